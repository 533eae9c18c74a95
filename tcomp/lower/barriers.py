"""Pass: shared-memory barrier insertion.

Pre: thread loops already bound (no `For(kind="thread")`).
Post: a `barrier()` between a statement that writes a shared buffer and a
later sibling that reads it (RAW between threads), and at the
top of a loop body that both writes and reads shared buffers (WAR between
iterations). Barriers are only placed at statement-list level, never inside
an `if`, so they are reached by every thread. (Global tensors computed at a
consumer's loop get their barriers from the builder.) Repeated barriers
collapse into one; a one-thread kernel keeps none.

Also here, for the builders that place their own barriers:
`init_barrier_objects`, the one protocol by which a kernel's mbarriers come
into being (thread 0 initialises them and fences, then a block barrier before
any role waits on them), which hopper_gemm.py and hopper_attention.py share.
"""
from __future__ import annotations

import dataclasses

from ..arch.hierarchy import Uniformity
from ..errors import LoweringError
from . import intrinsics, ir, uniformity
from .ir_walk import children
from .printer import expr as show
from .accesses import accesses
from .rewriter import Rewriter, walk_stmts


class _Sync(Rewriter):
    def __init__(self, shared: set[str]):
        self.shared = shared
        self._rw: dict[int, tuple] = {}  # id(stmt) -> (stmt, reads, writes)
        self._async: dict[int, tuple] = {}  # id(stmt) -> (stmt, buffers only cp_async writes)

    def _access(self, s: ir.Stmt):
        """(reads, writes) of `s`, as accesses(s) says. Remembered per
        statement and composed from the children's: every level of a nest
        asks about its body, which would otherwise be walked once per level."""
        hit = self._rw.get(id(s))
        if hit is not None and hit[0] is s:
            return hit[1], hit[2]
        if intrinsics.of(s) is not None or not any(isinstance(c, ir.Stmt)
                                                   for c in ir.children(s)):
            a = accesses(s)  # a leaf, or an intrinsic: counted by its registry entry
            r, w = a.reads, a.writes
        else:  # a compound statement touches what its parts touch
            r, w = set(), set()
            for c in ir.children(s):
                if isinstance(c, ir.Stmt):
                    cr, cw = self._access(c)
                else:
                    a = accesses(c)
                    cr, cw = a.reads, a.writes
                r |= cr
                w |= cw
            r, w = frozenset(r), frozenset(w)
        self._rw[id(s)] = (s, r, w)
        return r, w

    def _async_only(self, s: ir.Stmt) -> frozenset:
        """The buffers `s` writes only by asynchronous copies (an intrinsic with
        the "async" and "writes" effects: cp_async; no ordinary store to them
        in `s`); remembered per statement as `_access`."""
        hit = self._async.get(id(s))
        if hit is not None and hit[0] is s:
            return hit[1]
        entry = intrinsics.of(s) if isinstance(s, ir.Evaluate) else None
        if entry is not None and {"async", "writes"} <= entry.effects:
            # an asynchronous copy: its destinations are written when its wait completes
            out = frozenset(a.buffer for op, a in intrinsics.operands(s)
                            if op.access != intrinsics.READ and isinstance(a, ir.Ref))
        elif isinstance(s, ir.Store):
            out = frozenset()
        else:
            cp, stored = set(), set()
            for c in ir.children(s):
                if isinstance(c, ir.Stmt):
                    cp |= self._async_only(c)
                    stored |= self._access(c)[1] - self._async_only(c)
            out = frozenset(cp - stored)
        self._async[id(s)] = (s, out)
        return out

    def stmt_Seq(self, s: ir.Seq) -> ir.Stmt:
        out, pending = [], set()
        for child in s.stmts:
            child = self.stmt(child)
            r, w = self._access(child)
            if (r & pending) and not isinstance(child, ir.Barrier):
                out.append(ir.Barrier())
                pending = set()
            if isinstance(child, ir.Barrier):
                pending = set()
            out.append(child)
            pending |= (w - self._async_only(child)) & self.shared
        return ir.seq(*out)

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        body = self.stmt(s.body)
        r, w = self._access(body)
        if (w & self.shared) and (r & self.shared) and s.kind != "vectorize":
            stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
            # A barrier ending the body, or one before which no statement touches
            # a shared buffer, already separates one iteration's reads from the
            # next iteration's writes (and its writes from the next one's reads).
            if not self._leading_barrier(stmts) and not (
                    stmts and isinstance(stmts[-1], ir.Barrier)):
                body = ir.seq(ir.Barrier(), body)
        return dataclasses.replace(s, body=body)

    def _leading_barrier(self, stmts) -> bool:
        for x in stmts:
            if isinstance(x, ir.Barrier):
                return True
            r, w = self._access(x)
            if (r | w) & self.shared:
                return False
        return False


