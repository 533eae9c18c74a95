"""Paired epilogue stores (tc_gemm pair_stores: bfloat16x2 / float2 stores of
each lane's two adjacent accumulator columns) and fragments multi-buffered
across the k16 steps (fragment_pipeline) on the GPU: within one rounding of
the output type of the float64 result, and bit for bit what the schedule
without them computes (the same mma chain runs on the same operands; only
when operands are loaded and how results are stored change), at full sizes
and at awkward ones (odd N: a pair's second column outside the tensor, so
pairs are stored element by element under the column guard)."""
from __future__ import annotations

import pytest

import tcomp

from ..bench.common import S
from .gemm_check import (assert_same_as_plain, gelu_inputs, gelu_rows_match, random_ab,
                         rows_match_float64)

pytestmark = pytest.mark.cuda

MM = "def mm({t}(M,K) A, {t}(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)
OPTIONS = [dict(pair_stores=True), dict(fragment_pipeline=2),
           dict(pair_stores=True, fragment_pipeline=2)]
CASES = [
    ({"M": 4096, "N": 4096, "K": 4096}, BEST),
    ({"M": 2048, "N": 2048, "K": 2048}, dict(bm=128, bn=256, wm=64, wn=64, bk=64, pipeline=3,
                                             swizzle=True)),
    ({"M": 1024, "N": 1024, "K": 1024}, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4,
                                             swizzle=True)),
    ({"M": 300, "N": 500, "K": 700}, BEST),
    ({"M": 129, "N": 257, "K": 67}, dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=True)),
    ({"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
    ({"M": 100, "N": 72, "K": 56}, dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=5)),
]


@pytest.mark.parametrize("options", OPTIONS, ids=["pairs", "fpipe", "pairs_fpipe"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes, kw", CASES)
def test_gemm_on_gpu(dtype, sizes, kw, options):
    op = tcomp.op(MM.format(t=dtype))
    A, B = random_ab(sizes, dtype, 3)
    k = tcomp.build(S.tc_gemm(op, **kw, **options)[1], target="cuda", sizes=sizes)
    if options.get("pair_stores") and sizes["N"] % 2 == 0:
        assert "*reinterpret_cast<unsigned*>(&C[" in k.source  # the pairs are vectors
    got = k(A, B)
    rows_match_float64(A, B, got, 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10, sizes["K"])
    assert_same_as_plain(got, op, kw, sizes, (A, B))


@pytest.mark.parametrize("sizes", [{"M": 4096, "N": 4096, "K": 1024},
                                   {"M": 300, "N": 136, "K": 72},
                                   {"M": 129, "N": 135, "K": 72}])
def test_fused_bias_gelu_on_gpu(sizes):
    op = tcomp.op(S.TC_GEMM_GELU)
    args = gelu_inputs(sizes)
    k = tcomp.build(S.tc_gemm(op, **BEST, pair_stores=True, fragment_pipeline=2)[1],
                    target="cuda", sizes=sizes)
    got = k(*args)
    assert_same_as_plain(got, op, BEST, sizes, args)
    gelu_rows_match(op, args, got)


@pytest.mark.parametrize("sizes", [{"M": 1024, "N": 1024, "K": 512},
                                   {"M": 70, "N": 33, "K": 40}])
def test_float32_output_pairs_on_gpu(sizes):
    """float32 outputs: each pair is one 64-bit (float2) store (N even)."""
    op = tcomp.op(S.TC_GEMM_F32_OUT)
    A, B = random_ab(sizes, "bfloat16", 6)
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)
    k = tcomp.build(S.tc_gemm(op, **kw, pair_stores=True)[1], target="cuda", sizes=sizes)
    if sizes["N"] % 2 == 0:
        assert "*reinterpret_cast<float2*>(&C[" in k.source
    got = k(A, B)
    assert_same_as_plain(got, op, kw, sizes, (A, B))
    rows_match_float64(A, B, got, 2.0 ** -20, sizes["K"])
