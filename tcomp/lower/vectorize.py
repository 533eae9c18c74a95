"""Pass: vector accesses of vectorized loops.

Pre: storage flattened (one subscript per access); vectorized loops innermost
with a constant extent (the `unroll` pass checked them).
Post: a vectorized loop of 2 or more lanes whose body is one unguarded
store, starting at 0, carries `For.vector` (ir.VectorAccess) when its
accesses can move 4, 8 or 16 bytes of float32, int32, float16 or bfloat16 at
a time (4 bytes: two 16-bit lanes): every load of the body whose offsets are
`base + var` with `base` a multiple of the lane count (its linear form's
constant and every term, a term's structural factor counted: divisibility.py)
is read as one vector
(each of its own type's size when the store is a vector too, so a float32
bias read as a float2 feeds a bfloat16x2 store; all of one size when the
store is per lane, which may take another type, so 8 bfloat16 loads widen
into float32 registers); the store is written as one vector when it is
contiguous, aligned and of a vector type and size, else lane by lane — but a
vector store needs every load that varies with the loop to be a vector too
(else the loop gets no vector accesses).
A guard around the body that holds for all lanes or none (a bound check
`base + var < B` with `base` and `B` multiples of the lane count, or a
condition not on the loop variable) is moved outside the loop first:
`for v: if c(v): S` becomes `if c(0): for v: S`, which vectorizes. Local
arrays and fragments are never accessed as vectors: with the loop unrolled
their subscripts are constants and they stay in registers (a vector access
would take their address and move them to local memory).
A loop with no vector access keeps `vector=None` (targets emit it unrolled).
Nothing else changes: the loop's meaning is its lanes', in order.
"""
from __future__ import annotations

import dataclasses

from . import ir
from .divisibility import multiple_of
from .printer import expr
from .rewriter import Rewriter, substitute, walk_stmts
from .simplify import Linear, Simplifier

VECTOR_BYTES = (4, 8, 16)
VECTOR_TYPES = ("float32", "int32", "float16", "bfloat16")


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    dtypes = {b.name: b.dtype for b in program.buffers}
    local = set()
    for x in walk_stmts(k.body):
        if isinstance(x, ir.Alloc):
            dtypes.setdefault(x.buffer.name, x.buffer.dtype)
            if x.buffer.scope in ("local", "fragment"):  # registers
                local.add(x.buffer.name)
    v = _Vectorize(dtypes, local)
    body = v.stmt(k.body)
    counts = {}  # one remark per reason and loop: unrolled copies of a loop say it once
    for r in v.remarks:
        counts[r] = counts.get(r, 0) + 1
    said = tuple(r if n == 1 else f"{r} ({n} copies)" for r, n in counts.items())
    return dataclasses.replace(k, body=body, remarks=k.remarks + said)


def vector_access(loop: ir.For, dtypes: dict, local: set) -> ir.VectorAccess | None:
    """What this pass decides for one vectorized loop whose subscripts are
    flat: its vector accesses, or None. `dtypes`: buffer name -> DType (every
    buffer the loop touches); `local`: the names of local arrays. The schedule
    search asks this of loops it flattens itself, before unrolling. A
    lane-uniform guard is moved out first, as the pass does."""
    v = _Vectorize(dtypes, local)
    return v.decide(v.unguarded(loop)[1])


