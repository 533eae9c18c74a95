"""The epilogue through shared memory (tc_gemm smem_epilogue: accumulators
stored into a shared staging tile by their fragment layout, a barrier, the
tile copied to global memory by all threads in 16-byte vectors) on the GPU:
bit for bit what the kernel storing fragments straight to global memory
computes (the same mma chain and rounding), and within one rounding of the
output type of the float64 result, at full sizes (vector copies) and awkward
ones (guarded edge tiles, element copies where rows break 16-byte alignment),
bfloat16 and float16, cp.async rings of 3 and 4, the fused bias + GELU and a
float32 output (16-byte copies of 4 floats)."""
from __future__ import annotations

import pytest

import tcomp

from ..bench.common import S
from .gemm_check import (assert_same_as_plain, gelu_inputs, gelu_rows_match, random_ab,
                         rows_match_float64)

pytestmark = pytest.mark.cuda

MM = "def mm({t}(M,K) A, {t}(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)
OPTIONS = [dict(), dict(pair_stores=True), dict(pair_stores=True, fragment_pipeline=2)]
CASES = [
    ({"M": 4096, "N": 4096, "K": 4096}, BEST),
    ({"M": 2048, "N": 2048, "K": 2048}, dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=3,
                                             swizzle=True)),
    ({"M": 1024, "N": 1024, "K": 1024}, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4,
                                             swizzle=True)),
    ({"M": 300, "N": 504, "K": 700}, dict(BEST, swizzle=False, pad=True)),
    ({"M": 300, "N": 500, "K": 700}, BEST),
    ({"M": 129, "N": 257, "K": 67}, dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=4)),
    ({"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
]


@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "pairs", "pairs_fpipe"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes, kw", CASES)
def test_staged_gemm_on_gpu(dtype, sizes, kw, options):
    op = tcomp.op(MM.format(t=dtype))
    A, B = random_ab(sizes, dtype, 3)
    k = tcomp.build(S.tc_gemm(op, **kw, **options, smem_epilogue=True)[1], target="cuda",
                    sizes=sizes)
    if sizes["N"] % 8 == 0:
        assert "*reinterpret_cast<float4*>(&C[" in k.source  # 16-byte copies out
    got = k(A, B)
    rows_match_float64(A, B, got, 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10, sizes["K"])
    assert_same_as_plain(got, op, {**kw, **options}, sizes, (A, B))


@pytest.mark.parametrize("kw", [dict(BEST, pair_stores=True),
                                dict(BEST, bk=32, pipeline=4, pair_stores=True)],
                         ids=["k64_async3", "k32_async4"])
@pytest.mark.parametrize("sizes", [{"M": 4096, "N": 4096, "K": 1024},
                                   {"M": 300, "N": 136, "K": 72},
                                   {"M": 129, "N": 135, "K": 72}])
def test_staged_fused_bias_gelu_on_gpu(sizes, kw):
    op = tcomp.op(S.TC_GEMM_GELU)
    args = gelu_inputs(sizes)
    k = tcomp.build(S.tc_gemm(op, **kw, smem_epilogue=True)[1], target="cuda", sizes=sizes)
    got = k(*args)
    assert_same_as_plain(got, op, kw, sizes, args)
    gelu_rows_match(op, args, got)


@pytest.mark.parametrize("sizes", [{"M": 1024, "N": 1024, "K": 512},
                                   {"M": 70, "N": 33, "K": 40}])
def test_staged_float32_output_on_gpu(sizes):
    """float32 outputs: a float32 staging tile, copied out 4 floats at a time."""
    op = tcomp.op(S.TC_GEMM_F32_OUT)
    A, B = random_ab(sizes, "bfloat16", 6)
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3, pair_stores=True)
    k = tcomp.build(S.tc_gemm(op, **kw, smem_epilogue=True)[1], target="cuda", sizes=sizes)
    if sizes["N"] % 4 == 0:
        assert "*reinterpret_cast<float4*>(&C[" in k.source
    got = k(A, B)
    assert_same_as_plain(got, op, kw, sizes, (A, B))
    rows_match_float64(A, B, got, 2.0 ** -20, sizes["K"])
