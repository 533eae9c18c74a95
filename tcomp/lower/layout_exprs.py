"""Layouts (tcomp/arch/layout.py) evaluated into Kernel IR expressions: the
`ops` object that `Layout(...)(coord, ops=IR)` and `Fragment.coords` take, so
an index a kernel computes (a fragment's row and column for a thread and a
register) comes from the one definition of the layout, not a hand-written
formula. Integer coordinates stay Python ints (constants fold)."""
from __future__ import annotations

from . import ir


def _e(x) -> ir.Expr:
    return x if isinstance(x, ir.Expr) else ir.const(x)


def _bin(op, a, b):
    if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
        return None
    return ir.Bin(op, _e(a), _e(b), ir.int32)


class IROps:
    """Layout arithmetic as int32 IR (floor division and modulo, as the IR's)."""

    def const(self, v: int):
        return v

    def add(self, a, b):
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return _bin("+", a, b) or a + b

    def mul(self, a, k: int):
        if k == 1:
            return a
        if k == 0:
            return 0
        return _bin("*", a, k) or a * k

    def floordiv(self, a, k: int):
        return a if k == 1 else (_bin("/", a, k) or a // k)

    def mod(self, a, k: int):
        return _bin("%", a, k) or a % k

    def and_(self, a, k: int):
        return _bin("&", a, k) or a & k

    def xor(self, a, b):
        return _bin("^", a, b) or a ^ b

    def shr(self, a, k: int):
        return _bin(">>", a, k) or a >> k

    def shl(self, a, k: int):
        return _bin("<<", a, k) or a << k


IR = IROps()
