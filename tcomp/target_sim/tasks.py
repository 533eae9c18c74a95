"""Warp specialisation in the sim: a `Specialize` runs each warpgroup of each
role as a cooperative task.

A task is the warpgroup's 128 threads executing the role's body together (in
lock-step, as the executor runs a block: masks for divergent `if`s). It runs
until it blocks: an `mbarrier_wait` on a phase in progress (mbarriers.py), a
`named_barrier` its count of threads has not reached yet, or a
`tma_store_wait` / `wgmma_wait` (the asynchronous unit finishes there, and
the other tasks get a turn first). Then the next task in order (roles in
order, warpgroups in order) that can go on runs; when every task is blocked,
the sim reports a deadlock, naming for each task what it waits for (the
barrier, the parity it expects, the phase in progress, the arrivals and
transaction bytes missing). Everything outside a Specialize keeps the
executor's lock-step semantics; there a blocking intrinsic that cannot go on
at once is a deadlock too (no other task could release it).

Statements on the path to a blocking intrinsic are compiled into generators
(`compile_task`); the others are the executor's closures, called as they are.
Each task has its own variable bindings (a copy of the block's at the
Specialize), the role's variable bound to its index within the role.

Named barriers (`named_barrier(id, count)`, bar.sync): the threads of whole
warps arrive; the barrier opens when `count` threads have arrived, ordering
everything its participants did before it (their race marks are cleared and
their clocks joined, sync.py). Arrivals with different counts at one id, or
more threads than the count, are errors.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import intrinsics, ir
from ..lower.rewriter import walk_stmts
from .mbarriers import uniform
from .sync import ALWAYS, Blocked, Task, sync_of

WARPGROUP = 128
_UNSET = object()


def blocks(s: ir.Stmt) -> bool:
    """Whether statement `s` contains a blocking intrinsic."""
    for x in walk_stmts(s):
        if isinstance(x, ir.Evaluate):
            e = intrinsics.of(x)
            if e is not None and "blocking" in e.effects:
                return True
    return False


# ------------------------------------------------------------------ Specialize
def compile_specialize(ex, s: ir.Specialize):
    roles = [(r, _scoped(ex, r.var, r.body)) for r in s.roles]
    kname = ex.kname

    def specialize(env, mask):
        if mask is not None and not mask.all():
            raise SimError(f"kernel {kname}: a Specialize reached by only some threads of the "
                           f"block (every thread must reach it)")
        sync = sync_of(ex)
        if sync.task is not None or sync.tasks:
            raise SimError(f"kernel {kname}: a Specialize inside a role")
        wg = ex.tid // WARPGROUP
        ntasks = sum(r.count for r, _ in roles)
        tasks = []
        for r, body in roles:
            for k in range(r.count):
                lanes = wg == r.first + k
                tenv = dict(env)
                tenv[r.var] = np.int32(k)
                tasks.append(Task(len(tasks), r, k, lanes, body(tenv, lanes), ntasks))
        sync.start_tasks(tasks)
        try:
            _schedule(ex, sync, tasks)
        finally:
            sync.end_tasks()
    return specialize


def _schedule(ex, sync, tasks) -> None:
    live = list(tasks)
    while live:
        ran = False
        for t in list(live):
            if t.blocked is not None and not t.blocked.ready():
                continue
            ran = True
            sync.task = t
            try:
                t.blocked = next(t.gen)
            except StopIteration:
                live.remove(t)
            finally:
                sync.task = None
        if not ran:
            lines = "\n".join(f"  {t.describe()}: {t.blocked.what()}" for t in live)
            raise SimError(f"kernel {ex.kname}: deadlock in block {ex._block(0)}: every task is "
                           f"blocked\n{lines}")


def lockstep(gen_rule):
    """A blocking rule for lock-step code: its generator runs to its end; a
    wait that cannot be satisfied now never will be (no other task runs)."""
    def rule(ex, s):
        g = gen_rule(ex, s)

        def run(env, mask):
            for b in g(env, mask):
                if not b.ready():
                    raise SimError(f"kernel {ex.kname}: deadlock in block {ex._block(0)} "
                                   f"(outside a Specialize, nothing else runs): {b.what()}")
        return run
    return rule


# ------------------------------------------------------------------ generators
def compile_task(ex, s: ir.Stmt):
    """(is_generator, closure) for statement `s` of a role's body."""
    if not blocks(s):
        return False, ex.compile_stmt(s)
    method = _G.get(type(s))
    if method is None:
        kname, what = ex.kname, type(s).__name__

        def unknown(env, mask):
            raise SimError(f"kernel {kname}: the sim cannot run a blocking intrinsic inside "
                           f"{what} in a role")
            yield
        return True, unknown
    return True, method(ex, s)


def _scoped(ex, var, body):
    """A generator function for `body` with `var` bound per task (not invariant)."""
    was, outer = var in ex.invariant, ex.scope_id
    ex.invariant.discard(var)
    ex.scope_id = next(ex.scopes)
    try:
        is_gen, f = compile_task(ex, body)
    finally:
        (ex.invariant.add if was else ex.invariant.discard)(var)
        ex.scope_id = outer
    return f if is_gen else _as_generator(f)


def _as_generator(f):
    def g(env, mask):
        f(env, mask)
        return
        yield
    return g


def _g_Seq(ex, s):
    parts = [compile_task(ex, x) for x in s.stmts]

    def seq(env, mask):
        for is_gen, f in parts:
            if is_gen:
                yield from f(env, mask)
            else:
                f(env, mask)
    return seq


