"""Small constructors of Kernel IR used while building loop nests: int32 index
arithmetic, conjunctions of guards, C-safe stage names, and the language-level
subtraction of range bounds (before they are translated to IR)."""
from __future__ import annotations

from . import ir


def ident(stage: str) -> str:
    """A stage name as an identifier (`C.rf` -> `C_rf`)."""
    return stage.replace(".", "_")


def add(a, b):
    return ir.Bin("+", a, b, ir.int32)


def sub(a, b):
    return ir.Bin("-", a, b, ir.int32)


def mul(a, b):
    return ir.Bin("*", a, b, ir.int32)


def ceildiv(a, f: int):
    return ir.Bin("/", add(a, ir.const(f - 1)), ir.const(f), ir.int32)


def conj(conds):
    """`c1 && c2 && ...` without the constant-true ones; None when none is left."""
    out = None
    for c in conds:
        if isinstance(c, ir.Imm) and c.value:
            continue
        out = c if out is None else ir.Bin("&&", out, c, ir.bool_)
    return out


def lang_sub(hi, lo):
    """`hi - lo` over language expressions (a range's extent)."""
    from ..lang import dtypes
    from ..lang.ast import Binary, Const
    if isinstance(lo, Const) and lo.value == 0:
        return hi
    return Binary("-", hi, lo, dtypes.int32)
