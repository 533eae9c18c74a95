"""Unit tests of the integer simplifier (tcomp/lower/simplify.py), in
particular the division/modulo rules that use the ranges of the variables:

  (q*c + r) / c -> q              (q*c + r) % c -> r                  0 <= r < c
  (q*c + r) / c -> q + r / c      (q*c + r) % c -> r % c              0 <= r
  (g*x + r) / c -> x / (c/g)      (g*x + r) % c -> g*(x % (c/g)) + r  g | c, 0 <= r < g
  (x / a) / c -> x / (a*c)

`/` and `%` floor toward negative infinity (ir.py), like Python's // and %.
`simplify_expr(e, ranges)` takes ranges as {var: (lo, hi)}, inclusive, either
side None when unknown.

Besides the worked examples, a hypothesis property checks that simplification
never changes the value of random linear expressions (negative coefficients
and constants, nested / and %) at random points inside random ranges.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tcomp.lang.dtypes import float32 as F32
from tcomp.lower import ir
from tcomp.lower.printer import expr as show
from tcomp.lower.simplify import simplify, simplify_expr
from tcomp.target_sim import run_program

X, Y, I, J = (ir.Var(n) for n in "xyij")


def c(v: int) -> ir.Imm:
    return ir.const(v)


def add(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = ir.Bin("+", out, x, ir.int32)
    return out


def mul(a, k):
    return ir.Bin("*", a, c(k), ir.int32)


def div(a, k):
    return ir.Bin("/", a, c(k), ir.int32)


def mod(a, k):
    return ir.Bin("%", a, c(k), ir.int32)


def simp(e, ranges=None) -> str:
    return show(simplify_expr(e, ranges))


def evaluate(e: ir.Expr, env: dict) -> int:
    """The value of an integer expression with floor semantics (Python's // and %)."""
    if isinstance(e, ir.Imm):
        return int(e.value)
    if isinstance(e, ir.Var):
        return env[e.name]
    if isinstance(e, ir.Un) and e.op == "-":
        return -evaluate(e.x, env)
    if isinstance(e, ir.Bin):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "/": lambda: a // b, "%": lambda: a % b, "min": lambda: min(a, b),
                "max": lambda: max(a, b)}[e.op]()
    raise TypeError(f"unexpected node {e!r}")


def same_everywhere(e, f, ranges, free=range(-12, 13)):
    """e and f agree at every point of the (small) ranges; unknown sides use `free`."""
    names = sorted(ir.free_vars(e) | ir.free_vars(f))
    points = [{}]
    for n in names:
        lo, hi = (ranges or {}).get(n, (None, None))
        lo = free.start if lo is None else lo
        hi = free.stop - 1 if hi is None else hi
        points = [dict(p, **{n: v}) for p in points for v in range(lo, hi + 1)]
    for p in points:
        assert evaluate(e, p) == evaluate(f, p), (show(e), show(f), p)


# ----------------------------------------------------------------- worked examples
class TestMultiplesOfTheModulus:
    """(c*q + r) % c -> r % c and (c*q + r) / c -> q + r / c when r >= 0 is known
    (floor semantics make both exact for any r; the r >= 0 condition keeps the
    generated C's plain / and % valid for the remainder)."""

    def test_mod_drops_the_multiple(self):
        e, r = mod(add(mul(Y, 16), X), 2), {"x": (0, 15)}
        assert simp(e, r) == "x % 2"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))

    def test_div_splits_off_the_multiple(self):
        e, r = div(add(mul(Y, 16), X), 2), {"x": (0, 15)}
        assert simp(e, r) == "y * 8 + x / 2"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))

    def test_with_the_divisor_rule(self):
        # (64y + 4x + i) % 8 with x, i known non-negative: 4*(x % 2) + i, 16y gone
        e, r = mod(add(mul(Y, 64), mul(X, 4), I), 8), {"x": (0, 15), "i": (0, 3)}
        assert simp(e, r) == "x % 2 * 4 + i"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))
        e = div(add(mul(Y, 64), mul(X, 4), I), 8)
        assert simp(e, r) == "y * 8 + x / 2"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))

    def test_not_when_the_remainder_may_be_negative(self):
        e, r = mod(add(mul(Y, 16), X), 2), {"x": (-3, 15)}
        assert simp(e, r) == "(y * 16 + x) % 2"
        e = div(add(mul(Y, 16), X), 2)
        assert simp(e, r) == "(y * 16 + x) / 2"
        assert simp(mod(add(mul(Y, 16), X), 2)) == "(y * 16 + x) % 2"  # x unknown


