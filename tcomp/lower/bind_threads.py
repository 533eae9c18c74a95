"""Pass: thread-bound loops become thread/block indices.

Pre: loops bound with `For(kind="thread", tag=...)`.
Post: `let v = threadIdx.x` (or blockIdx.*) in place of each such loop. When a
loop covers fewer threads than the block has along its axis (or may, when the
block's dimension is an expression other than the loop's extent), only stores (and
intrinsic calls) are predicated with `v < extent`: barriers stay outside any
thread-dependent condition, so every thread reaches them.
"""
from __future__ import annotations

import dataclasses

from . import ir
from .rewriter import Rewriter
from .simplify import simplify_expr


class _Predicate(Rewriter):
    def __init__(self, cond: ir.Expr):
        self.cond = cond

    def stmt_Store(self, s):
        return ir.If(self.cond, s)

    def stmt_Evaluate(self, s):
        return ir.If(self.cond, s)


class _Bind(Rewriter):
    def __init__(self, kernel: ir.Kernel):
        self.block = kernel.block
        self.grid = kernel.grid

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        body = self.stmt(s.body)
        if s.kind != "thread":
            return s if body is s.body else dataclasses.replace(s, body=body)
        full = self.block[s.tag.dim] if s.tag.is_thread else None
        # (Block dimensions are the loops' own extents, or wider: a constant
        # wider than this loop, or a reduction's max(extent, 1).)
        if full is not None and simplify_expr(s.extent) != full:
            body = _Predicate(ir.Bin("<", ir.Var(s.var), s.extent, ir.bool_)).stmt(body)
        value = ir.Var(s.tag.name)
        if not (isinstance(s.lo, ir.Imm) and s.lo.value == 0):
            value = ir.Bin("+", s.lo, value, ir.int32)
        return ir.Let(s.var, value, body)


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    return dataclasses.replace(k, body=_Bind(k).stmt(k.body))
