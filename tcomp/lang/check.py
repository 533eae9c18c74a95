"""Semantic analysis: a parsed `Def` -> a checked `Op`.

Resolves names, checks every rule of the language with a precise message at
the offending node, infers types (see dtypes.py) and index ranges (see
ranges.py), and derives each output's dtype and shape. Rules enforced here:

  * inputs are never written; every declared output is written; a tensor
    written but not declared is a temporary (a tcomp extension of TC); names
    are unique;
  * an output may be read only after a statement wrote it; a statement may
    read the tensor it writes (an update such as `O(i) = O(i) / N` reads the
    value from before the statement); no statement may write a tensor after
    another statement read it (so reads see a tensor's final value);
  * `=` may not have reduction indices; a reduction without `!` needs an
    earlier definition of its tensor; statements writing one tensor agree on
    its rank;
  * subscripts are integers; ternary conditions and logic operands are bool
    or integer; typed outputs accept a statement's type only where no
    information is lost (cast explicitly otherwise);
  * a tensor has its right-hand side's type unless declared (or defined
    earlier); a reduction accumulates in the tensor's type, float16/bfloat16
    in float32 (rounded once, on store); `+=`/`*=` on a bool tensor is an
    error (`max=`/`min=` are logical or/and);
  * a float literal takes the float type of what it meets (literals.py: the
    operands of its operator, ternary or builtin, a cast, the tensor it is
    stored into), float32 alone;
  * a tensor's shape comes from its last statement; an earlier statement
    writing beyond it is an error when provable, else an `Op.write_checks`
    entry checked at every call (signature.py).
"""
from __future__ import annotations

import dataclasses

import sympy

from ..errors import LangError
from . import check_ordered, check_ragged, check_scatter, check_tuples, dtypes, literals
from .ast import (Binary, Call, Const, Def, ExistsClause, Expr, Index, LetClause, Name,
                  RangeClause, Read, Size, Stmt, Unary, walk)
from .dtypes import DType
from .op import Op, Range, Statement, Tensor
from .printer import expr_to_text
from .ranges import infer_ranges
from .signature import WriteCheck
from .symbolic import NotSymbolic, from_sympy, provably_le, to_sympy
from .check_exprs import ExprChecks



def check_def(d: Def) -> Op:
    return _Checker(d).run()


