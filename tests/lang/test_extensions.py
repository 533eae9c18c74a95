"""TC compatibility details and tcomp's extensions: comparison precedence,
temporaries, and input conversion checks."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang.ast import Binary


def test_comparisons_share_one_level_as_in_tc():
    op = tcomp.op("def f(int32(N) A) -> (O) { O(i) = A(i) == 0 < 1 }")
    rhs = op.statements[0].rhs
    assert isinstance(rhs, Binary) and rhs.op == "<" and rhs.a.op == "=="
    assert tcomp.evaluate(op, np.array([5], np.int32)).tolist() == [True]  # (5 == 0) < 1
    assert "A(i) == 0 < 1" in str(op)


def test_temporaries_are_computed_but_not_returned():
    op = tcomp.op("""def softmax(float(N, D) X) -> (O) {
      mx(n) max=! X(n, d)
      sm(n) +=! exp(X(n, d) - mx(n))
      O(n, d) = exp(X(n, d) - mx(n)) / sm(n)
    }""")
    assert [t.name for t in op.outputs] == ["O"]
    assert [t.name for t in op.temporaries] == ["mx", "sm"]
    x = np.random.default_rng().standard_normal((3, 7)).astype(np.float32)
    out = tcomp.evaluate(op, x)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(tcomp.build(tcomp.Schedule(op), target="sim")(x), out, rtol=1e-6)


def test_temporary_read_before_written():
    with pytest.raises(tcomp.LangError, match="temporary 'T' is read before any statement "
                                              "writes it"):
        tcomp.op("def f(float(N) A) -> (B) { B(i) = T(i)\n T(i) = A(i) }")


def test_temporaries_can_live_in_registers():
    op = tcomp.op("""def f(float(N, D) X) -> (O) {
      s(n) +=! X(n, d)
      O(n, d) = X(n, d) / s(n)
    }""")
    s = tcomp.Schedule(op)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    s["s"].compute_at(O, n)
    s["s"].set_scope("local")
    assert "alloc local float32 s[1]" in str(tcomp.lower(s))
    x = np.random.default_rng().random((4, 5)).astype(np.float32)
    np.testing.assert_allclose(tcomp.build(s, target="sim")(x), tcomp.evaluate(op, x), rtol=1e-6)
    with pytest.raises(tcomp.ScheduleError, match="'O' is an output of 'f' and stays in global"):
        O.set_scope("local")


def test_negative_write_position_at_run_time():
    op = tcomp.op("def f(float(N) A) -> (B) { B(i) = 1.0 where i in 1-N:N }")
    with pytest.raises(tcomp.LangError, match="writes 'B' at i = -2, a negative position"):
        tcomp.evaluate(op, np.zeros(3, np.float32))


def test_float_input_overflow_is_an_error():
    op = tcomp.op("def f(half(N) A) -> (B) { B(i) = A(i) }")
    with pytest.raises(tcomp.LangError, match="input 'A': values of the Python data overflow "
                                              "float16"):
        tcomp.evaluate(op, [1e6])
    np.testing.assert_array_equal(tcomp.evaluate(op, [np.inf]), [np.inf])  # not an overflow
