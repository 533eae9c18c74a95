"""The float64 check of a GEMM's output shared by the GPU tensor-core tests."""
from __future__ import annotations

import numpy as np


def rows_match_float64(A, B, got, ulp, K):
    """Every output row when small, else 64 sampled rows, against float64:
    within `ulp` relative (the output type's rounding) plus 1e-3 sqrt(K)."""
    idx = np.arange(A.shape[0]) if A.shape[0] <= 512 else \
        np.random.default_rng(0).choice(A.shape[0], 64, replace=False)
    exact = A[idx].astype(np.float64) @ B.astype(np.float64)
    g = got[idx].astype(np.float64)
    assert (np.abs(g - exact) <= np.abs(exact) * ulp + 1e-3 * np.sqrt(K)).all()
