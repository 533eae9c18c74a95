"""The integer evaluation and the small helpers of the feature walk
(feature_walk.py): an expression's value at the tuning sizes, the
row-major flattening of subscripts the vectorize prediction reads, byte
sizes, the lane axis of a launch."""
from __future__ import annotations

from ..arch import threads
from ..lower import ir
from ..lower.rewriter import Rewriter


def _constant(e, known: set) -> bool:
    """Whether integer expression `e` reads only constants and variables in `known`."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var):
            if x.name not in known:
                return False
        elif not isinstance(x, (ir.Imm, ir.Bin, ir.Un, ir.Cast, ir.Select)):
            return False
        stack.extend(ir.children(x))
    return True


def _conjuncts(c) -> list:
    if isinstance(c, ir.Bin) and c.op == "&&":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _bytes(dt) -> int:
    return max(1, dt.bits // 8)


def _bytes_of(buf) -> int:
    return _bytes(buf.dtype)


def _lane_var(res) -> str | None:
    for axis, d in zip(threads.THREAD, res.block):
        if d > 1:
            return axis.name
    return None


class _RowMajor(Rewriter):
    """Subscripts as one row-major offset (what flatten_storage computes);
    a buffer of unknown shape leaves the marker subscript `_UNKNOWN`."""

    def __init__(self, strides):
        self.strides = strides

    def _flat(self, buf, indices):
        if len(indices) == 1:
            return indices
        st = self.strides(buf)
        if st is None:
            return (_UNKNOWN,)
        out = None
        for i, n in zip(indices, st):
            t = i if n == 1 else ir.Bin("*", i, ir.const(n), ir.int32)
            out = t if out is None else ir.Bin("+", out, t, ir.int32)
        return (out if out is not None else ir.const(0),)

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        return ir.Load(e.buffer, self._flat(e.buffer, self.exprs(e.indices)), e.dtype)

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        return ir.Store(s.buffer, self._flat(s.buffer, self.exprs(s.indices)),
                        self.expr(s.value), loc=s.loc, atomic=s.atomic)

    @staticmethod
    def failed(s) -> bool:
        return any(x is _UNKNOWN for x in ir.walk(s))


_UNKNOWN = ir.Var("__unknown_shape__")


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
        "min": min, "max": max, "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
        ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
        "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b))}


def _eval(e, env: dict):
    """An integer expression's value in `env`, or None when it reads memory
    or an unknown variable."""
    if isinstance(e, ir.Imm):
        return int(e.value) if not isinstance(e.value, float) else None
    if isinstance(e, ir.Var):
        return env.get(e.name)
    if isinstance(e, ir.Bin):
        a = _eval(e.a, env)
        if a is None:
            return None
        b = _eval(e.b, env)
        return None if b is None else _OPS[e.op](a, b) if e.op in _OPS else None
    if isinstance(e, ir.Select):
        c = _eval(e.cond, env)
        return None if c is None else _eval(e.a if c else e.b, env)
    if isinstance(e, ir.Cast) and e.dtype.is_int:
        return _eval(e.x, env)
    if isinstance(e, ir.Un) and e.op == "-":
        x = _eval(e.x, env)
        return None if x is None else -x
    return None