class _Checker(ExprChecks):
    def __init__(self, d: Def):
        self.d = d
        self.sizes: list[str] = []
        self.inputs: dict[str, tuple[DType, tuple[Expr, ...]]] = {}
        self.declared: dict[str, object] = {}  # output (or temporary) name -> OutParam
        self.temporaries: list[str] = []

    # ---------------------------------------------------------------- header
    def run(self) -> Op:
        d = self.d
        seen: dict[str, object] = {}
        for p in d.inputs:
            if p.name in seen:
                raise LangError(f"tensor '{p.name}' is declared twice", p.loc)
            seen[p.name] = p
            dims = []
            for dim in p.dims:
                if isinstance(dim, Name):
                    if dim.name not in self.sizes:
                        self.sizes.append(dim.name)
                    dims.append(Size(dim.name, dtypes.int32, loc=dim.loc))
                else:
                    dims.append(dataclasses.replace(dim, dtype=dtypes.int32))
            self.inputs[p.name] = (dtypes.BY_NAME[p.type_name], tuple(dims))
        for o in d.outputs:
            if o.name in seen:
                what = "an input" if o.name in self.inputs else "an output"
                raise LangError(f"output '{o.name}' is already declared as {what}", o.loc)
            seen[o.name] = o
            self.declared[o.name] = o
        for name in self.sizes:
            if name in seen:
                raise LangError(f"'{name}' is both a size variable and a tensor name", seen[name].loc)
        out_dims = {}
        for o in d.outputs:
            if o.dims is not None:
                out_dims[o.name] = tuple(self.size_expr(x, "a typed output's shape") for x in o.dims)

        # tensor name -> (dtype, SymPy shape, rank) of what has been written so far
        self.written: dict[str, dict] = {}
        self.read_at: dict[str, Stmt] = {}
        stmts, checked = [], []
        for s in d.stmts:
            self.scatter_fill = None
            st, stmt = self.statement(s)
            stmts.append(stmt)
            if self.scatter_fill is not None:  # a scatter's `op=!` (check_scatter.py)
                checked.append(self.scatter_fill)
            checked.append(st)
        for o in d.outputs:
            if o.name not in self.written:
                raise LangError(f"output '{o.name}' is declared but never written", o.loc)
        write_checks = self.write_bounds(checked)

        inputs = tuple(Tensor(p.name, self.inputs[p.name][0], self.inputs[p.name][1], True)
                       for p in d.inputs)
        outputs = []
        for o in d.outputs:
            w = self.written[o.name]
            shape = tuple(from_sympy(x) for x in w["shape"])
            outputs.append(Tensor(o.name, w["dtype"], shape, False, out_dims.get(o.name)))
        temps = tuple(Tensor(n, self.written[n]["dtype"],
                             tuple(from_sympy(x) for x in self.written[n]["shape"]), False)
                      for n in self.temporaries)
        definition = dataclasses.replace(d, stmts=tuple(stmts))
        return Op(d.name, inputs, tuple(outputs), tuple(checked), tuple(self.sizes), definition,
                  temps, write_checks)

    def write_bounds(self, checked: list[Statement]) -> tuple[WriteCheck, ...]:
        """A tensor's shape comes from its last statement; an earlier statement may
        not write beyond it. Provably beyond (for every size): an error here, at that
        statement; provably inside: nothing; undecided: a check at every call."""
        last = {st.tensor: st for st in checked}
        checks = []
        for st in checked:
            fin = last[st.tensor]
            if st is fin or st.scatter:
                continue
            shape = self.written[st.tensor]["shape"]
            for dim, (v, extent) in enumerate(zip(st.spatial, shape)):
                r = st.range_of(v)
                lo, hi = to_sympy(r.lo), to_sympy(r.hi)
                if provably_le(hi, lo):
                    continue  # an empty range writes nothing
                inside = provably_le(hi, extent)
                if inside:
                    continue
                ext = from_sympy(extent)
                line, last_line = st.stmt.loc.line if st.stmt.loc else 0, \
                    fin.stmt.loc.line if fin.stmt.loc else 0
                if inside is False:
                    lo_t, hi_t, ext_t = expr_to_text(r.lo), expr_to_text(r.hi), expr_to_text(ext)
                    raise LangError(
                        f"this statement writes '{st.tensor}' beyond its shape: {v} runs over "
                        f"{lo_t}:{hi_t} here, but '{st.tensor}' has extent {ext_t} in dimension "
                        f"{dim}, set by the last statement that writes it (line {last_line}); "
                        f"restrict this statement with 'where {v} in {lo_t}:{ext_t}', or let the "
                        f"last statement cover {lo_t}:{hi_t}", st.stmt.loc)
                checks.append(WriteCheck(st.tensor, dim, v, r.lo, r.hi, ext, line, last_line))
        return tuple(checks)

    def size_expr(self, e: Expr, what: str) -> Expr:
        """Resolve an expression that may use only size variables and integers."""
        for x in walk(e):
            if isinstance(x, Name) and x.name not in self.sizes:
                raise LangError(f"undefined size variable '{x.name}' in {what}", x.loc)
            if isinstance(x, Const) and isinstance(x.value, float):
                raise LangError(f"{what} must be an integer expression", x.loc)
            if not isinstance(x, (Name, Const, Binary, Unary)) or (
                    isinstance(x, Binary) and x.op not in "+-*/") or (
                    isinstance(x, Unary) and x.op != "-"):
                if not (isinstance(x, Call) and x.fn in ("min", "max") and len(x.args) == 2):
                    raise LangError(f"{what} may use only size variables, integers, + - * / "
                                    f"and min/max", getattr(x, "loc", None))
        resolved = self._resolve_sizes(e)
        for x in walk(resolved):
            if isinstance(x, Binary) and x.op == "/" and to_sympy(x.b) == 0:
                raise LangError(f"division by zero in {what}", x.loc)
        return resolved

    def _resolve_sizes(self, e: Expr) -> Expr:
        if isinstance(e, Name):
            return Size(e.name, dtypes.int32, loc=e.loc)
        if isinstance(e, Const):
            return dataclasses.replace(e, dtype=dtypes.int32)
        if isinstance(e, Unary):
            return dataclasses.replace(e, x=self._resolve_sizes(e.x), dtype=dtypes.int32)
        if isinstance(e, Binary):
            return dataclasses.replace(e, a=self._resolve_sizes(e.a), b=self._resolve_sizes(e.b),
                                       dtype=dtypes.int32)
        if isinstance(e, Call):
            return dataclasses.replace(e, args=tuple(self._resolve_sizes(a) for a in e.args),
                                       dtype=dtypes.int32)
        raise AssertionError(e)

    def rank(self, name: str) -> int | None:
        if name in self.inputs:
            return len(self.inputs[name][1])
        if name in self.written:
            return len(self.written[name]["shape"])
        return None

    # ------------------------------------------------------------- statements
    def statement(self, s: Stmt) -> tuple[Statement, Stmt]:
        for name in s.all_tensors:
            self.target(name, s)
        name = s.tensor
        decl, prior = self.declared[name], self.written.get(name)
        continues = s.op != "=" and not s.init
        if continues and prior is None:
            raise LangError(f"reduction '{s.op}' continues an earlier definition of '{name}', but "
                            f"there is none; write '{s.op}!' to start from the identity", s.loc)
        return self.body(s, name, decl, prior, continues)

    def target(self, name: str, s: Stmt):
        """Checks of tensor `name` written by `s`: (its declaration, its earlier definition)."""
        if name in self.inputs:
            raise LangError(f"input '{name}' cannot be written", s.loc)
        if name not in self.declared:
            # tcomp extension: a tensor written but not listed as an output is a
            # temporary of the def (computed, readable, not returned).
            if name in self.sizes:
                raise LangError(f"'{name}' is a size variable and cannot be written", s.loc)
            from .ast import OutParam
            self.declared[name] = OutParam(name, loc=s.loc)
            self.temporaries.append(name)
        if name in self.read_at:
            reader = self.read_at[name]
            shared = [v for v in s.ordered if v in reader.ordered]
            why = ""
            if shared:  # (several statements in one ordered loop: docs/language.md)
                why = (f". Both statements are ordered over '{shared[0]}', but statements do "
                       f"not share an ordered loop: each runs its whole loop before the next "
                       f"(several statements in one ordered loop are not supported yet). Write "
                       f"the dependence inside one statement (a reduction guarded by the "
                       f"triangle, as trisolv and lu), or keep each step's values in a tensor "
                       f"indexed by the ordered index (as floyd-warshall's P(k, i, j))")
            raise LangError(f"'{name}' is written here after a statement read it (line "
                            f"{reader.loc.line}); reads must see a tensor's final "
                            f"value{why}", s.loc)
        for i, v in enumerate(s.indices):
            if v in s.indices[:i]:
                raise LangError(f"index '{v}' appears twice on the left-hand side", s.loc)
            if v in self.sizes:
                raise LangError(f"'{v}' is a size variable and cannot be used as an index", s.loc)
            if v in self.inputs or v in self.declared:
                raise LangError(f"'{v}' is a tensor and cannot be used as an index", s.loc)
        decl = self.declared[name]
        if decl.dims is not None and len(decl.dims) != s.rank:
            n, k = s.rank, len(decl.dims)
            raise LangError(f"'{name}' is written with {n} ind{'ex' if n == 1 else 'ices'} here "
                            f"but declared with {k} dimension{'s' if k != 1 else ''}", s.loc)
        prior = self.written.get(name)
        if prior is not None and len(prior["shape"]) != s.rank:
            raise LangError(f"'{name}' is written with {s.rank} indices here but with "
                            f"{len(prior['shape'])} by an earlier statement", s.loc)
        check_tuples.target(self, name, s, prior)
        return decl, prior

    def body(self, s: Stmt, name: str, decl, prior, continues: bool):
        # Lets first (they may use earlier lets), then the right-hand side.
        self.lets: dict[str, Expr] = {}
        self.let_depths: dict[str, tuple[int, int]] = {}
        self.stmt_indices: list[str] = list(s.indices)
        self.current = s
        where = []
        for c in s.where:
            if isinstance(c, LetClause):
                if c.name in self.lets or c.name in s.indices or c.name in self.sizes or \
                        self.rank(c.name) is not None or c.name in self.declared:
                    raise LangError(f"where-binding '{c.name}' shadows another name", c.loc)
                value = self.expr(c.value)
                if c.name in self.stmt_indices:  # read (as an index) by this or an earlier binding
                    raise LangError(f"where-binding '{c.name}' is used before it is bound; a "
                                    f"binding may use only the bindings before it", c.loc)
                self.lets[c.name] = value
                self.let_depths[c.name] = self.check_depth(value, c.loc)
                where.append(dataclasses.replace(c, value=value))
            else:
                where.append(c)
        subs = check_scatter.subscripts(self, s)
        rhs = self.expr(s.rhs)
        self.check_depth(rhs, s.rhs.loc)
        rhs_indices = list(self.stmt_indices)
        resolved = []
        for c in where:
            if isinstance(c, RangeClause):
                if c.var not in self.stmt_indices:
                    raise LangError(f"where clause constrains '{c.var}', which is not an index "
                                    f"of this statement", c.loc)
                if any(isinstance(x, RangeClause) and x.var == c.var for x in resolved):
                    raise LangError(f"index '{c.var}' has two range clauses", c.loc)
                if check_ragged.is_ragged(c):  # bounds read from a tensor (check_ragged.py)
                    c = check_ragged.clause(self, c, s.indices)
                else:
                    c = dataclasses.replace(c, lo=self.size_expr(c.lo, "a range bound"),
                                            hi=self.size_expr(c.hi, "a range bound"))
            elif isinstance(c, ExistsClause):
                read = self.expr(c.read)
                if not isinstance(read, Read):
                    raise LangError("'where exists' needs a tensor read", c.loc)
                self.check_depth(read, c.loc)
                c = dataclasses.replace(c, read=read)
                if len(self.stmt_indices) != len(rhs_indices):
                    v = self.stmt_indices[len(rhs_indices)]
                    raise LangError(f"'where exists' uses index '{v}', which the statement does "
                                    f"not use", c.loc)
            resolved.append(c)
        check_ragged.check_one(resolved)
        spatial = tuple(s.indices) if not subs else tuple(self.stmt_indices)  # a scatter's
        reduce = tuple(v for v in self.stmt_indices if v not in spatial)  # every point writes
        if s.op == "=" and reduce:
            uses = [c.value for c in where if isinstance(c, LetClause)] + [rhs] + \
                [c.read for c in resolved if isinstance(c, ExistsClause)]
            loc = next((x.loc for e in uses for x in walk(e)
                        if isinstance(x, Index) and x.name == reduce[0]), s.loc)
            raise LangError(f"index '{reduce[0]}' appears only on the right-hand side of '=': "
                            f"it would be a reduction index; use a reduction such as '+=!' (or "
                            f"did you mean a size variable?)", loc)
        stmt = dataclasses.replace(s, rhs=rhs, where=tuple(resolved), subscripts=subs)
        check_ordered.check(stmt, spatial, reduce, self.lets)
        if subs:
            check_scatter.check_reads(s, stmt, self.lets)
        if s.monoid is not None:
            return check_tuples.finish(self, s, stmt, spatial, reduce, resolved, where)

        # Types.
        # Types, as in TC and cuBLAS: the tensor has the right-hand side's type unless it
        # is declared (or was defined earlier); a reduction accumulates in the tensor's
        # type (the tensor is the accumulator), except that float16/bfloat16 accumulate
        # in float32 and are rounded once, when stored.
        value = rhs.dtype
        reducing = s.reduce_op is not None and bool(reduce or continues or subs)
        if decl.type_name is not None:
            tdtype, origin = dtypes.BY_NAME[decl.type_name], "declared"
        elif prior is not None:
            tdtype, origin = prior["dtype"], f"from its first definition, line {prior['line']}"
        else:
            tdtype, origin = value, ""
        if tdtype.is_float and tdtype != value and literals.is_weak(rhs, self.lets):
            # literals alone meet the tensor's type: `O(i) = 0.2` into a double O
            rhs = literals.retype(rhs, tdtype, self.lets)
            stmt, value = dataclasses.replace(stmt, rhs=rhs), rhs.dtype
        if not dtypes.can_store(value, tdtype):
            raise LangError(f"type mismatch: the statement computes {value} but '{name}' is "
                            f"{tdtype} ({origin}); cast explicitly, e.g. {tdtype}(...)", s.loc)
        if reducing and tdtype.is_bool and s.reduce_op in ("+", "*"):
            bang = "!" if s.init else ""
            what, fix = ("or", "max") if s.reduce_op == "+" else ("and", "min")
            raise LangError(f"'{s.op}{bang}' on bool values of '{name}' is ambiguous: write "
                            f"'{fix}={bang}' for a logical {what}, or accumulate in an integer "
                            f"(cast the right-hand side, e.g. int32(...), or declare '{name}' "
                            f"as int32)", s.loc)
        if reducing:
            acc = tdtype.compute
        else:
            acc = value.compute if not value.is_bool else value

        if subs:
            shape = check_scatter.shape(self, s, decl, prior)
            ranges, _ = self.ranges(s, stmt, spatial, reduce, resolved, name, {"shape": shape})
            if s.init:
                self.scatter_fill = check_scatter.fill_statement(s, tdtype, shape)
        else:
            ranges, shape = self.ranges(s, stmt, spatial, reduce, resolved, name,
                                        prior if continues else None)
        self.written[name] = {"dtype": tdtype, "shape": shape,
                              "line": prior["line"] if prior else s.loc.line if s.loc else 0}
        read_exprs = [rhs] + list(subs) + [c.read for c in resolved if isinstance(c, ExistsClause)] + \
            [c.value for c in where if isinstance(c, LetClause)]
        for e in read_exprs:
            for x in walk(e):
                if isinstance(x, Read) and x.tensor in self.declared and x.tensor != name:
                    self.read_at.setdefault(x.tensor, s)
        return Statement(stmt, spatial, reduce, ranges, value, acc, continues or reducing and
                         bool(subs)), stmt

    def ranges(self, s: Stmt, stmt: Stmt, spatial, reduce, resolved, name: str, lhs_prior):
        """(the statement's ranges, the shape it writes): range inference (ranges.py)."""
        shapes = {t: v[1] for t, v in self.inputs.items()}
        sym_shapes = {t: tuple(to_sympy(x) for x in dims) for t, dims in shapes.items()}
        sym_shapes.update({t: w["shape"] for t, w in self.written.items()})
        # (a ragged index: a placeholder range, its own bounds restored below)
        fixed = {c.var: (to_sympy(c.lo), to_sympy(c.hi)) if not check_ragged.is_ragged(c)
                 else (sympy.Integer(0), sympy.Integer(1)) for c in resolved if isinstance(c, RangeClause)}
        for c in resolved:
            if isinstance(c, RangeClause) and c.var in spatial and fixed[c.var][0].is_negative:
                raise LangError(f"the range of '{c.var}' starts below 0, so '{name}' would be "
                                f"written at a negative position", c.lo.loc)
        lhs_shape = lhs_prior["shape"] if lhs_prior is not None else None
        known = infer_ranges(stmt, spatial, reduce, sym_shapes,
                             lhs_shape, fixed)
        ranges = check_ragged.ranges(tuple(Range(v, _expr(known[v][0], s), _expr(known[v][1], s))
                                           for v in spatial + reduce), resolved)
        shape = tuple(known[v][1] for v in spatial)
        return ranges, shape

    # ------------------------------------------------------------ expressions


def _expr(s, stmt: Stmt) -> Expr:
    try:
        return from_sympy(s)
    except NotSymbolic:
        raise LangError(f"cannot express the inferred range {s} as a size expression; add a "
                        f"where clause", stmt.loc) from None
