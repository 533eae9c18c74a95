"""The simplifier's rules for the bitwise operators of Kernel IR (& | ^ << >>,
made by layouts: a swizzle's XOR): named rewrites, and a property test that
simplifying never changes an expression's value where its variables are in
their ranges (a dropped constant in `(q*2^k + r) & m` was caught this way)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tcomp.lower import ir
from tcomp.lower.printer import expr as text
from tcomp.lower.simplify import Simplifier

from .bank_conflicts import value

RANGES = {"i": (0, 7), "j": (0, 31), "k": (0, 1000), "n": (-50, 50)}


def B(op, a, b):
    return ir.Bin(op, a, b if isinstance(b, ir.Expr) else ir.const(b), ir.int32)


i, j, k, n = (ir.Var(x) for x in "ijkn")


def simp(e):
    return text(Simplifier(RANGES).expr(e))


def test_named_rules():
    assert simp(B("<<", B("^", k, j), 3)) == "(k ^ j) * 8"
    assert simp(B(">>", B("+", B("*", k, 8), i), 3)) == "k"  # 0 <= i < 8
    assert simp(B(">>", B("+", B("*", k, 8), j), 3)) == "k + (j >> 3)"
    assert simp(B("&", B("+", B("*", k, 8), 13), 7)) == "5"
    assert simp(B("&", B("+", B("*", k, 2), 3), 1)) == "1"
    assert simp(B("&", B("+", B("*", B("%", k, 3), 128), B("%", j, 16)), 7)) == "j & 7"
    assert simp(B("&", B(">>", B("%", j, 16), 1), 3)) == "(j >> 1) & 3"
    assert simp(B("&", B("+", B("*", k, 8), i), 7)) == "i"
    # (q c + r) ^ x -> q c + (r ^ x) with r, x in [0, c)
    assert simp(B("^", B("+", B("*", k, 8), i), B("&", j, 7))) == "k * 8 + (i ^ (j & 7))"
    assert simp(B("^", k, 0)) == "k" and simp(B("|", ir.const(0), k)) == "k" and simp(B("&", k, 0)) == "0"
    assert simp(B("^", ir.const(6), ir.const(3))) == "5"
    assert simp(B(">>", ir.const(-9), ir.const(2))) == "-3"  # arithmetic: floor


def test_bounds_of_bitwise_atoms():
    s = Simplifier(RANGES)
    assert s.atom_bound(B("&", n, 7)) == (0, 7)  # whatever the sign of n
    assert s.atom_bound(B("^", i, j)) == (0, 31)
    assert s.atom_bound(B(">>", k, 2)) == (0, 250)
    assert s.atom_bound(B("^", n, j)) is None  # n may be negative


def test_printed_like_c_with_bitwise_operands_bracketed():
    assert text(B("+", B("^", i, j), 1)) == "(i ^ j) + 1"
    assert text(B("^", B("+", i, 1), B("&", j, 7))) == "(i + 1) ^ (j & 7)"
    assert text(B("==", B("&", i, 1), ir.const(0))) == "(i & 1) == 0"


def _leaf():
    return st.one_of(st.sampled_from([i, j, k, n]), st.integers(-9, 40).map(ir.const))


def _tree(children):
    arith = st.tuples(st.sampled_from(["+", "-", "*"]), children, children)
    bit = st.tuples(st.sampled_from(["&", "|", "^"]), children, children)
    shift = st.tuples(st.sampled_from(["<<", ">>"]), children, st.integers(0, 4).map(ir.const))
    mask = st.tuples(st.just("&"), children, st.sampled_from([1, 3, 7, 15, 31]).map(ir.const))
    div = st.tuples(st.sampled_from(["/", "%"]), children,
                    st.sampled_from([2, 3, 4, 8, 16]).map(ir.const))
    return st.one_of(arith, bit, shift, mask, div).map(lambda t: B(*t))


EXPRS = st.recursive(_leaf(), _tree, max_leaves=8)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(e=EXPRS, env=st.fixed_dictionaries({v: st.integers(lo, hi)
                                           for v, (lo, hi) in RANGES.items()}))
def test_simplifying_keeps_the_value(e, env):
    want = value(e, env)
    got = value(Simplifier(RANGES).expr(e), env)
    assert got == want, f"{text(e)} -> {text(Simplifier(RANGES).expr(e))} at {env}"
