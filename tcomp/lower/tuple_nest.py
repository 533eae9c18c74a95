"""How a tuple (monoid) reduction's stage accumulates (lang/monoids.py).

Like a register reduction (reduction.py): the state is registers, one per
component (`<T>_acc`), set to the monoid's identity before the reduction
loops; each iteration computes the values into registers (`<T>_v0`, ...),
then the update's steps (`<T>_s0`, ...: monoid_update.py) from the old state,
then copies the new state back; after the loops each component's final value
is stored into its tensor. The reduction loops must be inside every spatial
loop and in one thread (schedule/tuple_stages.py refuses the rest).
"""
from __future__ import annotations

from . import ir, monoid_update as M
from .construct import ident
from .translate import cast


def tuple_accumulation(n, i: int) -> ir.Stmt:
    """The reduction loops from leaf i of StageNest `n`, for a tuple reduction."""
    d, ctx = n.d, n.info.ctx
    fresh = lambda base: ctx.fresh(base, n.prefix)  # noqa: E731
    z = (ir.const(0),)
    head = ident(d.tensor)
    accs = d.accs
    acc = [fresh(f"{ident(t)}_acc") for t in d.tensors]
    vts = M.value_types(d.monoid, accs, len(d.rhs.items))
    vals = [fresh(f"{head}_v{j}") for j in range(len(vts))]
    state = [ir.Load(a, z, t) for a, t in zip(acc, accs)]
    vloads = [ir.Load(v, z, t) for v, t in zip(vals, vts)]
    regs: dict[int, tuple[str, object]] = {}  # step j -> (its register, its type)

    def step(j, dt):
        if j not in regs:
            regs[j] = (fresh(f"{head}_s{j}"), dt)
        return ir.Load(regs[j][0], z, dt)
    exprs, out = M.update(d.monoid, accs, state, vloads, step)
    for j, e in enumerate(exprs):
        step(j, e.dtype)
    bufs = [ir.Buffer(a, t, (ir.const(1),), "local") for a, t in zip(acc, accs)]
    bufs += [ir.Buffer(v, t, (ir.const(1),), "local") for v, t in zip(vals, vts)]
    bufs += [ir.Buffer(r, t, (ir.const(1),), "local") for r, t in regs.values()]

    def body():
        # (translated inside the loops, after the stages computed at them registered views)
        s = [ir.Store(v, z, cast(n.tr(e), t), loc=n.loc)
             for v, e, t in zip(vals, d.rhs.items, vts)]
        s += [ir.Store(regs[j][0], z, e) for j, e in enumerate(exprs)]
        s += [ir.Store(a, z, step(j, t)) for a, j, t in zip(acc, out, accs)]
        return n.guarded(n.allg, ir.seq(*s))
    inner = n.reduction_loops(i, body)
    init = ir.seq(*[ir.Store(a, z, e) for a, e in zip(acc, M.identity(d.monoid, accs))])
    stores = []
    for k, (tensor, v) in enumerate(zip(d.tensors, M.final(d.monoid, accs, state))):
        target = n.target if k == 0 else tensor
        dt = n.b.sched.tensors[tensor][0]
        stores.append(ir.Store(target, n.store_idx, cast(v, dt), loc=n.loc))
    s = ir.seq(n.guarded(n.sg, init), inner, n.guarded(n.sg, ir.seq(*stores)))
    for b in reversed(bufs):
        s = ir.Alloc(b, s)
    return s
