"""Semantic checks of scatters, for check.py.

    O(I(i), d) +=! X(i, d)        (index_add, MoE combine, embedding backward)

A scatter writes through left-hand-side subscripts that read a tensor. Its
meaning: for every point of *all* its indices (each one a loop of the
statement; none is reduced away), `O(subscripts) op= rhs`, the points in any
order; `op=!` first fills the whole tensor with the operator's identity (a
fill statement of its own, `fill_statement`), `op=` continues the tensor's
earlier value, `=` overwrites the points written and keeps the others.
Duplicate subscripts with `+=`, `*=`, `max=`, `min=` combine every value
(NumPy's `np.add.at`); with `=` the last point in the statement's index order
wins in `evaluate`.

Rules: the written tensor's shape is known before the statement (a typed
output, `float(N, D) O`, or an earlier definition); at least one subscript
reads a tensor (other computed subscripts stay refused); neither the
subscripts nor the right-hand side read the written tensor; no tuple
reduction. Subscripts that are affine in the indices constrain their ranges
by the tensor's shape, as reads do; a data-dependent subscript's value is
checked against its dimension when the op runs (evaluate, the sim).
"""
from __future__ import annotations

from ..errors import LangError
from . import dtypes
from .ast import Const, Expr, RangeClause, Read, Stmt, walk
from .op import Range, Statement
from .symbolic import from_sympy, to_sympy


def subscripts(c, s: Stmt) -> tuple[Expr, ...]:
    """The checked left-hand-side subscripts of scatter `s` (() for other statements)."""
    if not s.subscripts:
        return ()
    out = tuple(c.expr(e) for e in s.subscripts)
    for e in out:
        c.check_depth(e, e.loc)
        if not e.dtype.is_int:
            raise LangError(f"subscript of '{s.tensor}' must be an integer, got {e.dtype}", e.loc)
    if not any(isinstance(x, Read) for e in out for x in walk(e)):
        raise LangError("left-hand side subscripts must be plain index variables (or read a "
                        "tensor: a scatter, e.g. O(I(i), d) += X(i, d))", s.loc)
    return out


def shape(c, s: Stmt, decl, prior):
    """The SymPy shape the scatter writes into: declared, or from an earlier definition."""
    if prior is not None:
        return prior["shape"]
    if decl.dims is None:
        raise LangError(f"a scatter into '{s.tensor}' needs its shape before the statement: "
                        f"declare it with a type and shape (e.g. float(N, D) {s.tensor}) or "
                        f"define it in an earlier statement", s.loc)
    return tuple(to_sympy(c.size_expr(x, "a typed output's shape")) for x in decl.dims)


def check_reads(s: Stmt, stmt: Stmt, lets) -> None:
    """Neither the subscripts nor the right-hand side read the written tensor."""
    for e in list(stmt.subscripts) + [stmt.rhs] + list(lets.values()):
        for x in walk(e):
            if isinstance(x, Read) and x.tensor == s.tensor:
                raise LangError(f"a scatter cannot read the tensor it writes ('{s.tensor}'): "
                                f"its points run in any order; read a copy written by an "
                                f"earlier statement", x.loc)


def _identity(op: str, dt: dtypes.DType):
    if op == "+":
        return 0.0 if dt.is_float else 0
    if op == "*":
        return 1.0 if dt.is_float else 1
    if dt.is_bool:
        return 0 if op == "max" else 1
    if dt.is_float:
        return float("-inf") if op == "max" else float("inf")
    import numpy as np
    info = np.iinfo(dt.numpy)
    return int(info.min) if op == "max" else int(info.max)


def fill_statement(s: Stmt, dtype: dtypes.DType, shape) -> Statement:
    """`O(d0, d1, ...) = identity` over the whole shape: what `op=!` starts from."""
    names = tuple(f"d{k}" for k in range(len(shape)))
    zero = Const(0, dtypes.int32)
    where = tuple(RangeClause(v, zero, from_sympy(n)) for v, n in zip(names, shape))
    rhs = Const(_identity(s.reduce_op, dtype), dtype, loc=s.loc)
    stmt = Stmt(s.tensor, names, "=", False, rhs, where, loc=s.loc)
    ranges = tuple(Range(v, zero, from_sympy(n)) for v, n in zip(names, shape))
    return Statement(stmt, names, (), ranges, dtype, dtype.compute if not dtype.is_bool else dtype,
                     False, scatter_fill=True)