class TestDivisorOfTheModulus:
    """(g*x + r) by c, g a proper divisor of c, 0 <= r < g."""

    def test_mod_keeps_the_remainder_outside(self):
        # (4x + i) % 8 with 0 <= i < 4: the low two bits are i, the third is x's lowest.
        e, r = mod(add(mul(X, 4), I), 8), {"i": (0, 3)}
        assert simp(e, r) == "x % 2 * 4 + i"
        same_everywhere(e, simplify_expr(e, r), r)

    def test_div_drops_the_remainder(self):
        e, r = div(add(mul(X, 4), I), 8), {"i": (0, 3)}
        assert simp(e, r) == "x / 2"
        same_everywhere(e, simplify_expr(e, r), r)

    def test_mod_with_a_multiple_of_the_modulus(self):
        # (64y + 4x + i) % 8 = 4*(x % 2) + i; the rule yields 4*((16y + x) % 2) + i, the
        # same value (16y is even), with i outside the modulo.
        e, r = mod(add(mul(Y, 64), mul(X, 4), I), 8), {"i": (0, 3)}
        assert simp(e, r) == "(y * 16 + x) % 2 * 4 + i"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))
        same_everywhere(e, add(mul(mod(X, 2), 4), I), r, free=range(-5, 6))

    def test_div_with_a_multiple_of_the_modulus(self):
        # (64y + 4x + i) / 8 = 8y + x / 2
        e, r = div(add(mul(Y, 64), mul(X, 4), I), 8), {"i": (0, 3)}
        assert simp(e, r) == "(y * 16 + x) / 2"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-5, 6))
        same_everywhere(e, add(mul(Y, 8), div(X, 2)), r, free=range(-5, 6))

    def test_the_largest_divisor_is_used(self):
        # 12x + 6y + i by 24 with 0 <= i < 6: g = 6 (not 2 or 3).
        e, r = mod(add(mul(X, 12), mul(Y, 6), I), 24), {"i": (0, 5)}
        assert simp(e, r) == "(x * 2 + y) % 4 * 6 + i"
        same_everywhere(e, simplify_expr(e, r), r, free=range(-4, 5))
        e = div(add(mul(X, 12), mul(Y, 6), I), 24)
        assert simp(e, r) == "(x * 2 + y) / 4"

    def test_remainder_of_several_terms(self):
        # 8x + 2j + i with i in [0, 2), j in [0, 4): r = 2j + i < 8 = g; c = 32.
        e, r = mod(add(mul(X, 8), mul(J, 2), I), 32), {"i": (0, 1), "j": (0, 3)}
        assert simp(e, r) == "x % 4 * 8 + j * 2 + i"
        same_everywhere(e, simplify_expr(e, r), r)
        assert simp(div(add(mul(X, 8), mul(J, 2), I), 32), r) == "x / 4"

    def test_constant_folded_into_the_quotient(self):
        # 4x + 5 = 4(x + 1) + 1: r = 1 (in [0, 4)), x + 1 goes inside.
        e = mod(add(mul(X, 4), c(5)), 8)
        assert simp(e) == "(x + 1) % 2 * 4 + 1"
        same_everywhere(e, simplify_expr(e), {})
        assert simp(div(add(mul(X, 4), c(5)), 8)) == "(x + 1) / 2"

    def test_negative_constant(self):
        # 4x - 1 = 4(x - 1) + 3
        e = mod(ir.Bin("-", mul(X, 4), c(1), ir.int32), 8)
        assert simp(e) == "(x - 1) % 2 * 4 + 3"
        same_everywhere(e, simplify_expr(e), {})
        e = div(ir.Bin("-", mul(X, 4), c(1), ir.int32), 8)
        assert simp(e) == "(x - 1) / 2"
        same_everywhere(e, simplify_expr(e), {})

    def test_negative_coefficient(self):
        # i - 4x = 4*(-x) + i: floor semantics hold for a negative multiple too.
        e, r = mod(ir.Bin("-", I, mul(X, 4), ir.int32), 8), {"i": (0, 3)}
        assert simp(e, r) == "(0 - x) % 2 * 4 + i"
        same_everywhere(e, simplify_expr(e, r), r)
        e = div(ir.Bin("-", I, mul(X, 4), ir.int32), 8)
        assert simp(e, r) == "(0 - x) / 2"
        same_everywhere(e, simplify_expr(e, r), r)

    def test_applies_inside_larger_expressions(self):
        # As in a store subscript: (4x + i) % 8 * 3 + (4x + i) / 8
        inner = add(mul(X, 4), I)
        e, r = add(mul(mod(inner, 8), 3), div(inner, 8)), {"i": (0, 3)}
        assert simp(e, r) == "x % 2 * 12 + i * 3 + x / 2"
        same_everywhere(e, simplify_expr(e, r), r)


