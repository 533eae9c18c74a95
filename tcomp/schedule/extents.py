"""Axis extents derived from a stage's relations (schedule-time view)."""
from __future__ import annotations

from ..lang.ast import Const
from ..lang.symbolic import NotSymbolic, to_sympy
from .stage import FuseRel, SplitRel, StageState


def extents(s: StageState) -> dict:
    """SymPy extent of every axis of the stage at root (size symbols free)."""
    import sympy
    out = {}
    for v in s.definition.spatial + s.definition.reduce:
        lo, hi = s.definition.ranges[v]
        try:
            out[v] = sympy.Max(to_sympy(hi) - to_sympy(lo), 0)
        except NotSymbolic:
            out[v] = None
    for r in s.relations:
        if isinstance(r, SplitRel):
            e = out.get(r.parent)
            if r.factor is not None:
                out[r.inner] = sympy.Integer(r.factor)
                out[r.outer] = None if e is None else sympy.ceiling(e / r.factor)
            else:
                out[r.outer] = sympy.Integer(r.nparts)
                out[r.inner] = None if e is None else sympy.ceiling(e / r.nparts)
        elif isinstance(r, FuseRel):
            a, b = out.get(r.outer), out.get(r.inner)
            out[r.fused] = None if a is None or b is None else a * b
    return out


def constant_extent(s: StageState, axis: str) -> int | None:
    """The extent of `axis` when it is a constant (None otherwise)."""
    v = _int_extents(s).get(axis)
    if type(v) is int:
        return v
    e = extents(s).get(axis)  # SymPy decides what integers alone do not
    if e is not None and e.is_Integer:
        return int(e)
    return None


_SYMBOLIC = object()  # an extent integer arithmetic alone cannot give


def _int_extents(s: StageState) -> dict:
    """`extents(s)` where it is computed from integers only (the same
    integers SymPy would give: max(hi - lo, 0), a split's factor or part
    count, ceiling division, products), else _SYMBOLIC. Replaying a
    schedule asks `constant_extent` of every vectorized axis, usually an
    inner split of constant factor: SymPy's ceiling and Max with their
    assumptions cost milliseconds per candidate there."""
    out = {}
    for v in s.definition.spatial + s.definition.reduce:
        lo, hi = s.definition.ranges[v]
        if type(lo) is Const and type(hi) is Const and type(lo.value) is int \
                and type(hi.value) is int:
            out[v] = max(hi.value - lo.value, 0)
        else:
            out[v] = _SYMBOLIC
    for r in s.relations:
        if isinstance(r, SplitRel):
            e = out.get(r.parent, _SYMBOLIC)
            if r.factor is not None:
                out[r.inner] = int(r.factor)
                out[r.outer] = -(-e // r.factor) if type(e) is int else _SYMBOLIC
            else:
                out[r.outer] = int(r.nparts)
                out[r.inner] = -(-e // r.nparts) if type(e) is int else _SYMBOLIC
        elif isinstance(r, FuseRel):
            a, b = out.get(r.outer, _SYMBOLIC), out.get(r.inner, _SYMBOLIC)
            out[r.fused] = a * b if type(a) is int and type(b) is int else _SYMBOLIC
    return out