def _g_Let(ex, s):
    value, inv = ex._compile(s.value)
    saved = ex.coverage.enter_let(s)
    was, outer = s.var in ex.invariant, ex.scope_id
    (ex.invariant.add if inv else ex.invariant.discard)(s.var)
    ex.scope_id = next(ex.scopes)
    try:
        is_gen, body = compile_task(ex, s.body)
    finally:
        (ex.invariant.add if was else ex.invariant.discard)(s.var)
        ex.scope_id = outer
        ex.coverage.leave_let(saved)
    var = s.var

    def let(env, mask):
        v = value(env, mask)
        if isinstance(v, np.ndarray) and v.base is not None:
            v = v.copy()
        old = env.get(var, _UNSET)
        env[var] = v
        yield from body(env, mask)
        _restore(env, var, old)
    return let


def _g_For(ex, s):
    lo, ext = ex.compile_expr(s.lo), ex.compile_expr(s.extent)
    body, var = _scoped(ex, s.var, s.body), s.var

    def loop(env, mask):
        a = int(ex._block_uniform(lo(env, mask), mask, s, s.lo))
        n = int(ex._block_uniform(ext(env, mask), mask, s, s.extent))
        old = env.get(var, _UNSET)
        for i in range(a, a + max(n, 0)):
            env[var] = np.int32(i)
            yield from body(env, mask)
        _restore(env, var, old)
    return loop


def _g_If(ex, s):
    cond = ex.compile_expr(s.cond)
    then = compile_task(ex, s.then)
    else_ = compile_task(ex, s.else_) if s.else_ is not None else None

    def run(part, env, mask):
        is_gen, f = part
        if is_gen:
            yield from f(env, mask)
        else:
            f(env, mask)

    def branch(env, mask):
        c = cond(env, mask)
        if np.ndim(c) == 0:
            if c:
                yield from run(then, env, mask)
            elif else_ is not None:
                yield from run(else_, env, mask)
            return
        m1 = c if mask is None else mask & c
        if m1.any():
            yield from run(then, env, None if m1.all() else m1)
        if else_ is not None:
            m2 = ~c if mask is None else mask & ~c
            if m2.any():
                yield from run(else_, env, None if m2.all() else m2)
    return branch


def _g_Evaluate(ex, s):
    from .intrinsics import BLOCKING
    entry = intrinsics.of(s)
    return BLOCKING[entry.name](ex, s)


_G = {ir.Seq: _g_Seq, ir.Let: _g_Let, ir.For: _g_For, ir.If: _g_If, ir.Evaluate: _g_Evaluate}


def _restore(env, var, old):
    if old is _UNSET:
        env.pop(var, None)
    else:
        env[var] = old


# ------------------------------------------------------------------ named barriers
class NamedBarrier:
    def __init__(self):
        self.count = self.arrived = self.generation = 0
        self.lanes = None
        self.clock = self.done_clock = None


def named_barrier(ex, s, wait: bool = True):
    """A generator: the running warps arrive; it blocks until `count` have
    (`wait`; named_barrier_arrive: they go on, and what they did before
    happens before what the waiting threads do after the phase)."""
    idf, cntf = (ex.compile_expr(a) for a in s.call.args)

    def run(env, mask):
        lanes = ex.lane if mask is None else np.flatnonzero(mask)
        bid = uniform(ex, idf(env, mask), lanes, "named_barrier's id")
        count = uniform(ex, cntf(env, mask), lanes, "named_barrier's count")
        if not 0 <= bid < 16 or count <= 0 or count % 32:
            raise SimError(f"kernel {ex.kname}: named_barrier({bid}, {count}): ids are 0..15 and "
                           f"the count a positive multiple of 32 (whole warps)")
        active = np.zeros(ex.L, bool)
        active[lanes] = True
        warps = active.reshape(-1, 32)
        some, every = warps.any(axis=1), warps.all(axis=1)
        if (some & ~every).any():
            w = int(np.argmax(some & ~every))
            raise SimError(f"kernel {ex.kname}: named_barrier {bid} reached by only some lanes "
                           f"of warp {w} (block {ex._block(0)}); whole warps arrive")
        sync = sync_of(ex)
        nb = sync.named.setdefault(bid, NamedBarrier())
        if nb.arrived and nb.count != count:
            raise SimError(f"kernel {ex.kname}: named_barrier {bid} reached with count {count} "
                           f"while {nb.arrived} threads wait on it with count {nb.count}")
        nb.count = count
        nb.arrived += 32 * int(some.sum())
        nb.lanes = active if nb.lanes is None else nb.lanes | active
        c = sync.release()
        if c is not None:
            nb.clock = c if nb.clock is None else np.maximum(nb.clock, c)
        if nb.arrived > count:
            raise SimError(f"kernel {ex.kname}: {nb.arrived} threads reached named_barrier "
                           f"{bid}, whose count is {count}")
        gen = nb.generation
        if nb.arrived == count:
            nb.generation += 1
            nb.arrived, nb.done_clock, nb.clock = 0, nb.clock, None
            sync.reset_thread_marks(nb.lanes)
            nb.lanes = None
            yield ALWAYS  # the others waiting go on; so does this task, after them
        elif not wait:
            return
        else:
            yield Blocked(lambda: nb.generation != gen,
                          lambda: f"named_barrier {bid}: {nb.arrived} of its {count} threads "
                                  f"have arrived")
        if wait:
            sync.acquire(nb.done_clock)
    return run


def named_barrier_arrive(ex, s):
    return named_barrier(ex, s, wait=False)
