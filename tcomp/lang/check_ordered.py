"""The checks of an ordered statement (`where ordered t`, docs/language.md).

An ordered statement runs point by point over its ordered indices, in
increasing order (several clauses: lexicographically, outermost first). At
each point it computes every element of that point (its other indices, its
reductions) from the tensor's current state, then stores them: a read of its
own tensor at an earlier point sees what the statement stored there, a read
at this point or a later one the value from before the statement.

What makes that schedulable as an ordinary serial loop (no snapshot, no
per-point copy) is the rule checked here: every read of the statement's own
tensor is either
  * at a point provably other than the one being written: at some ordered
    position the subscript is `t + c` with `c` a nonzero constant
    (`O(t - 1)`), or a ternary (or `&&`) guarding the read excludes `t`
    (`j < i ? ... X(j) ... : ...`, trisolv's forward substitution; two
    conditions chain: `k < j` and `j < i` exclude `k == i`); or
  * at exactly the element written (`O(i, t)` in `O(i, t) = 2.0 * O(i, t)`),
    in a statement without reduction indices (a reduction would read its own
    partial sum).
A read the rule cannot place is an error: it would see values the loop has
overwritten, or race with them.

The independent indices (every read of the tensor uses that index itself in
that dimension) are the ones a schedule may spread over threads and blocks;
the ordered indices and the others stay serial loops (schedule/ordered.py).
"""
from __future__ import annotations

import sympy

from ..errors import LangError
from .ast import Binary, Expr, Index, OrderedClause, Read, Select, Stmt, Unary
from .printer import expr_to_text
from .symbolic import NotSymbolic, index_symbol, to_sympy

# A fact about the indices where a read happens: ("le", D) is D <= 0, ("ne", D) is D != 0.
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}


def check(stmt: Stmt, spatial: tuple[str, ...], reduce: tuple[str, ...], lets: dict) -> None:
    """Raise LangError unless `stmt`'s ordered clauses and its reads of its own
    tensor follow the rules above (module docstring)."""
    clauses = [c for c in stmt.where if isinstance(c, OrderedClause)]
    if not clauses:
        return
    seen = []
    for c in clauses:
        if c.var not in spatial:
            what = "a reduction index" if c.var in reduce else "not an index of this statement"
            raise LangError(f"'ordered {c.var}': '{c.var}' is {what}; only an index of the "
                            f"left-hand side can be ordered (a reduction runs in any order)",
                            c.loc)
        if c.var in seen:
            raise LangError(f"index '{c.var}' is ordered twice", c.loc)
        seen.append(c.var)
    if stmt.monoid is not None:
        raise LangError(f"'ordered' is not supported on a tuple reduction ('{stmt.op}!'); "
                        f"write the recurrence on each component", clauses[0].loc)
    ordered = tuple(seen)
    for e in [stmt.rhs, *lets.values()]:
        for read, facts in _reads(e, ()):
            if read.tensor == stmt.tensor:
                _check_read(stmt, read, facts, ordered, spatial, reduce)


def independent(stmt: Stmt, spatial: tuple[str, ...], lets: dict) -> tuple[str, ...]:
    """The spatial indices, not ordered, that every read of the statement's own
    tensor uses unchanged in their own dimension: the loops a schedule may
    spread over threads (each thread then reads only the elements it writes)."""
    ordered = stmt.ordered
    out = []
    for k, v in enumerate(spatial):
        if v in ordered:
            continue
        same = all(r.args[k] == Index(v, r.args[k].dtype)
                   for e in [stmt.rhs, *lets.values()] for r, _ in _reads(e, ())
                   if r.tensor == stmt.tensor)
        if same:
            out.append(v)
    return tuple(out)


def _reads(e: Expr, facts: tuple):
    """(read, facts known where it is evaluated): ternaries and `&&`/`||` are
    lazy, so a read in a branch happens only where the branch's condition holds."""
    if isinstance(e, Read):
        yield e, facts
        for a in e.args:
            yield from _reads(a, facts)
        return
    if isinstance(e, Select):
        yield from _reads(e.cond, facts)
        yield from _reads(e.a, facts + _facts(e.cond, True))
        yield from _reads(e.b, facts + _facts(e.cond, False))
        return
    if isinstance(e, Binary) and e.op in ("&&", "||"):
        yield from _reads(e.a, facts)
        yield from _reads(e.b, facts + _facts(e.a, e.op == "&&"))
        return
    from .ast import children
    for c in children(e):
        yield from _reads(c, facts)


def _facts(cond: Expr, holds: bool) -> tuple:
    """What `cond` being `holds` says about the indices, as ("le"|"ne", D) facts."""
    if isinstance(cond, Unary) and cond.op == "!":
        return _facts(cond.x, not holds)
    if isinstance(cond, Binary) and cond.op in ("&&", "||"):
        if (cond.op == "&&") == holds:  # both operands have the value `holds`
            return _facts(cond.a, holds) + _facts(cond.b, holds)
        return ()
    if not (isinstance(cond, Binary) and cond.op in _FLIP):
        return ()
    op = cond.op if holds else _NEGATE[cond.op]
    try:
        a, b = to_sympy(cond.a), to_sympy(cond.b)
    except NotSymbolic:
        return ()
    if op in (">", ">="):
        a, b, op = b, a, _FLIP[op]
    if op == "<":
        return (("le", a - b + 1),)  # integers: a < b is a - b + 1 <= 0
    if op == "<=":
        return (("le", a - b),)
    if op == "!=":
        return (("ne", a - b),)
    return ()


def _other_point(sub: Expr, var: str, facts: tuple) -> bool:
    """Whether subscript `sub` at an ordered position of index `var` provably differs from it."""
    try:
        e = sympy.expand(to_sympy(sub) - index_symbol(var))
    except NotSymbolic:
        return False
    if e.is_Integer:
        return e != 0
    les = [d for kind, d in facts if kind == "le"]
    chained = [("le", a + b) for i, a in enumerate(les) for b in les[i + 1:]]  # k < j, j < i
    for kind, d in facts + tuple(chained):
        for sign in (1, -1):
            k = sympy.expand(sign * e - d)
            if not k.is_Integer:
                continue
            if kind == "ne" and k == 0:
                return True
            if kind == "le" and k < 0:  # sign * e = d + k <= k < 0
                return True
    return False


def _check_read(stmt: Stmt, read: Read, facts, ordered, spatial, reduce) -> None:
    if any(_other_point(read.args[spatial.index(v)], v, facts) for v in ordered):
        return
    exact = all(isinstance(a, Index) and a.name == v for a, v in zip(read.args, spatial))
    if exact and not reduce:
        return
    text = expr_to_text(read)
    point = ", ".join(ordered)
    why = ("the element it writes, in a reduction (it would read its own partial result)"
           if exact else f"the point ({point}) it is writing")
    raise LangError(f"this ordered statement reads '{text}', which may be {why}; read "
                    f"another point of {point} (e.g. '{ordered[0]} - 1'), read exactly the "
                    f"element written in a statement without reduction, or guard the read "
                    f"with a condition that excludes this point (e.g. 'j < {ordered[0]} ? "
                    f"... : ...')", read.loc)