class TestNestedDivision:
    def test_division_of_a_division(self):
        assert simp(div(div(X, 4), 8)) == "x / 32"

    def test_three_levels(self):
        assert simp(div(div(div(X, 2), 3), 5)) == "x / 30"

    def test_negative_values(self):
        e = div(div(X, 4), 8)
        same_everywhere(e, simplify_expr(e), {}, free=range(-70, 70))

    def test_inner_quotient_of_a_sum(self):
        # ((8y + x) / 4) / 2 -> (8y + x) / 8 -> y when 0 <= x < 8
        e, r = div(div(add(mul(Y, 8), X), 4), 2), {"x": (0, 7)}
        assert simp(e, r) == "y"
        same_everywhere(e, simplify_expr(e, r), r)

    def test_combined_divisor_must_be_an_int32(self):
        """x / (a*c) needs a*c as an int32 constant (CUDA emits it as an int);
        2**31 and beyond keep the two divisions (regression: the rule made
        x / 4294967296)."""
        assert simp(div(div(X, 65536), 65536)) == "x / 65536 / 65536"
        assert simp(div(div(X, 65536), 32768)) == "x / 65536 / 32768"
        assert simp(div(div(X, 65536), 16384)) == "x / 1073741824"

    def test_division_by_one(self):
        assert simp(div(div(X, 4), 1)) == "x / 4"

    def test_modulo_of_a_division_is_left(self):
        # (x / a) % c has no such rule.
        assert simp(mod(div(X, 4), 8)) == "x / 4 % 8"


