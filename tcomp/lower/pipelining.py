"""Software pipelining (`pipeline`): the shared copies computed at a loop are
double-buffered through registers, so the copy of step k+1 overlaps the
compute of step k. The copy nests are expanded (`_unroll_serial`) and split
into loads into register slots and stores of those slots (`_split_copy`).
Fragments (tensor-core operands) computed at a loop are multi-buffered in
registers instead (`fragment_loop`): the ldmatrix of step k+1 is issued
before the mma of step k."""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from . import ir
from .construct import ident
from .loops import for_loop, placed
from .printer import expr as show
from .rewriter import Rewriter, substitute
from .simplify import simplify_expr


def ring_loop(b, stage, st, i, info, inner, pre, attached, domains):
    """stages >= 3: the shared copies at leaf i write rings of `stages` buffers
    (buffer k % stages at iteration k) allocated around the loop; the loop is
    marked with its depth and software_pipeline.py moves the copies ahead."""
    leaf = st.leaves[i]
    var, ext = info.loopvar[leaf], info.ext[leaf]
    n = st.pipeline[leaf]
    shared = _shared_only(b, stage, st, leaf, attached)
    allocs, copies = [], []
    for p in shared:
        a, prod = b.attach(p, stage, st, i, domains[p], info.ctx, double=(var, n),
                           consumer=info)
        allocs += a
        copies.append(_RingStores(a[0].name, ir.Bin("%", ir.Var(var), ir.const(n), ir.int32))
                      .stmt(prod))
    others = _others(b, stage, st, i, info, attached, shared, domains, allocs)
    loop = dataclasses.replace(for_loop(st, leaf, var, ext, ir.seq(*copies, *others, inner())),
                               stages=n)
    out = loop
    for a in reversed(allocs):
        out = ir.Alloc(a, out)
    return ir.seq(pre, out) if pre is not None else out


class _RingStores(Rewriter):
    """The copy's stores go to buffer `slot` of the ring (its reads of the ring,
    through the view, already carry it)."""

    def __init__(self, buf, slot):
        self.buf, self.slot = buf, slot

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        s = self.generic_stmt(s)
        if s.buffer != self.buf:
            return s
        return dataclasses.replace(s, indices=(self.slot, *s.indices))


def fragment_loop(b, stage, st, i, info, inner, pre, attached, domains):
    """Register multi-buffering of the fragments computed at leaf i (stages
    n = 2..5): each gets a ring of n fragment buffers (slot k % n at
    iteration k) and its loads run n-1 iterations ahead of the compute:

        copy(0); ...; copy(n-2)                  (each under `j < extent`)
        for k: if k + n-1 < extent: copy(k + n-1)   (slot (k-1) % n, read at k-1)
               compute(k)                           (reads slot k % n)

    No barrier: fragments are the warp's own registers, and the shared tiles
    they load from do not change inside the loop. The slot subscripts make
    the loop's variable reach register numbers, so tensor_cores unrolls it."""
    leaf = st.leaves[i]
    var, ext = info.loopvar[leaf], info.ext[leaf]
    n = st.pipeline[leaf]
    allocs, copies = [], []
    for p in attached:
        a, prod = b.attach(p, stage, st, i, domains[p], info.ctx, double=(var, n),
                           consumer=info)
        allocs += a
        copies.append(_RingStores(a[0].name, ir.Bin("%", ir.Var(var), ir.const(n), ir.int32))
                      .stmt(prod))
    copy = ir.seq(*copies)
    prologue = [ir.If(ir.Bin("<", ir.const(j), ext, ir.bool_),
                      substitute(copy, {var: ir.const(j)})) for j in range(n - 1)]
    ahead = ir.Bin("+", ir.Var(var), ir.const(n - 1), ir.int32)
    body = ir.seq(ir.If(ir.Bin("<", ahead, ext, ir.bool_), substitute(copy, {var: ahead})),
                  inner())
    out = ir.seq(*prologue, for_loop(st, leaf, var, ext, body))
    for a in reversed(allocs):
        out = ir.Alloc(a, out)
    return ir.seq(pre, out) if pre is not None else out