class _Vectorize(Rewriter):
    def __init__(self, dtypes: dict, local: set):
        self.dtypes, self.local = dtypes, local
        self.simp = Simplifier()  # linear forms only (no ranges needed)
        self.remarks: list[str] = []  # one per vectorized loop left lane by lane
        self.why: str | None = None  # why `decide` returned None, for the remark

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        if s.kind != "vectorize":
            return self.generic_stmt(s)
        guard, s = self.unguarded(s)
        self.why = None
        vector = self.decide(s)
        if vector is not None:
            s = dataclasses.replace(s, vector=vector)
        else:
            self.remarks.append(f"vectorize: loop '{s.var}' runs lane by lane (no vector "
                                f"access): {self.why or 'nothing it reads or writes is a vector'}")
        return s if guard is None else ir.If(guard, s)  # (the same meaning, vector or not)

    def unguarded(self, s: ir.For) -> tuple[ir.Expr | None, ir.For]:
        """(guard, loop): a guard around the loop's one store that holds for all
        lanes or none, taken out (its value at lane 0), and the loop without
        it; (None, s) when there is none."""
        if (isinstance(s.body, ir.If) and s.body.else_ is None
                and isinstance(s.body.then, ir.Store) and isinstance(s.extent, ir.Imm)
                and self.lane_uniform(s.body.cond, s.var, int(s.extent.value))):
            guard = substitute(s.body.cond, {s.var: ir.const(0)})
            return guard, dataclasses.replace(s, body=s.body.then)
        return None, s

    def lane_uniform(self, cond: ir.Expr, var: str, n: int) -> bool:
        """Whether `cond` has one value for all lanes var in 0:n: each
        conjunct does not use `var`, or is `var + rest < 0` / `>= 0` (as
        a < b, a >= b, ...) with every coefficient of `rest` and its constant
        multiples of n (then rest <= -n or rest >= 0, whatever the lane)."""
        if isinstance(cond, ir.Bin) and cond.op == "&&":
            return self.lane_uniform(cond.a, var, n) and self.lane_uniform(cond.b, var, n)
        if var not in ir.free_vars(cond):
            return True
        if not (isinstance(cond, ir.Bin) and cond.op in ("<", ">=", ">", "<=")
                and cond.a.dtype == ir.int32 and cond.b.dtype == ir.int32):
            return False
        a, b = (cond.a, cond.b) if cond.op in ("<", ">=") else (cond.b, cond.a)
        diff = self.simp.linear(a).add(self.simp.linear(b), -1)
        key = ir.Var(var)
        if diff.terms.get(key) != 1:
            return False
        rest = {t: c for t, c in diff.terms.items() if t != key}
        return (not any(var in ir.free_vars(t) for t in rest) and diff.const % n == 0
                and all(multiple_of(c, t, n) for t, c in rest.items()))

    def no(self, why: str) -> None:
        self.why = why

    def decide(self, s: ir.For) -> ir.VectorAccess | None:
        if isinstance(s.body, ir.If) and isinstance(s.body.then, ir.Store):
            return self.no(f"its guard ({expr(s.body.cond)}) is not the same for every lane "
                           f"(a bound that is not a multiple of the lanes at these sizes, or "
                           f"symbolic)")
        if not isinstance(s.extent, ir.Imm) or not isinstance(s.body, ir.Store):
            return self.no("its body is not one store")
        if not (isinstance(s.lo, ir.Imm) and s.lo.value == 0):
            return self.no("it does not start at 0")
        n = int(s.extent.value)
        if n < 2:
            return self.no("it has one lane")  # (a scalar access)
        st = s.body
        dt = self.dtypes.get(st.buffer)
        if dt is None:
            return self.no(f"the type of '{st.buffer}' is not known here")
        nbytes = n * dt.numpy.itemsize
        sbase = None
        if st.buffer not in self.local:
            if nbytes not in VECTOR_BYTES or dt.name not in VECTOR_TYPES:
                return self.no(f"{n} lanes of {dt.name} are {nbytes} bytes: a vector is 4, 8 or "
                               f"16 bytes of {', '.join(VECTOR_TYPES)}")
            sbase = self.contiguous(st.indices[0], s.var, n)
        else:
            nbytes = None  # a per-lane register store: the loads set the size
        loads = [x for x in ir.walk_expr(st.value) if isinstance(x, ir.Load)
                 and s.var in ir.free_vars(x.indices[0]) and x.buffer not in self.local]
        # a load in a branch of a select runs only where its condition holds (a zero-
        # filled tile's edge): a vector load would read the whole vector regardless
        conditional = {x for sel in ir.walk_expr(st.value) if isinstance(sel, ir.Select)
                       for branch in (sel.a, sel.b) for x in ir.walk_expr(branch)}
        vec_loads = {}
        for ld in loads:
            base = None
            ldt = self.dtypes.get(ld.buffer)
            size = None if ldt is None else n * ldt.numpy.itemsize
            if (ldt is not None and ld not in conditional and ldt.name in VECTOR_TYPES
                    and size in VECTOR_BYTES and (sbase is not None or nbytes is None
                                                  or size == nbytes)):
                base = self.contiguous(ld.indices[0], s.var, n)
            if base is None:
                if sbase is not None:  # a vector store needs every varying load as a vector
                    return self.no(f"the load of '{ld.buffer}' is not {n} contiguous elements "
                                   f"at a multiple of {n} (unaligned or symbolic offsets, another "
                                   f"type or a conditional read)")
                continue
            vec_loads[ld] = base
            if sbase is None:
                nbytes = size
        if sbase is None and not vec_loads:
            return self.no(f"neither the store to '{st.buffer}' nor a load is {n} contiguous "
                           f"elements at a multiple of {n} (unaligned or symbolic offsets)")
        return ir.VectorAccess(nbytes, tuple(vec_loads), tuple(vec_loads.values()), sbase)

    def contiguous(self, index: ir.Expr, var: str, width: int):
        """The base of `index` when it is `base + var` with `base` a multiple of
        `width` elements, else None."""
        lin = self.simp.linear(index)
        key = ir.Var(var)
        if lin.terms.get(key) != 1:
            return None
        rest = Linear({a: c for a, c in lin.terms.items() if a != key}, lin.const)
        if any(ir.free_vars(a) & {var} for a in rest.terms):
            return None
        if rest.const % width or not all(multiple_of(c, a, width)
                                         for a, c in rest.terms.items()):
            return None
        return rest.to_expr()