class TestRulesThatMustNotFire:
    def test_remainder_range_unknown(self):
        e = mod(add(mul(X, 4), I), 8)
        assert simp(e) == "(x * 4 + i) % 8"
        assert simp(div(add(mul(X, 4), I), 8)) == "(x * 4 + i) / 8"

    def test_remainder_half_known(self):
        for r in ({"i": (0, None)}, {"i": (None, 3)}):
            assert simp(mod(add(mul(X, 4), I), 8), r) == "(x * 4 + i) % 8"
            assert simp(div(add(mul(X, 4), I), 8), r) == "(x * 4 + i) / 8"

    def test_remainder_can_reach_the_divisor(self):
        # i = 4 would carry into x's bit: (4x + 4) % 8 != 4*(x % 2) + 4 at x = 1.
        r = {"i": (0, 4)}
        assert simp(mod(add(mul(X, 4), I), 8), r) == "(x * 4 + i) % 8"
        assert simp(div(add(mul(X, 4), I), 8), r) == "(x * 4 + i) / 8"

    def test_remainder_can_be_negative(self):
        r = {"i": (-1, 2)}
        assert simp(mod(add(mul(X, 4), I), 8), r) == "(x * 4 + i) % 8"
        assert simp(div(add(mul(X, 4), I), 8), r) == "(x * 4 + i) / 8"

    def test_coefficient_not_a_divisor(self):
        # 3 does not divide 8 (and no divisor of 8 divides 3).
        r = {"i": (0, 2)}
        assert simp(mod(add(mul(X, 3), I), 8), r) == "(x * 3 + i) % 8"

    def test_coefficient_multiple_of_a_divisor_only(self):
        # 6x by 8: g = 2 divides 6; 6x + i = 2*(3x) + i with i in [0, 2):
        # the rule fires with g = 2 (not 6, which does not divide 8).
        e, r = mod(add(mul(X, 6), I), 8), {"i": (0, 1)}
        assert simp(e, r) == "x * 3 % 4 * 2 + i"
        same_everywhere(e, simplify_expr(e, r), r)
        # with i in [0, 2] it cannot.
        assert simp(mod(add(mul(X, 6), I), 8), {"i": (0, 2)}) == "(x * 6 + i) % 8"

    def test_prime_modulus_has_no_proper_divisor(self):
        r = {"i": (0, 2)}
        assert simp(mod(add(mul(X, 3), I), 7), r) == "(x * 3 + i) % 7"

    def test_non_constant_divisor(self):
        e = ir.Bin("%", add(mul(X, 4), I), Y, ir.int32)
        assert simp(e, {"i": (0, 3)}) == "(x * 4 + i) % y"

    def test_nothing_but_the_remainder(self):
        # no multiple of g left once the remainder is taken out: the first rule's job.
        assert simp(mod(I, 8), {"i": (0, 3)}) == "i"
        assert simp(div(I, 8), {"i": (0, 3)}) == "0"
        assert simp(mod(I, 8), {"i": (0, 8)}) == "i % 8"


# ----------------------------------------------------------------- property
VARS = ("x", "y", "i", "j")


@st.composite
def ranges_st(draw):
    """Per variable: a small range, a half-known one, or none."""
    out = {}
    for v in VARS:
        kind = draw(st.sampled_from(["range", "range", "range", "lo", "none"]))
        if kind == "none":
            continue
        lo = draw(st.integers(-6, 6))
        out[v] = (lo, None) if kind == "lo" else (lo, lo + draw(st.integers(0, 9)))
    return out


def linear_st(atoms):
    """k0 + sum(k * atom), coefficients and constant of both signs."""
    term = st.tuples(st.integers(-16, 16), atoms)

    def build(args):
        k0, terms = args
        e = c(k0)
        for k, a in terms:
            if k == 0:
                continue
            op, k = ("+", k) if k > 0 else ("-", -k)
            e = ir.Bin(op, e, a if k == 1 else mul(a, k), ir.int32)
        return e
    return st.tuples(st.integers(-20, 20), st.lists(term, min_size=1, max_size=3)).map(build)


DIVISORS = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32])


def by(e, op, k):
    return ir.Bin(op, e, c(k), ir.int32)


