"""Semantic checks of ragged ranges, for check.py.

    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)     (embedding bags)

A ragged range reads its bounds from a tensor: for each point of the
statement's spatial indices, the reduction index runs from `lo` to `hi`
(exclusive; empty where hi <= lo). Rules: only a reduction index is ragged;
its bounds are integer expressions of sizes, spatial indices and tensor reads
(no reduction index, no ragged index); at most one ragged index a statement;
no tuple reduction or scatter. Range inference treats the index as bounded by
its ragged range alone; the reads it makes are checked when the op runs
(evaluate, the sim: a bound that takes the index outside a tensor it reads is
an out-of-bounds read there).
"""
from __future__ import annotations

import dataclasses

from ..errors import LangError
from . import builtins
from .ast import Call, Index, RangeClause, Read, walk
from .op import Range


def is_ragged(c) -> bool:
    """Whether range clause `c` reads a tensor (before or after resolution)."""
    return isinstance(c, RangeClause) and any(
        isinstance(x, Read) or isinstance(x, Call) and not builtins.is_builtin(x.fn)
        for e in (c.lo, c.hi) for x in walk(e))


def clause(chk, c: RangeClause, spatial) -> RangeClause:
    """`c` with its bounds resolved (check.py's `_Checker` `chk`)."""
    s = chk.current
    if s.subscripts or s.monoid is not None:
        what = "a scatter" if s.subscripts else "a tuple reduction"
        raise LangError(f"a ragged range (bounds read from a tensor) is not supported in "
                        f"{what}", c.loc)
    if c.var in spatial:
        raise LangError(f"the range of '{c.var}' reads a tensor (a ragged range), but '{c.var}' "
                        f"is on the left-hand side: only a reduction index may be ragged (the "
                        f"shape of '{s.tensor}' cannot depend on data)", c.loc)
    before = len(chk.stmt_indices)
    bounds = []
    for e in (c.lo, c.hi):
        r = chk.expr(e)
        if len(chk.stmt_indices) != before or any(
                isinstance(x, Index) and x.name not in spatial for x in walk(r)):
            name = next(x.name for x in walk(r) if isinstance(x, Index) and x.name not in spatial)
            raise LangError(f"a ragged range's bounds may use sizes, tensor reads and the "
                            f"statement's left-hand-side indices, not '{name}'", c.loc)
        if not r.dtype.is_int:
            raise LangError(f"a bound of the range of '{c.var}' must be an integer, got "
                            f"{r.dtype}", c.loc)
        bounds.append(r)
    return dataclasses.replace(c, lo=bounds[0], hi=bounds[1])


def check_one(resolved) -> None:
    ragged = [c for c in resolved if is_ragged(c)]
    if len(ragged) > 1:
        raise LangError(f"only one index of a statement may have a ragged range ('{ragged[0].var}' "
                        f"and '{ragged[1].var}' both read their bounds)", ragged[1].loc)


def ranges(ranges_, resolved) -> tuple[Range, ...]:
    """The statement's ranges with each ragged index's range as written."""
    ragged = {c.var: c for c in resolved if is_ragged(c)}
    return tuple(Range(r.var, ragged[r.var].lo, ragged[r.var].hi) if r.var in ragged else r
                 for r in ranges_)
