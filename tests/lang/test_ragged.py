"""Ragged ranges (lang/check_ragged.py, evaluate_ragged.py): a reduction whose
bounds are read from an input, against plain Python loops, with empty
segments, one-element segments and bounds checked by the reads they make."""
import numpy as np
import pytest

import tcomp

BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) OP T(J(j), d) where j in Off(b):Off(b + 1)
}"""


def bag_reference(t, j, off, ufunc, identity):
    out = np.full((len(off) - 1, t.shape[1]), identity, np.float64)
    for b in range(len(off) - 1):
        for k in range(off[b], off[b + 1]):
            out[b] = ufunc(out[b], t[j[k]])
    return out


@pytest.mark.parametrize("op_text, ufunc, identity", [("+=!", np.add, 0.0),
                                                      ("max=!", np.fmax, -np.inf),
                                                      ("min=!", np.fmin, np.inf)])
@pytest.mark.parametrize("off", [[0, 2, 2, 7], [0], [0, 0, 0], [0, 1], [3, 7]])
def test_embedding_bag_against_loops(op_text, ufunc, identity, off):
    rng = np.random.default_rng(len(off))
    t = rng.standard_normal((10, 3)).astype(np.float32)
    j = rng.integers(0, 10, 7).astype(np.int32)
    off = np.array(off, np.int32)
    op = tcomp.op(BAG.replace("OP", op_text))
    got = tcomp.evaluate(op, t, j, off)
    np.testing.assert_allclose(got, bag_reference(t, j, off, ufunc, identity), rtol=1e-6)


def test_variable_length_sequences_with_a_second_reduction_index():
    op = tcomp.op("""def f(float(B, S, D) X, int32(B) Len, float(D, E) W) -> (O) {
        O(b, e) +=! X(b, t, d) * W(d, e) where t in 0:Len(b)
    }""")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    lens = np.array([5, 0, 1, 3], np.int32)
    want = np.stack([x[b, :lens[b]].sum(0) @ w for b in range(4)])
    np.testing.assert_allclose(tcomp.evaluate(op, x, lens, w), want, rtol=1e-5, atol=1e-6)


def test_continuing_a_definition_and_the_printed_op():
    op = tcomp.op("""def f(float(N) X, int32(B1) Off, float(B) C) -> (O) {
        O(b) = C(b)
        O(b) += X(j) where j in Off(b):Off(b + 1)
    }""")
    x = np.arange(6, dtype=np.float32)
    off = np.array([0, 4, 6], np.int32)
    np.testing.assert_array_equal(tcomp.evaluate(op, x, off, np.ones(2, np.float32)), [7, 10])
    assert "j in Off(b):Off(b + 1)" in op.to_text()
    assert tcomp.op(op.to_text(notes=False)).to_text() == op.to_text()


def test_a_bound_outside_the_tensor_read_is_an_error_naming_the_point():
    op = tcomp.op(BAG.replace("OP", "+=!"))
    t, j = np.ones((10, 3), np.float32), np.zeros(7, np.int32)
    with pytest.raises(tcomp.LangError) as e:
        tcomp.evaluate(op, t, j, np.array([0, 2, 9], np.int32))
    assert "J(j) reads 'J' out of bounds at index (7,) (shape (7,)) when j=7, b=1, d=0" in \
        str(e.value)
    with pytest.raises(tcomp.LangError, match="reads 'J' out of bounds at index \\(-1,\\)"):
        tcomp.evaluate(op, t, j, np.array([-1, 2, 2], np.int32))


def test_a_builtin_in_a_bound_is_no_tensor_read():
    # `min(N, M)` is a size expression (the bound is not ragged), `min(Off(b), 2)` reads
    fixed = tcomp.op("def f(float(N) A, float(M) B) -> (O) { O(i) = A(i) where i in 0:min(N, M) }")
    assert not fixed.statements[0].ragged
    op = tcomp.op("""def f(float(N) X, int32(B1) Off) -> (O) {
        O(b) +=! X(j) where j in 0:min(Off(b), 2)
    }""")
    assert list(op.statements[0].ragged) == ["j"]
    np.testing.assert_array_equal(
        tcomp.evaluate(op, np.arange(4, dtype=np.float32), np.array([0, 1, 3], np.int32)),
        [0, 0, 1])
