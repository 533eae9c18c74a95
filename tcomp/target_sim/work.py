"""How much work a run of a program on the sim is, checked before it starts.

The sim executes every statement instance in Python and NumPy: a few million
instances a second spread over threads (a block's lanes run together), a few
thousand a second along a serial loop. N = 10^7 in a serial loop ran for many
minutes without a word. So a call counts the instances first and refuses to
start past `MAX_INSTANCES` (a SimError naming the count, the limit and the
remedies); a kernel's limit is its `max_instances` attribute (tcomp.build
sets it to this default; `k.max_instances = None` removes it).

Instances of a store: the threads of its launch (grid x block) times the
extents of the serial and unrolled loops around it, at the call's sizes.
An extent that depends on an enclosing loop's variable (a triangular nest)
counts as 1, so the count is a lower bound there: the guard refuses no
launch smaller than its limit.
"""
from __future__ import annotations

from ..errors import SimError
from ..lower import ir

MAX_INSTANCES = 1 << 24  # 16,777,216 statement instances per call


def _value(e: ir.Expr, sizes: dict) -> int | None:
    """`e` at these sizes, or None where it reads anything else."""
    if isinstance(e, ir.Imm):
        return int(e.value)
    if isinstance(e, ir.Var):
        return int(sizes[e.name]) if e.name in sizes else None
    if isinstance(e, ir.Bin) and e.op in ("+", "-", "*", "/", "min", "max"):
        a, b = _value(e.a, sizes), _value(e.b, sizes)
        if a is None or b is None:
            return None
        if e.op == "/":
            return a // b if b else None
        return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


def _stores(s: ir.Stmt, sizes: dict) -> int:
    """Instances of the stores in `s` per thread."""
    if isinstance(s, ir.Store):
        return 1
    n = sum(_stores(c, sizes) for c in ir.children(s) if isinstance(c, ir.Stmt))
    if isinstance(s, ir.For) and s.kind != "thread":
        extent = _value(s.extent, sizes)
        n *= 1 if extent is None else max(0, extent)
    return n


def instances(k: ir.Kernel, sizes: dict) -> int:
    """Statement instances of one launch of `k` at `sizes` (module docstring)."""
    threads = 1
    for d in (*k.grid, *k.block):
        v = _value(d, sizes)
        threads *= 1 if v is None else max(0, v)
    return threads * _stores(k.body, sizes)


def check(prog: ir.Program, sizes: dict, limit: int | None) -> None:
    """Raise SimError when a run of `prog` at `sizes` is more than `limit`
    statement instances (None: no limit)."""
    if limit is None:
        return
    total = sum(instances(k, sizes) for k in prog.kernels)
    if total > limit:
        shown = ", ".join(f"{n}={v}" for n, v in sizes.items())
        raise SimError(f"sim: '{prog.name}' at {shown} would run {total:,} statement instances, "
                       f"more than the sim's limit of {limit:,} (the sim runs a few million a "
                       f"second, far fewer along serial loops); run smaller sizes, bind loops "
                       f"to threads, or raise the limit: k.max_instances = {total} (None: no "
                       f"limit)")