def expr_st():
    atoms = st.sampled_from([ir.Var(v) for v in VARS])
    level1 = st.one_of(atoms, st.builds(by, linear_st(atoms), st.sampled_from("/%"), DIVISORS))
    inner = linear_st(level1)
    nested = st.builds(div, st.builds(div, inner, DIVISORS), DIVISORS)
    top = st.builds(by, inner, st.sampled_from("/%"), DIVISORS)
    return st.one_of(top, nested, st.builds(add, top, top))


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), e=expr_st(), ranges=ranges_st())
def test_simplification_keeps_the_value(data, e, ranges):
    bounds = {}
    for v in VARS:
        lo, hi = ranges.get(v, (None, None))
        lo = -40 if lo is None else lo
        bounds[v] = (lo, lo + 80 if hi is None else hi)
    envs = data.draw(st.lists(st.fixed_dictionaries(
        {v: st.integers(lo, hi) for v, (lo, hi) in bounds.items()}), min_size=12, max_size=12),
        label="points")
    # and the corners of the ranges, where a wrong range condition shows first
    envs += [{v: b[k] for v, b in bounds.items()} for k in (0, 1)]
    out = simplify_expr(e, ranges)
    note(f"{show(e)}  ->  {show(out)}   ranges {ranges}")
    for env in envs:
        assert evaluate(out, env) == evaluate(e, env), env


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(g_log=st.integers(1, 4), c_mul=st.integers(2, 6), kx=st.integers(-9, 9),
       ky=st.integers(-3, 3), k0=st.integers(-40, 40), lo=st.integers(-2, 2),
       span=st.integers(0, 18))
def test_divisor_rule_keeps_the_value(g_log, c_mul, kx, ky, k0, lo, span):
    """(g*kx*x + g*c*ky*y + i + k0) by g*c with i in [lo, lo + span]: whether
    the rules fire or not (the remainder's range may reach g, or below 0), the
    result has the original's value at every i, every residue of x and a few y."""
    g = 2 ** g_log
    cc = g * c_mul
    lin = add(mul(X, g * kx), mul(Y, cc * ky), I, c(k0))
    r = {"i": (lo, lo + span)}
    for op in (div, mod):
        e = op(lin, cc)
        out = simplify_expr(e, r)
        note(f"{show(e)}  ->  {show(out)}")
        for x in range(-c_mul - 1, c_mul + 1):
            for y in (-1, 0, 2):
                for i in range(lo, lo + span + 1):
                    env = {"x": x, "y": y, "i": i}
                    assert evaluate(out, env) == evaluate(e, env), env


# ------------------------------------------------------------------ deciding comparisons
_BOUNDS = [None, -3, -2, -1, 0, 1, 2, 3]


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_are_decided_soundly_and_whenever_the_bounds_settle_them(op):
    """`a op b` from the bounds of a - b: True or False only when every difference in the
    bounds gives that answer (a wrong fold is a wrong answer in every kernel), and decided
    whenever both bounds are known and agree (else guards stay in the code)."""
    from tcomp.lower.simplify import _decide
    cmp = {"<": lambda v: v < 0, "<=": lambda v: v <= 0, ">": lambda v: v > 0,
           ">=": lambda v: v >= 0, "==": lambda v: v == 0, "!=": lambda v: v != 0}[op]
    for lo in _BOUNDS:
        for hi in _BOUNDS:
            if lo is not None and hi is not None and lo > hi:
                continue
            values = range(-10 if lo is None else lo, (10 if hi is None else hi) + 1)
            answers = {cmp(v) for v in values}
            got = _decide(op, (lo, hi))
            if got is not None:
                assert answers == {got}, (op, lo, hi, got)
            elif lo is not None and hi is not None:
                assert len(answers) == 2, (op, lo, hi)


# ------------------------------------------------------------------ scopes of ranges
def _shadowing_cases():
    """Bodies of `for i in 0:4` (one thread, O of 12 floats) where a nested
    scope gives `i` a narrower range: an inner loop or let of the same name
    (Kernel IR allows shadowing; verify accepts it), an if-condition that
    refines i in its then-branch only. After that scope the outer range must
    come back, or the guard after it is folded away. {name: (body, want)}."""
    def store(at, v):
        return ir.Store("O", (at,), ir.Imm(float(v), F32))

    def lt(a, k):
        return ir.Bin("<", a, c(k), ir.bool_)

    def want(pairs):
        out = np.zeros(12, np.float32)
        for at, v in pairs:
            out[at] = v
        return out

    return {
        "inner-loop": (ir.seq(ir.For("i", c(0), c(2), "serial", store(I, 1)),
                              ir.If(lt(I, 2), store(add(I, c(4)), 2))),
                       want([(0, 1), (1, 1), (4, 2), (5, 2)])),
        "inner-let": (ir.seq(ir.Let("i", c(0), store(I, 1)), ir.If(lt(I, 1), store(add(I, c(4)), 2))),
                      want([(0, 1), (4, 2)])),
        "if-then-else": (ir.seq(ir.If(lt(I, 2), store(I, 1), ir.If(lt(I, 3), store(add(I, c(4)), 2))),
                                ir.If(lt(I, 3), store(add(I, c(8)), 3))),
                         want([(0, 1), (1, 1), (6, 2), (8, 3), (9, 3), (10, 3)])),
    }


