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


def random_ab(sizes, dtype: str, seed: int):
    """Random A (M x K) and B (K x N) of a tcomp dtype name, from `seed`."""
    import tcomp
    rng = np.random.default_rng(seed)
    npdt = tcomp.lang.dtypes.BY_NAME[dtype].numpy
    return (rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt),
            rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt))


def gelu_inputs(sizes, seed: int = 5):
    """(A, B, bias) of TC_GEMM_GELU: bf16 A and B, float32 bias, from `seed`."""
    rng = np.random.default_rng(seed)
    import tcomp
    npdt = tcomp.lang.dtypes.bfloat16.numpy
    return (rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt),
            rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt),
            rng.standard_normal(sizes["N"]).astype(np.float32))


def gelu_rows_match(op, args, got):
    """The fused GEMM + bias + GELU output against tcomp.evaluate (all rows
    when M <= 512, else the first 64), within bf16 rounding of the output."""
    import tcomp
    rows = slice(None) if args[0].shape[0] <= 512 else slice(0, 64)
    want = tcomp.evaluate(op, args[0][rows], args[1], args[2]).astype(np.float64)
    g = got[rows].astype(np.float64)
    assert (np.abs(g - want) <= np.abs(want) * 2 ** -6 + 2e-2).all()


def assert_same_as_plain(got, op, kw, sizes, args):
    """`got` (a kernel built with an option on top of tc_gemm(op, **kw)) is
    bit-equal to what the plain tc_gemm(op, **kw) kernel computes on the GPU."""
    import tcomp
    from ..bench.common import S
    plain = tcomp.build(S.tc_gemm(op, **kw)[1], target="cuda", sizes=sizes)(*args)
    assert np.array_equal(got, plain)
