"""Ordered recurrences (`where ordered t`, lang/check_ordered.py): the text
round trip, and `tcomp.evaluate` against NumPy's accumulations and Python
loops written as the C loop would run (prefix sums, running maxima and
minima, a linear recurrence, a product scan, a wavefront over two ordered
indices, reads of later points and of the same point)."""
from __future__ import annotations

import numpy as np

import tcomp

CUMSUM = tcomp.op("""def cumsum(float(B, T) X) -> (O) {
    O(b, t) = X(b, t)
    O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t
}""")
CUMMAX = tcomp.op("""def cummax(float(B, T) X) -> (O) {
    O(b, t) = X(b, t)
    O(b, t) = max(O(b, t - 1), X(b, t)) where t in 1:T, ordered t
}""")
LINEAR = tcomp.op("""def linear(float(B, T, D) A, float(B, T, D) X) -> (H) {
    H(b, t, d) = X(b, t, d)
    H(b, t, d) = A(b, t, d) * H(b, t - 1, d) + X(b, t, d) where t in 1:T, ordered t
}""")


def test_round_trip():
    """The clause prints as written, and the printed text checks to the same op."""
    text = CUMSUM.to_text(notes=False)
    assert "where t in 1:T, ordered t" in text
    again = tcomp.op(text)
    assert again.statements[1].ordered == ("t",)
    assert again.to_text(notes=False) == text
    assert CUMSUM.statements[1].independent == ("b",)
    assert CUMSUM.statements[0].ordered == () and CUMSUM.statements[0].independent == ()


def test_ordered_is_contextual():
    """`ordered` is not reserved: it can still name an index (`where ordered in 0:N`)."""
    op = tcomp.op("def f(float(N) X) -> (O) { O(ordered) = X(ordered) where ordered in 0:N }")
    np.testing.assert_array_equal(tcomp.evaluate(op, np.arange(3, dtype=np.float32)), [0, 1, 2])


def test_prefix_sum_and_running_max():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 33)).astype(np.float32)
    np.testing.assert_allclose(tcomp.evaluate(CUMSUM, X), np.cumsum(X, axis=1), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(tcomp.evaluate(CUMMAX, X), np.maximum.accumulate(X, axis=1))
    # one element, and no element past the first: the recurrence's range is empty
    np.testing.assert_array_equal(tcomp.evaluate(CUMSUM, X[:, :1]), X[:, :1])


def test_float_sum_is_in_order():
    """evaluate adds in the loop's order, left to right: bit for bit the sequential sum."""
    X = np.float32([[1e8, 1, -1e8, 1, 1, 1]])
    want, acc = [], np.float32(0)
    for v in X[0]:
        acc = np.float32(acc + v)
        want.append(acc)
    np.testing.assert_array_equal(tcomp.evaluate(CUMSUM, X)[0], want)


def test_running_min_of_ints():
    op = tcomp.op("""def cummin(int32(T) X) -> (O) {
        O(t) = X(t)
        O(t) = min(O(t - 1), X(t)) where t in 1:T, ordered t
    }""")
    X = np.int32([5, 7, 3, 9, -2, 4])
    np.testing.assert_array_equal(tcomp.evaluate(op, X), np.minimum.accumulate(X))


def test_linear_recurrence():
    rng = np.random.default_rng(1)
    A = rng.uniform(0.5, 1.0, (2, 17, 3)).astype(np.float32)
    X = rng.standard_normal((2, 17, 3)).astype(np.float32)
    want = np.zeros_like(X)
    for b in range(2):
        for d in range(3):
            h = np.float32(0)
            for t in range(17):
                h = X[b, t, d] if t == 0 else np.float32(A[b, t, d] * h + X[b, t, d])
                want[b, t, d] = h
    np.testing.assert_allclose(tcomp.evaluate(LINEAR, A, X), want, rtol=1e-5, atol=1e-6)


def test_product_scan_by_select():
    """The first element by a ternary instead of an initial statement's range."""
    op = tcomp.op("""def cumprod(double(T) X) -> (O) {
        O(t) = X(t)
        O(t) = t > 0 ? O(t - 1) * X(t) : X(t) where ordered t
    }""")
    X = np.linspace(0.5, 1.5, 9)
    np.testing.assert_allclose(tcomp.evaluate(op, X), np.cumprod(X), rtol=1e-12)


def test_two_ordered_indices_are_lexicographic():
    """`ordered i, ordered j`: point (i, j) sees (i, j - 1) and row i - 1 updated, (i + 1, ...)
    as before (Gauss-Seidel order)."""
    op = tcomp.op("""def gs(double(N, M) A) -> (O) {
        O(i, j) = A(i, j)
        O(i, j) = i > 0 && j > 0 && i + 1 < N ? O(i - 1, j) + O(i, j - 1) + O(i + 1, j - 1)
                  : O(i, j) where i in 0:N, j in 0:M, ordered i, ordered j
    }""")
    A = np.arange(20, dtype=np.float64).reshape(4, 5)
    want = A.copy()
    for i in range(4):
        for j in range(5):
            if i > 0 and j > 0 and i + 1 < 4:
                want[i, j] = want[i - 1, j] + want[i, j - 1] + want[i + 1, j - 1]
    np.testing.assert_array_equal(tcomp.evaluate(op, A), want)


def test_same_point_other_elements_see_the_old_values():
    """Within one point of the ordered index the other elements are computed
    together: a read of another row at the same t sees its value before the
    statement; a read at t - 1 sees the new one."""
    op = tcomp.op("""def f(float(B, T) X) -> (O) {
        O(b, t) = X(b, t)
        O(b, t) = O(b, t - 1) + (b > 0 ? O(b - 1, t - 1) : 0.0) where t in 1:T, ordered t
    }""")
    X = np.ones((3, 4), np.float32)
    want = X.copy()
    for t in range(1, 4):
        prev = want[:, t - 1].copy()
        want[:, t] = prev + np.concatenate([[0], prev[:-1]])
    np.testing.assert_array_equal(tcomp.evaluate(op, X), want)
    assert op.statements[1].independent == ()  # O(b - 1, ...): b is not independent


def test_later_points_read_the_value_before_the_statement():
    op = tcomp.op("""def f(float(T) X) -> (O) {
        O(t) = X(t)
        O(t) = t + 1 < T ? O(t + 1) - O(t) : O(t) where t in 0:T, ordered t
    }""")
    X = np.float32([1, 4, 9, 16])
    np.testing.assert_array_equal(tcomp.evaluate(op, X), [3, 5, 7, 16])
