"""`Op`: a checked def — tensors with dtypes and shapes, statements with their
index ranges and accumulation types. This is what schedules and lowering see."""
from __future__ import annotations

from dataclasses import dataclass

from .ast import Def, Expr, LetClause, Stmt
from .dtypes import DType
from .printer import def_to_text, expr_to_text


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: DType
    shape: tuple[Expr, ...]  # size expressions
    is_input: bool
    declared_shape: tuple[Expr, ...] | None = None  # typed outputs: checked at run time

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = ", ".join(expr_to_text(d) for d in self.shape)
        return f"{self.dtype}({dims}) {self.name}" if self.shape else f"{self.dtype} {self.name}"


@dataclass(frozen=True)
class Range:
    var: str
    lo: Expr
    hi: Expr  # exclusive

    def __str__(self) -> str:
        return f"{self.var} in {expr_to_text(self.lo, 1)}:{expr_to_text(self.hi, 1)}"


@dataclass(frozen=True)
class Statement:
    """A checked statement. `stmt` is the resolved, typed syntax node.

    Semantics: for every point of `spatial` (in `ranges`), reduce the right-hand
    side over the `reduce` indices with `reduce_op`, starting from the identity
    when `stmt.init`, from the tensor's current value when it `continues` an
    earlier definition; compute in `acc_dtype`, store as the tensor's dtype.
    """
    stmt: Stmt
    spatial: tuple[str, ...]
    reduce: tuple[str, ...]
    ranges: tuple[Range, ...]  # spatial ranges first (LHS order), then reduction ranges
    value_dtype: DType  # type of the right-hand side
    acc_dtype: DType  # type the reduction (or continuation) accumulates in
    continues: bool  # reduction without `!`: starts from the tensor's earlier value
    # A tuple reduction (lang/monoids.py): each component's stored and accumulation type,
    # in the order of `tensors` (value_dtype/acc_dtype are the first value's, component's).
    component_dtypes: tuple[DType, ...] = ()
    component_accs: tuple[DType, ...] = ()
    # The identity fill that a scatter's `op=!` starts from (lang/check_scatter.py):
    # a statement of the op that is no statement of the def.
    scatter_fill: bool = False

    @property
    def ragged(self) -> dict[str, Range]:
        """The reduction indices whose range reads a tensor (lang/check_ragged.py)."""
        from .ast import Read, walk
        return {r.var: r for r in self.ranges
                if any(isinstance(x, Read) for e in (r.lo, r.hi) for x in walk(e))}

    @property
    def scatter(self) -> tuple[Expr, ...]:
        """A scatter's left-hand-side subscripts (check_scatter.py); () for other
        statements. Then `spatial` lists every index (each point writes) and
        `reduce` is empty."""
        return self.stmt.subscripts

    @property
    def tensor(self) -> str:
        return self.stmt.tensor

    @property
    def tensors(self) -> tuple[str, ...]:
        """Every tensor the statement writes (several for a tuple reduction)."""
        return self.stmt.all_tensors

    @property
    def monoid(self) -> str | None:
        return self.stmt.monoid

    @property
    def values(self) -> tuple[Expr, ...]:
        """A tuple reduction's values (its right-hand side lists them)."""
        return self.stmt.rhs.items

    @property
    def rhs(self) -> Expr:
        return self.stmt.rhs

    @property
    def reduce_op(self) -> str | None:
        """'+', '*', 'max', 'min', or None (plain assignment, or `!` with no reduction index)."""
        if self.stmt.op == "=":
            return None
        if not self.reduce and not self.continues:
            return None
        return self.stmt.reduce_op

    @property
    def ordered(self) -> tuple[str, ...]:
        """Its `where ordered` indices, outermost first (lang/check_ordered.py)."""
        return self.stmt.ordered

    @property
    def independent(self) -> tuple[str, ...]:
        """Of an ordered statement, the spatial indices a schedule may spread over
        threads: every read of its own tensor uses them unchanged (check_ordered.py)."""
        from .check_ordered import independent
        return independent(self.stmt, self.spatial, self.lets) if self.ordered else ()

    @property
    def lets(self) -> dict[str, Expr]:
        return {c.name: c.value for c in self.stmt.where if isinstance(c, LetClause)}

    def range_of(self, var: str) -> Range:
        for r in self.ranges:
            if r.var == var:
                return r
        raise KeyError(var)


@dataclass(frozen=True)
class Op:
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    statements: tuple[Statement, ...]
    size_vars: tuple[str, ...]  # in order of first appearance in the inputs
    definition: Def  # the resolved def (for printing)
    temporaries: tuple[Tensor, ...] = ()  # written but not outputs: computed, not returned
    # Writes range inference could not prove inside the tensor's shape (the shape comes
    # from its last statement): signature.WriteCheck, evaluated at every call.
    write_checks: tuple = ()

    @property
    def tensors(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.inputs + self.outputs + self.temporaries}

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def to_text(self, notes: bool = True) -> str:
        """TC text of the op; with `notes`, comments show inferred types and ranges."""
        if not notes:
            return def_to_text(self.definition)
        by_stmt = {}
        for i, st in enumerate(st for st in self.statements if not st.scatter_fill):
            t = ", ".join(str(self.tensor(n)) for n in st.tensors)
            accs = ", ".join(str(a) for a in st.component_accs) or str(st.acc_dtype)
            red = f" reduce {', '.join(st.reduce)} in {accs}" if st.reduce else ""
            rng = ", ".join(str(r) for r in st.ranges)
            by_stmt[i] = f"{t}{red}" + (f"; {rng}" if rng else "")
        return def_to_text(self.definition, by_stmt)

    def __str__(self) -> str:
        return self.to_text()
