"""The constant factor an integer expression is known to be a multiple of,
read from its structure alone (no ranges, no facts from outside).

    factor(c)          = |c|                  (a constant)
    factor(a * b)      = factor(a) * factor(b)
    factor(a + b)      = gcd(factor(a), factor(b))     (also a - b, min, max, select)
    factor(-a)         = factor(a)
    factor(anything else: a variable, a / b, a % b) = 1

The linear forms of simplify.py keep a product of two non-constant atoms
(`i * (N / 4 * 4)`) as one atom of coefficient 1; its factor is still 4. A
schedule specialised on `N % 4 == 0` (schedule/specialize.py) is lowered
with N written `N / 4 * 4`, so the passes that need a multiple of the vector
width (vectorize) see it through `factor` where a symbolic N would hide it.
factor(0) is 0: a multiple of everything.
"""
from __future__ import annotations

import math

from . import ir


def factor(e: ir.Expr) -> int:
    if isinstance(e, ir.Imm):
        return abs(e.value) if isinstance(e.value, int) else 1
    if isinstance(e, ir.Bin):
        if e.op == "*":
            return factor(e.a) * factor(e.b)
        if e.op in ("+", "-", "min", "max"):
            return math.gcd(factor(e.a), factor(e.b))
        return 1
    if isinstance(e, ir.Un) and e.op == "-":
        return factor(e.x)
    if isinstance(e, ir.Select):
        return math.gcd(factor(e.a), factor(e.b))
    return 1


def multiple_of(coef: int, atom: ir.Expr, n: int) -> bool:
    """Whether `coef * atom` is a multiple of n, by its structure."""
    return (coef * factor(atom)) % n == 0
