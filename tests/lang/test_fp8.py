"""fp8 (float8_e4m3fn, float8_e5m2) in the language and in `evaluate`
(docs/language.md, "fp8"): the names, promotion, float32 compute, and the one
conversion rule, round to nearest even then saturate to the largest finite
value, NaN kept, checked against a brute-force nearest-value oracle over
every fp8 value."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes, npfuncs

FP8 = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def finite_values(t):
    """Every finite value of fp8 type `t` with its byte (both zeros)."""
    b = np.arange(256, dtype=np.uint8)
    v = b.view(FP8[t]).astype(np.float64)
    keep = np.isfinite(v)
    return v[keep], b[keep]


def oracle(t, x: float) -> int:
    """The byte of x in fp8 type `t`: NaN -> NaN; |x| beyond the largest finite
    value -> that value with x's sign; else the nearest value, a tie to the even
    byte; zero keeps x's sign."""
    vals, codes = finite_values(t)
    if np.isnan(x):
        return -1
    x = min(max(x, -MAX[t]), MAX[t])
    d = np.abs(vals - x)
    best = np.flatnonzero(d == d.min())
    if len(best) > 1:
        best = [i for i in best if codes[i] % 2 == 0] or best
    if vals[best[0]] == 0:  # a zero result keeps x's sign
        return 0x80 if np.signbit(x) else 0
    return int(codes[best[0]])


def awkward(t):
    """Values around every fp8 value: itself, the midpoints to its neighbours,
    one float32 ulp either side of them; beyond the range; infinities, NaN, -0,
    the subnormal range and below."""
    vals, _ = finite_values(t)
    vals = np.unique(vals)
    mids = (vals[1:] + vals[:-1]) / 2
    xs = np.concatenate([vals, mids]).astype(np.float32)
    near = np.concatenate([xs, np.nextafter(xs, np.float32(np.inf)),
                           np.nextafter(xs, np.float32(-np.inf))])
    extra = np.array([MAX[t] * 1.01, MAX[t] * 1.1, 1e30, -1e30, np.inf, -np.inf, np.nan, -0.0,
                      0.0, 2.0 ** -30, -(2.0 ** -30)], np.float32)
    return np.concatenate([near, extra])


@pytest.mark.parametrize("t", list(FP8))
def test_conversion_from_float32_is_nearest_even_saturating(t):
    xs = awkward(t)
    got = npfuncs.convert(xs, np.dtype(FP8[t])).view(np.uint8)
    for x, g in zip(xs, got):
        want = oracle(t, float(x))
        if want == -1:
            assert np.isnan(np.uint8(g).view(FP8[t]).astype(np.float32)), (x, g)
        else:
            assert g == want, f"{t}({x!r}) gave byte {g:#04x}, want {want:#04x}"


@pytest.mark.parametrize("t", list(FP8))
def test_float64_and_integers_round_once(t):
    """A double just above a tie rounds up (through float32 it would tie to even
    and go down); integers saturate."""
    one_up = 1.125 if t == "float8_e4m3fn" else 1.25
    half = (1 + one_up) / 2
    x = np.array([half + 2.0 ** -40, half, -(half + 2.0 ** -40)])
    got = npfuncs.convert(x, np.dtype(FP8[t])).astype(np.float64)
    np.testing.assert_array_equal(got, [one_up, 1.0, -one_up])
    ints = np.array([3, -17, 1 << 40, -(1 << 62)], np.int64)
    got = npfuncs.convert(ints, np.dtype(FP8[t])).astype(np.float64)
    np.testing.assert_array_equal(got, [3, -16, MAX[t], -MAX[t]])


def test_names_promotion_and_compute_type():
    assert dtypes.BY_NAME["float8_e4m3fn"].is_fp8 and dtypes.BY_NAME["float8_e5m2"].is_fp8
    e4, e5 = dtypes.float8_e4m3fn, dtypes.float8_e5m2
    assert e4.compute == dtypes.float32 and e4.numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert dtypes.promote(e4, e5) == dtypes.float32
    assert dtypes.promote(e4, e4) == e4
    assert dtypes.promote(e4, dtypes.float16) == dtypes.float16
    assert dtypes.promote(e5, dtypes.bfloat16) == dtypes.bfloat16
    assert dtypes.promote(e5, dtypes.int32) == e5
    assert dtypes.from_numpy(ml_dtypes.float8_e5m2) == e5
    op = tcomp.op("def f(float8_e4m3fn(N) A, float8_e5m2(N) B) -> (C, D) "
                  "{ C(i) = A(i) * B(i)  D(i) = A(i) * A(i) }")
    assert [o.dtype.name for o in op.outputs] == ["float32", "float8_e4m3fn"]


