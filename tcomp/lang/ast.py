"""Syntax tree and checked IR of the comprehension language.

One set of frozen nodes serves both stages: the parser produces expressions
with `Name` for bare identifiers and `dtype=None`; semantic analysis resolves
each `Name` to `Index`, `Size`, `LetRef` or a 0-d `Read`, and fills `dtype`.
Locations (`loc`) never take part in equality.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import DType
from .source import Loc, loc_field


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Expr:
    pass


@dataclass(frozen=True)
class Const(Expr):
    """Integer or float literal. `value` is never negative (see Unary). A float
    literal's `value` is exact in its `dtype` once checked (literals.py);
    `text` is its spelling in the source, from which it was rounded (None
    where a pass built it), no part of equality."""
    value: int | float
    dtype: DType | None = None
    loc: Loc | None = loc_field()
    text: str | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Name(Expr):
    """An identifier not yet resolved (parser output only)."""
    name: str
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Index(Expr):
    """An index variable (spatial or reduction) of the enclosing statement."""
    name: str
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Size(Expr):
    """A size variable bound from the inputs' shapes."""
    name: str
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class LetRef(Expr):
    """A name bound by a `where x = expr` clause of the enclosing statement."""
    name: str
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Read(Expr):
    tensor: str
    args: tuple[Expr, ...]
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # '-' or '!'
    x: Expr
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # + - * / % < <= > >= == != && ||
    a: Expr
    b: Expr
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Select(Expr):
    """`cond ? a : b`; lazy: only the branch taken is evaluated."""
    cond: Expr
    a: Expr
    b: Expr
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Call(Expr):
    """A builtin function (exp, min, ...)."""
    fn: str
    args: tuple[Expr, ...]
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Cast(Expr):
    """A type-name call: `int32(x)`, `float(a <= b)`; `type_name` keeps the spelling."""
    type_name: str
    x: Expr
    dtype: DType | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Values(Expr):
    """The right-hand side of a tuple (monoid) reduction: the values it lists,
    `a(n), b(n) argmax=! X(n, d), d` (lang/monoids.py). Not a value itself."""
    items: tuple[Expr, ...]
    dtype: DType | None = None
    loc: Loc | None = loc_field()


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Read, Call)):
        return e.args
    if isinstance(e, Values):
        return e.items
    if isinstance(e, Unary):
        return (e.x,)
    if isinstance(e, Cast):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()


def walk(e: Expr):
    """Pre-order traversal of an expression tree."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


# ------------------------------------------------------------------ statements
@dataclass(frozen=True)
class RangeClause:
    """`where var in lo:hi` (hi exclusive)."""
    var: str
    lo: Expr
    hi: Expr
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class ExistsClause:
    """`where exists T(i, ...)`: informs range inference only."""
    read: Expr
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class LetClause:
    """`where x = expr`: names an expression for the statement's right-hand side."""
    name: str
    value: Expr
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class OrderedClause:
    """`where ordered t`: the statement runs point by point in increasing `t`
    (several clauses: lexicographically, in the order written), and a read of
    its own tensor at an earlier point sees what the statement stored there
    (an in-order recurrence; docs/language.md, "Ordered recurrences")."""
    var: str
    loc: Loc | None = loc_field()


WhereClause = RangeClause | ExistsClause | LetClause | OrderedClause


@dataclass(frozen=True)
class Stmt:
    """`tensor(indices) op rhs where ...`; op is one of = += *= max= min=, or
    a tuple reduction's `NAME=` (lang/monoids.py): then `tensors` lists the
    other components' tensors (written at the same indices) and `rhs` is a
    `Values`. A scatter (check_scatter.py) writes through data-dependent
    subscripts, `O(I(i), d) += X(i, d)`: then `subscripts` holds every
    left-hand-side subscript as an expression and `indices` is empty."""
    tensor: str
    indices: tuple[str, ...]
    op: str
    init: bool  # the `!` form: start from the reduction's identity
    rhs: Expr
    where: tuple[WhereClause, ...] = ()
    loc: Loc | None = loc_field()
    tensors: tuple[str, ...] = ()  # a tuple reduction's further components
    subscripts: tuple[Expr, ...] = ()  # a scatter's left-hand-side subscripts

    @property
    def rank(self) -> int:
        """The number of subscripts on the left-hand side."""
        return len(self.subscripts) if self.subscripts else len(self.indices)

    @property
    def reduce_op(self) -> str | None:
        """'+', '*', 'max', 'min', a monoid's name, or None for plain assignment."""
        return None if self.op == "=" else self.op[:-1]

    @property
    def monoid(self) -> str | None:
        """The monoid of a tuple reduction (lang/monoids.py), else None."""
        return self.op[:-1] if isinstance(self.rhs, Values) else None

    @property
    def all_tensors(self) -> tuple[str, ...]:
        return (self.tensor,) + self.tensors

    @property
    def ordered(self) -> tuple[str, ...]:
        """The indices of its `where ordered` clauses, outermost first."""
        return tuple(c.var for c in self.where if isinstance(c, OrderedClause))


@dataclass(frozen=True)
class Param:
    """A typed tensor declaration: `float(M, 256) A`. dims are Size or Const."""
    name: str
    type_name: str
    dims: tuple[Expr, ...]
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class OutParam:
    """An output: bare `C`, or typed `int32(M, N) C` (then type_name/dims set)."""
    name: str
    type_name: str | None = None
    dims: tuple[Expr, ...] | None = None
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Def:
    name: str
    inputs: tuple[Param, ...]
    outputs: tuple[OutParam, ...]
    stmts: tuple[Stmt, ...]
    loc: Loc | None = loc_field()


@dataclass(frozen=True)
class Module:
    """What the parser returns: the defs of one source text, unchecked."""
    defs: tuple[Def, ...]
