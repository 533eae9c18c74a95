"""The definitions behind `Stage.rfactor`: a factored reduction stage and
the stage that finishes the reduction over the factored axis."""
from __future__ import annotations

import dataclasses

from ..lang import dtypes
from ..lang.ast import Binary, Const, Expr, Index, Read, Select
from .stage import StageDef


def _i(v: int) -> Const:
    return Const(v, dtypes.int32)


def _identity(op: str, dt) -> Const:
    if op == "+":
        return Const(0.0 if dt.is_float else 0, dt)
    if op == "*":
        return Const(1.0 if dt.is_float else 1, dt)
    if dt.is_float:
        return Const(float("-inf") if op == "max" else float("inf"), dt)
    import numpy as np
    info = np.iinfo(dt.numpy) if not dt.is_bool else None
    if info is None:
        return Const(op == "min", dt)
    return Const(int(info.min if op == "max" else info.max), dt)


def _subst(e: Expr, var: str, value: Expr) -> Expr:
    if isinstance(e, Index) and e.name == var:
        return value
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            nv = _subst(v, var, value)
            if nv is not v:
                changes[f.name] = nv
        elif isinstance(v, tuple) and v and isinstance(v[0], Expr):
            nv = tuple(_subst(x, var, value) for x in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes[f.name] = nv
    return dataclasses.replace(e, **changes) if changes else e


def factor(sched, s, axis: str, rel):
    """(stage name, factored StageDef, remaining StageDef) for rfactor."""
    d: StageDef = s.definition
    acc = d.acc_dtype
    buf = f"{d.tensor}_rf"
    base, i = buf, 1
    while buf in sched.tensors:
        buf, i = f"{base}{i}", i + 1
    ranges = dict(d.ranges)
    rhs = d.rhs
    lets = dict(d.lets)
    if rel is None:
        fvar, others = axis, tuple(v for v in d.reduce if v != axis)
        flo, fhi = ranges[axis]
        # Index the factored buffer from 0.
        fext = fhi if (isinstance(flo, Const) and flo.value == 0) else Binary("-", fhi, flo, dtypes.int32)
        if not (isinstance(flo, Const) and flo.value == 0):
            value = Binary("+", flo, Index(axis, dtypes.int32), dtypes.int32)
            rhs = _subst(rhs, axis, value)
            lets = {k: _subst(v, axis, value) for k, v in lets.items()}
            ranges[axis] = (_i(0), fext)
    else:
        r = rel.parent
        lo, hi = ranges[r]
        ext = hi if (isinstance(lo, Const) and lo.value == 0) else Binary("-", hi, lo, dtypes.int32)
        if rel.factor is not None:
            inner_ext = _i(rel.factor)
            outer_ext = Binary("/", Binary("+", ext, _i(rel.factor - 1), dtypes.int32),
                               _i(rel.factor), dtypes.int32)
        else:
            outer_ext = _i(rel.nparts)
            inner_ext = Binary("/", Binary("+", ext, _i(rel.nparts - 1), dtypes.int32),
                               _i(rel.nparts), dtypes.int32)
        io, ii = Index(rel.outer, dtypes.int32), Index(rel.inner, dtypes.int32)
        offset = Binary("+", Binary("*", io, inner_ext, dtypes.int32), ii, dtypes.int32)
        value = offset if (isinstance(lo, Const) and lo.value == 0) else Binary("+", lo, offset,
                                                                             dtypes.int32)
        body = _subst(rhs, r, value)
        lets = {k: _subst(v, r, value) for k, v in lets.items()}
        cond = Binary("<", offset, ext, dtypes.bool_)
        rhs = Select(cond, body, _identity(d.reduce_op, body.dtype), body.dtype)
        del ranges[r]
        ranges[rel.outer] = (_i(0), outer_ext)
        ranges[rel.inner] = (_i(0), inner_ext)
        fvar = axis
        other_half = rel.inner if axis == rel.outer else rel.outer
        others = tuple(other_half if v == r else v for v in d.reduce)
    rf_spatial = (fvar,) + d.spatial
    rf_def = StageDef(buf, rf_spatial, others, {v: ranges[v] for v in rf_spatial + others}, rhs,
                      d.reduce_op, True, acc, lets)
    sched.tensors[buf] = (acc, tuple(ranges[v][1] for v in rf_spatial), "global")
    read = Read(buf, tuple(Index(v, dtypes.int32) for v in rf_spatial), acc)
    main = StageDef(d.tensor, d.spatial, (fvar,),
                    {**{v: d.ranges[v] for v in d.spatial}, fvar: ranges[fvar]}, read,
                    d.reduce_op, d.init, acc, {})
    name, i = f"{s.name}.rf", 1
    while name in sched.states:
        name, i = f"{s.name}.rf{i}", i + 1
    return name, rf_def, main
