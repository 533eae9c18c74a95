"""A tensor's shape comes from its last statement; earlier statements may not write
beyond it (issue 9 item 2). Provable when the op is checked: a LangError at the
offending statement. Undecided: an `Op.write_checks` entry that every target
evaluates at every call (tests/errors and tests/target_cuda/test_call_checks.py)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import tcomp
from tcomp.lang.symbolic import provably_le, size_symbol

REPRO = """def f(float(N) A) -> (O) {
  O(i) = A(i)
  O(i) = O(i + 1) where i in 0:N-1
}"""


def test_reproducer_is_refused_at_the_earlier_statement():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(REPRO)
    err = info.value
    assert (err.line, err.col) == (2, 3)
    assert "writes 'O' beyond its shape" in err.message
    assert "where i in 0:N - 1" in err.message


def test_fixed_reproducer_runs_on_every_target():
    """What the reproducer meant (a shift), with both statements over 0:N-1: a
    temporary for the copy, or the copy restricted as the message suggests."""
    for fixed in (REPRO.replace("O(i) = A(i)\n", "T(i) = A(i)\n").replace("O(i + 1)", "T(i + 1)"),
                  REPRO.replace("O(i) = A(i)\n", "O(i) = A(i) where i in 0:N - 1\n").replace(
                      "O(i + 1) where i in 0:N-1", "O(i) + A(i + 1)")):
        op = tcomp.op(fixed)
        assert op.write_checks == ()
        A = np.arange(5, dtype=np.float32)
        want = tcomp.evaluate(op, A)
        np.testing.assert_array_equal(want, [1, 2, 3, 4] if "T(" in fixed else [1, 3, 5, 7])
        np.testing.assert_array_equal(tcomp.build(op, target="sim")(A), want)
        assert "O[" in tcomp.build(op, target="cuda").source  # compiles


@pytest.mark.parametrize("body", [
    "O(i) = A(i) where i in 0:min(N, M)\n  O(i) = A(i)",       # min(N, M) <= N
    "O(i) = A(2 * i)\n  O(i) = A(i)",                          # floor((N - 1) / 2) + 1 <= N
    "O(i) = A(i)\n  O(i) = A(i) + 1.0",                         # the same range
    "O(i) = 1.0 where i in 0:0\n  O(i) = A(i) where i in 0:N/2",  # empty: writes nothing
    "O(i) = A(i) where i in 0:N/3\n  O(i) = A(i)",              # floor(N / 3) <= N
])
def test_provably_inside_needs_no_call_time_check(body):
    op = tcomp.op(f"def f(float(N) A, float(M) B) -> (O) {{\n  {body}\n}}")
    assert op.write_checks == ()


@pytest.mark.parametrize("body,line", [
    ("O(i) = A(i)\n  O(i) = A(i) + A(i + 2)", 2),           # N > N - 2
    ("T(i) = A(i)\n  T(i) = 0.0 where i in 0:N/2\n  O(i) = T(i)", 2),  # a temporary
    ("O(i) +=! A(i) * B(j)\n  O(i) = O(i) * 2.0 where i in 0:N-1", 2),  # a reduction
    ("O(i) = A(i)\n  O(i) += A(i)\n  O(i) = 0.0 where i in 0:N-1", 2),
])
def test_provably_beyond_is_refused(body, line):
    with pytest.raises(tcomp.LangError, match="beyond its shape") as info:
        tcomp.op(f"def f(float(N) A, float(M) B) -> (O) {{\n  {body}\n}}")
    assert info.value.line == line


def test_undecided_becomes_a_call_time_check():
    op = tcomp.op("def f(float(N) A, float(M) B) -> (O) {\n  O(i) = A(i)\n  O(i) = B(i)\n}")
    (c,) = op.write_checks
    assert (c.tensor, c.dim, c.var, c.line, c.last_line) == ("O", 0, "i", 2, 3)
    A, B = np.ones(2, np.float32), np.full(3, 2, np.float32)
    for run in (lambda *a: tcomp.evaluate(op, *a), tcomp.build(op, target="sim")):
        np.testing.assert_array_equal(run(A, B), [2, 2, 2])
        with pytest.raises(tcomp.LangError, match="the statement on line 2 writes 'O' beyond "
                                                  "its shape: i runs over 0:N = 0:3 there"):
            run(B, A)


# ------------------------------------------------------------- the decision
N, M = size_symbol("N"), size_symbol("M")
F, C = sympy.floor, sympy.ceiling


@pytest.mark.parametrize("a,b,want", [
    (sympy.Min(M, N), N, True), (F(N / 2), N, True), (F((N - 1) / 2) + 1, N, True),
    (sympy.Max(N - 2, 0), N, True), (C(N / 3), N, True), (N, N - 1, False), (N, M, None),
    (N + 1, sympy.Max(N, M), None), (N + 2, sympy.Max(N, N + 1), False), (2 * N, N, False),
    (N + C(N / 2), N, False), (sympy.Min(N + 1, M + 1), sympy.Min(N, M), False),
])
def test_provably_le(a, b, want):
    assert provably_le(a, b) is want


_ATOMS = st.sampled_from([N, M, N - 1, M + 2, 2 * N, sympy.Integer(3), F(N / 2), C(M / 3),
                          F((N + M) / 2)])


@st.composite
def _sizes_exprs(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(_ATOMS)
    a, b = draw(_sizes_exprs(depth - 1)), draw(_sizes_exprs(depth - 1))
    op = draw(st.sampled_from(["+", "-", "min", "max"]))
    return {"+": a + b, "-": a - b, "min": sympy.Min(a, b), "max": sympy.Max(a, b)}[op]


@settings(max_examples=100, deadline=None)
@given(_sizes_exprs(), _sizes_exprs())
def test_provably_le_is_never_wrong(a, b):
    """True/False must hold for every positive size (checked on a grid)."""
    verdict = provably_le(a, b)
    if verdict is None:
        return
    fa, fb = (sympy.lambdify((N, M), e, modules=[{"floor": np.floor, "ceiling": np.ceil}])
              for e in (a, b))
    for n in range(1, 9):
        for m in range(1, 9):
            va, vb = fa(n, m), fb(n, m)
            assert (va <= vb) == verdict, (a, b, n, m)
