"""The Hopper rules of the search (rules/hopper.py, issue 24): the space of a
16-bit GEMM on sm_90a holds the TMA + wgmma schedule (any operand order), the
fused epilogue variant for GEMM + bias + GELU, valid at the tuning sizes; not
on other architectures; a small candidate runs on the sim as evaluate does."""
from __future__ import annotations

from collections import Counter

import numpy as np

import pytest

import tcomp
from tcomp.search.rules import Limits
from tcomp.search.space import Space

GEMM = "def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
GEMM_NT = "def mm(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }"
FUSED = """def gbg(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
  C(m, n) +=! float(A(m, k)) * float(B(k, n))
  D(m, n) = bfloat16(0.5 * x * (1.0 + erf(x * 0.70710678118654752))) where x = C(m, n) + bias(n)
}"""
BIG = {"M": 4096, "N": 4096, "K": 4096}


def _sketches(src, sizes, n=24, limits=None, seed=0):
    sp = Space(tcomp.op(src), sizes, limits=limits)
    got = sp.generate(n, np.random.default_rng(seed))
    return sp, got, Counter(c.sketch for c in got)


def test_hopper_tile_candidates_are_valid():
    sp, got, counts = _sketches(GEMM, BIG)
    assert counts["C:hopper_tile"] >= 4, counts
    plans = [c.plan_dict()["stages"]["C"] for c in got if c.sketch == "C:hopper_tile"]
    assert all(p["bn"] in (128, 256) and p["consumers"] in (1, 2) for p in plans)
    for c in got:
        if c.sketch == "C:hopper_tile":
            assert "hopper_gemm" in str(sp.analyse(c).program)


def test_either_operand_order():
    _, _, counts = _sketches(GEMM_NT, BIG)
    assert counts["C:hopper_tile"] >= 4, counts


def test_fused_epilogue_candidates():
    sp, got, counts = _sketches(FUSED, {"M": 8192, "N": 8192, "K": 4096}, n=16)
    assert counts["D:hopper_epilogue"] >= 2, counts
    c = next(c for c in got if c.sketch == "D:hopper_epilogue")
    assert "computed from the accumulators and bias" in str(sp.analyse(c).program)


def test_not_without_wgmma():
    _, _, counts = _sketches(GEMM, BIG, limits=Limits(arch="sm_80"))
    assert not counts["C:hopper_tile"], counts


def test_not_where_the_tma_engine_cannot_move_the_rows():
    _, _, counts = _sketches(GEMM, {"M": 512, "N": 500, "K": 500})
    assert not counts["C:hopper_tile"], counts


def test_a_small_candidate_runs_on_the_sim():
    sizes = {"M": 128, "N": 128, "K": 64}
    sp, got, _ = _sketches(GEMM, sizes, n=40, seed=1)
    c = next(c for c in got if c.sketch == "C:hopper_tile")
    k = tcomp.build(c.replay(sp.op), target="sim", sizes=sizes)
    import ml_dtypes
    rng = np.random.default_rng(0)
    A = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(np.asarray(k(A, B)).astype(np.float64),
                               np.asarray(tcomp.evaluate(sp.op, A, B)).astype(np.float64),
                               rtol=2 ** -7, atol=1e-3)


def test_features_count_the_gemm_of_a_persistent_warp_specialised_kernel():
    """A hopper_tile kernel loops over its tiles per SM (a persistent grid, the
    SM count a launch parameter) in roles of warpgroups: the features counted
    one tile per block, for all 384 threads (the producer's included), 1/5 of
    the GEMM's flops: an estimate of 2.4 PFLOP/s at 4096^3, above the H200's
    dense peak. Now the tensor-core flops are the GEMM's: the tile loop runs
    the blocks' mean trips, each consumer warpgroup at its own index (ping-pong
    consumers take alternate tiles), and the estimate stays under wgmma's
    ceiling."""
    from tcomp.search import features as F
    sp, got, _ = _sketches(GEMM, BIG)
    hopper = [c for c in got if c.sketch == "C:hopper_tile"]
    assert hopper
    for c in hopper:
        f = F.as_dict(sp.features[c.schedule])
        ratio = f["mma_flops"] / (2 * 4096 ** 3)
        assert ratio == pytest.approx(1.0, abs=1e-9), (c.plan, ratio)
        assert f["wgmma_flops"] == f["mma_flops"]
        assert 2 * 4096 ** 3 / (F.analytic_ms(sp.features[c.schedule]) * 1e-3) < F.WGMMA_FLOPS_S


