"""Language expressions -> Kernel IR expressions, with explicit compute types.

float16/bfloat16 values are loaded, then cast to float32; arithmetic happens in
each node's compute type; the store casts back (see lang/dtypes.py).
"""
from __future__ import annotations

import numpy as np

from ..errors import LoweringError
from ..lang import ast as L
from ..lang import dtypes, literals, npfuncs
from . import ir

COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def cast(e: ir.Expr, dt) -> ir.Expr:
    """`e` as `dt`; a constant is converted here, as every target converts
    (npfuncs.convert: floats rounded once, float -> integer saturating with
    NaN -> 0, integers wrapping); a constant to float16/bfloat16 stays a Cast."""
    if getattr(e, "dtype", None) == dt:
        return e
    if isinstance(e, ir.Imm) and not dt.is_low_precision:
        if dt.is_bool:
            return ir.Imm(bool(e.value), dt)
        src = e.dtype
        if not src.is_float:  # an integer in its own type first (NumPy refuses one beyond it)
            wrapped = _wrap(int(e.value), src) if src.is_int else int(e.value)
            if dt.is_int:
                return ir.Imm(_wrap(wrapped, dt), dt)
            return ir.Imm(float(npfuncs.convert(np.asarray(wrapped, src.numpy), dt.numpy)), dt)
        v = npfuncs.convert(np.asarray(e.value, src.numpy), dt.numpy)
        return ir.Imm(float(v) if dt.is_float else int(v), dt)
    return ir.Cast(dt, e)


def _wrap(v: int, dt) -> int:
    """`v` modulo 2^bits into integer type `dt` (two's complement)."""
    span = 1 << dt.bits
    v %= span
    return v - span if dt.kind == "i" and v >= span >> 1 else v


def to_bool(e: ir.Expr) -> ir.Expr:
    if e.dtype.is_bool:
        return e
    zero = ir.Imm(0, e.dtype) if not e.dtype.is_float else ir.Imm(0.0, e.dtype)
    return ir.Bin("!=", e, zero, dtypes.bool_)


def size_expr(e: L.Expr, size) -> ir.Expr:
    """A language size expression (Const/Size/+ - * / min max) as IR."""
    if isinstance(e, L.Const):
        return ir.const(int(e.value))
    if isinstance(e, L.Size):
        return size(e.name)
    if isinstance(e, L.Unary) and e.op == "-":
        return ir.Bin("-", ir.const(0), size_expr(e.x, size), ir.int32)
    if isinstance(e, L.Binary) and e.op in "+-*/%":
        return ir.Bin(e.op, size_expr(e.a, size), size_expr(e.b, size), ir.int32)
    if isinstance(e, L.Call) and e.fn in ("min", "max"):
        return ir.Bin(e.fn, size_expr(e.args[0], size), size_expr(e.args[1], size), ir.int32)
    raise LoweringError(f"not a size expression: {e!r}")


class Translator:
    """Translate one stage's expressions. `index` maps index names to IR;
    `read(tensor, args)` produces the IR for a tensor read (views, inlining)."""

    def __init__(self, index: dict, lets: dict, size, read):
        self.index, self.lets, self.size, self.read_fn = index, lets, size, read

    def __call__(self, e: L.Expr) -> ir.Expr:
        t = e.dtype
        ct = t.compute if t is not None else None
        if isinstance(e, L.Const):
            if ct.is_float:
                # The literal's value in its own type (check.py rounded it from its
                # text: a no-op then), held in the compute type: exact there.
                return ir.Imm(literals.rounded(float(e.value), None, t), ct)
            return ir.Imm(int(e.value), ct)
        if isinstance(e, L.Index):
            return self.index[e.name]
        if isinstance(e, L.Size):
            return self.size(e.name)
        if isinstance(e, L.LetRef):
            return self(self.lets[e.name])
        if isinstance(e, L.Read):
            args = tuple(cast(self(a), ir.int32) for a in e.args)
            v = self.read_fn(e.tensor, args, t)
            return cast(v, ct)
        if isinstance(e, L.Cast):
            x = self(e.x)
            if t.is_bool:
                return to_bool(x)
            v = cast(x, t)
            return cast(v, ct)
        if isinstance(e, L.Unary):
            x = self(e.x)
            if e.op == "!":
                return ir.Un("!", to_bool(x), dtypes.bool_)
            return ir.Un("-", cast(x, ct), ct)
        if isinstance(e, L.Binary):
            a, b = self(e.a), self(e.b)
            if e.op in ("&&", "||"):
                return ir.Bin(e.op, to_bool(a), to_bool(b), dtypes.bool_)
            if e.op in COMPARE:
                pt = dtypes.promote(e.a.dtype, e.b.dtype).compute
                return ir.Bin(e.op, cast(a, pt), cast(b, pt), dtypes.bool_)
            return ir.Bin(e.op, cast(a, ct), cast(b, ct), ct)
        if isinstance(e, L.Select):
            return ir.Select(to_bool(self(e.cond)), cast(self(e.a), ct), cast(self(e.b), ct), ct)
        if isinstance(e, L.Call):
            args = tuple(cast(self(a), ct) for a in e.args)
            if e.fn in ("min", "max"):
                return ir.Bin(e.fn, args[0], args[1], ct)
            return ir.Call(e.fn, args, ct)
        raise LoweringError(f"cannot lower expression {e!r}")


def combine(op: str, a: ir.Expr, b: ir.Expr, dt) -> ir.Expr:
    if op in ("+", "*"):
        if dt.is_bool:
            return ir.Bin("||" if op == "+" else "&&", a, b, dt)
        return ir.Bin(op, a, b, dt)
    return ir.Bin(op, a, b, dt)
