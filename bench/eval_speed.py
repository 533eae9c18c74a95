"""Time `tcomp.evaluate` (the NumPy oracle) on two classic workloads.

    python3 bench/eval_speed.py [--repeat N]

Prints the best wall-clock time in seconds for
  * a 512x512x512 float32 matmul, and
  * a 32x64x56x56 NCHW float32 convolution with 64 3x3 filters (valid padding).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tcomp  # noqa: E402

MATMUL = """
def matmul(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
"""

CONV = """
def conv2d(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw)
}
"""


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per workload (best is shown)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)

    op = tcomp.op(MATMUL)
    A = rng.standard_normal((512, 512), dtype=np.float32)
    B = rng.standard_normal((512, 512), dtype=np.float32)
    t = best_time(lambda: tcomp.evaluate(op, A, B), args.repeat)
    print(f"matmul 512x512x512 float32: {t:.3f} s")

    op = tcomp.op(CONV)
    I = rng.standard_normal((32, 64, 56, 56), dtype=np.float32)
    W = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    t = best_time(lambda: tcomp.evaluate(op, I, W), args.repeat)
    print(f"conv2d 32x64x56x56, 64 3x3 filters, float32: {t:.3f} s")


if __name__ == "__main__":
    main()
