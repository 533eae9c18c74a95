"""conv2d on tensor cores as a comprehension (bench/schedules.py TC_CONV2D,
tc_conv2d): an im2col stage `Acol` computed in shared memory at the GEMM's
K-tile loop, read through fragments. The sim against tcomp.evaluate (and
evaluate against a float64 convolution) at small and awkward sizes, the
gather's cp.async with zero-fill, and the full-size kernel through NVRTC."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang.dtypes import bfloat16, float16, float32, float64
from tcomp.lower import ir
from tcomp.lower.software_pipeline import _zero_filled_load

from ..bench.common import S

FULL = {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "R": 9 * 256}


def conv_ref(X, Wt):
    """The float64 3x3 convolution, stride 1, padding 1, of NHWC `X` with the
    (9 C) x K filter matrix `Wt`, as (N H W) x K."""
    N, H, W, C = X.shape
    F = Wt.astype(np.float64).reshape(3, 3, C, -1)
    Xp = np.zeros((N, H + 2, W + 2, C))
    Xp[:, 1:-1, 1:-1] = X
    out = sum(Xp[:, a:a + H, b:b + W] @ F[a, b] for a in range(3) for b in range(3))
    return out.reshape(N * H * W, -1)


def data(sizes, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((sizes["N"], sizes["H"], sizes["W"], sizes["C"])).astype(np.float16)
    Wt = rng.standard_normal((9 * sizes["C"], sizes["K"])).astype(np.float16)
    return X, Wt


def sizes_of(N, H, W, C, K):
    return {"N": N, "H": H, "W": W, "C": C, "K": K, "R": 9 * C}


SMALL = dict(bm=64, bn=64, wm=32, wn=32, bk=32)
CASES = [  # (sizes, schedule arguments)
    (sizes_of(1, 8, 8, 16, 64), dict(SMALL)),
    (sizes_of(1, 8, 8, 16, 64), dict(SMALL, pipeline=3)),
    # H, W not multiples of anything; N H W = 70 (a partial block of pixels),
    # K = 24 (a partial block of filters); 9 C = 144 (a partial K tile)
    (sizes_of(2, 7, 5, 16, 24), dict(SMALL, pipeline=3)),
    (sizes_of(2, 7, 5, 16, 24), dict(SMALL, pipeline=True)),
    # C = 4: 8-channel pieces span filter taps (no cp.async: stores into the ring)
    (sizes_of(2, 5, 7, 4, 24), dict(SMALL, pipeline=4)),
    (sizes_of(2, 5, 7, 12, 24), dict(SMALL, pipeline=3)),
    (sizes_of(1, 3, 3, 8, 8), dict(bm=32, bn=32, wm=16, wn=32, bk=16)),
    (sizes_of(3, 6, 9, 24, 40), dict(bm=64, bn=32, wm=32, wn=16, bk=32, pipeline=5)),
    (sizes_of(1, 11, 13, 8, 16), dict(bm=64, bn=32, wm=32, wn=32, bk=16, pipeline=3,
                                      pad=False, unroll_k=True)),
]


def test_the_comprehension_is_a_convolution():
    op = tcomp.op(S.TC_CONV2D)
    assert [t.name for t in op.temporaries] == ["Acol"]
    sizes = sizes_of(2, 5, 6, 4, 8)
    X, Wt = data(sizes)
    got = tcomp.evaluate(op, X, Wt)
    exact = conv_ref(X, Wt)
    assert got.dtype == np.float16 and got.shape == exact.shape
    # the float32 sum rounded once to float16
    assert (np.abs(got - exact) <= np.abs(exact) * 2.0 ** -11 + 1e-3).all()


@pytest.mark.parametrize("sizes, kw", CASES)
def test_sim_matches_evaluate(sizes, kw):
    op, s = S.tc_conv2d(**kw)
    X, Wt = data(sizes, seed=sizes["H"])
    got = tcomp.build(s, target="sim", sizes=sizes)(X, Wt)
    want = tcomp.evaluate(op, X, Wt)
    assert got.dtype == want.dtype == np.float16
    assert_one_rounding_apart(got, want, X, Wt)
    np.testing.assert_allclose(got.astype(np.float64), conv_ref(X, Wt), rtol=1e-2, atol=1e-2)


def assert_one_rounding_apart(got, want, X, Wt):
    """Both round a float32 sum once to float16, the mma summing in another
    order: 1 ulp of the larger apart, plus the float32 sums' difference (16
    float32 epsilons of the sum of the terms' magnitudes: it matters only
    where the terms cancel to a result far below them)."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    ulp = np.spacing(np.maximum(np.abs(got), np.abs(want)).astype(np.float16)).astype(np.float64)
    magnitude = conv_ref(np.abs(X), np.abs(Wt))
    assert (np.abs(got - want) <= ulp + 2.0 ** -20 * magnitude).all()


