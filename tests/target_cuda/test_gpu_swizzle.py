"""XOR-swizzled shared tiles (Stage.swizzle) in the tensor-core GEMM and
conv on the GPU: within one rounding of the output type of the float64
result, and bit for bit what the padded schedule computes (the layout moves
data, not arithmetic: the same mma chain runs on the same operands)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from ..bench.common import S
from .gemm_check import rows_match_float64

pytestmark = pytest.mark.cuda

BF = "def mm({t}(M,K) A, {t}(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
CASES = [
    # the benchmark's tiles (rows of 128 and 256 bytes) at a full size
    ({"M": 2048, "N": 2048, "K": 2048}, dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)),
    ({"M": 1024, "N": 1024, "K": 1024}, dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                             unroll_k=True)),
    ({"M": 512, "N": 1024, "K": 512}, dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=4)),
    ({"M": 256, "N": 128, "K": 256}, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=True)),
    ({"M": 64, "N": 64, "K": 64}, dict(bm=64, bn=64, wm=32, wn=32, bk=16)),  # rows of 32 bytes
    # sizes the tiles do not divide (zero-filled tiles, partial K tiles)
    ({"M": 300, "N": 500, "K": 700}, dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)),
    ({"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
    ({"M": 129, "N": 257, "K": 67}, dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=True)),
    ({"M": 100, "N": 72, "K": 56}, dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=5)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes, kw", CASES)
def test_swizzled_gemm_on_gpu(dtype, sizes, kw):
    op = tcomp.op(BF.format(t=dtype))
    rng = np.random.default_rng(3)
    npdt = tcomp.lang.dtypes.BY_NAME[dtype].numpy
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    swz = tcomp.build(S.tc_gemm(op, **kw, swizzle=True)[1], target="cuda", sizes=sizes)
    assert "^" in swz.source  # the layout is in the addresses
    got = swz(A, B)
    rows_match_float64(A, B, got, 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10, sizes["K"])
    pad = tcomp.build(S.tc_gemm(op, **kw, pad=True)[1], target="cuda", sizes=sizes)(A, B)
    assert np.array_equal(got, pad)


def test_swizzled_fused_bias_gelu_on_gpu():
    sizes = {"M": 300, "N": 136, "K": 72}
    op = tcomp.op(S.TC_GEMM_GELU)
    kw = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)
    rng = np.random.default_rng(5)
    npdt = tcomp.lang.dtypes.bfloat16.numpy
    args = (rng.standard_normal((300, 72)).astype(npdt), rng.standard_normal((72, 136)).astype(npdt),
            rng.standard_normal(136).astype(np.float32))
    got = tcomp.build(S.tc_gemm(op, **kw, swizzle=True)[1], target="cuda", sizes=sizes)(*args)
    pad = tcomp.build(S.tc_gemm(op, **kw)[1], target="cuda", sizes=sizes)(*args)
    assert np.array_equal(got, pad)
    want = tcomp.evaluate(op, *args).astype(np.float64)
    assert (np.abs(got.astype(np.float64) - want) <= np.abs(want) * 2 ** -6 + 2e-2).all()


@pytest.mark.parametrize("dims, kw", [
    ((2, 9, 7, 32, 40), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)),  # cp.async gather
    ((2, 5, 7, 12, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=4)),  # ring stores
    ((4, 28, 28, 64, 64), dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)),
])
def test_swizzled_conv2d_on_gpu(dims, kw):
    n, h, w, c, kf = dims
    sizes = {"N": n, "H": h, "W": w, "C": c, "K": kf, "R": 9 * c}
    rng = np.random.default_rng(7)
    X = rng.standard_normal((n, h, w, c)).astype(np.float16)
    Wt = rng.standard_normal((9 * c, kf)).astype(np.float16)
    op, s = S.tc_conv2d(**kw, swizzle=True)
    got = tcomp.build(s, target="cuda", sizes=sizes)(X, Wt)
    pad = tcomp.build(S.tc_conv2d(**kw)[1], target="cuda", sizes=sizes)(X, Wt)
    assert np.array_equal(got, pad)
    want = tcomp.evaluate(op, X, Wt).astype(np.float64)
    assert (np.abs(got.astype(np.float64) - want) <= np.abs(want) * 2 ** -9 + 2e-2).all()
