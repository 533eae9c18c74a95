"""The simplifier's arithmetic (lower/simplify.py): the canonical linear
form `c0 + sum(ci * atom_i)` of an integer expression, the type-range checks
that keep every rewrite inside its type, and constant folding."""
from __future__ import annotations

import functools

from . import ir

BITWISE = ("&", "|", "^", "<<", ">>")


def _key(e: ir.Expr):
    return e  # frozen dataclasses hash structurally


class Linear:
    """c0 + sum(coef * atom); atoms keyed by structural equality."""
    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = terms or {}
        self.const = const

    def add(self, other: "Linear", sign: int = 1) -> "Linear":
        terms = dict(self.terms)
        for a, c in other.terms.items():
            n = terms.get(a, 0) + sign * c
            if n:
                terms[a] = n
            else:
                terms.pop(a, None)
        return Linear(terms, self.const + sign * other.const)

    def scale(self, k: int) -> "Linear":
        if k == 0:
            return Linear()
        return Linear({a: c * k for a, c in self.terms.items()}, self.const * k)

    def is_const(self) -> bool:
        return not self.terms

    def to_expr(self, dtype=ir.int32) -> ir.Expr:
        """The form as an expression of integer type `dtype` (int32 in the
        passes; int64 for kernels whose indices were widened for CUDA)."""
        def const(v):
            return ir.Imm(int(v), dtype)
        pos = [(a, c) for a, c in self.terms.items() if c > 0]
        neg = [(a, -c) for a, c in self.terms.items() if c < 0]
        out = None
        for a, c in pos:
            t = a if c == 1 else ir.Bin("*", a, const(c), dtype)
            out = t if out is None else ir.Bin("+", out, t, dtype)
        for a, c in neg:
            t = a if c == 1 else ir.Bin("*", a, const(c), dtype)
            out = ir.Bin("-", out if out is not None else const(0), t, dtype)
        if out is None:
            return const(self.const)
        if self.const > 0:
            out = ir.Bin("+", out, const(self.const), dtype)
        elif self.const < 0:
            out = ir.Bin("-", out, const(-self.const), dtype)
        return out


def _holds(wide, narrow) -> bool:
    """Whether every value of dtype `narrow` converts to `wide` and back unchanged."""
    if narrow.is_float and wide.is_float:
        if narrow.is_fp8:  # every fp8 value is a float16 and a bfloat16 value too
            return wide.bits >= 16
        return (narrow.name, wide.name) in {("bfloat16", "float32"), ("float16", "float32"),
                                            ("bfloat16", "float64"), ("float16", "float64"),
                                            ("float32", "float64")}
    if narrow.kind in "iu" and wide.kind == "i" and not narrow.is_bool:
        return wide.bits > narrow.bits or (wide.bits == narrow.bits and narrow.kind == "i")
    return False


def _in_range(v: int, dtype) -> bool:
    """v is a value of integer type `dtype`; for signed types, -v is one too
    (a linear form prints `x - c` for the constant -c)."""
    if dtype.kind == "u":
        return 0 <= v < 2 ** dtype.bits
    return abs(v) < 2 ** (dtype.bits - 1)


def _fits(lin: Linear, dtype) -> bool:
    """Every constant the form prints (coefficients and c0) is in range
    (`_in_range` of each, with the extremes compared once)."""
    if not _in_range(lin.const, dtype):
        return False
    if not lin.terms:
        return True
    cs = lin.terms.values()
    return _in_range(min(cs), dtype) and _in_range(max(cs), dtype)


def _is_int32(e: ir.Expr) -> bool:
    return getattr(e, "dtype", None) == ir.int32


@functools.lru_cache(maxsize=4096)
def _divisors(c: int) -> frozenset:
    return frozenset(g for d in range(1, int(c ** 0.5) + 1) if c % d == 0 for g in (d, c // d))


def _fold(op: str, a: ir.Imm, b: ir.Imm, dtype):
    x, y = a.value, b.value
    if dtype.is_float or a.dtype.is_float or b.dtype.is_float:
        return None  # float folding would need the exact rounding of the type
    try:
        if op == "+":
            v = x + y
        elif op == "-":
            v = x - y
        elif op == "*":
            v = x * y
        elif op == "/":
            if y == 0:
                return None
            v = x // y
        elif op == "%":
            if y == 0:
                return None
            v = x % y
        elif op in BITWISE:
            if op in ("<<", ">>") and not 0 <= y < dtype.bits:
                return None
            v = {"&": x & y, "|": x | y, "^": x ^ y}[op] if op in ("&", "|", "^") else \
                (x << y if op == "<<" else x >> y)
        elif op == "min":
            v = min(x, y)
        elif op == "max":
            v = max(x, y)
        else:
            r = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y,
                 "&&": bool(x) and bool(y), "||": bool(x) or bool(y)}[op]
            return ir.Imm(r, ir.bool_)
    except KeyError:
        return None
    if not dtype.is_bool and not _in_range(v, dtype):
        return None
    return ir.Imm(v, dtype)
