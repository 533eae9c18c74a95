"""The parameters of a built kernel: the global buffers its body touches, and
the size variables it needs (those its body uses, and those of the touched
buffers' shapes, which flattening indexes with)."""
from __future__ import annotations

from ..lang.ast import walk
from . import ir
from .accesses import accesses


def kernel_params(body: ir.Stmt, sched, bound_sizes: dict) -> tuple[tuple, tuple]:
    """(global buffers in the schedule's tensor order, size parameters in the
    op's order) of a kernel with this body; sizes in `bound_sizes` are fixed."""
    acc = accesses(body)
    used = set(acc.buffers | acc.free_vars)
    gbufs = tuple(b for b in sched.tensors if sched.tensors[b][2] == "global"
                  and b in used)
    # Flattening indexes with the buffers' shapes: their size variables are needed too.
    for b in gbufs:
        for d in sched.tensors[b][1]:
            used |= {x.name for x in walk(d) if hasattr(x, "name") and type(x).__name__ == "Size"}
    sizes = tuple(v for v in sched.op.size_vars if v not in bound_sizes and v in used)
    return gbufs, sizes