@pytest.mark.parametrize("case", ["inner-loop", "inner-let", "if-then-else"])
def test_ranges_narrowed_in_a_nested_scope_end_with_it(case):
    body, want = _shadowing_cases()[case]
    one = ir.ONE
    k = ir.Kernel("k", ("O",), (), (one,) * 3, (one,) * 3, ir.For("i", c(0), c(4), "serial", body))
    out = ir.Buffer("O", F32, (c(12),), "global", "output")
    for kern in (k, simplify(k)):
        prog = ir.Program("p", (out,), (kern,), (), ("O",), ())
        env = {"O": np.zeros(12, np.float32)}
        run_program(prog, env, {})
        np.testing.assert_array_equal(env["O"], want, err_msg="simplified" if kern is not k else "as built")


# ------------------------------------------------------------------ int32 range
BIG = 2_000_000_000


@pytest.mark.parametrize("e,text", [
    (add(c(2**31 - 1), c(1)), "2147483647 + 1"),
    (add(X, c(BIG), c(BIG)), "x + 2000000000 + 2000000000"),
    (mul(mul(X, 65536), 65536), "x * 65536 * 65536"),
    (ir.Un("-", c(-2**31), ir.int32), "-(-2147483648)"),
    (div(mul(mul(X, 65536), 65536), 3), "x * 65536 * 65536 / 3"),
    # in range: still folded
    (add(X, c(BIG), c(-BIG)), "x"),
    (ir.Bin("*", c(46340), c(46340), ir.int32), "2147395600"),
])
def test_no_rewrite_creates_a_constant_outside_int32(e, text):
    """A fold or linear form whose constant would leave int32 keeps the
    expression as written: it wraps at run time, like `evaluate`'s int32."""
    assert simp(e) == text


@pytest.mark.parametrize("expr", ["(I(i) + 2000000000) + 2000000000", "I(i) * 65536 * 65536 + 3",
                                  "I(i) - (-2147483647 - 1)", "I(i) + int32(float(2147483647 + 1) / 2.0)"])
def test_int32_arithmetic_that_wraps_runs_like_evaluate(expr):
    import tcomp
    op = tcomp.op(f"def f(int32(N) I) -> (O) {{ O(i) = {expr} }}")
    data = np.array([1, -5, 7, 2**31 - 1, -2**31], np.int32)
    got = tcomp.build(tcomp.Schedule(op), target="sim")(data)
    np.testing.assert_array_equal(got, tcomp.evaluate(op, data))


# ----------------------------------------------------------------- caches (speed, same output)
@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(e=expr_st(), ranges=ranges_st())
def test_remembered_linear_forms_are_what_linearising_again_gives(e, ranges):
    """Simplifier.expr_of remembers the linear form of the sum it builds, so
    a parent does not walk it again; the remembered form must be exactly
    (terms, their order, the constant) what `_linear` computes on it."""
    from tcomp.lower.simplify import Simplifier
    s = Simplifier(ranges)
    out = s.expr(e)
    checked = 0
    for x in ir.walk_expr(out):
        hit = s._lin.get(id(x))
        if hit is None or hit[0] is not x:
            continue
        fresh = Simplifier(ranges)._linear(x)
        assert list(hit[1].terms.items()) == list(fresh.terms.items()) and \
            hit[1].const == fresh.const, show(x)
        checked += 1
    note(f"{show(e)} -> {show(out)}: {checked} remembered forms checked")


