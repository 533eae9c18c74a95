"""Scatters (lang/check_scatter.py) in `evaluate`: NumPy's `ufunc.at`
semantics for `+=`, `*=`, `max=`, `min=` (duplicates all counted), the last
point in index order for `=`, the identity fill of `op=!`, and the subscripts'
range checked with a message naming the tensor, the subscript and the value."""
import numpy as np
import pytest

import tcomp

INDEX_ADD = """
def index_add(float(N, D) X, int32(N) I, float(M, D) B) -> (O) {
    O(m, d) = B(m, d)
    O(I(i), d) += X(i, d)
}
"""

rng = np.random.default_rng(27)


def data(n, d=3, m=4, dtype=np.float32):
    x = rng.standard_normal((n, d)).astype(dtype)
    idx = rng.integers(0, m, n).astype(np.int32)
    b = rng.standard_normal((m, d)).astype(dtype)
    return x, idx, b


@pytest.mark.parametrize("n", [0, 1, 2, 17])
def test_index_add_is_np_add_at(n):
    x, idx, b = data(n)
    ref = b.astype(np.float64)
    np.add.at(ref, idx, x.astype(np.float64))
    got = tcomp.evaluate(tcomp.op(INDEX_ADD), x, idx, b)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op, ufunc", [("+", np.add), ("*", np.multiply),
                                       ("max", np.fmax), ("min", np.fmin)])
def test_each_operator_with_duplicates(op, ufunc):
    src = INDEX_ADD.replace("+=", f"{op}=")
    x, _, b = data(6)
    idx = np.array([1, 1, 1, 0, 3, 1], np.int32)  # duplicates
    ref = b.astype(np.float64)
    ufunc.at(ref, idx, x.astype(np.float64))
    np.testing.assert_allclose(tcomp.evaluate(tcomp.op(src), x, idx, b), ref, rtol=1e-6)


def test_bang_starts_from_the_identity_over_the_whole_tensor():
    op = tcomp.op("""
    def segmax(float(N, D) X, int32(N) I, float(M) Z) -> (float(M, D) O) {
        O(I(i), d) max=! X(i, d)
    }""")
    x, _, _ = data(5)
    idx = np.array([0, 2, 2, 0, 0], np.int32)
    got = tcomp.evaluate(op, x, idx, np.zeros(4, np.float32))
    ref = np.full((4, 3), -np.inf, np.float32)
    np.maximum.at(ref, idx, x)
    np.testing.assert_array_equal(got, ref)  # rows 1 and 3: -inf, no point writes them
    names = [st.name for st in tcomp.Schedule(op).stages]
    assert names == ["O", "O.1"]  # the identity fill, then the scatter


def test_integer_scatter_add_and_bool_or():
    op = tcomp.op("""
    def count(int32(N) I, int32(M) Z) -> (int32(M) C) {
        C(I(i)) +=! 1
    }""")
    idx = np.array([3, 0, 3, 3, 1], np.int32)
    np.testing.assert_array_equal(tcomp.evaluate(op, idx, np.zeros(5, np.int32)),
                                  np.bincount(idx, minlength=5))


def test_assignment_keeps_the_last_point_in_index_order():
    op = tcomp.op("""
    def put(float(N, D) X, int32(N) I, float(M, D) B) -> (O) {
        O(m, d) = B(m, d)
        O(I(i), d) = X(i, d)
    }""")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([1, 0, 1, 1], np.int32)
    b = np.full((3, 3), -1, np.float32)
    np.testing.assert_array_equal(tcomp.evaluate(op, x, idx, b),
                                  [[3, 4, 5], [9, 10, 11], [-1, -1, -1]])


def test_two_gathered_subscripts_and_a_range_clause():
    op = tcomp.op("""
    def scatter2(float(N) X, int32(N) R, int32(N) C, float(M, K) B) -> (O) {
        O(m, k) = B(m, k)
        O(R(i), C(i)) += X(i) where i in 0:N - 1
    }""")
    x = rng.standard_normal(7).astype(np.float32)
    r, c = rng.integers(0, 3, 7).astype(np.int32), rng.integers(0, 2, 7).astype(np.int32)
    b = np.zeros((3, 2), np.float32)
    ref = b.copy()
    np.add.at(ref, (r[:6], c[:6]), x[:6])
    np.testing.assert_allclose(tcomp.evaluate(op, x, r, c, b), ref, rtol=1e-6)


def test_large_box_runs_in_parts_in_order():
    # more points than evaluate's CHUNK: split along the outermost index, in order
    import importlib
    E = importlib.import_module("tcomp.lang.evaluate")
    old = E.CHUNK
    E.CHUNK = 8
    try:
        x = np.arange(40, dtype=np.float32).reshape(20, 2)
        idx = np.array([0, 1] * 10, np.int32)
        put = tcomp.op(INDEX_ADD.replace("+=", "="))
        got = tcomp.evaluate(put, x, idx, np.zeros((4, 2), np.float32))
        np.testing.assert_array_equal(got[:2], x[-2:])  # the last writers
        add = tcomp.evaluate(tcomp.op(INDEX_ADD), x, idx, np.zeros((4, 2), np.float32))
        ref = np.zeros((4, 2), np.float32)
        np.add.at(ref, idx, x)
        np.testing.assert_array_equal(add, ref)
    finally:
        E.CHUNK = old


def test_out_of_range_subscript_names_tensor_subscript_and_value():
    x, idx, b = data(4)
    idx[2] = 4
    with pytest.raises(tcomp.LangError) as e:
        tcomp.evaluate(tcomp.op(INDEX_ADD), x, idx, b)
    assert ("scatter into 'O(I(i), d)': subscript I(i) = 4 is outside dimension 0 of 'O' "
            "(extent 4) when i=2, d=0") in str(e.value)
    idx[2] = -1
    with pytest.raises(tcomp.LangError, match=r"subscript I\(i\) = -1 is outside"):
        tcomp.evaluate(tcomp.op(INDEX_ADD), x, idx, b)


def test_printed_op_parses_again():
    op = tcomp.op(INDEX_ADD)
    again = tcomp.op(op.to_text(notes=False))
    assert again.to_text() == op.to_text()
    assert "O(I(i), d) += X(i, d)" in op.to_text()
