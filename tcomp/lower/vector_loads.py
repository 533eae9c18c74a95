"""Pass: vector loads for the pieces a reduction reads.

Pre: unrolled loops not yet expanded (runs before `unroll`); one subscript
per dimension.
Post: an unrolled loop `for v in 0:w` that *accumulates* (its stores'
subscripts do not vary with v: a reduction's piece loop, which cannot be
vectorized since its lanes add into one value) and reads a global or shared
buffer B at `B[..., e + v]` (only the last subscript varies with v, with
coefficient 1) first copies those w elements into a local array with a
vectorized loop, under the body's guard, and the body reads the array:

    for v in 0:w @unroll: if c(v): acc = f(acc, B[i, e + v])
    -> alloc local B_piece[w]
       for v' in 0:w @vectorize: if c(v'): B_piece[v'] = B[i, e + v']
       for v in 0:w @unroll: if c(v): acc = f(acc, B_piece[v])

The `vectorize` pass then reads the w elements as one 4-, 8- or 16-byte
vector where they are aligned and the guard holds for all lanes or none (a
row's piece in shared memory: one LDS.128 instead of eight 16-bit loads, each
four-way bank conflicted), lane by lane otherwise; either way each element is
read once, where and when the body read it, so values do not change. Left
as it is: a body that writes B, holds loops, allocations, barriers or calls
with effects, reads B in a guard, a subscript or only under a select's branch
(a zero-filled edge), or whose element size times w is not 4, 8 or 16 bytes.
"""
from __future__ import annotations

import dataclasses

from . import intrinsics, ir
from .rewriter import Rewriter, substitute, walk_stmts
from .simplify import Simplifier
from .vectorize import VECTOR_BYTES


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    dtypes = {b.name: b.dtype for b in program.buffers}
    registers = set()
    names = set(dtypes)
    for x in walk_stmts(k.body):
        if isinstance(x, ir.Alloc):
            dtypes[x.buffer.name] = x.buffer.dtype
            names.add(x.buffer.name)
            if x.buffer.scope in ("local", "fragment"):
                registers.add(x.buffer.name)
        b = ir.binding(x)
        if b is not None:
            names.add(b[0])
    return dataclasses.replace(k, body=_VectorLoads(dtypes, registers, names).stmt(k.body))


class _VectorLoads(Rewriter):
    def __init__(self, dtypes, registers, names):
        self.dtypes, self.registers, self.names = dtypes, registers, names
        self.simp = Simplifier()  # linear forms only

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}{i}", i + 1
        self.names.add(name)
        return name

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        s = self.generic_stmt(s)
        if not (s.kind == "unroll" and isinstance(s.extent, ir.Imm) and isinstance(s.lo, ir.Imm)
                and s.lo.value == 0 and int(s.extent.value) >= 2):
            return s
        guard, stores = _shape(s.body)
        if stores is None or any(s.var in ir.free_vars(i) for st in stores for i in st.indices):
            return s
        w = int(s.extent.value)
        written = {st.buffer for st in stores}
        pieces = []
        for ld in _loads(stores):
            if (ld in pieces or ld.buffer in self.registers or ld.buffer in written
                    or ld.buffer not in self.dtypes or not self._piece(ld, s.var, w)):
                continue
            pieces.append(ld)
        if guard is not None and any(isinstance(x, ir.Load) and x in pieces
                                     for x in ir.walk_expr(guard)):
            return s
        if not pieces:
            return s
        copies, allocs, swap = [], [], {}
        lane = self.fresh(f"{s.var}_piece")
        for ld in pieces:
            buf = ir.Buffer(self.fresh(f"{ld.buffer}_piece"), ld.dtype, (ir.const(w),), "local")
            allocs.append(buf)
            swap[ld] = ir.Load(buf.name, (ir.Var(s.var),), ld.dtype)
            copy = ir.Store(buf.name, (ir.Var(lane),), substitute(ld, {s.var: ir.Var(lane)}))
            if guard is not None:
                copy = ir.If(substitute(guard, {s.var: ir.Var(lane)}), copy)
            copies.append(ir.For(lane, ir.const(0), s.extent, "vectorize", copy))
        out = ir.seq(*copies, dataclasses.replace(s, body=_Swap(swap).stmt(s.body)))
        for buf in reversed(allocs):
            out = ir.Alloc(buf, out)
        return out

    def _piece(self, ld: ir.Load, var: str, w: int) -> bool:
        """Whether `ld` reads w consecutive elements over the lanes, of a total
        size a vector moves: only its last subscript varies, as `e + var`."""
        if not ld.indices or w * ld.dtype.numpy.itemsize not in VECTOR_BYTES:
            return False
        *outer, last = ld.indices
        if any(var in ir.free_vars(i) for i in outer):
            return False
        lin = self.simp.linear(last)
        key = ir.Var(var)
        return lin.terms.get(key) == 1 and not any(
            var in ir.free_vars(t) for t in lin.terms if t != key)


def _shape(body: ir.Stmt):
    """(guard or None, the stores) of a body `[if c:] store; store; ...`, else
    (None, None)."""
    guard = None
    if isinstance(body, ir.If):
        if body.else_ is not None:
            return None, None
        guard, body = body.cond, body.then
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    if not all(isinstance(x, ir.Store) for x in stmts):
        return None, None
    for st in stmts:
        for x in ir.walk_expr(st.value):
            if isinstance(x, ir.Call) and x.fn in intrinsics.REGISTRY:
                return None, None
    return guard, list(stmts)


def _loads(stores):
    """The loads of the stores' values outside a select's branches (a
    branch's load runs only where its condition holds)."""
    out = []

    def visit(e):
        if isinstance(e, ir.Load):
            out.append(e)
        if isinstance(e, ir.Select):
            visit(e.cond)
            return
        for c in ir.children(e):
            visit(c)
    for st in stores:
        visit(st.value)
    return out


class _Swap(Rewriter):
    def __init__(self, swap):
        self.swap = swap

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        got = self.swap.get(e)
        return got if got is not None else self.generic_expr(e)