def test_arithmetic_in_float32_rounded_on_store():
    """A(i) * A(i) + A(i) is computed in float32 and rounded (saturating) once."""
    op = tcomp.op("def f(float8_e4m3fn(N) A) -> (O) { O(i) = A(i) * A(i) + A(i) }")
    a = np.array([1.5, 24, 30, -0.0, 2.0 ** -9], ml_dtypes.float8_e4m3fn)
    got = tcomp.evaluate(op, a)
    f = a.astype(np.float32)
    want = npfuncs.convert(f * f + f, np.dtype(ml_dtypes.float8_e4m3fn))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert float(got[1]) == 448.0 and float(got[2]) == 448.0  # 600 and 930 saturate


def test_reduction_accumulates_in_float32():
    """An fp8 sum accumulates in float32 and rounds once: 16 + 16 x 0.5 is 24 (exact
    in e4m3fn), where an fp8 accumulator would stay at 16 (16.5 rounds to 16)."""
    op = tcomp.op("def f(float8_e4m3fn(M, N) A) -> (S) { S(i) +=! A(i, j) }")
    assert op.outputs[0].dtype.name == "float8_e4m3fn"
    a = np.full((1, 17), 0.5, ml_dtypes.float8_e4m3fn)
    a[0, 0] = 16
    assert float(tcomp.evaluate(op, a)[0]) == 24.0


@pytest.mark.parametrize("t", list(FP8))
def test_evaluate_reads_fp8_through_strided_views(t):
    """Shifted reads and einsum products of fp8 tensors (a strided view of an
    ml_dtypes array: as_strided cannot rebuild '<f1' from its interface)."""
    rng = np.random.default_rng(0)
    op = tcomp.op(f"def f({t}(N, M) X, {t}(M, K) W) -> (Y, float32(N, K) Z) "
                  "{ Y(i, j) = X(i, j + 1) - X(i, j)  Z(i, k) +=! X(i, j) * W(j, k) }")
    x = rng.standard_normal((5, 7)).astype(FP8[t])
    w = rng.standard_normal((7, 3)).astype(FP8[t])
    y, z = tcomp.evaluate(op, x, w)
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    np.testing.assert_array_equal(y.view(np.uint8), npfuncs.convert(
        xf[:, 1:] - xf[:, :-1], np.dtype(FP8[t])).view(np.uint8))
    assert z.dtype == np.float32 and y.dtype == np.dtype(FP8[t])
    np.testing.assert_allclose(z, xf.astype(np.float64) @ wf, rtol=1e-6)


@pytest.mark.parametrize("t", list(FP8))
def test_casts_to_and_from_every_type(t):
    """fp8 -> each type is exact (integers: truncated and saturated as from
    float); each type -> fp8 rounds once and saturates."""
    vals, _ = finite_values(t)
    x = vals.astype(FP8[t])
    for other in ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32",
                  "int64", "bool"):
        op = tcomp.op(f"def f({t}(N) X) -> (O) {{ O(i) = {other}(X(i)) }}")
        got = tcomp.evaluate(op, x)
        if other == "bool":
            want = vals != 0
        elif other in ("int8", "uint8", "int32", "int64"):
            info = np.iinfo(other)
            want = np.clip(np.trunc(vals), info.min, info.max).astype(other)
        else:
            want = vals.astype(dtypes.BY_NAME[other].numpy)
        np.testing.assert_array_equal(got, want, err_msg=other)
        back = tcomp.op(f"def g({other}(N) X) -> (O) {{ O(i) = {t}(X(i)) }}")
        src = got
        got8 = tcomp.evaluate(back, src)
        want8 = npfuncs.convert(np.asarray(src).astype(np.float64), np.dtype(FP8[t]))
        np.testing.assert_array_equal(got8.view(np.uint8), want8.view(np.uint8), err_msg=other)


def test_literals_meeting_fp8_round_once_and_saturate():
    """A float literal meeting an fp8 value is fp8 (as one meeting a half is a half):
    its text rounded once (a text just above a tie rounds up, where its double, the
    tie itself, would go to even) and saturated like every conversion to fp8."""
    op = tcomp.op("def f(float8_e4m3fn(N) X) -> (O, P, Q) { O(i) = X(i) * 1000.0  "
                  "P(i) = X(i) * 1.0625000000000000000001  Q(i) = X(i) * 0.1 }")
    assert [o.dtype.name for o in op.outputs] == ["float8_e4m3fn"] * 3
    x = np.array([1, -0.5], ml_dtypes.float8_e4m3fn)
    o, p, q = (v.astype(np.float64) for v in tcomp.evaluate(op, x))
    np.testing.assert_array_equal(o, [448, -224])
    np.testing.assert_array_equal(p, [1.125, -0.5625])
    np.testing.assert_array_equal(q, [0.1015625, -0.05078125])
