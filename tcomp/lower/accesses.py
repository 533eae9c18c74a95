"""What a piece of Kernel IR touches: buffers read, buffers written, free
variables. The one answer every pass uses (barrier insertion, the kernel's
parameters, the CUDA parameter qualifiers, the sim's race tables).

    accesses(Store("C", (i,), Load("A", (i, k)) * x))
        -> reads {A}, writes {C}, free_vars {i, k, x}

An intrinsic's address operands (`ir.Ref`, or a node-backed intrinsic's
buffer field) are read, written or both as its registry entry says; a
reference anywhere else counts as both (the verifier refuses it).

A statement that defines a variable (`for`, `let`) hides it from the free
variables of its body; its bounds or value are outside that scope.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import intrinsics, ir


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
    operands = set()  # ids of the references intrinsics consume (counted by their entry)
    # (id(node), bound) already collected: passes share subtrees (a substituted loop
    # variable's value sits at each of its uses), and a second visit with the same bound
    # variables adds nothing (`operands` only grows, so a reference skipped the first time
    # is skipped again).
    seen = set()
    while stack:
        x, bound = stack.pop()
        t = type(x)
        if t is ir.Var:
            if x.name not in bound:
                free.add(x.name)
            continue
        if t is ir.Imm:
            continue
        if isinstance(x, ir.Expr) and not ir.has_ref(x):
            # an expression without references: its loads and variables, as kept on
            # the node (ir.loaded, ir.free_vars; expressions bind no variables)
            reads |= ir.loaded(x)
            free.update(ir.free_vars(x) - bound if bound else ir.free_vars(x))
            continue
        key = (id(x), bound)
        if key in seen:
            continue
        seen.add(key)
        if t is ir.Load:
            reads.add(x.buffer)
        elif t is ir.Store:
            writes.add(x.buffer)
        elif t is ir.Ref:
            if id(x) not in operands:
                reads.add(x.buffer)
                writes.add(x.buffer)
        elif isinstance(x, ir.Stmt):
            for op, v in intrinsics.operands(x):
                if not op.ref or not isinstance(v, (str, ir.Ref)):
                    continue
                name = v if isinstance(v, str) else v.buffer
                if isinstance(v, ir.Ref):
                    operands.add(id(v))
                if op.access in (intrinsics.READ, intrinsics.READWRITE):
                    reads.add(name)
                if op.access in (intrinsics.WRITE, intrinsics.READWRITE):
                    writes.add(name)
        b = ir.binding(x)
        if b is None:
            for c in ir.children(x):
                stack.append((c, bound))
        else:
            inner = bound | {b[0]}
            for c in ir.children(x):
                stack.append((c, inner if c is b[1] else bound))