class _Dedupe(Rewriter):
    """Drop barriers that follow another barrier with nothing in between."""

    def stmt_Seq(self, s: ir.Seq) -> ir.Stmt:
        out = []
        for x in s.stmts:
            x = self.stmt(x)
            if isinstance(x, ir.Barrier) and out and isinstance(out[-1], ir.Barrier):
                continue
            out.append(x)
        return ir.seq(*out)


class _NoBarriers(Rewriter):
    """Drop every barrier (of a single-thread kernel)."""

    def stmt_Barrier(self, s: ir.Barrier) -> ir.Stmt:
        return ir.Seq(())

    def stmt_Seq(self, s: ir.Seq) -> ir.Stmt:
        return ir.seq(*[self.stmt(x) for x in s.stmts])


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    if k.const_block() == (1, 1, 1):
        return dataclasses.replace(k, body=_NoBarriers().stmt(k.body))
    shared = {x.buffer.name for x in walk_stmts(k.body)
              if isinstance(x, ir.Alloc) and x.buffer.scope == "shared"}
    body = _Sync(shared).stmt(k.body) if shared else k.body
    body = _Dedupe().stmt(body)
    _uniform_trip_counts(k.name, body, uniformity.block_extents(k), {})
    return dataclasses.replace(k, body=body)


def init_barrier_objects(inits, tid: ir.Expr) -> ir.Stmt:
    """The mbarriers' initialisation (`inits`: their mbarrier_init calls) by
    the block's thread `tid == 0`, with the fence that makes them visible to
    the async proxy and to the other threads, then a block barrier: every
    thread of the block reaches it before any role arrives or waits on one."""
    fence = ir.Evaluate(ir.Call("fence_mbarrier_init", (), ir.int32))
    first = ir.Bin("==", tid, ir.const(0), ir.bool_)
    return ir.seq(ir.If(first, ir.seq(*inits, fence)), ir.Barrier())


def _uniform_trip_counts(kernel: str, s: ir.Stmt, block, known: dict) -> None:
    """A barrier inside a loop whose bounds differ between threads of the block
    (a region that moves with the thread, computed there with a shared copy
    inside) would be reached a different number of times by different threads:
    a LoweringError (fuzz seed 10 pair 5951; the sim reported the loop's bounds
    differing). "Differ" is the uniformity lattice's (uniformity.py): bounds
    less uniform than the block, through the lets and loops around them."""
    if isinstance(s, ir.Let):
        known = {**known, s.var: uniformity.of(s.value, block, known, free=Uniformity.GRID)}
        return _uniform_trip_counts(kernel, s.body, block, known)
    if isinstance(s, ir.For):
        bounds = max(uniformity.of(s.lo, block, known, free=Uniformity.GRID),
                     uniformity.of(s.extent, block, known, free=Uniformity.GRID))
        if bounds > Uniformity.BLOCK and any(isinstance(x, ir.Barrier)
                                             for x in walk_stmts(s.body)):
            raise LoweringError(
                f"kernel {kernel}: loop '{s.var}' runs {show(s.extent)} times, a count that "
                f"differs between the threads of a block, and a barrier inside it (a shared "
                f"buffer computed there) would be reached a different number of times by "
                f"each: compute the shared stage outside that loop, or the loop's stage at a "
                f"loop where its region does not move with the thread")
        known = {**known, s.var: bounds}
    for c in children(s):
        if isinstance(c, ir.Stmt):
            _uniform_trip_counts(kernel, c, block, known)
