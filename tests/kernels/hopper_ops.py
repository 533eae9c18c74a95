"""The products of the Hopper schedule tests: C = A . B with either operand
in either major order (A as (M, K) or (K, M), B as (K, N) or (N, K)) and the
input/output types the Hopper path takes."""
from __future__ import annotations

import numpy as np

import tcomp

# name -> (A's shape, B's shape, the product): the letter pairs say which operand is
# given transposed relative to C = A(M, K) . B(K, N) ("N": as written, "T": transposed)
LAYOUTS = {
    "NN": ("M,K", "K,N", "A(m, k) * B(k, n)"),
    "NT": ("M,K", "N,K", "A(m, k) * B(n, k)"),
    "TN": ("K,M", "K,N", "A(k, m) * B(k, n)"),
    "TT": ("K,M", "N,K", "A(k, m) * B(n, k)"),
}


def op(layout: str, dtype: str = "bfloat16", out: str | None = None):
    a, b, prod = LAYOUTS[layout]
    ret = f"{out}(M, N) C" if out else "C"
    return tcomp.op(f"def mm_{layout.lower()}({dtype}({a}) A, {dtype}({b}) B) -> ({ret}) "
                    f"{{ C(m, n) +=! {prod} }}")


def data(layout: str, M: int, N: int, K: int, dtype: str = "bfloat16", seed: int = 0):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    a, b, _ = LAYOUTS[layout]
    dims = {"M": M, "N": N, "K": K}
    rng = np.random.default_rng(seed)
    A = rng.standard_normal(tuple(dims[x] for x in a.split(","))).astype(dt)
    B = rng.standard_normal(tuple(dims[x] for x in b.split(","))).astype(dt)
    return A, B


def reference(layout: str, A, B):
    a = A.astype(np.float64) if LAYOUTS[layout][0] == "M,K" else A.astype(np.float64).T
    b = B.astype(np.float64) if LAYOUTS[layout][1] == "K,N" else B.astype(np.float64).T
    return a @ b
