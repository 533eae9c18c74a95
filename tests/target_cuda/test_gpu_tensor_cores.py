"""Tensorized GEMM schedules (bench/schedules.tc_gemm) on the GPU: results
within one rounding of the output type of the float64 product, and equal to
the sim's within float32 summation order."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from ..bench.common import S

pytestmark = pytest.mark.cuda

BF = "def mm({t}(M,K) A, {t}(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
CASES = [
    ({"M": 64, "N": 64, "K": 32}, dict(bm=64, bn=64, wm=32, wn=32, bk=32)),
    ({"M": 32, "N": 48, "K": 64}, dict(bm=32, bn=16, wm=16, wn=16, bk=16)),
    ({"M": 256, "N": 256, "K": 128}, dict(bm=128, bn=128, wm=64, wn=64, bk=32)),
    ({"M": 384, "N": 512, "K": 192}, dict(bm=128, bn=256, wm=64, wn=64, bk=32)),
    ({"M": 256, "N": 128, "K": 256}, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=True)),
    ({"M": 64, "N": 64, "K": 64}, dict(bm=64, bn=64, wm=32, wn=32, bk=16, pad=False)),
    ({"M": 256, "N": 256, "K": 256}, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3)),
    ({"M": 256, "N": 512, "K": 512}, dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=4)),
    ({"M": 128, "N": 128, "K": 320}, dict(bm=128, bn=128, wm=64, wn=32, bk=64, pipeline=5)),
    ({"M": 32, "N": 32, "K": 64}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
    # sizes the tiles do not divide (zero-filled tiles; cp.async zero-fill where K % 8 == 0)
    ({"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
    ({"M": 100, "N": 72, "K": 56}, dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=4)),
    ({"M": 300, "N": 500, "K": 700}, dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)),
    ({"M": 129, "N": 257, "K": 67}, dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=True)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes, kw", CASES)
def test_tensorized_gemm_on_gpu(dtype, sizes, kw):
    op, s = S.tc_gemm(tcomp.op(BF.format(t=dtype)), **kw)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    rng = np.random.default_rng(2)
    npdt = tcomp.lang.dtypes.BY_NAME[dtype].numpy
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    got = k(A, B).astype(np.float64)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
    # float32 accumulation (any order) then one rounding to the output type
    assert (np.abs(got - exact) <= np.abs(exact) * ulp + 1e-3 * np.sqrt(sizes["K"])).all()
    if sizes["M"] * sizes["N"] <= 64 * 64:
        sim = tcomp.build(s, target="sim", sizes=sizes)(A, B).astype(np.float64)
        assert (np.abs(got - sim) <= np.abs(sim) * 2 * ulp + 1e-6).all()


@pytest.mark.parametrize("sizes", [{"M": 256, "N": 256, "K": 128}, {"M": 300, "N": 136, "K": 72}])
def test_fused_bias_gelu_on_gpu(sizes):
    op, s = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    rng = np.random.default_rng(5)
    npdt = tcomp.lang.dtypes.bfloat16.numpy
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    bias = rng.standard_normal(sizes["N"]).astype(np.float32)
    got = k(A, B, bias).astype(np.float64)
    x = A.astype(np.float64) @ B.astype(np.float64) + bias
    from math import erf
    want = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    assert (np.abs(got - want) <= np.abs(want) * 2 ** -7 + 1e-3 * np.sqrt(sizes["K"])).all()
