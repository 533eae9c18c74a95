"""How much work a run of a program on the sim is, checked before it starts.

The sim executes every statement instance in Python and NumPy: a few million
instances a second spread over threads (a block's lanes run together), a few
thousand a second along a serial loop. N = 10^7 in a serial loop ran for many
minutes without a word. So a call counts the instances first and refuses to
start past `MAX_INSTANCES` in all, or past `MAX_THREAD_STEPS` instances in
one thread (the serial work, which is what is slow), with a SimError naming
the count, the limit and the remedies. A kernel's limits are its
`max_instances` and `max_thread_steps` attributes (tcomp.build sets them to
these defaults; None removes one).

Instances of a store: the threads of its launch (grid x block) times the
extents of the serial and unrolled loops around it, at the call's sizes.
An extent that depends on an enclosing loop's variable (a triangular nest)
counts as 1, so the count is a lower bound there: the guard refuses no
launch smaller than its limit.
"""
from __future__ import annotations

from ..errors import SimError
from ..lower import ir

MAX_INSTANCES = 1 << 26     # 67,108,864 statement instances per call
MAX_THREAD_STEPS = 1 << 21  # 2,097,152 of them in one thread


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


def instances(k: ir.Kernel, sizes: dict) -> tuple[int, int]:
    """Statement instances of one launch of `k` at `sizes`, in all and in one
    thread (module docstring)."""
    threads = 1
    for d in (*k.grid, *k.block):
        v = _value(d, sizes)
        threads *= 1 if v is None else max(0, v)
    steps = _stores(k.body, sizes)
    return threads * steps, steps


def check(prog: ir.Program, sizes: dict, limit: int | None, thread_limit: int | None) -> None:
    """Raise SimError when a run of `prog` at `sizes` is more than `limit`
    statement instances, or more than `thread_limit` in one thread (None: no
    limit)."""
    counts = [instances(k, sizes) for k in prog.kernels]
    total, steps = sum(c[0] for c in counts), sum(c[1] for c in counts)
    shown = ", ".join(f"{n}={v}" for n, v in sizes.items())
    if limit is not None and total > limit:
        raise SimError(f"sim: '{prog.name}' at {shown} would run {total:,} statement instances, "
                       f"more than the sim's limit of {limit:,} (it runs a few million a "
                       f"second); run smaller sizes, or raise the limit: k.max_instances = "
                       f"{total} (None: no limit)")
    if thread_limit is not None and steps > thread_limit:
        raise SimError(f"sim: '{prog.name}' at {shown} would run {steps:,} statement instances "
                       f"in one thread, more than the sim's limit of {thread_limit:,} (it runs "
                       f"a few thousand a second along a serial loop); bind loops to threads, "
                       f"run smaller sizes, or raise the limit: k.max_thread_steps = {steps} "
                       f"(None: no limit)")
