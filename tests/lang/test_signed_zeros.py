"""Signed zeros in max/min and the sign of NaN in copysign, defined alike on every
target (lang/minmax.py, lang/npfuncs.py, docs/language.md): -0 < +0 in float
max and min (calls, fmax/fmin, reductions, scans, scatters), copysign(x, NaN) =
|x|. Found by issue 22's fuzz run (seed 7 pair 27361): NumPy's NaN from an
invalid pow is negative, the GPU's positive, and np.fmax may return either
zero, so rsqrt(max(+0, copysign(0, NaN))) was -inf in evaluate and +inf on the
emulated CUDA. Checked bit for bit (np.signbit) on evaluate, the sim, the CUDA
emulator and (marked cuda) the H200."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang import minmax
from ..target_cuda.emulator import HAVE_CXX, run_emulated

Z = np.float32([0.0, -0.0, 0.0, -0.0])
W = np.float32([-0.0, 0.0, 0.0, -0.0])
MAX = np.float32([0.0, 0.0, 0.0, -0.0])   # max(Z, W): +0 unless both are -0
MIN = np.float32([-0.0, -0.0, 0.0, -0.0])  # min(Z, W): -0 unless both are +0

PAIRS = """def f(float(N) A, float(N) B) -> (O1, O2, O3, O4) {
    O1(i) = max(A(i), B(i))
    O2(i) = min(A(i), B(i))
    O3(i) = fmax(A(i), B(i))
    O4(i) = fmin(A(i), B(i))
}"""
ROWS = """def f(float(M, K) X) -> (mx, mn, P) {
    mx(m) max=! X(m, k)
    mn(m) min=! X(m, k)
    P(m, k) = X(m, k) where k in 0:1
    P(m, k) = max(P(m, k - 1), X(m, k)) where k in 1:K, ordered k
}"""
COPYSIGN = """def f(float(N) A, float(N) B) -> (O, R) {
    O(i) = copysign(A(i), B(i))
    R(i) = rsqrt(max(0.0 * A(i), copysign(0.0, B(i))))
}"""


def bits(a):
    return np.asarray(a).view(np.uint32 if np.asarray(a).dtype == np.float32 else np.uint64)


def assert_bits(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(bits(np.float32(g)), bits(np.float32(w)))


def rows():
    """Rows of zeros of mixed signs, all -0, all +0, negatives and one zero, NaN."""
    return np.float32([[-0.0, 0.0, -0.0], [-0.0, -0.0, -0.0], [0.0, 0.0, 0.0],
                       [-1.0, -0.0, -2.0], [np.nan, -0.0, 0.0], [0.0, -0.0, -0.0]])


def nans():
    neg = np.array([0xFFC00000, 0x7FC00000, 0xFFC00000, 0x3F800000], np.uint32).view(np.float32)
    return np.float32([1.0, -2.0, -0.0, -3.0]), neg  # B: -NaN, +NaN, -NaN, 1.0


def test_minmax_helpers_order_zeros():
    assert_bits(minmax.MAX(Z, W), MAX)
    assert_bits(minmax.MIN(Z, W), MIN)
    assert_bits(minmax.MAX(W, Z), MAX)
    x = rows()
    assert_bits(minmax.MAX.reduce(x, axis=1), [0.0, -0.0, 0.0, -0.0, 0.0, 0.0])
    assert_bits(minmax.MIN.reduce(x, axis=1), [-0.0, -0.0, 0.0, -2.0, -0.0, -0.0])
    np.testing.assert_array_equal(np.signbit(minmax.MAX.accumulate(x[0])), [True, False, False])
    a = np.float32([-0.0, -0.0, 0.0])
    minmax.MAX.at(a, np.array([0, 0, 2, 1]), np.float32([-1.0, 0.0, -0.0, -0.0]))
    assert_bits(a, [0.0, -0.0, 0.0])
    b = np.float32([0.0, 5.0])
    minmax.MIN.at(b, np.array([0, 0]), np.float32([-0.0, 1.0]))
    assert_bits(b, [-0.0, 5.0])
    assert minmax.MAX(np.int32(3), np.int32(-1)) == 3  # (integers: np.maximum)


def test_evaluate_orders_signed_zeros():
    op = tcomp.op(PAIRS)
    for g, w in zip(tcomp.evaluate(op, Z, W), (MAX, MIN, MAX, MIN)):
        assert_bits(g, w)
    mx, mn, P = tcomp.evaluate(tcomp.op(ROWS), rows())
    assert_bits(mx, [0.0, -0.0, 0.0, -0.0, 0.0, 0.0])
    assert_bits(mn, [-0.0, -0.0, 0.0, -2.0, -0.0, -0.0])
    np.testing.assert_array_equal(np.signbit(P[0]), [True, False, False])


def test_evaluate_copysign_of_a_nan_is_positive():
    O, R = tcomp.evaluate(tcomp.op(COPYSIGN), *nans())
    assert_bits(O, [1.0, 2.0, 0.0, 3.0])
    np.testing.assert_array_equal(R, [np.inf, np.inf, np.inf, np.inf])


def test_scatter_max_orders_signed_zeros():
    op = tcomp.op("""def f(int32(N) I, float(N) X, float(M) B) -> (O) {
        O(m) = B(m)
        O(I(i)) max= X(i)
    }""")
    (O,) = [tcomp.evaluate(op, np.int32([0, 0, 1]), np.float32([0.0, -0.0, -0.0]),
                           np.float32([-0.0, -0.0, 0.0]))]
    assert_bits(O, [0.0, -0.0, 0.0])


def threaded(src):
    s = tcomp.Schedule(tcomp.op(src))
    for st in s.stages:
        st.bind(st.axes[0], "threadIdx.x")
    return s


@pytest.mark.parametrize("split", [False, True])
def test_sim_orders_signed_zeros(split):
    for g, w in zip(tcomp.build(threaded(PAIRS), target="sim")(Z, W), (MAX, MIN, MAX, MIN)):
        assert_bits(g, w)
    s = tcomp.Schedule(tcomp.op(ROWS))
    for name in ("mx", "mn"):
        st = s[name]
        st.bind(st.axes[0], "blockIdx.x")
        if split:  # the row over threads: a cross-thread reduction
            st.bind(st.reduce_axes[0], "threadIdx.x")
    want = tcomp.evaluate(s.op, rows())
    for g, w in zip(tcomp.build(s, target="sim")(rows()), want):
        assert_bits(np.ravel(g), np.ravel(w))
    O, R = tcomp.build(threaded(COPYSIGN), target="sim")(*nans())
    assert_bits(O, [1.0, 2.0, 0.0, 3.0])
    np.testing.assert_array_equal(R, [np.inf] * 4)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulator needs g++")
def test_emulated_cuda_orders_signed_zeros():
    for g, w in zip(run_emulated(tcomp.build(threaded(PAIRS), target="cuda"), Z, W),
                    (MAX, MIN, MAX, MIN)):
        assert_bits(g, w)
    O, R = run_emulated(tcomp.build(threaded(COPYSIGN), target="cuda"), *nans())
    assert_bits(O, [1.0, 2.0, 0.0, 3.0])
    assert "tc_copysign(" in tcomp.build(threaded(COPYSIGN), target="cuda").source


@pytest.mark.cuda
def test_gpu_orders_signed_zeros_and_copysign_of_nan():
    """The H200's fmaxf/fminf (max.f32 / min.f32) on zeros read at run time, the
    reductions across threads, and tc_copysign on NaNs of either sign."""
    for g, w in zip(tcomp.build(threaded(PAIRS), target="cuda")(Z, W), (MAX, MIN, MAX, MIN)):
        assert_bits(np.asarray(g), w)
    s = tcomp.Schedule(tcomp.op(ROWS))
    for name in ("mx", "mn"):
        st = s[name]
        st.bind(st.axes[0], "blockIdx.x")
        st.bind(st.reduce_axes[0], "threadIdx.x")
    want = tcomp.evaluate(s.op, rows())
    for g, w in zip(tcomp.build(s, target="cuda")(rows()), want):
        assert_bits(np.ravel(np.asarray(g)), np.ravel(w))
    O, R = tcomp.build(threaded(COPYSIGN), target="cuda")(*nans())
    assert_bits(np.asarray(O), [1.0, 2.0, 0.0, 3.0])
    np.testing.assert_array_equal(np.asarray(R), [np.inf] * 4)
