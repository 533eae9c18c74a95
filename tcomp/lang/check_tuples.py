"""Semantic checks of tuple (monoid) reductions (monoids.py), for check.py.

    mx(n), ix(n) argmax=! X(n, d), d

Rules: the statement reduces (it has a reduction index and the `!` form); each
component is a tensor of its own that no other statement writes (so the values
cannot read it: it is not written before); the values fit the monoid (monoids.component_types); a
component declared with a type takes the monoid's type only without loss.
"""
from __future__ import annotations

from ..errors import LangError
from . import dtypes, monoids
from .ast import ExistsClause, LetClause, Read, Stmt, walk
from .op import Statement


def target(c, name: str, s: Stmt, prior) -> None:
    """A tuple reduction's components are written by it alone."""
    owners = c.__dict__.setdefault("tuple_owner", {})
    if name in owners:
        line = owners[name].loc.line if owners[name].loc else 0
        raise LangError(f"'{name}' is written by the tuple reduction on line {line}; a "
                        f"component of a tuple reduction is written by no other statement", s.loc)
    if s.monoid is not None and prior is not None:
        raise LangError(f"'{name}' is written by an earlier statement (line {prior['line']}); a "
                        f"component of a tuple reduction is written by no other statement", s.loc)


def finish(c, s: Stmt, stmt: Stmt, spatial, reduce, resolved, where):
    """The checked Statement of tuple reduction `s` (its values typed in `stmt`)."""
    op = f"{s.op}!"  # (the lexer knows tuple reductions only in their `!` form)
    if not reduce:
        raise LangError(f"'{op}' has no reduction index: every index on its right-hand side "
                        f"is on its left", s.loc)
    items = stmt.rhs.items
    stored, _ = monoids.component_types(s.monoid, items, s.loc)
    final = []
    for name, t in zip(s.all_tensors, stored):
        decl = c.declared[name]
        if decl.type_name is not None:
            want = dtypes.BY_NAME[decl.type_name]
            if not dtypes.can_store(t, want):
                raise LangError(f"type mismatch: '{op}' computes {t} for '{name}' but it is "
                                f"{want} (declared); cast the value explicitly", s.loc)
            t = want
        final.append(t)
    ranges, shape = c.ranges(s, stmt, spatial, reduce, resolved, s.tensor, None)
    line = s.loc.line if s.loc else 0
    for name, t in zip(s.all_tensors, final):
        c.written[name] = {"dtype": t, "shape": shape, "line": line}
        c.tuple_owner[name] = s
    exprs = list(items) + [x.read for x in resolved if isinstance(x, ExistsClause)] + \
        [w.value for w in where if isinstance(w, LetClause)]
    for e in exprs:
        for x in walk(e):
            if isinstance(x, Read) and x.tensor in c.declared:
                c.read_at.setdefault(x.tensor, s)
    accs = tuple(t.compute for t in final)
    st = Statement(stmt, tuple(spatial), tuple(reduce), ranges, items[0].dtype, accs[0], False,
                   tuple(final), accs)
    return st, stmt