def test_features_count_the_tma_copies_once_per_block():
    """The TMA copies of a hopper_tile kernel are issued by one thread of a
    warpgroup (`threadIdx.x % 128 == 0`): they count once, with the bytes of
    their tensor map's box. Each output tile is stored once, so the global
    store bytes are C's; each tile loads its rows of A and columns of B."""
    from tcomp.search import features as F
    sp, got, _ = _sketches(GEMM, BIG)
    hopper = [c for c in got if c.sketch == "C:hopper_tile"]
    assert hopper
    for c in hopper:
        f = F.as_dict(sp.features[c.schedule])
        p = c.plan_dict()["stages"]["C"]
        bm, bn = p.get("bm", 64 * p["consumers"]), p["bn"]
        tiles = (4096 // bm) * (4096 // bn)
        assert f["global_store_bytes"] == pytest.approx(4096 * 4096 * 2), p  # bfloat16 C
        assert f["global_load_bytes"] == pytest.approx(tiles * (bm + bn) * 4096 * 2), p
        assert f["unique_global_bytes"] == pytest.approx(3 * 4096 * 4096 * 2)


CONV_SIZES = {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "RSC": 2304}


def _conv():
    from tcomp.kernels.conv_sm90 import conv2d_source
    return conv2d_source()


def test_a_convolution_gets_the_hopper_path_with_its_im2col_stage_kept():
    """O's A operand is the im2col temporary: kept as a stage (not inlined) and
    filled by TMA im2col copies."""
    sp, got, counts = _sketches(_conv(), CONV_SIZES, n=24)
    assert counts["O:hopper_tile"] >= 3, counts
    c = next(c for c in got if c.sketch == "O:hopper_tile")
    text = str(sp.analyse(c).program)
    assert "A im2col windows of X (3x3 filter, padding 1,1, 256 channels)" in text


def test_not_for_channels_that_are_not_a_multiple_of_64():
    _, _, counts = _sketches(_conv(), dict(CONV_SIZES, C=96, RSC=864), n=16)
    assert not counts["O:hopper_tile"], counts


def test_not_for_a_temporary_that_is_not_a_window():
    src = """def f(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) {
  T(m, k) = A(m, k) * 2.0
  C(m, n) +=! T(m, k) * B(k, n)
}"""
    _, _, counts = _sketches(src, BIG, n=16)
    assert not counts["C:hopper_tile"], counts


def test_a_small_convolution_candidate_runs_on_the_sim_as_evaluate_does():
    from tests.kernels.conv_ops import data
    sizes = {"N": 2, "H": 5, "W": 7, "C": 64, "K": 64, "RSC": 576}
    sp, got, _ = _sketches(_conv(), sizes, n=24, seed=1)
    c = next(c for c in got if c.sketch == "O:hopper_tile")
    k = tcomp.build(c.replay(sp.op), target="sim", sizes=sizes)
    X, Wt = data((3, 3), sizes)
    want = np.asarray(tcomp.evaluate(tcomp.op(_conv()), X, Wt)).astype(np.float64)
    got_o = np.asarray(k(X, Wt)).astype(np.float64)
    assert np.abs(got_o - want).max() <= 2.0 ** -10 * np.abs(want).max()


FP8 = ("def mm8(float8_e4m3fn(M,K) A, float8_e4m3fn(N,K) B) -> (C) "
       "{ C(m, n) +=! float(A(m, k)) * float(B(n, k)) }")


def test_fp8_products_get_the_hopper_path():
    sp, got, counts = _sketches(FP8, BIG, n=16)
    assert counts["C:hopper_tile"] >= 3, counts
    c = next(c for c in got if c.sketch == "C:hopper_tile")
    assert "wgmma m64n" in str(sp.analyse(c).program) and "k32" in str(sp.analyse(c).program)


def test_not_for_fp8_read_mn_major():
    src = FP8.replace("float8_e4m3fn(N,K) B", "float8_e4m3fn(K,N) B").replace("B(n, k)",
                                                                             "B(k, n)")
    _, _, counts = _sketches(src, BIG, n=12)
    assert not counts["C:hopper_tile"], counts
