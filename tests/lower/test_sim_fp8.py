"""fp8 on the sim: bit for bit with `tcomp.evaluate` (docs/language.md, "fp8").

Both widen fp8 to float32 on load, compute in float32 and convert once on
store, rounding to nearest even and saturating (npfuncs.to_fp8). The values
are the awkward ones: the largest finite value and just beyond it, the
midpoints, subnormals and below, infinities, NaN and -0.0."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from tests.lang.test_fp8 import FP8, awkward, finite_values

from .test_sim_low_precision import threads


def same8(got, want):
    """Equal bytes, except that any NaN equals any NaN (the sign and payload of
    a NaN are not specified: docs/language.md, "fp8")."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    bad = np.flatnonzero(~nan & (got.view(np.uint8) != want.view(np.uint8)))
    assert bad.size == 0, (f"{bad.size} differ, first at {bad[0]}: {got.reshape(-1)[bad[0]]!r} "
                           f"vs {want.reshape(-1)[bad[0]]!r}")


SOURCES = ("float", "double", "half", "bfloat16", "int32", "int64", "uint8")


@pytest.mark.parametrize("t", list(FP8))
@pytest.mark.parametrize("src", SOURCES)
def test_conversions_to_fp8_match_evaluate(t, src):
    op = tcomp.op(f"def f({src}(N) X) -> (O) {{ O(i) = {t}(X(i)) }}")
    dt = op.inputs[0].dtype.numpy
    x = awkward(t).astype(np.float64)
    if op.inputs[0].dtype.is_int:
        info = np.iinfo(dt)
        x = np.clip(np.nan_to_num(np.trunc(x)), info.min, info.max)
    with np.errstate(over="ignore", invalid="ignore"):
        x = x.astype(dt)
    same8(tcomp.build(threads(op, "O", 64), target="sim")(x), tcomp.evaluate(op, x))


@pytest.mark.parametrize("t", list(FP8))
def test_arithmetic_and_casts_out_of_fp8_match_evaluate(t):
    """Every fp8 value (NaN and the zeros included) times 2.5 plus itself, saturated
    on store; to float16, int8 and uint32; and a copy through shared memory."""
    x = np.arange(256, dtype=np.uint8).view(FP8[t])
    op = tcomp.op(f"def f({t}(N) X) -> (O, H, I, U) {{ O(i) = X(i) * 2.5 + X(i) "
                  f"H(i) = half(X(i))  I(i) = int8(X(i))  U(i) = uint32(X(i)) }}")
    s = tcomp.Schedule(op)
    for out in ("O", "H", "I", "U"):
        o = s[out]
        (i,) = o.axes
        io, ii = o.split(i, 32)
        o.bind(io, "blockIdx.x")
        o.bind(ii, "threadIdx.x")
    got = tcomp.build(s, target="sim")(x)
    want = tcomp.evaluate(op, x)
    same8(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("t", list(FP8))
def test_fp8_matmul_through_shared_tiles_matches_evaluate(t):
    """A tiled product of fp8 inputs: copies of fp8 tiles in shared memory and a
    float32 result (integer data: the float32 sums are exact in any order)."""
    op = tcomp.op(f"def mm({t}(M, K) A, {t}(K, N) B) -> (float32(M, N) C) "
                  f"{{ C(m, n) +=! A(m, k) * B(k, n) }}")
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (20, 24)).astype(FP8[t])
    b = rng.integers(-4, 5, (24, 12)).astype(FP8[t])
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 8, 4)
    ko, ki = C.split(k, 8)
    C.reorder(mo, no, ko, mi, ni, ki)
    for ax, tag in ((mo, "blockIdx.x"), (no, "blockIdx.y"), (mi, "threadIdx.y"),
                    (ni, "threadIdx.x")):
        C.bind(ax, tag)
    for name in ("A", "B"):
        T = s.cache_read(name, "shared", [C])
        T.compute_at(C, ko)
    got = tcomp.build(s, target="sim")(a, b)
    np.testing.assert_array_equal(got, tcomp.evaluate(op, a, b))
    np.testing.assert_array_equal(got, a.astype(np.float64) @ b.astype(np.float64))


def test_every_finite_value_round_trips():
    for t in FP8:
        vals, codes = finite_values(t)
        op = tcomp.op(f"def f(float(N) X) -> (O) {{ O(i) = {t}(X(i)) }}")
        got = tcomp.build(threads(op, "O", 32), target="sim")(vals.astype(np.float32))
        np.testing.assert_array_equal(got.view(np.uint8), codes)
