"""Lowering and codegen time of Hopper schedules (issue 24: lowering +
codegen of a Hopper GEMM schedule <= 50 ms, NVRTC reported apart).

    PYTHONPATH=. python3 bench/hopper_lower_time.py [--reps 10]

For each case (the bf16 GEMM 4096^3 with `hopper_schedule`'s default and
ping-pong configurations, the fused GEMM + bias + GELU, the 3x3 convolution
through TMA im2col copies, FlashAttention D128 with the log-sum-exp): the
CPU milliseconds (process time) of writing the schedule, `tcomp.lower`
(every pass, sizes bound), CUDA codegen (`program_source`) and NVRTC
(`compile_source`, its cache bypassed), median of --reps after one warm-up
call (the first call's times are printed too: it fills the simplifier's
caches). Writes $OUT/hopper_lower_time.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tcomp  # noqa: E402
from tcomp.kernels.attention_sm90 import AttentionConfig, attention_schedule  # noqa: E402
from tcomp.kernels.conv_sm90 import conv2d_schedule, conv2d_source  # noqa: E402
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule  # noqa: E402
from tcomp.target_cuda.codegen import program_source  # noqa: E402
from tcomp.target_cuda.compile import CompileOptions, compile_source  # noqa: E402

GEMM = "def mm(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"
FUSED = """def gbg(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
  C(m, n) +=! float(A(m, k)) * float(B(k, n))
  D(m, n) = bfloat16(0.5 * x * (1.0 + erf(x * 0.70710678118654752))) where x = C(m, n) + bias(n)
}"""
G4 = {"M": 4096, "N": 4096, "K": 4096}
CASES = {
    "gemm_bf16_4096_cooperative": (lambda: hopper_schedule(tcomp.op(GEMM)), G4),
    "gemm_bf16_4096_pingpong": (lambda: hopper_schedule(tcomp.op(GEMM), GemmConfig(
        bm=64, bn=256, pingpong=True)), G4),
    "gemm_bias_gelu_8192": (lambda: _fused(), {"M": 8192, "N": 8192, "K": 4096}),
    "conv2d_3x3_fp16": (lambda: conv2d_schedule(tcomp.op(conv2d_source())),
                        {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "RSC": 2304}),
    "attention_d128_lse": (lambda: attention_schedule(AttentionConfig(lse=True),
                                                      {"D": 128, "E": 128}),
                           {"D": 128, "E": 128}),
}


def _fused():
    s = hopper_schedule(tcomp.op(FUSED), GemmConfig(bm=64, bn=256, pingpong=True), stage="C")
    s["C"].epilogue(s["D"])
    return s


def _ms(fn):
    t = time.process_time()
    out = fn()
    return out, (time.process_time() - t) * 1e3


def run(name, reps):
    make, sizes = CASES[name]
    rows = []
    for _ in range(reps + 1):
        s, t_sched = _ms(make)
        prog, t_lower = _ms(lambda: tcomp.lower(s, sizes=sizes))
        (src, _), t_code = _ms(lambda: program_source(prog))
        _, t_nvrtc = _ms(lambda: compile_source(src, "k", CompileOptions("sm_90a"),
                                                use_cache=False))
        rows.append((t_sched, t_lower, t_code, t_nvrtc))
    first, rest = rows[0], rows[1:]
    med = [statistics.median(r[i] for r in rest) for i in range(4)]
    out = dict(case=name, first_ms=first, schedule_ms=med[0], lower_ms=med[1], codegen_ms=med[2],
               nvrtc_ms=med[3], lower_codegen_ms=med[1] + med[2])
    print(f"{name:28s} schedule {med[0]:6.1f}  lower {med[1]:6.1f}  codegen {med[2]:6.1f}  "
          f"lower+codegen {med[1] + med[2]:6.1f} ms  (NVRTC {med[3]:6.0f} ms; first call: "
          f"lower {first[1]:.1f}, codegen {first[2]:.1f})", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(CASES)
    rows = [run(n, a.reps) for n in names]
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "hopper_lower_time.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
