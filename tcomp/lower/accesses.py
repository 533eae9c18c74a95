"""What a piece of Kernel IR touches: buffers read, buffers written, free
variables. The one answer every pass uses (barrier insertion, the kernel's
parameters, the CUDA parameter qualifiers, the sim's race tables).

    accesses(Store("C", (i,), Load("A", (i, k)) * x))
        -> reads {A}, writes {C}, free_vars {i, k, x}

A statement that defines a variable (`for`, `let`) hides it from the free
variables of its body; its bounds or value are outside that scope.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ir


@dataclass(frozen=True)
class Accesses:
    reads: frozenset[str]
    writes: frozenset[str]
    free_vars: frozenset[str]

    @property
    def buffers(self) -> frozenset[str]:
        return self.reads | self.writes


def accesses(node) -> Accesses:
    """Buffers `node` reads and writes, and the variables it uses that it
    does not define itself."""
    reads, writes, free = set(), set(), set()
    _collect(node, reads, writes, free, frozenset())
    return Accesses(frozenset(reads), frozenset(writes), frozenset(free))


def _collect(node, reads, writes, free, bound) -> None:
    stack = [(node, bound)]
    while stack:
        x, bound = stack.pop()
        if isinstance(x, ir.Var):
            if x.name not in bound:
                free.add(x.name)
        elif isinstance(x, ir.Load):
            reads.add(x.buffer)
        elif isinstance(x, ir.Store):
            writes.add(x.buffer)
        elif isinstance(x, (ir.AllReduce, ir.Ref)):
            # (a reference counts as both: the intrinsic taking it may do either)
            reads.add(x.buffer)
            writes.add(x.buffer)
        b = ir.binding(x)
        for c in ir.children(x):
            stack.append((c, bound | {b[0]} if b is not None and c is b[1] else bound))
