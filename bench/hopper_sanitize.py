"""A small call of tcomp.kernels.gemm_sm90 for compute-sanitizer (NumPy data, no torch):

    compute-sanitizer --tool memcheck python3 bench/hopper_sanitize.py
"""
import ml_dtypes
import numpy as np

from tcomp.kernels import gemm_sm90

rng = np.random.default_rng(0)
M, N, K = 300, 520, 136
A = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
B = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
C = gemm_sm90()(A, B)
ref = A.astype(np.float64) @ B.astype(np.float64).T
print("max error", float(np.abs(C.astype(np.float64) - ref).max()))
