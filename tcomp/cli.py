"""The `tcomp` command line (docs/cli.md).

  tcomp compile FILE.tc [--entry NAME] [--schedule S.json] [--sizes M=1024,N=512]
                [--arch sm_90a] -o OUT.cubin      (also writes OUT.cu, OUT.ptx, OUT.json)
  tcomp run FILE.tc [--entry NAME] [--schedule S.json] [--sizes M=...,N=...]
                [--input NAME=FILE.npy ...] [--target auto|cuda|sim] [--repeat N] [--seed S]
      compiles, runs on the GPU when there is one (else on sim), checks the
      result against tcomp.evaluate on the given or random inputs, and prints
      time and check.
  tcomp tune FILE.tc --sizes M=...,N=... --records R.jsonl [--trials 200]
                [--target cuda|sim] [--plot curve.png] [--export best.cubin]
      searches for a fast schedule (cli_tune.py; docs/tuning.md).

A user error (bad flags, unreadable files, a TcompError from the compiler)
prints `tcomp: <message>` on stderr and exits with status 2; a `run` whose
result does not match `tcomp.evaluate` exits with status 1.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .errors import TcompError

EXIT_MISMATCH, EXIT_ERROR = 1, 2

DESCRIPTION = """\
tcomp: tensor comprehensions to CUDA. Compile a def of a .tc file with a
schedule to a .cubin (no GPU needed), run it and check it against the
NumPy reference tcomp.evaluate, or tune its schedule."""

COMPILE_HELP = "compile a def to OUT.cubin, OUT.cu, OUT.ptx and OUT.json (no GPU needed)"
COMPILE_EPILOG = """\
Sizes left out of --sizes stay symbolic: the kernel reads them from its
arguments at run time. OUT.json describes the kernel for tcomp.load (docs/export.md).
example: tcomp compile tutorials/matmul.tc --schedule tutorials/matmul_schedule.json \\
             --sizes K=64 -o out/matmul.cubin"""

RUN_HELP = "compile and run a def, and check the result against tcomp.evaluate"
RUN_EPILOG = """\
Inputs not given with --input are random: floats standard normal, bools
uniform; an integer input used as a subscript of another tensor (a gather)
gets values in range of the dimension it indexes, other integers 0..99.
Exit status: 0 when the check passes, 1 when it fails, 2 on an error.
example: tcomp run tutorials/matmul.tc --sizes M=96,N=80,K=64 --target sim"""


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors in tcomp's one-line form."""

    def error(self, message):
        self.exit(EXIT_ERROR, f"tcomp: {message} (see '{self.prog} --help')\n")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _seed(text: str) -> int:
    """A seed of NumPy's generator: a non-negative integer (of any size)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got "
                                         f"'{_short(text)}'") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {n}")
    return n


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise TcompError(f"cannot read {what} {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TcompError(f"cannot read {what} {path}: not UTF-8 text (byte {e.start})") from None


def _load(args):
    """(op, schedule) from FILE.tc, --entry and --schedule."""
    from . import lang
    from .schedule import Schedule
    text = _read_text(args.file, "source")
    prog = lang.parse(text, name=args.file)
    if args.entry:
        op = prog[args.entry]
    elif len(prog) != 1:
        raise TcompError(f"{args.file} has {len(prog)} defs ({', '.join(prog.ops) or 'none'}); "
                         f"choose one with --entry")
    else:
        op = next(iter(prog))
    if not getattr(args, "schedule", None):  # tune takes no schedule
        return op, Schedule(op)
    text = _read_text(args.schedule, "schedule")
    try:
        return op, Schedule.from_json(op, text)
    except TcompError as e:
        raise TcompError(f"{args.schedule}: {e}") from None


def cmd_compile(args) -> int:
    from .cli_inputs import parse_sizes
    from .build import build
    out = args.output
    if not out.endswith(".cubin"):
        raise TcompError(f"-o must name a .cubin file, got '{out}'")
    op, s = _load(args)
    k = build(s, f"cuda:{args.arch}", parse_sizes(args.sizes, op))
    base = out[:-len(".cubin")]
    try:
        k.export(out)
        with open(base + ".cu", "w") as f:
            f.write(k.source)
        with open(base + ".ptx", "w") as f:
            f.write(k.ptx)
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        raise TcompError(f"cannot write {out}: {e.strerror or e}{where}") from None
    print(f"wrote {out} ({len(k.cubin)} bytes, {args.arch}), {base}.cu, {base}.ptx, {base}.json")
    return 0


def tolerance(dt) -> float:
    # (fp8: one unit in the last place of e4m3 is 2^-3 relative, of e5m2 2^-2; a sum in
    # another order may round to the neighbour)
    return {"float16": 2e-2, "bfloat16": 1e-1, "float32": 1e-4, "float64": 1e-10,
            "float8_e4m3fn": 0.25, "float8_e5m2": 0.5}.get(dt.name, 0.0)


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
    from .cli_inputs import (bind_sizes, check_memory, load_array, make_inputs,
                             parse_input_flags, parse_sizes)
    from .target_cuda import cuda_api
    op, s = _load(args)
    sizes = parse_sizes(args.sizes, op)
    files = parse_input_flags(args.input, op)
    given = {t.name: load_array(t.name, files[t.name], t.dtype)
             for t in op.inputs if t.name in files}
    sizes = bind_sizes(op, given, sizes)
    check_memory(op, given, sizes)
    arrays = make_inputs(op, given, sizes, np.random.default_rng(args.seed))
    want = evaluate(op, *arrays)  # first: invalid data is reported before compiling
    target = args.target
    if target == "auto":
        target = "cuda" if cuda_api.have_device() else "sim"
    t0 = time.perf_counter()
    k = build(s, target=target, sizes=sizes if target == "cuda" else None)
    t_build = time.perf_counter() - t0
    got = k(*arrays)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        k(*arrays)
        times.append(time.perf_counter() - t)
    ok, detail = compare(op, got, want)
    where = cuda_api.device().name if target == "cuda" else "sim (CPU)"
    print(f"{op.name} on {where}: build {t_build * 1e3:.1f} ms, run {np.median(times) * 1e3:.3f} ms "
          f"(median of {len(times)}, host-timed, includes copies)")
    print(f"check vs tcomp.evaluate: {'PASS' if ok else 'FAIL'} — {detail}")
    return 0 if ok else EXIT_MISMATCH


def parser() -> argparse.ArgumentParser:
    from . import __version__
    ap = _Parser(prog="tcomp", description=DESCRIPTION,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"tcomp {__version__}",
                    help="print tcomp's version and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                            parser_class=_Parser)
    for name, help_, epilog in (("compile", COMPILE_HELP, COMPILE_EPILOG),
                                ("run", RUN_HELP, RUN_EPILOG)):
        p = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".",
                           epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("file", metavar="FILE.tc", help="a .tc source file with one or more defs")
        p.add_argument("--entry", metavar="NAME",
                       help="the def to use when the file has several")
        p.add_argument("--schedule", metavar="S.json",
                       help="a schedule written by Schedule.to_json (default: the default "
                            "schedule, correct and serial)")
        if name == "compile":
            p.add_argument("--sizes", metavar="M=1024,N=512",
                           help="size variables to fix at compile time; the others stay "
                                "kernel parameters")
            p.add_argument("--arch", default="sm_90a", metavar="SM",
                           help="the GPU architecture to compile for (default: sm_90a)")
            p.add_argument("-o", "--output", required=True, metavar="OUT.cubin",
                           help="the .cubin to write; OUT.cu, OUT.ptx and OUT.json go beside it")
        else:
            p.add_argument("--sizes", metavar="M=1024,N=512",
                           help="size variables; needed for each size of an input that is "
                                "not given with --input")
            p.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                           help="read input NAME from a .npy file (repeatable); the other "
                                "inputs are random")
            p.add_argument("--target", default="auto", choices=("auto", "cuda", "sim"),
                           help="where to run: cuda, sim (the CPU simulator) or auto (cuda "
                                "when a GPU is present, else sim; the default)")
            p.add_argument("--repeat", type=_positive, default=3, metavar="N",
                           help="timed runs after the first (default: 3); the median is shown")
            p.add_argument("--seed", type=_seed, default=None, metavar="S",
                           help="seed of the random inputs (default: a fresh seed each run)")
    from .cli_tune import add_parser
    add_parser(sub, _positive, argparse.RawDescriptionHelpFormatter)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "tune":
            from .cli_tune import cmd_tune
            return cmd_tune(args, lambda a: _load(a)[0])
        return cmd_compile(args) if args.cmd == "compile" else cmd_run(args)
    except TcompError as e:
        print(f"tcomp: {e}", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError:
        # What check_memory could not foresee (the machine's free memory, the
        # compiler's own): still one line, as every other error.
        print(f"tcomp: {args.cmd}: out of memory; give smaller --sizes", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
