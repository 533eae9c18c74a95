"""Benchmark suite (issue: fast SIMT kernels). Run on the GPU machine:

    PYTHONPATH=. python3 bench/suite.py [--quick] [--only NAME,...]
    PYTHONPATH=. python3 bench/suite.py --rows [--sweep] [--reps 20]   (bench/rows.py)

For every case: build the tcomp kernel from its hand-written schedule
(bench/schedules.py), check it against a float64 reference on fresh random
data, time it and the library equivalent in the same process with
triton.testing.do_bench (CUDA events, median, L2 flushed between calls), twice
each, alternating, and print one table. Ratios are library time / tcomp time
(> 1: tcomp is faster). Results also go to $OUT/suite.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import schedules as S  # noqa: E402
import tcomp  # noqa: E402

COPY_TBPS = 4.28  # device copy bandwidth measured on the H200 (read + write)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float32)


def rel_err(out, ref):
    out = out.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def case_gemm(n, variant):
    op, s = S.gemm({}, **S.gemm_variant(variant))
    sizes = {"M": n, "N": n, "K": n}
    mk = lambda: (randn(n, n), randn(n, n))  # noqa: E731
    ref = lambda a, b: a.double() @ b.double()  # noqa: E731

    def lib(a, b):
        return a @ b
    return dict(name=f"gemm_fp32_{n}^3[{variant}]", op=op, s=s, sizes=sizes, make=mk, ref=ref,
                lib=lib, lib_name="cuBLAS (no TF32)", flops=2 * n ** 3, bytes=3 * n * n * 4,
                tol=1e-5, prep=lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False))


def _row_tag(threads, shared_row, variant):
    """The name suffix of a row-op case: [threads, where the row lives, variant]."""
    return f"[{threads}t,{'smem' if shared_row else 'L2'}{',' + variant if variant else ''}]"


def case_softmax(r, c, threads, shared_row, variant=""):
    op, s = S.softmax({}, threads=threads, shared_row=shared_row, **S.row_variant(variant))
    v = _row_tag(threads, shared_row, variant)
    return dict(name=f"softmax_fp32_{r}x{c}{v}", op=op, s=s, sizes={"N": r, "D": c},
                make=lambda: (randn(r, c),), ref=lambda x: torch.softmax(x.double(), -1),
                lib=lambda x: torch.softmax(x, -1), lib_name="torch.softmax", flops=0,
                bytes=2 * r * c * 4, tol=1e-5)


def case_layernorm(r, c, threads, shared_row, variant=""):
    op, s = S.layernorm({}, threads=threads, shared_row=shared_row, **S.row_variant(variant))
    w, b = randn(c), randn(c)
    v = _row_tag(threads, shared_row, variant)
    return dict(name=f"layernorm_fp32_{r}x{c}{v}", op=op, s=s, sizes={"N": r, "D": c},
                make=lambda: (randn(r, c), w, b),
                ref=lambda x, w, b: F.layer_norm(x.double(), (c,), w.double(), b.double(), 1e-5),
                lib=lambda x, w, b: F.layer_norm(x, (c,), w, b, 1e-5), lib_name="F.layer_norm",
                flops=0, bytes=2 * r * c * 4, tol=1e-5)


def case_rowsum(r, c):
    op, s = S.rowsum({}, threads=256 if c >= 4096 else 128)
    return dict(name=f"rowsum_fp32_{r}x{c}", op=op, s=s, sizes={"N": r, "D": c},
                make=lambda: (randn(r, c),), ref=lambda x: x.double().sum(-1),
                lib=lambda x: x.sum(-1), lib_name="torch.sum(-1)", flops=0, bytes=r * c * 4,
                tol=1e-5)


def case_transpose(n):
    op, s = S.transpose({})
    return dict(name=f"transpose_fp32_{n}x{n}", op=op, s=s, sizes={"M": n, "N": n},
                make=lambda: (randn(n, n),), ref=lambda a: a.double().t(),
                lib=lambda a: a.t().contiguous(), lib_name=".t().contiguous()", flops=0,
                bytes=2 * n * n * 4, tol=0.0)


def case_gelu(n):
    op, s = S.gelu({})
    w = torch.tensor(0.75, device="cuda")
    b = torch.tensor(-0.25, device="cuda")
    return dict(name=f"gelu(x*w+b)_fp32_2^{int(np.log2(n))}", op=op, s=s, sizes={"N": n},
                make=lambda: (randn(n), w, b),
                ref=lambda x, w, b: F.gelu(x.double() * w.double() + b.double()),
                lib=lambda x, w, b: F.gelu(x * w + b), lib_name="torch eager", flops=0,
                bytes=2 * n * 4, tol=1e-5)


def run_case(c, reps):
    if "prep" in c:
        c["prep"]()
    t0 = time.perf_counter()
    k = tcomp.build(c["s"], target="cuda", sizes=c["sizes"])
    build_s = time.perf_counter() - t0
    sets = [c["make"]() for _ in range(2)]
    with torch.no_grad():
        err = rel_err(k(*sets[0]), c["ref"](*sets[0]))
        lib_err = rel_err(c["lib"](*sets[0]), c["ref"](*sets[0]))
    ok = err <= max(c["tol"], 4 * lib_err, 1e-7 if c["tol"] == 0 else 0)
    turn = [0]

    def rot(fn):
        def call():
            turn[0] ^= 1
            return fn(*sets[turn[0]])
        return call
    t_tc, t_lib = [], []
    for _ in range(reps):
        t_tc.append(do_bench(rot(k), warmup=25, rep=100, return_mode="median"))
        t_lib.append(do_bench(rot(c["lib"]), warmup=25, rep=100, return_mode="median"))
    tc, lib = statistics.median(t_tc), statistics.median(t_lib)
    rate = (c["flops"] / tc / 1e9, "TFLOP/s") if c["flops"] else (c["bytes"] / tc / 1e9, "TB/s")
    lib_rate = (c["flops"] / lib / 1e9) if c["flops"] else (c["bytes"] / lib / 1e9)
    return dict(case=c["name"], ok=ok, rel_err=err, lib_rel_err=lib_err, tcomp_ms=tc, lib_ms=lib,
                tcomp_runs=t_tc, lib_runs=t_lib, ratio=lib / tc, rate=rate[0], unit=rate[1],
                lib_rate=lib_rate, lib=c["lib_name"], build_s=build_s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rows", action="store_true",
                    help="run the row-kernel benchmark instead (bench/rows.py: tcomp, torch, "
                         "Triton and a device copy per case; $OUT/rows.json)")
    a, rest = ap.parse_known_args()
    if a.rows:
        import rows
        rows.main(rest + (["--only", a.only] if a.only else []))
        return
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    q = a.quick
    cases = [
        lambda: case_gelu(1 << (24 if q else 28)),
        lambda: case_transpose(2048 if q else 8192),
        lambda: case_rowsum(32768, 4096), lambda: case_rowsum(4096, 32768),
        lambda: case_softmax(32768, 4096, 512, True), lambda: case_softmax(32768, 4096, 256, False),
        lambda: case_softmax(32768, 4096, 256, True, "vec4+rcp"),
        lambda: case_softmax(4096, 32768, 1024, True), lambda: case_softmax(4096, 32768, 1024, False),
        lambda: case_softmax(4096, 32768, 1024, True, "vec4"),
        lambda: case_softmax(4096, 32768, 1024, True, "vec4+rcp"),
        lambda: case_layernorm(32768, 4096, 512, True),
        lambda: case_layernorm(32768, 4096, 256, False),
        lambda: case_layernorm(32768, 4096, 512, True, "vec4"),
        lambda: case_layernorm(4096, 32768, 1024, True),
        lambda: case_layernorm(4096, 32768, 1024, False),
        lambda: case_layernorm(4096, 32768, 1024, True, "vec4"),
        lambda: case_gemm(1024 if q else 4096, "frag+scalar"),
        lambda: case_gemm(1024 if q else 4096, "frag"),
        lambda: case_gemm(1024 if q else 4096, "frag+warp+pad"),
        lambda: case_gemm(1024 if q else 4096, "frag+warp+pad+pipe"),
        lambda: case_gemm(1024 if q else 4096, "frag+warp+pad+pipe+g8"),
        lambda: case_gemm(1024 if q else 4096, "shared+warp+pad+pipe+g8"),
        lambda: case_gemm(2048 if q else 8192, "frag"),
        lambda: case_gemm(2048 if q else 8192, "frag+warp+pad+pipe"),
        lambda: case_gemm(2048 if q else 8192, "frag+warp+pad+pipe+g8"),
    ]
    results = []
    for make in cases:
        c = make()
        if a.only and not any(o in c["name"] for o in a.only.split(",")):
            continue
        try:
            r = run_case(c, a.reps)
        except Exception as e:  # report and go on with the other cases
            r = dict(case=c["name"], ok=False, error=f"{type(e).__name__}: {str(e)[:2000]}")
        results.append(r)
        if "error" in r:
            print(f"{r['case']}: ERROR {r['error'][:400]}", flush=True)
        else:
            print(f"{r['case']:34s} {'ok ' if r['ok'] else 'BAD'} err={r['rel_err']:.1e} "
                  f"tcomp {r['tcomp_ms']:.3f} ms ({r['rate']:.2f} {r['unit']}) | {r['lib']} "
                  f"{r['lib_ms']:.3f} ms ({r['lib_rate']:.2f}) | ratio {r['ratio']:.2f} "
                  f"[runs {', '.join(f'{x:.3f}' for x in r['tcomp_runs'])} / "
                  f"{', '.join(f'{x:.3f}' for x in r['lib_runs'])}] build {r['build_s']:.1f}s",
                  flush=True)
    info = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                driver=torch.version.cuda, date=time.strftime("%Y-%m-%d"), results=results)
    out = os.environ.get("OUT")
    if out:
        json.dump(info, open(os.path.join(out, "suite.json"), "w"), indent=1)
    print("\ncase | tcomp ms | library ms | ratio (library/tcomp) | check")
    for r in results:
        if "error" in r:
            print(f"{r['case']} | error | | | {r['error'][:80]}")
        else:
            print(f"{r['case']} | {r['tcomp_ms']:.3f} | {r['lib_ms']:.3f} | {r['ratio']:.2f} | "
                  f"{'ok' if r['ok'] else 'BAD'} ({r['rel_err']:.1e})")


if __name__ == "__main__":
    main()