def _shared_only(b, stage, st, leaf, attached):
    shared = [p for p in attached if b.sched.states[p].scope == "shared"]
    if not shared:
        raise LoweringError(f"stage '{stage}': pipeline on '{leaf}', but no shared-memory "
                            f"copy is computed at that loop (pipeline runs the shared "
                            f"copies, or the fragment loads of tensor-core operands, "
                            f"computed at a loop ahead of its compute)")
    for p in shared:
        nested = next((r for r in b.nested(p) if b.sched.states[r].scope == "shared"), None)
        # (stages=2 copies a nested shared copy with the prefetch, unless threads share
        # the work: a cooperative copy's nested buffer is read by other threads)
        if nested is not None and (st.pipeline[leaf] >= 3 or any(
                b.sched.states[q].bind for q in (p, nested))):
            raise LoweringError(
                f"stage '{stage}': pipeline on '{leaf}' runs the copy '{p}' ahead of the "
                f"loop's compute, but '{nested}' (shared memory) is computed inside it: its "
                f"writes for a later iteration would race with the threads still reading it "
                f"for this one; compute '{nested}' elsewhere, or do not pipeline '{leaf}'")
    # (a shared copy of another shared copy computed at the loop too reads that copy's
    # buffer for the next iteration before it is filled: seed 8 pair 27815, a read of
    # shared memory no thread wrote)
    here = {b.sched.states[p].tensor: p for p in attached}
    for p in shared:
        for t in sorted(b.sched.states[p].definition.reads()):
            if t in here and here[t] != p:
                raise LoweringError(
                    f"stage '{stage}': pipeline on '{leaf}' runs the copy '{p}' ahead of the "
                    f"loop's compute, but it reads '{t}', which '{here[t]}' computes at that "
                    f"loop (in the same iteration); compute '{here[t]}' at an outer loop, or "
                    f"do not pipeline '{leaf}'")
    return shared


def _others(b, stage, st, i, info, attached, shared, domains, allocs):
    """The producers at a pipelined loop other than its shared copies (a row's
    statistics, register caches), built as an ordinary loop builds them; they
    run in each iteration after the copies, as part of its compute. Their
    buffers are appended to `allocs`."""
    out = []
    for p in attached:
        if p in shared:
            continue
        a, prod = b.attach(p, stage, st, i, domains[p], info.ctx, consumer=info)
        allocs += a
        out.append(placed(b, p, prod, info))  # as leaf_loop places it
    return out


def pipelined_loop(b, stage, st, i, info, inner, pre, attached, domains):
    """Software pipelining (double buffering) of the shared copies at leaf i:

        <load copy(0) into registers; store it to half 0>; barrier
        for k: if k+1 < n: load copy(k+1) into registers
               body(k), reading half k % 2
               if k+1 < n: store the registers to half (k+1) % 2
               barrier
    """
    leaf = st.leaves[i]
    var, ext = info.loopvar[leaf], info.ext[leaf]
    fragments = [p for p in attached if b.sched.states[p].scope == "fragment"]
    if fragments:
        others = [p for p in attached if p not in fragments]
        if others:
            raise LoweringError(f"stage '{stage}': pipeline on '{leaf}' multi-buffers the "
                                f"fragments computed there ('{fragments[0]}'), but "
                                f"'{others[0]}' ({b.sched.states[others[0]].scope}) is also "
                                f"computed there; compute it at another loop")
        return fragment_loop(b, stage, st, i, info, inner, pre, attached, domains)
    if st.pipeline[leaf] >= 3:
        return ring_loop(b, stage, st, i, info, inner, pre, attached, domains)
    shared = _shared_only(b, stage, st, leaf, attached)
    allocs, loads, stores = [], [], []
    for p in shared:
        a, prod = b.attach(p, stage, st, i, domains[p], info.ctx, double=var,
                           consumer=info)
        allocs += a
        regs = info.ctx.fresh(f"{ident(b.sched.states[p].tensor)}_prefetch",
                              ident(stage))
        load, store, n = _split_copy(_unroll_serial(prod, p), a[0].name, regs)
        allocs.append(ir.Buffer(regs, a[0].dtype, (ir.const(n),), "local"))
        loads.append(load)
        stores.append(store)
    others = _others(b, stage, st, i, info, attached, shared, domains, allocs)
    nxt = {var: ir.Bin("+", ir.Var(var), ir.const(1), ir.int32)}
    half = lambda k: ir.Bin("%", k, ir.const(2), ir.int32)  # noqa: E731
    first = {var: ir.const(0)}
    prologue = ir.seq(*[substitute(l, first) for l in loads],
                      *[substitute(s_(ir.const(0)), first) for s_ in stores])
    more = ir.Bin("<", ir.Bin("+", ir.Var(var), ir.const(1), ir.int32), ext, ir.bool_)
    body = ir.seq(
        ir.If(more, ir.seq(*[substitute(l, nxt) for l in loads])),
        *others,
        inner(),
        # half(k) becomes half(k + 1) with the substitution k -> k + 1.
        ir.If(more, ir.seq(*[substitute(s_(half(ir.Var(var))), nxt) for s_ in stores])),
        ir.Barrier())
    out = ir.seq(prologue, ir.Barrier(), for_loop(st, leaf, var, ext, body))
    for a in reversed(allocs):
        out = ir.Alloc(a, out)
    return ir.seq(pre, out) if pre is not None else out


