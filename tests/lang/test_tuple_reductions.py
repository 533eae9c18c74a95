"""Tuple (monoid) reductions (lang/monoids.py): the reference semantics in
`tcomp.evaluate`, the same values on the sim, CUDA C++ that NVRTC compiles,
and the printed form that parses back."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

SRC = """def stats(float(N, D) X, float(D, E) V) -> (mx, ix, mn, jn, c, mean, m2, m, l, m3, l3, a) {
    mx(n), ix(n) argmax=! X(n, d), d
    mn(n), jn(n) argmin=! X(n, d), d
    c(n), mean(n), m2(n) welford=! X(n, d)
    m(n), l(n) expsum=! X(n, d)
    m3(n, e), l3(n, e), a(n, e) expsum=! X(n, d), V(d, e)
}"""


def _rows():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 7)).astype(np.float32)
    X[1, [2, 4]] = 9                       # a tie: the lowest index wins
    X[2, :] = -np.inf                      # a fully masked row
    X[3, :3] = -np.inf                     # a masked prefix
    X[4, 1] = np.nan                       # NaN: never the max, poisons the sums
    X[5, :] = np.nan                       # all NaN
    X[6, :] = [3e38, -3e38, 1e30, 0, 0, 0, 0]  # large magnitudes
    X[7, 3] = np.inf
    V = rng.standard_normal((7, 3)).astype(np.float32)
    return X, V


def test_reference_semantics():
    op = tcomp.op(SRC)
    X, V = _rows()
    mx, ix, mn, jn, c, mean, m2, m, l, m3, l3, a = tcomp.evaluate(op, X, V)
    Xf = np.where(np.isnan(X), -np.inf, X)
    assert (mx == np.fmax.reduce(X, axis=1, initial=-np.inf)).all()
    assert ix.tolist() == np.argmax(Xf, axis=1).tolist()
    assert ix[1] == 2 and ix[2] == 0 and ix[5] == 0 and ix.dtype == np.int32
    assert jn.tolist() == np.argmin(np.where(np.isnan(X), np.inf, X), axis=1).tolist()
    assert (c == 7).all()
    finite = np.isfinite(X).all(axis=1)
    np.testing.assert_allclose(mean[finite], X[finite].mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(m2[finite], X[finite].var(axis=1) * 7, rtol=1e-4)
    assert np.isnan(mean[~finite]).all() and np.isnan(m2[~finite]).all()
    # expsum is exactly the chain max, sum exp(x - max), sum exp(x - max) * v
    chain = tcomp.op("""def chain(float(N, D) X, float(D, E) V) -> (m, l, a) {
        m(n) max=! X(n, d)
        l(n) +=! exp(X(n, d) - m(n))
        a(n, e) +=! exp(X(n, d) - m(n)) * V(d, e)
    }""")
    cm, cl, ca = tcomp.evaluate(chain, X, V)
    np.testing.assert_array_equal(m, cm)
    np.testing.assert_allclose(l, cl, rtol=1e-6)
    np.testing.assert_allclose(a, ca, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l3, np.broadcast_to(cl[:, None], l3.shape), rtol=1e-6)
    assert np.isnan(l[2]) and np.isnan(l[4]) and np.isnan(l[7]) and not np.isnan(l[3])


def test_empty_reduction_is_the_identity():
    op = tcomp.op("def f(float(N, D) X) -> (mx, ix, m, l) {\n"
                  "  mx(n), ix(n) argmax=! X(n, d), d\n  m(n), l(n) expsum=! X(n, d) }")
    mx, ix, m, l = tcomp.evaluate(op, np.zeros((2, 0), np.float32))
    assert mx.tolist() == [-np.inf] * 2 and ix.tolist() == [2**31 - 1] * 2
    assert m.tolist() == [-np.inf] * 2 and l.tolist() == [0, 0]
    got = tcomp.build(op, target="sim")(np.zeros((2, 0), np.float32))
    for r, g in zip((mx, ix, m, l), got):
        np.testing.assert_array_equal(r, g)


@pytest.mark.parametrize("split", [None, 3, 4])
def test_sim_equals_evaluate(split):
    op = tcomp.op(SRC)
    X, V = _rows()
    s = tcomp.Schedule(op)
    for st in s.stages:
        if split:
            (r,) = st.reduce_axes
            st.split(r, split)
        st.bind(st.axes[0], "threadIdx.x")
    got = tcomp.build(s, target="sim")(X, V)
    for t, r, g in zip(op.outputs, tcomp.evaluate(op, X, V), got):
        if t.name in ("mean", "m2"):  # (Welford's online update overflows on row 6's 3e38)
            r, g = np.delete(r, 6), np.delete(g, 6)
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=1e-6, equal_nan=True, err_msg=t.name)


def test_half_values_accumulate_in_float32():
    op = tcomp.op("def f(float16(N, D) X) -> (m, l) { m(n), l(n) expsum=! X(n, d) }")
    assert [t.dtype.name for t in op.outputs] == ["float16", "float16"]
    X = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float16)
    np.testing.assert_array_equal(tcomp.build(op, target="sim")(X)[0], tcomp.evaluate(op, X)[0])
    np.testing.assert_allclose(tcomp.build(op, target="sim")(X)[1].astype(np.float32),
                               tcomp.evaluate(op, X)[1].astype(np.float32), rtol=2e-3)


def test_printed_form_parses_back():
    op = tcomp.op(SRC)
    assert "mx(n), ix(n) argmax=! X(n, d), d" in str(op)
    assert "# float32(N) mx, int32(N) ix reduce d in float32, int32" in str(op)
    again = tcomp.op(op.to_text(notes=False))
    assert again.to_text() == op.to_text()


def test_cuda_source_compiles():
    op = tcomp.op(SRC)
    s = tcomp.Schedule(op)
    for st in s.stages:
        st.bind(st.axes[0], "threadIdx.x")
    k = tcomp.build(s, target="cuda", sizes={"N": 8, "D": 7, "E": 3})
    assert "expf(" in k.source and k.ptx
