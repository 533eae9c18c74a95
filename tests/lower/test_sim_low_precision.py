"""Exact low precision: the sim and `tcomp.evaluate` agree bit for bit on
float16 and bfloat16.

Both compute in float32 (a float16/bfloat16 value is widened on load, the
arithmetic is float32, a reduction accumulates in float32) and round once,
to nearest even, when the result is stored (docs/language.md, "float16 and
bfloat16"). Where the float32 operations happen in the same order, the
results are then identical, so these tests compare the bits, not within the
tolerances of util.TOL (1e-2 for float16 would hide a 1-ulp error, such as a
cast that truncates instead of rounding, in half the products).

Elementwise programs have one order by construction. For reductions the sim
and the oracle add in different orders (per thread, per tile; einsum), so the
data are small integers: every float32 sum is exact whatever the order, and
only the one rounding on store (sums beyond 2048 in float16, beyond 256 in
bfloat16, are not representable) decides the bits.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tcomp

from .util import inputs_for, tile_on_blocks_and_threads

TYPES = {"half": np.float16, "bfloat16": ml_dtypes.bfloat16}


def bits(a: np.ndarray) -> np.ndarray:
    """The stored bits (an unsigned integer view): +0 and -0, NaN payloads differ."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.flatnonzero(bits(got) != bits(want))
    assert diff.size == 0, (f"{diff.size} of {got.size} elements differ, first at flat "
                            f"{diff[0]}: sim {got.reshape(-1)[diff[0]]!r}, evaluate "
                            f"{want.reshape(-1)[diff[0]]!r}")


def small_ints(op, sizes, lo=-8, hi=9, seed=0):
    """Integer-valued inputs in [lo, hi): float32 sums of their products are exact."""
    rng = np.random.default_rng(seed)
    return [rng.integers(lo, hi, a.shape).astype(a.dtype) for a in inputs_for(op, sizes)]


def threads(op, out, block=32):
    """The output's loops fused, split by `block` and bound to blocks and threads."""
    s = tcomp.Schedule(op)
    O = s[out]
    f = O.fuse(*O.axes) if len(O.axes) > 1 else O.axes[0]
    fo, fi = O.split(f, block)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    return s


def vectorized(op, out, width=4):
    """Blocks of 8 threads, each storing `width` consecutive outputs in a vectorized loop."""
    s = tcomp.Schedule(op)
    O = s[out]
    (i,) = O.axes
    io, iv = O.split(i, width)
    bo, bi = O.split(io, 8)
    O.bind(bo, "blockIdx.x")
    O.bind(bi, "threadIdx.x")
    O.vectorize(iv)
    return s


def same(s, args, sizes=None):
    got = tcomp.build(s, target="sim", sizes=sizes)(*args)
    assert_same_bits(got, tcomp.evaluate(s.op, *args))
    return got


# ------------------------------------------------------------------ elementwise
ELEMENTWISE = {
    # half * half is exact in float32: only the store rounds (ties to even)
    "product": "def f({t}(N) A, {t}(N) B) -> (O) {{ O(i) = A(i) * B(i) }}",
    "fma-like": "def f({t}(N) A, {t}(N) B) -> (O) {{ O(i) = A(i) * B(i) + A(i) }}",
    "quotient": "def f({t}(N) A, {t}(N) B) -> (O) {{ O(i) = A(i) / (fabs(B(i)) + {t}(1.0)) }}",
    "math": "def f({t}(N) A, {t}(N) B) -> (O) {{ O(i) = exp(A(i) * {t}(0.5)) - sqrt(fabs(B(i))) }}",
    "select": "def f({t}(N) A, {t}(N) B) -> (O) {{ O(i) = A(i) > B(i) ? A(i) - B(i) : fmax(A(i), B(i)) }}",
}


@pytest.mark.parametrize("sched", ["default", "threads", "vectorized"])
@pytest.mark.parametrize("expr", list(ELEMENTWISE))
@pytest.mark.parametrize("t", list(TYPES))
def test_elementwise(t, expr, sched):
    op = tcomp.op(ELEMENTWISE[expr].format(t=t))
    assert op.outputs[0].dtype.numpy == np.dtype(TYPES[t])
    args = inputs_for(op, {"N": 1003 if sched != "vectorized" else 1024}, seed=1)
    s = {"default": lambda: tcomp.Schedule(op), "threads": lambda: threads(op, "O"),
         "vectorized": lambda: vectorized(op, "O")}[sched]()
    same(s, args)