def _unroll_serial(s: ir.Stmt, stage: str) -> ir.Stmt:
    """Expand the serial loops of a copy nest (thread loops stay, and vectorized
    loops, whose body is one store), so that every store is a separate statement
    with its own register slot (or a vector of consecutive slots)."""
    if isinstance(s, ir.Seq):
        return ir.seq(*[_unroll_serial(x, stage) for x in s.stmts])
    if isinstance(s, ir.For):
        if s.kind == "thread":
            return dataclasses.replace(s, body=_unroll_serial(s.body, stage))
        ext = simplify_expr(s.extent)
        if not isinstance(ext, ir.Imm):
            raise LoweringError(f"pipeline: the copy '{stage}' has a loop '{s.var}' of "
                                f"non-constant extent {show(ext)}")
        if s.kind == "vectorize" and _vector_store(s) is not None:
            return dataclasses.replace(s, extent=ext)
        return ir.seq(*[_unroll_serial(substitute(s.body, {s.var: ir.Bin(
            "+", s.lo, ir.const(k), ir.int32)}), stage) for k in range(int(ext.value))])
    if isinstance(s, (ir.If,)):
        return dataclasses.replace(s, then=_unroll_serial(s.then, stage))
    if isinstance(s, (ir.Let, ir.Alloc)):
        return dataclasses.replace(s, body=_unroll_serial(s.body, stage))
    return s


def _vector_store(s: ir.For):
    """The one store of a vectorized loop's body (also under a guard), else None."""
    body = s.body.then if isinstance(s.body, ir.If) and s.body.else_ is None else s.body
    return body if isinstance(body, ir.Store) else None


def _split_copy(nest: ir.Stmt, buf: str, regs: str):
    """(load nest, half -> store nest, number of slots): the copy's stores to
    `buf` become stores to register slots, and stores of those slots to the
    given half of `buf`. A vectorized loop of stores keeps its loop over
    consecutive slots."""
    slots = [0]

    def slot(s: ir.For | None):
        """Index of the next slot (plus the loop variable in a vectorized loop)."""
        base = ir.const(slots[0])
        if s is None:
            slots[0] += 1
            return base
        slots[0] += int(s.extent.value)
        return ir.Bin("+", base, ir.Var(s.var), ir.int32)

    class Copy(Rewriter):
        def __init__(self, make):
            self.make, self.loop = make, None

        def stmt_For(self, s):
            if s.kind == "vectorize" and _vector_store(s) is not None:
                self.loop = s
                out = self.generic_stmt(s)
                self.loop = None
                return out
            return self.generic_stmt(s)

        def stmt_Store(self, s):
            if s.buffer != buf:
                return s
            return self.make(s, slot(self.loop))

    load = Copy(lambda s, k: ir.Store(regs, (k,), s.value)).stmt(nest)
    n = slots[0]

    def store(half):
        slots[0] = 0
        return Copy(lambda s, k: ir.Store(buf, (half,) + s.indices,
                                          ir.Load(regs, (k,), s.value.dtype))).stmt(nest)
    return load, store, n