def test_simplify_expr_remembers_only_what_prints_the_same():
    """Structural equality takes 1 == 1.0 == True: a remembered result is
    used for an equal expression only when both are plain (ir.plain: every
    constant a Python value of its own type's kind), so an equal expression
    with an int constant of a float type is simplified afresh."""
    from tcomp.lower import simplify as S
    S._SHARED.clear()
    e = add(mul(X, 4), c(3))
    first = simplify_expr(e, {"x": (0, 7)})
    assert simplify_expr(add(mul(X, 4), c(3)), {"x": (0, 7)}) is first  # remembered
    assert simplify_expr(e, {"x": (0, 8)}) is not first                   # other ranges
    as_float = ir.Bin("+", ir.Var("x", F32), ir.Imm(1.0, F32), F32)
    as_int = ir.Bin("+", ir.Var("x", F32), ir.Imm(1, F32), F32)
    assert as_float == as_int and ir.plain(as_float) and not ir.plain(as_int)
    assert show(simplify_expr(as_float)) == show(as_float)
    assert show(simplify_expr(as_int)) == show(as_int)
    flag = ir.Bin("&&", ir.Var("b", ir.bool_), ir.Imm(True, ir.bool_), ir.bool_)
    one = ir.Bin("&&", ir.Var("b", ir.bool_), ir.Imm(1, ir.bool_), ir.bool_)
    assert flag == one and ir.plain(flag) and not ir.plain(one)


# ------------------------------------------------------------ symbolic divisors (fuse)
N_, M_, S_ = ir.Var("N"), ir.Var("M"), ir.Var("S")


def _b(op, a, b):
    return ir.Bin(op, a, b, ir.int32)


@pytest.mark.parametrize("e, text", [
    (_b("+", _b("*", _b("/", X, N_), N_), _b("%", X, N_)), "x"),
    (_b("+", _b("*", N_, _b("/", X, N_)), _b("%", X, N_)), "x"),
    (_b("+", _b("*", _b("+", _b("*", _b("/", X, N_), N_), _b("%", X, N_)), S_), Y), "x * S + y"),
    (_b("+", _b("*", _b("*", _b("/", X, N_), N_), ir.const(3)),
        _b("*", _b("%", X, N_), ir.const(3))), "x * 3"),
    # not the identity: kept
    (_b("+", _b("*", _b("/", X, N_), M_), _b("%", X, N_)), "x / N * M + x % N"),
    (_b("+", _b("*", _b("/", X, N_), N_), _b("%", Y, N_)), "x / N * N + y % N"),
])
def test_a_symbolic_division_and_its_remainder_recombine(e, text):
    assert show(simplify_expr(e)) == text


def test_a_fused_axis_with_symbolic_sizes_indexes_and_guards_plainly():
    """fuse(b, h) with symbolic sizes: b = f / H and h = f % H recombine into f in the
    subscripts, and the clamps of b and h, implied by f's loop, are not emitted."""
    import tcomp
    op = tcomp.op("def f(float(B,H,S) X) -> (O) { O(b,h,s) = X(b,h,s) * 2 }")
    s = tcomp.Schedule(op)
    O = s["O"]
    b, h, x = O.axes
    f = O.fuse(b, h)
    O.bind(f, "blockIdx.x")
    _, xi = O.split(x, 128)
    O.bind(xi, "threadIdx.x")
    text = str(tcomp.lower(s))
    assert "if s_o * 128 + s_i < S\n" in text, text
    assert "O[b_h_f * S + s_o * 128 + s_i] = X[b_h_f * S + s_o * 128 + s_i] * 2.0" in text
    assert "/ H" not in text and "% H" not in text
    X_ = np.random.default_rng(0).random((3, 5, 130)).astype(np.float32)
    np.testing.assert_array_equal(tcomp.build(s, target="sim")(X_), tcomp.evaluate(op, X_))
