"""The parameters of a built kernel: the global buffers its body touches, and
the size variables it needs (those its body uses, and those of the touched
buffers' shapes, which flattening indexes with)."""
from __future__ import annotations

from ..lang.ast import walk
from . import ir
from .rewriter import walk_stmts


def kernel_params(body: ir.Stmt, sched, bound_sizes: dict) -> tuple[tuple, tuple]:
    """(global buffers in the schedule's tensor order, size parameters in the
    op's order) of a kernel with this body; sizes in `bound_sizes` are fixed."""
    used = set()
    for s in _walk_all(body):
        used |= {x for x in s}
    gbufs = tuple(b for b in sched.tensors if sched.tensors[b][2] == "global"
                  and b in used)
    # Flattening indexes with the buffers' shapes: their size variables are needed too.
    for b in gbufs:
        for d in sched.tensors[b][1]:
            used |= {x.name for x in walk(d) if hasattr(x, "name") and type(x).__name__ == "Size"}
    sizes = tuple(v for v in sched.op.size_vars if v not in bound_sizes and v in used)
    return gbufs, sizes


def _walk_all(s: ir.Stmt):
    """Names of buffers and variables a statement uses."""
    for x in walk_stmts(s):
        names = set()
        exprs = []
        if isinstance(x, ir.Store):
            names.add(x.buffer)
            exprs = list(x.indices) + [x.value]
        elif isinstance(x, ir.For):
            exprs = [x.lo, x.extent]
        elif isinstance(x, ir.If):
            exprs = [x.cond]
        elif isinstance(x, ir.Let):
            exprs = [x.value]
        elif isinstance(x, ir.Evaluate):
            exprs = [x.call]
        for e in exprs:
            for y in ir.walk_expr(e):
                if isinstance(y, ir.Load):
                    names.add(y.buffer)
                elif isinstance(y, ir.Var):
                    names.add(y.name)
        yield names
