"""The CPU cost of `tcomp.auto_schedule` (issue 26: at most a second per op),
on every op it is documented for: the ops of bench/ (schedules.py,
row_schedules.py) and the issue's new ones (group norm, depthwise conv,
batched GEMM, stencil, SwiGLU, add + RMSNorm, GEMM + bias + GELU).

    PYTHONPATH=. python3 bench/auto_time.py [--only NAME,...] [--reps 1]
                                            [--profile DIR] [--no-check] [--calls]

Prints the CPU cost of the process's first call (imports, on a one-line
op), then, per op, the CPU seconds of `tcomp.search.auto.choose` (process
time, so that other jobs on a shared machine inflate it less): its first
call on that op and the median of `--reps` calls (each on a freshly parsed
Op; lowering's shared caches stay warm after the first), the wall seconds, the sketch chosen and how many
candidates were ranked, then the slowest op. `--profile DIR` writes a
cProfile (pstats format) per op into DIR. `--calls` adds a column: the
Python function calls of the first call (cProfile's count; lowering's shared
simplifier caches emptied before it), a count that, unlike the seconds, does
not depend on what else the machine runs: compare it before and after a
change on a shared machine. Run it on an idle machine: this is a
measurement, not a test (tests/search/test_auto_choices.py pins what is
chosen).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tcomp  # noqa: E402
from tcomp.search import auto  # noqa: E402

import row_schedules as R  # noqa: E402
import schedules as S  # noqa: E402

GROUP_NORM = """def group_norm(float(N, G, D) X, float(G, D) gamma, float(G, D) beta) -> (Y) {
  mean(n, g) +=! X(n, g, d) / float(D)
  var(n, g) +=! (X(n, g, d) - mean(n, g)) * (X(n, g, d) - mean(n, g)) / float(D)
  Y(n, g, d) = (X(n, g, d) - mean(n, g)) * rsqrt(var(n, g) + 1e-5) * gamma(g, d) + beta(g, d)
}"""
DEPTHWISE = """def depthwise(float(N, C, H, W) I, float(C, KH, KW) Wt) -> (O) {
  O(n, c, h, w) +=! I(n, c, h + kh, w + kw) * Wt(c, kh, kw)
}"""
BMM_FP16 = S.TC_BMM.replace("bfloat16", "float16")
STENCIL = ("def stencil(float(H, W) X) -> (O) { O(i, j) = X(i+1, j+1) * 4 - X(i, j+1) "
           "- X(i+2, j+1) - X(i+1, j) - X(i+1, j+2) }")
SWIGLU = """def swiglu(float(M, K) X, float(K, N) W1, float(K, N) W3) -> (O) {
  G(m, n) +=! X(m, k) * W1(k, n)
  U(m, n) +=! X(m, k) * W3(k, n)
  O(m, n) = G(m, n) / (1.0 + exp(-G(m, n))) * U(m, n)
}"""
ADD_RMSNORM = """def add_rmsnorm(float(N, D) X, float(N, D) R, float(D) w) -> (H, Y) {
  H(n, d) = X(n, d) + R(n, d)
  ss(n) +=! H(n, d) * H(n, d)
  Y(n, d) = H(n, d) * rsqrt(ss(n) / float(D) + 1e-6) * w(d)
}"""
GEMM_BIAS_GELU = """def gemm_bias_gelu(float(M, K) A, float(K, N) B, float(N) bias) -> (D) {
  C(m, n) +=! A(m, k) * B(k, n)
  D(m, n) = 0.5 * x * (1.0 + erf(x * 0.70710678118654752)) where x = C(m, n) + bias(n)
}"""

G4 = {"M": 4096, "N": 4096, "K": 4096}
ROWS = {"N": 32768, "D": 4096}
# name -> (source, sizes, target)
OPS = {
    # the ops
    "group_norm": (GROUP_NORM, {"N": 32, "G": 32, "D": 16384}, "cuda"),
    "depthwise_conv": (DEPTHWISE, {"N": 32, "C": 256, "H": 58, "W": 58, "KH": 3, "KW": 3},
                       "cuda"),
    "bmm_fp16": (BMM_FP16, {"NB": 64, "M": 512, "N": 512, "K": 64}, "cuda"),
    "stencil": (STENCIL, {"H": 4098, "W": 4098}, "cuda"),
    "swiglu": (SWIGLU, G4, "cuda"),
    "add_rmsnorm": (ADD_RMSNORM, ROWS, "cuda"),
    "gemm_bias_gelu": (GEMM_BIAS_GELU, G4, "cuda"),
    # bench/schedules.py
    "gemm_fp32": (S.GEMM, G4, "cuda"),
    "softmax": (S.SOFTMAX, ROWS, "cuda"),
    "layernorm": (S.LAYERNORM, ROWS, "cuda"),
    "rowsum": (S.ROWSUM, ROWS, "cuda"),
    "fma": (S.FMA, {"N": 1 << 26}, "cuda"),
    "transpose": (S.TRANSPOSE, {"M": 8192, "N": 8192}, "cuda"),
    "gelu": (S.GELU, {"N": 1 << 26}, "cuda"),
    "tc_gemm_bf16": (S.TC_GEMM, G4, "cuda"),
    "tc_bmm_bf16": (S.TC_BMM, {"NB": 64, "M": 512, "N": 512, "K": 64}, "cuda"),
    "tc_gemm_bias_gelu_bf16": (S.TC_GEMM_GELU, G4, "cuda"),
    "tc_conv2d_fp16": (S.TC_CONV2D, {"N": 32, "H": 56, "W": 56, "C": 256, "R": 9 * 256,
                                     "K": 256}, "cuda"),
    # bench/row_schedules.py
    "softmax_bf16": (R.softmax_src("bfloat16"), ROWS, "cuda"),
    "layernorm_bf16": (R.layernorm_src("bfloat16"), ROWS, "cuda"),
    "rmsnorm_bf16": (R.rmsnorm_src("bfloat16"), ROWS, "cuda"),
    "add_layernorm_bf16": (R.add_layernorm_src("bfloat16"), ROWS, "cuda"),
    "cross_entropy_bf16": (R.cross_entropy_src(), {"N": 4096, "V": 131072}, "cuda"),
    "chain_bf16": (R.chain_src("bfloat16"), {"N": 1 << 26}, "cuda"),
}


def time_one(name: str, reps: int, check: bool, prof_dir: str | None,
             calls: bool = False) -> dict:
    src, sizes, target = OPS[name]
    cpu, wall, choice = [], [], None
    for r in range(reps):
        op = tcomp.op(src)  # a fresh Op each time: nothing remembered on it helps
        prof = cProfile.Profile() if prof_dir and r == 0 else None
        c0, w0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        choice = auto.choose(op, sizes, target, check=check)
        if prof:
            prof.disable()
            prof.dump_stats(os.path.join(prof_dir, f"{name}.prof"))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    count = _calls(src, sizes, target, check) if calls else None  # (after: timed cold)
    return dict(name=name, cpu_s=statistics.median(cpu), first_cpu_s=cpu[0],
                wall_s=statistics.median(wall), calls=count,
                sketch=choice.sketch, candidates=choice.candidates,
                estimate_ms=choice.estimate_ms)


def _calls(src, sizes, target, check) -> int:
    """The function calls of one choice on a fresh Op, with lowering's shared
    simplifier caches emptied first (as in a first call)."""
    import pstats
    from tcomp.lower import simplify
    simplify._SHARED.clear()
    prof = cProfile.Profile()
    prof.enable()
    auto.choose(tcomp.op(src), sizes, target, check=check)
    prof.disable()
    return pstats.Stats(prof).total_calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--profile", default=None, help="a folder for one cProfile per op")
    ap.add_argument("--no-check", action="store_true", help="auto_schedule's check=False")
    ap.add_argument("--calls", action="store_true",
                    help="also count the function calls of one choice per op (cProfile)")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)} (ops: {', '.join(OPS)})")
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    c0 = time.process_time()  # the first call of a process imports the search and the sim
    auto.choose(tcomp.op("def warm(float(N) X) -> (O) { O(i) = X(i) + 1 }"), {"N": 64})
    print(f"first call of the process (imports; a one-line op): "
          f"{time.process_time() - c0:.2f} s CPU")
    calls = f" {'calls':>7}" if a.calls else ""
    print(f"{'op':<26} {'first':>6} {'cpu s':>6} {'wall s':>6}{calls}  {'cands':>5}  sketch")
    rows = []
    for n in names:
        row = time_one(n, a.reps, not a.no_check, a.profile, a.calls)
        rows.append(row)
        calls = f" {row['calls'] / 1e6:6.2f}M" if a.calls else ""
        print(f"{n:<26} {row['first_cpu_s']:6.2f} {row['cpu_s']:6.2f} {row['wall_s']:6.2f}"
              f"{calls}  {row['candidates']:5d}  "
              f"{row['sketch']}", flush=True)
    worst = max(rows, key=lambda r: r["cpu_s"])
    over = [r["name"] for r in rows if r["cpu_s"] > 1.0]
    print(f"slowest: {worst['name']} {worst['cpu_s']:.2f} s CPU; over 1 s: "
          f"{', '.join(over) or 'none'}")
    if a.calls:
        print(f"function calls, all ops: {sum(r['calls'] for r in rows) / 1e6:.2f}M")
    return 0


if __name__ == "__main__":
    sys.exit(main())