def test_im2col_is_in_shared_memory_and_gathered_with_cp_async():
    """C a multiple of 8: each 8-channel piece of a window row is 16
    contiguous bytes of X, copied with cp.async, 0 source bytes in the padding
    and past the last pixel; Acol never reaches global memory."""
    op, s = S.tc_conv2d(**SMALL, pipeline=3)
    text = str(tcomp.lower(s, sizes=sizes_of(2, 7, 5, 16, 24)))
    assert "alloc shared float16 Acol[3, 64, 40]" in text
    assert "buffer temp" not in text
    gathers = [line for line in text.splitlines() if "cp_async(&Acol[" in line]
    assert gathers and all("? 16 : 0)" in line and "&X[" in line for line in gathers)


def test_taps_that_split_a_piece_stay_synchronous_stores():
    """C = 12: a piece of 8 may span two filter taps (not contiguous in X):
    the gather stays ordinary stores into the ring, the filters are cp.async."""
    op, s = S.tc_conv2d(**SMALL, pipeline=3)
    text = str(tcomp.lower(s, sizes=sizes_of(2, 5, 7, 12, 24)))
    assert "cp_async(&Wt_shared[" in text and "cp_async(&Acol[" not in text
    ring = [line for line in text.splitlines() if line.strip().startswith("Acol[(r_o + 2) % 3")]
    assert ring and all("X[" in line for line in ring)  # stores 2 K tiles ahead


def test_a_gather_that_computes_is_not_an_async_copy():
    """An im2col stage that scales what it gathers is not a copy: its stores
    stay synchronous, and the result is still evaluate's."""
    src = S.TC_CONV2D.replace("X(n, h, w, r % C)", "X(n, h, w, r % C) * float16(2.0)")
    op, s = S.tc_conv2d(tcomp.op(src), **SMALL, pipeline=3)
    sizes = sizes_of(1, 4, 5, 8, 16)
    assert "cp_async(&Acol[" not in str(tcomp.lower(s, sizes=sizes))
    X, Wt = data(sizes)
    got = tcomp.build(s, target="sim", sizes=sizes)(X, Wt)
    assert_one_rounding_apart(got, tcomp.evaluate(op, X, Wt), X, Wt)


def test_full_size_kernel_compiles_to_tensor_core_ptx():
    """N32 C256 56x56 K256 (the benchmark case): mma.sync, ldmatrix and
    cp.async in the PTX, no local memory (nothing spilled or indexed at run
    time)."""
    op, s = S.tc_conv2d(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3)
    k = tcomp.build(s, target="cuda", sizes=FULL)
    ptx = k.ptx
    assert ".local" not in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned" in ptx and "cp.async.cg.shared.global" in ptx
    # the gather's copies: 16 bytes with a zero-fill source size
    assert k.source.count("cp.async.cg.shared.global [%0], [%1], 16, %2") >= 4


# ------------------------------------------------------------------ the cp.async matcher
def _load(dt, buf="X"):
    return ir.Load(buf, (ir.Var("i"),), dt)


def _sel(a, zero_dt):
    return ir.Select(ir.Var("c"), a, ir.Imm(0.0, zero_dt), a.dtype)


DTYPES = {"X": float16, "F": float32, "B": bfloat16}


def test_zero_filled_load_through_a_widening_and_back():
    x = _load(float16)
    e = ir.Cast(float16, _sel(ir.Cast(float32, x), float32))  # float16(c ? float32(x) : 0)
    assert _zero_filled_load(e, DTYPES) == (ir.Var("c"), x)
    nested = ir.Select(ir.Var("d"), e, ir.Imm(0.0, float16), float16)
    cond, load = _zero_filled_load(nested, DTYPES)
    assert load == x and cond == ir.Bin("&&", ir.Var("d"), ir.Var("c"), ir.bool_)
    assert _zero_filled_load(x, DTYPES) == (None, x)


@pytest.mark.parametrize("make", [
    lambda: ir.Cast(float16, _load(float32, "F")),                      # narrowing
    lambda: ir.Cast(bfloat16, ir.Cast(float16, _load(bfloat16, "B"))),  # through float16
    lambda: ir.Cast(float32, ir.Cast(float16, _load(float32, "F"))),    # through a narrower
    lambda: ir.Cast(float32, _load(float16)),                          # a different type out
    lambda: ir.Select(ir.Var("c"), _load(float16), ir.Imm(1.0, float16), float16),  # not 0
    lambda: ir.Bin("*", _load(float16), _load(float16), float16),       # computed
    lambda: _load(float64, "T"),                                        # not a global input
])
def test_values_that_are_not_a_copy(make):
    assert _zero_filled_load(make(), DTYPES) is None


def test_sizes_known_at_run_time():
    """Without sizes= the K tile's alignment in X is unknown: the gather stays
    stores into the ring (no cp.async), and the kernel is right at any size."""
    op, s = S.tc_conv2d(**SMALL, pipeline=3)
    assert "cp_async(&Acol[" not in str(tcomp.lower(s))
    k = tcomp.build(s, target="sim")
    for sizes in (sizes_of(2, 5, 7, 16, 24), sizes_of(1, 3, 4, 8, 8)):
        X, Wt = data(sizes)
        assert_one_rounding_apart(k(X, Wt), tcomp.evaluate(op, X, Wt), X, Wt)
