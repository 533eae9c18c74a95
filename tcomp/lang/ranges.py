"""Range inference for one statement, following Tensor Comprehensions.

Each index gets the largest rectangular range that reads no tensor out of
bounds (and writes no output at a negative position):

  * `where i in lo:hi` fixes a range before anything else;
  * in each round, every index that is the only unknown of some affine
    subscript `a*i + rest` (its other indices already have ranges, so rest
    lies in [rmin, rmax]) gets i in ceil(-rmin/a) : floor((D-1-rmax)/a)+1
    (mirrored for a < 0) for T's dimension D; an index alone, `T(.., i, ..)`,
    gives i in 0:D. All such constraints on an index are intersected (max of
    lows, min of highs); indices solved in one round do not constrain each
    other. Rounds repeat until nothing new is solved;
  * subscripts that read another tensor (gathers) and non-affine subscripts
    constrain nothing; reads they make are checked when the op runs;
  * `where x = expr` bindings are substituted first, as TC inlines them: the
    reads inside a used binding constrain like reads written in place, and a
    subscript `A(x)` with `x = i + k` is the affine subscript `i + k`.
An index left without a range is an error asking for a `where` clause.
"""
from __future__ import annotations

import sympy

from ..errors import LangError
from .ast import ExistsClause, Expr, LetClause, LetRef, RangeClause, Read, Stmt, walk
from .symbolic import NotSymbolic, index_symbol, to_sympy


def _walk(e: Expr, lets: dict[str, Expr]):
    """Pre-order traversal of `e` that continues into the let bindings it uses."""
    for x in walk(e):
        yield x
        if isinstance(x, LetRef) and x.name in lets:
            yield from _walk(lets[x.name], lets)


def _affine(sub: Expr, indices: set[str], lets: dict[str, Expr]):
    """sub as ({index: int coefficient}, rest) or None when not affine with
    integer coefficients, or when it reads a tensor."""
    if any(isinstance(x, Read) for x in _walk(sub, lets)):
        return None
    try:
        s = sympy.expand(to_sympy(sub, lets))
    except NotSymbolic:
        return None
    syms = [index_symbol(v) for v in indices if index_symbol(v) in s.free_symbols]
    coeffs = {}
    rest = s
    for sym in syms:
        c = s.coeff(sym)
        if not c.is_Integer or c == 0:
            return None
        coeffs[sym.name] = int(c)
        rest = rest - c * sym
    rest = sympy.expand(rest)
    if rest.free_symbols & {index_symbol(v) for v in indices}:
        return None  # products of indices, floor divisions, ...
    return coeffs, rest


def infer_ranges(stmt: Stmt, spatial: tuple[str, ...], reduce: tuple[str, ...],
                 shapes: dict[str, tuple], lhs_shape: tuple | None,
                 fixed: dict[str, tuple]) -> dict[str, tuple]:
    """Ranges (lo, hi) as SymPy expressions for every index of `stmt`.

    shapes: SymPy shapes of the tensors readable here. lhs_shape: the written
    tensor's shape from an earlier definition when this statement continues
    it (constrains the left-hand side), else None. fixed: ranges from `where`.
    """
    indices = set(spatial) | set(reduce)
    # (coefficient map, rest, dim size, read node)
    constraints = []
    lets = {c.name: c.value for c in stmt.where if isinstance(c, LetClause)}
    reads = [x for x in _walk(stmt.rhs, lets) if isinstance(x, Read)]
    for c in stmt.where:
        if isinstance(c, ExistsClause):
            reads += [x for x in _walk(c.read, lets) if isinstance(x, Read)]
    for c in stmt.where:  # a ragged range's bounds (check_ragged.py) bound the indices they read
        if isinstance(c, RangeClause):
            reads += [x for e in (c.lo, c.hi) for x in _walk(e, lets) if isinstance(x, Read)]
    for e in stmt.subscripts:  # a scatter's (check_scatter.py): its reads bound indices too
        reads += [x for x in _walk(e, lets) if isinstance(x, Read)]
    for r in reads:
        shape = shapes[r.tensor]
        for sub, dim in zip(r.args, shape):
            aff = _affine(sub, indices, lets)
            if aff is not None and aff[0]:
                constraints.append((aff[0], aff[1], dim, r))
    if lhs_shape is not None and stmt.subscripts:  # a scatter's affine subscripts
        for sub, dim in zip(stmt.subscripts, lhs_shape):
            aff = _affine(sub, indices, lets)
            if aff is not None and aff[0]:
                constraints.append((aff[0], aff[1], dim, None))
    elif lhs_shape is not None:
        for v, dim in zip(stmt.indices, lhs_shape):
            constraints.append(({v: 1}, sympy.Integer(0), dim, None))

    known: dict[str, tuple] = dict(fixed)
    while True:
        found: dict[str, list] = {}
        for coeffs, rest, dim, _ in constraints:
            unknown = [v for v in coeffs if v not in known]
            if len(unknown) == 1:
                v = unknown[0]
                found.setdefault(v, []).append(_solve(v, coeffs, rest, dim, known))
        if not found:
            break
        for v, cands in found.items():
            lo = sympy.Max(*[c[0] for c in cands])
            hi = sympy.Min(*[c[1] for c in cands])
            if v in spatial:
                lo = sympy.Max(lo, 0)  # never write at a negative position
            known[v] = (sympy.simplify(lo), sympy.simplify(hi))

    missing = [v for v in spatial + reduce if v not in known]
    if missing:
        v = missing[0]
        others = [r for coeffs, rest, dim, r in constraints if v in coeffs and r is not None]
        where = f"where {v} in 0:<size>"
        if others:
            from .printer import expr_to_text
            raise LangError(f"ambiguous range for index '{v}': it appears in "
                            f"{expr_to_text(others[0])} only together with other indices whose "
                            f"ranges are unknown; add a '{where}' clause", stmt.loc)
        raise LangError(f"cannot infer the range of index '{v}': no tensor read bounds it; "
                        f"add a '{where}' clause", stmt.loc)
    return known


def _solve(v, coeffs, rest, dim, known):
    """Range of v from 0 <= a*v + sum(c_u * u) + rest <= dim - 1."""
    a = coeffs[v]
    rmin = rmax = rest
    for u, c in coeffs.items():
        if u == v:
            continue
        lo, hi = known[u]
        if c > 0:
            rmin, rmax = rmin + c * lo, rmax + c * (hi - 1)
        else:
            rmin, rmax = rmin + c * (hi - 1), rmax + c * lo
    if a > 0:
        return sympy.ceiling(-rmin / a), sympy.floor((dim - 1 - rmax) / a) + 1
    b = -a
    return sympy.ceiling((rmax - dim + 1) / b), sympy.floor(rmin / b) + 1


def fixed_range(c: RangeClause):
    return to_sympy(c.lo), to_sympy(c.hi)
