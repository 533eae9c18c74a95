"""The `tcomp` command line.

  tcomp compile FILE.tc [--entry NAME] [--schedule S.json] [--sizes M=1024,N=512]
                [--arch sm_90a] -o OUT.cubin      (also writes OUT.cu, OUT.ptx, OUT.json)
  tcomp run FILE.tc [--entry NAME] [--schedule S.json] --sizes M=...,N=...
                [--target auto|cuda|sim] [--repeat N]
      compiles, runs on the GPU when there is one (else on sim), checks the
      result against tcomp.evaluate on random data, and prints time and check.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .errors import TcompError


def _sizes(text: str | None) -> dict[str, int]:
    out = {}
    if not text:
        return out
    for item in text.split(","):
        if "=" not in item:
            raise TcompError(f"--sizes: expected NAME=INT, got '{item}'")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = int(v)
        except ValueError:
            raise TcompError(f"--sizes: {k.strip()} must be an integer, got '{v}'") from None
    return out


def _load(args):
    from . import lang
    from .schedule import Schedule
    try:
        with open(args.file) as f:
            text = f.read()
    except OSError as e:
        raise TcompError(f"cannot read {args.file}: {e.strerror}") from None
    op = lang.parse(text, name=args.file)[args.entry] if args.entry else _only(text, args.file)
    if args.schedule:
        try:
            with open(args.schedule) as f:
                s = Schedule.from_json(op, f.read())
        except OSError as e:
            raise TcompError(f"cannot read {args.schedule}: {e.strerror}") from None
    else:
        s = Schedule(op)
    return op, s


def _only(text, filename):
    from . import lang
    prog = lang.parse(text, name=filename)
    if len(prog) != 1:
        raise TcompError(f"{filename} has {len(prog)} defs ({', '.join(prog.ops)}); choose one "
                         f"with --entry")
    return next(iter(prog))


def cmd_compile(args) -> int:
    from .target_cuda.kernel import CudaKernel
    op, s = _load(args)
    k = CudaKernel.from_schedule(s, _sizes(args.sizes), f"cuda:{args.arch}")
    out = args.output
    if not out.endswith(".cubin"):
        raise TcompError(f"-o must name a .cubin file, got '{out}'")
    k.export(out)
    base = out[:-len(".cubin")]
    with open(base + ".cu", "w") as f:
        f.write(k.source)
    with open(base + ".ptx", "w") as f:
        f.write(k.ptx)
    print(f"wrote {out} ({len(k.cubin)} bytes, {args.arch}), {base}.cu, {base}.ptx, {base}.json")
    return 0


def random_inputs(op, sizes: dict, rng) -> list:
    from .lang.symbolic import eval_int
    arrays = []
    for t in op.inputs:
        missing = [d for d in t.shape if any(n not in sizes for n in _names(d))]
        if missing:
            names = sorted({n for d in missing for n in _names(d)})
            raise TcompError(f"run: give the size(s) {', '.join(names)} with --sizes")
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        dt = t.dtype
        if dt.is_float:
            a = rng.standard_normal(shape).astype(dt.numpy)
        elif dt.is_bool:
            a = rng.random(shape) < 0.5
        else:
            hi = min(np.iinfo(dt.numpy).max, 100)
            lo = 0 if dt.kind == "u" else -hi
            a = rng.integers(lo, hi, shape, endpoint=True).astype(dt.numpy)
        arrays.append(a)
    return arrays


def _names(e):
    from .lang.ast import Size, walk
    return [x.name for x in walk(e) if isinstance(x, Size)]


def tolerance(dt) -> float:
    return {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-4, "float64": 1e-10}.get(dt.name, 0.0)


def compare(op, got, want) -> tuple[bool, str]:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    lines, ok = [], True
    for t, g, w in zip(op.outputs, got, want):
        g64, w64 = np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64)
        if g64.shape != w64.shape:
            ok = False
            lines.append(f"{t.name}: shape {g64.shape} != {w64.shape}")
            continue
        scale = max(1.0, float(np.max(np.abs(w64), initial=0.0)))
        err = float(np.max(np.abs(g64 - w64), initial=0.0)) / scale
        good = err <= tolerance(t.dtype) or (np.isnan(g64) == np.isnan(w64)).all() and \
            np.allclose(g64, w64, rtol=tolerance(t.dtype), atol=tolerance(t.dtype) * scale,
                        equal_nan=True)
        ok &= bool(good)
        lines.append(f"{t.name}: max error {err:.2e} (relative to max |value|) "
                     f"{'ok' if good else 'MISMATCH'}")
    return ok, "; ".join(lines)


def cmd_run(args) -> int:
    from . import build, evaluate
    from .target_cuda import cuda_api
    op, s = _load(args)
    sizes = _sizes(args.sizes)
    target = args.target
    if target == "auto":
        target = "cuda" if cuda_api.have_device() else "sim"
    rng = np.random.default_rng(args.seed)
    arrays = random_inputs(op, sizes, rng)
    t0 = time.perf_counter()
    k = build(s, target=target, sizes=sizes if target == "cuda" else None)
    t_build = time.perf_counter() - t0
    got = k(*arrays)
    times = []
    for _ in range(max(args.repeat, 1)):
        t = time.perf_counter()
        k(*arrays)
        times.append(time.perf_counter() - t)
    want = evaluate(op, *arrays)
    ok, detail = compare(op, got, want)
    where = cuda_api.device().name if target == "cuda" else "sim (CPU)"
    print(f"{op.name} on {where}: build {t_build * 1e3:.1f} ms, run {np.median(times) * 1e3:.3f} ms "
          f"(median of {len(times)}, host-timed, includes copies)")
    print(f"check vs tcomp.evaluate: {'PASS' if ok else 'FAIL'} — {detail}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tcomp", description="tcomp: tensor comprehensions to CUDA")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("compile", "run"):
        p = sub.add_parser(name)
        p.add_argument("file", help="a .tc file with one or more defs")
        p.add_argument("--entry", help="the def to compile (when the file has several)")
        p.add_argument("--schedule", help="a schedule JSON file (Schedule.to_json)")
        p.add_argument("--sizes", help="size bindings, e.g. M=1024,N=512")
        if name == "compile":
            p.add_argument("--arch", default="sm_90a")
            p.add_argument("-o", "--output", required=True, help="OUT.cubin")
        else:
            p.add_argument("--target", default="auto", choices=("auto", "cuda", "sim"))
            p.add_argument("--repeat", type=int, default=3)
            p.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        return cmd_compile(args) if args.cmd == "compile" else cmd_run(args)
    except TcompError as e:
        print(f"tcomp: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