@pytest.mark.parametrize("t", list(TYPES))
def test_products_round_to_nearest_even(t):
    """Products of random values: about half of them lie above the midpoint
    between two neighbours of the narrow type (a truncating store is 1 ulp off
    there), and the data include exact ties, which round to even."""
    op = tcomp.op(ELEMENTWISE["product"].format(t=t))
    args = inputs_for(op, {"N": 4096}, seed=2)
    got = same(threads(op, "O", 64), args)
    wide = args[0].astype(np.float32) * args[1].astype(np.float32)
    truncated = (wide.view(np.uint32) & np.uint32(0xFFFF0000 if t == "bfloat16" else 0xFFFFE000))
    truncated = truncated.view(np.float32).astype(TYPES[t])
    assert np.mean(got != truncated) > 0.3  # the data tell rounding from truncation
    ties = np.float32([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11] if t == "half" else
                      [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8])
    one = np.ones(2, TYPES[t])
    cast = tcomp.op(f"def f(float(N) A, {t}(N) B) -> (O) {{ O(i) = {t}(A(i)) * B(i) }}")
    got = same(threads(cast, "O", 2), [ties, one])
    np.testing.assert_array_equal(got.astype(np.float32), np.float32(
        [1, 1 + 2.0 ** -9] if t == "half" else [1, 1 + 2.0 ** -6]))


# ------------------------------------------------------------------ mixed types
@pytest.mark.parametrize("t", list(TYPES))
def test_mixed_with_float32(t):
    """A narrow value times a float32 one: float32 out (no rounding to the narrow
    type), and the float32 result cast back to the narrow type."""
    wide = tcomp.op(f"def f({t}(N) A, float(N) B) -> (O) {{ O(i) = A(i) * B(i) + 1.0 }}")
    args = inputs_for(wide, {"N": 517}, seed=3)
    assert same(threads(wide, "O"), args).dtype == np.float32
    narrow = tcomp.op(f"def f({t}(N) A, float(N) B) -> (O) {{ O(i) = {t}(A(i) * B(i)) }}")
    assert same(threads(narrow, "O"), args).dtype == np.dtype(TYPES[t])


def test_half_with_bfloat16_computes_in_float32():
    op = tcomp.op("def f(half(N) A, bfloat16(N) B) -> (O) { O(i) = A(i) * B(i) }")
    args = inputs_for(op, {"N": 300}, seed=4)
    assert same(threads(op, "O"), args).dtype == np.float32


# ------------------------------------------------------------------ reductions
MATMUL = "def mm({t}(M,K) A, {t}(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}"
ROWSUM = "def rs({t}(M,K) A) -> (O) {{ O(m) +=! A(m, k) * A(m, k) }}"


@pytest.mark.parametrize("t", list(TYPES))
def test_matmul_accumulates_in_float32_and_rounds_once(t):
    """K = 97 products of integers up to 8 in magnitude: sums up to 6208, so
    many are not representable in the narrow type (spacing 4 above 4096 in
    float16, 32 in bfloat16 there). Accumulating in the narrow type, or
    rounding twice, changes bits; the float32 sums are exact in any order."""
    op = tcomp.op(MATMUL.format(t=t))
    sizes = {"M": 8, "N": 12, "K": 211}
    args = small_ints(op, sizes, lo=0, seed=5)
    want = tcomp.evaluate(op, *args)
    exact = args[0].astype(np.float64) @ args[1].astype(np.float64)
    assert (exact != want.astype(np.float64)).any()  # the store rounds some sums
    same(tcomp.Schedule(op), args)
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    tile_on_blocks_and_threads(C, m, n, 4, 4)
    same(s, args)


@pytest.mark.parametrize("t", list(TYPES))
def test_rowsum_across_threads(t):
    """A cross-thread reduction (rfactor over 32 threads, then all-reduce) of
    exact float32 partial sums, rounded once on store."""
    op = tcomp.op(ROWSUM.format(t=t))
    sizes = {"M": 5, "K": 300}
    args = small_ints(op, sizes, seed=6)
    s = tcomp.Schedule(op)
    O = s["O"]
    (m,) = O.axes
    (k,) = O.reduce_axes
    ko, ki = O.split(k, 32)
    O.bind(m, "blockIdx.x")
    O.bind(ki, "threadIdx.x")
    got = same(s, args)
    exact = (args[0].astype(np.float64) ** 2).sum(axis=1)
    assert (exact != got.astype(np.float64)).any()  # the store rounds some sums


