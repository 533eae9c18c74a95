"""Pass: storage flattening — multi-dimensional subscripts become one
row-major offset per buffer.

Pre: Load/Store/Ref carry one subscript per buffer dimension.
Post: Load/Store/Ref carry a single subscript. Both targets run the IR after this
pass (the sim runs the IR before it too, on an error, to name the dimension
at fault).
"""
from __future__ import annotations

import dataclasses

from . import ir
from .rewriter import Rewriter, walk_stmts
from .simplify import Linear, kernel_simplifier


def _flat(indices, shape) -> ir.Expr:
    out = None
    for i, n in zip(indices, shape):
        out = i if out is None else ir.Bin("+", ir.Bin("*", out, n, ir.int32), i, ir.int32)
    return out if out is not None else ir.const(0)


class _Flatten(Rewriter):
    def __init__(self, shapes, simp):
        self.shapes, self.simp = shapes, simp

    def flat(self, indices, shape) -> ir.Expr:
        if all(isinstance(n, ir.Imm) for n in shape):
            # Constant strides: combine the (already canonical) linear forms directly.
            strides, stride = [], 1
            for n in reversed(shape):
                strides.append(stride)
                stride *= int(n.value)
            lin = Linear()
            for i, st in zip(indices, reversed(strides)):  # outer dimension first
                lin = lin.add(self.simp.linear(i).scale(st))
            return self.simp._merge_divmod(lin).to_expr()
        return self.simp.expr(_flat(indices, shape))

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        idx = self.exprs(e.indices)
        return ir.Load(e.buffer, (self.flat(idx, self.shapes[e.buffer]),), e.dtype)

    def expr_Ref(self, e: ir.Ref) -> ir.Expr:
        idx = self.exprs(e.indices)
        return ir.Ref(e.buffer, (self.flat(idx, self.shapes[e.buffer]),), e.dtype)

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        idx, v = self.exprs(s.indices), self.expr(s.value)
        return ir.Store(s.buffer, (self.flat(idx, self.shapes[s.buffer]),), v, loc=s.loc)


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    shapes = {b.name: b.shape for b in program.buffers}
    for x in walk_stmts(k.body):
        if isinstance(x, ir.Alloc):
            shapes[x.buffer.name] = x.buffer.shape
    # One simplifier for the kernel: its cache of linear forms is shared by all indices.
    return dataclasses.replace(k, body=_Flatten(shapes, kernel_simplifier(k)).stmt(k.body))
