"""Axis extents derived from a stage's relations (schedule-time view)."""
from __future__ import annotations

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
    e = extents(s).get(axis)
    if e is not None and e.is_Integer:
        return int(e)
    return None
