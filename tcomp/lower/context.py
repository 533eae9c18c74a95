"""Build-time state of one kernel's construction: the names taken, the views
through which stages read buffers computed at a consumer's loop, and the
thread loops enclosing the stage being built."""
from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .construct import sub
from .simplify import simplify_expr


@dataclass
class StageLoops:
    """One stage's loop variables, extents, domain and index values in a kernel."""
    loopvar: dict
    ext: dict
    domain: dict
    index: dict
    ctx: "KernelCtx"
    # the conditions under which the stage's indices are in its ranges (an imperfect
    # split's guard, a region's clamps): attach.py evaluates a data-dependent region
    # (a gather's subscript) only where they hold
    in_range: tuple = ()
    # those of in_range that guard an imperfect inner split (`j_i < 3` for j_i split
    # by 2): past them the indices name points other iterations compute (attach.py
    # skips, or refuses, an in-place producer's region there)
    tails: tuple = ()


@dataclass
class View:
    buffer: str
    offsets: list  # per dimension, subtracted from absolute indices
    prefix: tuple = ()  # leading subscripts (the buffer half of a double-buffered copy)
    perm: tuple | None = None  # storage_order: buffer dimension j holds logical dimension perm[j]

    def subscripts(self, args) -> tuple:
        args = tuple(simplify_expr(sub(a, o)) for a, o in zip(args, self.offsets))
        if self.perm is not None:
            args = tuple(args[j] for j in self.perm)
        return self.prefix + args


class KernelCtx:
    def __init__(self, reserved=()):
        # Names a generated loop or register name must not take: the op's sizes and
        # tensors (a size named `k_o` was captured by split's `k_o`: issue 22, defect 2).
        self.names: set[str] = set(reserved)
        self.views: dict[str, View] = {}
        self.thread_loops: list[tuple[str, ir.Expr, str]] = []  # enclosing threadIdx loops

    def fresh(self, base: str, prefix: str) -> str:
        name = base if base not in self.names else f"{prefix}_{base}"
        i = 1
        while name in self.names:
            name, i = f"{prefix}_{base}{i}", i + 1
        self.names.add(name)
        return name
