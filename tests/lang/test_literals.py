"""Float literals take the float type of what they meet (issue 22, defect 10),
keep their text's precision until then, and `inf`/`nan` are literals; on
evaluate, the sim and in the CUDA source (the literal's type in the code)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tcomp

BF16 = np.dtype(ml_dtypes.bfloat16)


def run_all(op, *args):
    """evaluate and the sim, which must agree exactly; the CUDA source."""
    want = tcomp.evaluate(op, *args)
    got = tcomp.build(tcomp.Schedule(op), target="sim")(*args)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        assert w.dtype == g.dtype
        np.testing.assert_array_equal(w, g)
    return want, tcomp.build(tcomp.Schedule(op), target="cuda").source


@pytest.mark.parametrize("t, np_t, conv", [("float16", np.float16, "__float2half_rn"),
                                           ("bfloat16", BF16, "__float2bfloat16_rn")])
def test_a_literal_meeting_a_half_keeps_the_half_type(t, np_t, conv):
    op = tcomp.op(f"def f({t}(N) X) -> (O, P, Q) {{\n O(i) = X(i) * 2.0\n"
                  f" P(i) = X(i) + 0.1\n Q(i) = X(i) * 2 }}")
    assert [o.dtype.name for o in op.outputs] == [t, t, t]
    x = np.array([1.5, -3.0, 0.25, 1000], np_t)
    (O, P, Q), src = run_all(op, x)
    tenth = np.float32(np.asarray(0.1, np_t))  # the literal in the half type, exactly
    np.testing.assert_array_equal(O, (x.astype(np.float32) * 2).astype(np_t))
    np.testing.assert_array_equal(P, (x.astype(np.float32) + tenth).astype(np_t))
    np.testing.assert_array_equal(Q, O)
    # computed in float32 (the half's compute type), rounded on store
    assert f"O[i] = {conv}((float)(((float)(" in src and ")) * 2.0f));" in src
    assert f"{float(tenth)!r}f" in src  # 0.0999755859375f for float16


def test_a_literal_meeting_a_double_keeps_double_precision():
    op = tcomp.op("def f(double(N) D) -> (O, E, double(N) A, L, C) {\n O(i) = D(i) + 0.2\n"
                  " E(i) = D(i) == 0.1\n A(i) = 0.2 where i in 0:N\n"
                  " L(i) = D(i) * c where c = 0.2\n C(i) = double(0.1) + D(i) * 0 }")
    assert [o.dtype.name for o in op.outputs] == ["float64", "bool", "float64", "float64",
                                                  "float64"]
    d = np.array([0.0, 0.1, 1.0])
    (O, E, A, L, C), src = run_all(op, d)
    np.testing.assert_array_equal(O, d + 0.2)  # float32(0.2) was off by 3e-9
    np.testing.assert_array_equal(E, [False, True, False])
    np.testing.assert_array_equal(A, [0.2] * 3)
    np.testing.assert_array_equal(L, d * 0.2)
    np.testing.assert_array_equal(C, [0.1] * 3)
    assert "O[i] = D[i] + 0.2;" in src and "A[i] = 0.2;" in src
    assert "0.2f" not in src and "0.20000000298023224" not in src


def test_a_literal_alone_or_with_integers_is_float32():
    op = tcomp.op("def f(int32(N) I) -> (O, A, C) {\n O(i) = I(i) * 0.5\n"
                  " A(i) = 0.2 where i in 0:N\n C(i) = i > 0 ? 1.5 : 2.5 where i in 0:N }")
    assert [o.dtype.name for o in op.outputs] == ["float32", "float32", "float32"]
    (O, A, C), src = run_all(op, np.array([1, 3], np.int32))
    np.testing.assert_array_equal(A, [np.float32(0.2)] * 2)
    assert "A[i] = 0.20000000298023224f;" in src and "0.5f" in src


def test_literals_meet_through_ternaries_builtins_and_casts():
    op = tcomp.op("def f(float16(N) H, double(N) D) -> (S, M, P, K) {\n"
                  " S(i) = i > 0 ? H(i) : 0.5 * 3\n M(i) = max(H(i), -1.0 - 0.5)\n"
                  " P(i) = pow(D(i), 1.0 / 3.0)\n K(i) = half(0.1) + H(i) * 0 }")
    assert [o.dtype.name for o in op.outputs] == ["float16", "float16", "float64", "float16"]
    h = np.array([-4, 2], np.float16)
    (S, M, P, K), _ = run_all(op, h, np.array([8.0, 27.0]))
    np.testing.assert_array_equal(S, np.array([1.5, 2], np.float16))
    np.testing.assert_array_equal(M, np.array([-1.5, 2], np.float16))
    np.testing.assert_array_equal(P, np.power([8.0, 27.0], 1.0 / 3.0))
    np.testing.assert_array_equal(K, np.float16(0.1))


def test_a_literal_beyond_its_type_is_infinity():
    op = tcomp.op("def f(float16(N) H) -> (O, B) {\n O(i) = H(i) * 70000.0\n"
                  " B(i) = 1e39 where i in 0:N }")
    (O, B), _ = run_all(op, np.ones(2, np.float16))
    assert O.dtype == np.float16 and np.isinf(O).all() and np.isinf(B).all()


def test_inf_and_nan_are_literals_and_minus_inf_their_negation():
    op = tcomp.op("def f(float(N) X) -> (M, L, C, N2, Old) {\n"
                  " M(i) = X(i) > 0.0 ? X(i) : -inf\n L(i) = min(X(i), inf)\n"
                  " C(i) = X(i) != X(i) ? 0.0 : 1.0\n N2(i) = nan + X(i) * 0.0\n"
                  " Old(i) = -1e999 + X(i) * 0.0 }")
    x = np.array([1.0, -2.0, np.nan], np.float32)
    (M, L, C, N2, Old), src = run_all(op, x)
    np.testing.assert_array_equal(M, [1.0, -np.inf, -np.inf])
    np.testing.assert_array_equal(L, [1.0, -2.0, np.inf])  # fminf: a NaN never wins
    np.testing.assert_array_equal(C, [1.0, 1.0, 0.0])
    assert np.isnan(N2).all()
    np.testing.assert_array_equal(Old, [-np.inf, -np.inf, np.nan])
    assert "-__int_as_float(0x7f800000)" in src and "__int_as_float(0x7fffffff)" in src
    text = op.to_text(notes=False)
    assert "-inf" in text and "nan + X(i)" in text and "min(X(i), inf)" in text
    assert tcomp.op(text) == op
    double = tcomp.op("def f(double(N) D) -> (O) { O(i) = D(i) * 0.0 + nan - inf }")
    assert "__longlong_as_double(0x7ff8000000000000LL)" in \
        tcomp.build(tcomp.Schedule(double), target="cuda").source


def test_a_literal_is_rounded_once_from_its_text():
    # 1 + 2^-24 (a float32 halfway point) + 1e-29: the nearest double is the halfway point,
    # which rounds to even (1.0); the text itself rounds up, to 1 + 2^-23
    just_above = "1.00000005960464477539062500001"
    op = tcomp.op(f"def f(float(N) X) -> (O) {{ O(i) = X(i) * 0.0 + {just_above} }}")
    O, _ = run_all(op, np.zeros(1, np.float32))
    assert O[0] == np.float32(1 + 2.0 ** -23)
    assert float(np.float32(float(just_above))) == 1.0  # what rounding the double gave
    text = op.to_text(notes=False)
    assert just_above in text  # printed as written: the double alone would lose it
    assert tcomp.op(text) == op
    # the largest float32 is below 3.4028235677973366e38 by less than half a unit there
    near_max = tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) * 0.0 + 3.4028235677973366e38 }")
    assert tcomp.evaluate(near_max, np.zeros(1, np.float32))[0] == np.finfo(np.float32).max
    with np.errstate(over="ignore"):  # the double rounded again: infinity
        assert math.isinf(float(np.float32(3.4028235677973366e38)))


def test_printing_keeps_the_spelling_of_ordinary_literals():
    op = tcomp.op("def f(double(N) D) -> (O) { O(i) = D(i) * 0.1 + 1e-5 }")
    assert "O(i) = D(i) * 0.1 + 1e-05" in op.to_text(notes=False)


def test_emulated_cuda_double_literals():
    from tests.target_cuda.emulator import HAVE_CXX, run_emulated
    if not HAVE_CXX:
        pytest.skip("no host C++ compiler (g++) to emulate CUDA")
    op = tcomp.op("def f(double(N) D, float(N) F) -> (O, P) {\n O(i) = D(i) + 0.2\n"
                  " P(i) = F(i) + 0.2 }")
    d, f = np.array([0.0, 1.0]), np.array([0.0, 1.0], np.float32)
    O, P = run_emulated(tcomp.build(tcomp.Schedule(op), target="cuda"), d, f)
    np.testing.assert_array_equal(O, d + 0.2)
    np.testing.assert_array_equal(P, f + np.float32(0.2))
