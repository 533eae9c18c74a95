"""The uniformity of Kernel IR expressions: arch/hierarchy.py's lattice
(GRID < CLUSTER < BLOCK < WARPGROUP < WARP < THREAD) read off IR.

    of(e, block, known, registers)   the largest group of threads in which `e`
                                     is certainly the same

`block`: the kernel's block extents (block_extents: an int where constant,
None where known only at launch); `known`: name -> Uniformity of the
variables in scope that are not index registers (sizes and tensor maps are
GRID; loop, let and role variables what their definitions give);
`registers`: the buffers whose elements live in each thread's registers
(local, fragment): a load of one is THREAD, whatever its subscripts. Any
other load is as uniform as its subscripts (the same address in every thread
of a group reads the same value there). Index registers are
hierarchy.register_uniformity (threadIdx.y is warp-uniform when blockDim.x is
a multiple of 32); threadIdx.x / c is hierarchy.quotient_uniformity
(threadIdx.x / 128: a warpgroup's index).
"""
from __future__ import annotations

from ..arch.hierarchy import Uniformity, register_uniformity, uniformity
from . import ir
from .ir_walk import children, free_vars

REGISTER_SCOPES = ("local", "fragment")


def block_extents(k: ir.Kernel) -> tuple:
    """(x, y, z) of `k`'s block: ints where constant, else None."""
    return tuple(int(b.value) if isinstance(b, ir.Imm) else None for b in k.block)


def of(e: ir.Expr, block=(None, None, None), known=None, registers=frozenset(),
       free: Uniformity = Uniformity.THREAD) -> Uniformity:
    """(`free`: the uniformity of a variable that is neither an index register
    nor in `known`; THREAD, nothing known of it, unless the caller asks only
    about the index registers.)"""
    known = dict(known or {})
    if free is not Uniformity.THREAD:
        for name in free_vars(e):
            if name not in known and register_uniformity(name) is None:
                known[name] = free

    def view(x):
        if isinstance(x, ir.Imm):
            return ("const", x.value)
        if isinstance(x, ir.Var):
            return ("var", x.name)
        if isinstance(x, ir.Bin):
            return (x.op, x.a, x.b)
        if isinstance(x, ir.Load) and x.buffer in registers:
            return ("var", _REGISTER)  # (not in `known`, not a register: THREAD)
        return (type(x).__name__, *children(x))
    return uniformity(e, view, block, known)


_REGISTER = "<a thread's register>"
