"""Pass: shared-memory barrier insertion.

Pre: thread loops already bound (no `For(kind="thread")`).
Post: a `barrier()` between a statement that writes a shared buffer and a
later sibling that reads it (RAW between threads), and at the
top of a loop body that both writes and reads shared buffers (WAR between
iterations). Barriers are only placed at statement-list level, never inside
an `if`, so they are reached by every thread. (Global tensors computed at a
consumer's loop get their barriers from the builder.) Repeated barriers
collapse into one; a one-thread kernel keeps none.
"""
from __future__ import annotations

import dataclasses

from . import ir
from .rewriter import walk_stmts


def _access(s: ir.Stmt):
    reads, writes = set(), set()
    for x in walk_stmts(s):
        exprs = []
        if isinstance(x, ir.Store):
            writes.add(x.buffer)
            exprs = list(x.indices) + [x.value]
        elif isinstance(x, ir.If):
            exprs = [x.cond]
        elif isinstance(x, ir.Let):
            exprs = [x.value]
        elif isinstance(x, ir.For):
            exprs = [x.lo, x.extent]
        elif isinstance(x, ir.Evaluate):
            exprs = [x.call]
        for e in exprs:
            reads |= {y.buffer for y in ir.walk_expr(e) if isinstance(y, (ir.Load, ir.Ref))}
    return reads, writes


class _Sync:
    def __init__(self, shared: set[str]):
        self.shared = shared

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Seq):
            out, pending = [], set()
            for child in s.stmts:
                child = self.stmt(child)
                r, w = _access(child)
                if (r & pending) and not isinstance(child, ir.Barrier):
                    out.append(ir.Barrier())
                    pending = set()
                if isinstance(child, ir.Barrier):
                    pending = set()
                out.append(child)
                pending |= w & self.shared
            return ir.seq(*out)
        if isinstance(s, ir.For):
            body = self.stmt(s.body)
            r, w = _access(body)
            if (w & self.shared) and (r & self.shared) and s.kind != "vectorize":
                first = body.stmts[0] if isinstance(body, ir.Seq) and body.stmts else body
                last = body.stmts[-1] if isinstance(body, ir.Seq) and body.stmts else body
                # A barrier ending the body already separates one iteration's reads
                # from the next iteration's writes.
                if not isinstance(first, ir.Barrier) and not isinstance(last, ir.Barrier):
                    body = ir.seq(ir.Barrier(), body)
            return dataclasses.replace(s, body=body)
        if isinstance(s, (ir.Let, ir.Alloc)):
            return dataclasses.replace(s, body=self.stmt(s.body))
        if isinstance(s, ir.If):
            return dataclasses.replace(s, then=self.stmt(s.then),
                                       else_=self.stmt(s.else_) if s.else_ is not None else None)
        return s


def _dedupe(s: ir.Stmt) -> ir.Stmt:
    """Drop barriers that follow another barrier with nothing in between, and
    every barrier of a single-thread kernel."""
    if isinstance(s, ir.Seq):
        out = []
        for x in s.stmts:
            x = _dedupe(x)
            if isinstance(x, ir.Barrier) and out and isinstance(out[-1], ir.Barrier):
                continue
            out.append(x)
        return ir.seq(*out)
    if isinstance(s, (ir.For, ir.Let, ir.Alloc)):
        return dataclasses.replace(s, body=_dedupe(s.body))
    if isinstance(s, ir.If):
        return dataclasses.replace(s, then=_dedupe(s.then),
                                   else_=_dedupe(s.else_) if s.else_ is not None else None)
    return s


class _NoBarriers:
    def stmt(self, s):
        if isinstance(s, ir.Barrier):
            return ir.Seq(())
        if isinstance(s, ir.Seq):
            return ir.seq(*[self.stmt(x) for x in s.stmts])
        if isinstance(s, (ir.For, ir.Let, ir.Alloc)):
            return dataclasses.replace(s, body=self.stmt(s.body))
        if isinstance(s, ir.If):
            return dataclasses.replace(s, then=self.stmt(s.then),
                                       else_=self.stmt(s.else_) if s.else_ is not None else None)
        return s


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    if k.const_block() == (1, 1, 1):
        return dataclasses.replace(k, body=_NoBarriers().stmt(k.body))
    shared = {x.buffer.name for x in walk_stmts(k.body)
              if isinstance(x, ir.Alloc) and x.buffer.scope == "shared"}
    body = _Sync(shared).stmt(k.body) if shared else k.body
    return dataclasses.replace(k, body=_dedupe(body))