# ------------------------------------------------------------------ conversions from wide types
# x just above a tie of the narrow type: rounded once it goes up; rounded
# through float32 first (which lands on the tie, then ties to even) it goes down.
ABOVE_TIES = {
    "half": (np.float64([1 + 2.0 ** -11 + 2.0 ** -40, -(1 + 2.0 ** -11 + 2.0 ** -40), 3.0]),
             np.float64([1 + 2.0 ** -10, -(1 + 2.0 ** -10), 3.0])),
    "bfloat16": (np.float64([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30), 3.0]),
                 np.float64([1 + 2.0 ** -7, -(1 + 2.0 ** -7), 3.0])),
}
INT_ABOVE_TIES = (np.int64([2 ** 24 + 2 ** 16 + 1, 2 ** 62 + 2 ** 54 + 1, -(2 ** 24 + 2 ** 16 + 1)]),
                  np.float64([2 ** 24 + 2 ** 17, 2 ** 62 + 2 ** 55, -(2 ** 24 + 2 ** 17)]))


@pytest.mark.parametrize("t", list(TYPES))
def test_double_to_narrow_rounds_once(t):
    """float64 -> float16/bfloat16 rounds once (ml_dtypes alone rounds to
    bfloat16 through float32: twice)."""
    x, want = ABOVE_TIES[t]
    op = tcomp.op(f"def f(double(N) D) -> (O) {{ O(i) = {t}(D(i)) }}")
    got = same(threads(op, "O", 2), [x])
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_integer_to_bfloat16_rounds_once():
    x, want = INT_ABOVE_TIES
    for src in ("int64", "int32"):
        op = tcomp.op(f"def f({src}(N) D) -> (O) {{ O(i) = bfloat16(D(i)) }}")
        keep = want if src == "int64" else want[[0, 2]]
        data = x if src == "int64" else x[[0, 2]].astype(np.int32)
        got = same(threads(op, "O", 2), [data])
        np.testing.assert_array_equal(got.astype(np.float64), keep)


def test_convert_rounds_once_on_random_data():
    """npfuncs.convert to bfloat16 against the exact rounding (Fractions) of
    random float64 values over 60 decades and random 64-bit integers."""
    from fractions import Fraction

    from tcomp.lang.npfuncs import convert
    bf = TYPES["bfloat16"]

    def nearest(v):
        near = np.array([float(v)], np.float64).astype(np.float32).astype(bf)
        u = int(near.view(np.uint16)[0])
        cands = [np.array([c], np.uint16).view(bf) for c in range(u - 2, u + 3)
                 if 0 <= c <= 0xFFFF and (c & 0x7F80) != 0x7F80]  # finite neighbours
        return min(cands, key=lambda c: (abs(Fraction(float(c.astype(np.float64)[0])) - v),
                                         int(c.view(np.uint16)[0]) & 1)).astype(np.float64)[0]

    rng = np.random.default_rng(7)
    xs = rng.standard_normal(400) * 10.0 ** rng.integers(-30, 30, 400)
    got = convert(xs, bf).astype(np.float64)
    assert all(g == nearest(Fraction(float(x))) for g, x in zip(got, xs))
    ints = rng.integers(-2 ** 62, 2 ** 62, 400)
    got = convert(ints, bf).astype(np.float64)
    assert all(g == nearest(Fraction(int(v))) for g, v in zip(got, ints))


@pytest.mark.parametrize("t", list(TYPES))
def test_cuda_converts_doubles_once(t):
    """The CUDA source converts a double, or a 32- or 64-bit integer (which
    float cannot hold exactly: int32 2^24 + 2^16 + 1 to bfloat16 through float
    rounds twice, to the wrong side of a tie), straight to the narrow type;
    16-bit integers, exact in float, go through float. NVRTC compiles it."""
    op = tcomp.op(f"def f(double(N) D, int64(N) I, int32(N) J, uint32(N) U, int16(N) S) -> (O) "
                  f"{{ O(i) = {t}(D(i)) + {t}(I(i)) + {t}(J(i)) + {t}(U(i)) + {t}(S(i)) }}")
    k = tcomp.build(threads(op, "O"), target="cuda")
    conv = "__double2half" if t == "half" else "__double2bfloat16"
    for name in "DIJU":
        assert k.source.count(f"{conv}((double)({name}[") == 1, name
    narrow = "__float2half_rn" if t == "half" else "__float2bfloat16_rn"
    assert k.source.count(f"{narrow}((float)(S[") == 1
    assert k.ptx
