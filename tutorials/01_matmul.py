"""Tutorial 1: a matrix multiplication written as a tensor comprehension.

Run: python3 tutorials/01_matmul.py
"""
import numpy as np

import tcomp

SRC = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)   # r_k appears only on the right: a reduction
}
"""

op = tcomp.op(SRC)
# Printing an op shows it back as TC text, with the inferred types and index ranges.
print(op)

rng = np.random.default_rng()
A = rng.standard_normal((96, 40)).astype(np.float32)
B = rng.standard_normal((40, 72)).astype(np.float32)
C = tcomp.evaluate(op, A, B)  # the NumPy oracle: what any schedule must reproduce

expected = A.astype(np.float64) @ B.astype(np.float64)
err = np.abs(C - expected).max() / np.abs(expected).max()
print(f"C: {C.shape} {C.dtype}, max relative error vs float64: {err:.2e}")
assert err < 1e-5, err
print("ok")
