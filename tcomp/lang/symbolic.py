"""Size expressions: conversion to and from SymPy, and fast integer evaluation.

Size expressions (tensor shapes, index ranges) are ordinary `Expr` trees over
`Const`, `Size`, `Index`, `+ - * /` (integer `/` floors) and `min`/`max` calls.
Range inference reasons about them with SymPy (sizes are positive integers);
everything else evaluates them directly with `eval_int`.
"""
from __future__ import annotations

import functools

import sympy

from ..errors import LangError
from . import dtypes
from .ast import Binary, Call, Const, Expr, Index, LetRef, Size, Unary


@functools.lru_cache(maxsize=None)
def size_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


@functools.lru_cache(maxsize=None)
def index_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True)


class NotSymbolic(Exception):
    """The expression is outside the size-expression fragment."""


def to_sympy(e: Expr, lets: dict[str, Expr] | None = None):
    """`e` as SymPy; `lets` (name -> bound expression) substitutes `where x = ...`
    bindings, which are otherwise outside the fragment."""
    if isinstance(e, LetRef) and lets and e.name in lets:
        return to_sympy(lets[e.name], lets)
    if isinstance(e, Const):
        if isinstance(e.value, float):
            raise NotSymbolic(e)
        return sympy.Integer(e.value)
    if isinstance(e, Size):
        return size_symbol(e.name)
    if isinstance(e, Index):
        return index_symbol(e.name)
    if isinstance(e, Unary) and e.op == "-":
        return -to_sympy(e.x, lets)
    if isinstance(e, Binary) and e.op in "+-*/":
        a, b = to_sympy(e.a, lets), to_sympy(e.b, lets)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        return sympy.floor(a / b)
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        f = sympy.Min if e.fn == "min" else sympy.Max
        return f(to_sympy(e.args[0], lets), to_sympy(e.args[1], lets))
    raise NotSymbolic(e)


def _i(v: int) -> Const:
    return Const(int(v), dtypes.int32)


def from_sympy(s) -> Expr:
    """SymPy expression over size/index symbols -> Expr (integer semantics)."""
    s = sympy.sympify(s)
    if s.is_Integer:
        v = int(s)
        return _i(v) if v >= 0 else Unary("-", _i(-v), dtypes.int32)
    if s.is_Symbol:
        cls = Size if s.is_positive else Index
        return cls(s.name, dtypes.int32)
    if isinstance(s, (sympy.Min, sympy.Max)):
        fn = "min" if isinstance(s, sympy.Min) else "max"
        args = sorted(s.args, key=sympy.default_sort_key)
        out = from_sympy(args[0])
        for a in args[1:]:
            out = Call(fn, (out, from_sympy(a)), dtypes.int32)
        return out
    if isinstance(s, sympy.floor):
        num, den = sympy.fraction(sympy.together(s.args[0]))
        return Binary("/", from_sympy(num), from_sympy(den), dtypes.int32)
    if isinstance(s, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(s.args[0]))
        # ceil(n/d) = (n + d - 1) / d for positive d
        return Binary("/", from_sympy(sympy.expand(num + den - 1)), from_sympy(den), dtypes.int32)
    if s.is_Add:
        # Symbolic terms first, subtractions next, the constant last: H - KH + 1.
        terms = sorted(s.args, key=lambda t: (t.is_number, _is_negative(t),
                                              sympy.default_sort_key(t)))
        out = from_sympy(terms[0])
        for t in terms[1:]:
            if _is_negative(t):
                out = Binary("-", out, from_sympy(-t), dtypes.int32)
            else:
                out = Binary("+", out, from_sympy(t), dtypes.int32)
        return out
    if s.is_Mul:
        coef, rest = s.as_coeff_Mul()
        if coef == -1:
            return Unary("-", from_sympy(rest), dtypes.int32)
        if not coef.is_Integer:
            raise NotSymbolic(s)
        factors = ([] if coef == 1 else [coef]) + list(sympy.Mul.make_args(rest))
        out = from_sympy(factors[0])
        for f in factors[1:]:
            out = Binary("*", out, from_sympy(f), dtypes.int32)
        return out
    if s.is_Pow and s.exp.is_Integer and s.exp > 0:
        out = from_sympy(s.base)
        for _ in range(int(s.exp) - 1):
            out = Binary("*", out, from_sympy(s.base), dtypes.int32)
        return out
    raise NotSymbolic(s)


def _is_negative(t) -> bool:
    coef, _ = t.as_coeff_Mul()
    return bool(coef.is_negative)


def provably_le(a, b) -> bool | None:
    """For SymPy size expressions: True when a <= b for every positive size, False
    when a > b for every positive size, None when SymPy cannot tell. min/max are
    split into their arguments; floor/ceil are bounded by their argument."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    for f, every in ((sympy.Min, any), (sympy.Max, all)):
        if isinstance(a, f):  # min(x, y) <= b if some x <= b; max needs all
            r = [provably_le(x, b) for x in a.args]
            if every(v is True for v in r):
                return True
            if (all if every is any else any)(v is False for v in r):
                return False
            return None
    for f, every in ((sympy.Max, any), (sympy.Min, all)):
        if isinstance(b, f):  # a <= max(x, y) if a <= some x; min needs all
            r = [provably_le(a, y) for y in b.args]
            if every(v is True for v in r):
                return True
            if (all if every is any else any)(v is False for v in r):
                return False
            return None
    d = sympy.expand(a - b)
    if d.is_nonpositive or d.is_positive is False:
        return True
    if d.is_positive:
        return False
    # floor(x) in (x - 1, x], ceiling(x) in [x, x + 1): bound each by its argument on the
    # side that makes d largest (to prove <=) or smallest (to prove >).
    rounded = [t for t in d.atoms(sympy.floor, sympy.ceiling)]
    if rounded:
        up, down = d, d
        for t in rounded:
            c = d.coeff(t)
            if not c.is_number or (d - c * t).has(t):
                return None
            x = t.args[0]
            num, den = sympy.fraction(sympy.together(x))
            # with an integer numerator over a positive integer q, the slack is (q-1)/q
            slack = 1 - 1 / den if den.is_Integer and den > 0 and num.is_integer else 1
            hi, lo = (x, x - slack) if isinstance(t, sympy.floor) else (x + slack, x)
            up = up.subs(t, hi if c > 0 else lo)
            down = down.subs(t, lo if c > 0 else hi)
        if sympy.expand(up).is_nonpositive:
            return True
        if sympy.expand(down).is_positive:
            return False
    return None


def simplify(e: Expr) -> Expr:
    return from_sympy(to_sympy(e))


def eval_int(e: Expr, env: dict[str, int]) -> int:
    """Evaluate a size expression with concrete sizes (and indices) in `env`."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, (Size, Index)):
        return env[e.name]
    if isinstance(e, Unary) and e.op == "-":
        return -eval_int(e.x, env)
    if isinstance(e, Binary):
        a, b = eval_int(e.a, env), eval_int(e.b, env)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op in "/%" and b == 0:
            raise LangError("division by zero in a size expression", e.loc)
        if e.op == "/":
            return a // b
        if e.op == "%":
            return a % b
    if isinstance(e, Call) and e.fn in ("min", "max"):
        vals = [eval_int(a, env) for a in e.args]
        return min(vals) if e.fn == "min" else max(vals)
    raise NotSymbolic(e)
