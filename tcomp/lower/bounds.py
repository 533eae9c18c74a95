"""Interval analysis of integer index expressions (for bound inference).

`interval(e, vary)` gives inclusive (lo, hi) expressions for `e` when the
variables in `vary` range over their inclusive bounds and every other
variable is fixed; None when `e` is not analysable (non-affine in a varying
variable, a data-dependent index, ...).
"""
from __future__ import annotations

from . import ir
from .simplify import simplify_expr


def _b(op, a, b):
    return ir.Bin(op, a, b, ir.int32)


def interval(e: ir.Expr, vary: dict[str, tuple[ir.Expr, ir.Expr]]):
    if not (ir.free_vars(e) & set(vary)):
        return (e, e)
    if isinstance(e, ir.Var):
        lo, hi = vary[e.name]
        # a range that names other varying variables (a deeper stage's region offset
        # whose extent moves with a consumer's inner loop: `tmp in 0:max(0, j) - ...`):
        # the least of its low end and the greatest of its high end over them (seed 9
        # pair 26120: the extent kept naming `public` outside its loop)
        rest = {k: v for k, v in vary.items() if k != e.name}
        if ir.free_vars(lo) & set(rest) or ir.free_vars(hi) & set(rest):
            a, b = interval(lo, rest), interval(hi, rest)
            if a is None or b is None:
                return None
            return a[0], b[1]
        return lo, hi
    if isinstance(e, ir.Bin) and e.dtype == ir.int32:
        a, b = interval(e.a, vary), interval(e.b, vary)
        if a is None or b is None:
            return None
        if e.op == "+":
            return _b("+", a[0], b[0]), _b("+", a[1], b[1])
        if e.op == "-":
            return _b("-", a[0], b[1]), _b("-", a[1], b[0])
        if e.op == "*":
            for x, y in ((a, b), (b, a)):
                if isinstance(y[0], ir.Imm) and y[0] == y[1]:
                    c = int(y[0].value)
                    lo, hi = _b("*", x[0], y[0]), _b("*", x[1], y[0])
                    return (lo, hi) if c >= 0 else (hi, lo)
            return None
        if e.op in ("/", "%") and isinstance(b[0], ir.Imm) and b[0] == b[1] and b[0].value > 0:
            if e.op == "/":
                return _b("/", a[0], b[0]), _b("/", a[1], b[0])
            return ir.const(0), ir.const(int(b[0].value) - 1)
        if e.op in ("min", "max"):
            return _b(e.op, a[0], b[0]), _b(e.op, a[1], b[1])
        return None
    if isinstance(e, ir.Select):
        a, b = interval(e.a, vary), interval(e.b, vary)
        if a is None or b is None:
            return None
        return _b("min", a[0], b[0]), _b("max", a[1], b[1])
    return None


def region(indices, vary, ranges=None):
    """Inclusive per-dimension (lo, hi) of several index tuples, simplified."""
    out = []
    for dim in zip(*indices):
        lo = hi = None
        for x in dim:
            r = interval(x, vary)
            if r is None:
                return None
            lo = r[0] if lo is None else _b("min", lo, r[0])
            hi = r[1] if hi is None else _b("max", hi, r[1])
        out.append((simplify_expr(lo, ranges), simplify_expr(hi, ranges)))
    return out
