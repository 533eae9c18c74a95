"""The sim's mbarriers (buffers of scope "barrier", lower/intrinsics_sm90.py).

An mbarrier counts a phase: it completes when its `count` expected arrivals
have arrived and the transaction bytes announced by `mbarrier_expect_tx`
have been delivered by TMA loads (tma.py: a load delivers its box's bytes
when it is issued, and its data is readable by those who waited for the
phase). Then the next phase starts, expecting `count` arrivals again.

    mbarrier_init(&bar, count)      arrivals per phase; phase 0 in progress
    mbarrier_arrive(&bar)           one arrival per thread that executes it
    mbarrier_expect_tx(&bar, n)     n transaction bytes expected, and an arrival
    mbarrier_wait(&bar, parity)     returns when the phase of that parity has
                                    completed: while the phase in progress has
                                    that parity it blocks; otherwise the last
                                    completed phase has it (on a fresh barrier,
                                    parity 1 returns at once: phase -1, the
                                    producer's start convention, as on the GPU)

Checked: a barrier used before its init; more arrivals in a phase than its
count (while bytes are outstanding); more bytes delivered than announced
(an expect-tx count smaller than the copies); a parity other than 0 or 1;
threads of one wait naming different barriers. A phase that never completes
shows in the deadlock report (tasks.py), which says for each blocked task
the barrier, the parity it waits for, the phase in progress, the arrivals
and the transaction bytes still missing.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import ir
from .sync import Blocked, sync_of


class MBar:
    __slots__ = ("count", "pending", "tx", "expected", "delivered", "phase", "inited",
                 "clock", "done_clock", "arrivers", "done_arrivers")

    def __init__(self):
        self.inited = False
        self.count = self.pending = self.tx = self.expected = self.delivered = self.phase = 0
        self.clock = self.done_clock = None
        self.arrivers, self.done_arrivers = set(), set()

    def state(self) -> str:
        """The phase in progress, as the deadlock report says it."""
        out = (f"its phase {self.phase} (parity {self.phase % 2}) is in progress with "
               f"{self.pending} of {self.count} arrivals missing")
        if self.expected or self.delivered:
            out += (f" and {self.tx} of {self.expected} transaction bytes not delivered "
                    f"({self.delivered} delivered)")
            if self.pending == 0 and self.tx > 0:
                out += ": the expect_tx count is larger than the bytes its copies move, or a " \
                       "copy is missing"
        return out


class Barriers:
    """The handle of a "barrier" scope buffer in the block's memory."""

    def __init__(self, buf, shape):
        self.buf, self.shape = buf, shape
        self.size = int(np.prod(shape, dtype=np.int64))
        self.bars = [MBar() for _ in range(self.size)]


def barrier_args(ex, ref: ir.Expr, fn: str):
    """A closure giving (handle, flat element per active lane, active lanes)."""
    if not isinstance(ref, ir.Ref):
        raise SimError(f"kernel {ex.kname}: {fn} takes a reference to an mbarrier (&bar[i])")
    name, idx = ref.buffer, [ex.compile_expr(i) for i in ref.indices]

    def get(env, mask):
        h = ex.mem.get(name)
        if not isinstance(h, Barriers):
            raise SimError(f"kernel {ex.kname}: {fn} on '{name}', which is not a buffer of scope "
                           f"\"barrier\" allocated here")
        _, off = ex.offsets(name, [f(env, mask) for f in idx], h.shape, mask, f"{fn} on")
        lanes = ex.lane if mask is None else np.flatnonzero(mask)
        off = np.broadcast_to(np.asarray(off, np.int64), (ex.L,))[lanes]
        return h, off, lanes
    return name, get


def _bar(ex, name, h, elem, fn):
    b = h.bars[elem]
    if not b.inited:
        raise SimError(f"kernel {ex.kname}: {fn} on mbarrier {name}[{elem}] before its "
                       f"mbarrier_init")
    return b


def uniform(ex, v, lanes, what: str) -> int:
    """The one value of `v` over the active lanes (a SimError if they differ)."""
    a = np.asarray(v)
    if a.ndim:
        a = a[lanes]
        if a.size and (a != a[0]).any():
            raise SimError(f"kernel {ex.kname}: {what} differs between the threads that execute "
                           f"it together")
        return int(a[0]) if a.size else 0
    return int(a)


def arrive(ex, name, elem, b: MBar, tx: int = 0) -> None:
    """One arrival (and `tx` expected bytes) of the running task or lock-step code."""
    sync = sync_of(ex)
    what = f"mbarrier {name}[{elem}]"
    b.tx += tx
    b.expected += tx
    if b.pending == 0:
        raise SimError(f"kernel {ex.kname}: an arrival on {what} in phase {b.phase} after all "
                       f"its {b.count} expected arrivals (an extra arrive, or an init count "
                       f"too small)")
    b.pending -= 1
    c = sync.release()
    if c is not None:
        b.clock = c if b.clock is None else np.maximum(b.clock, c)
        b.arrivers.add(sync.task.index)
    settle(ex, what, b)


def deliver(ex, what: str, b: MBar, nbytes: int) -> None:
    """A TMA load's bytes reach the barrier (complete_tx)."""
    b.tx -= nbytes
    b.delivered += nbytes
    settle(ex, what, b)


def settle(ex, what: str, b: MBar) -> None:
    if b.pending:
        return
    if b.tx < 0:
        raise SimError(f"kernel {ex.kname}: TMA loads delivered {b.delivered} bytes to {what} in "
                       f"phase {b.phase}, but mbarrier_expect_tx announced {b.expected}: the "
                       f"expect-tx byte count does not match the copies (it must be the sum of "
                       f"their boxes' bytes)")
    if b.tx == 0:
        b.phase += 1
        b.pending, b.expected, b.delivered = b.count, 0, 0
        b.done_clock, b.clock = b.clock, None
        b.done_arrivers, b.arrivers = b.arrivers, set()


# ------------------------------------------------------------------ rules
def _init(ex, s):
    ref, count = s.call.args
    name, get = barrier_args(ex, ref, "mbarrier_init")
    cnt = ex.compile_expr(count)

    def init(env, mask):
        h, off, lanes = get(env, mask)
        n = uniform(ex, cnt(env, mask), lanes, "mbarrier_init's count")
        if n < 1:
            raise SimError(f"kernel {ex.kname}: mbarrier_init of {name} with count {n} (at least "
                           f"one arrival per phase)")
        for e in np.unique(off):
            b = h.bars[int(e)]
            b.__init__()
            b.inited, b.count, b.pending = True, n, n
    return init


def _arrive(ex, s):
    name, get = barrier_args(ex, s.call.args[0], "mbarrier_arrive")

    def run(env, mask):
        h, off, lanes = get(env, mask)
        for e in off:
            arrive(ex, name, int(e), _bar(ex, name, h, int(e), "mbarrier_arrive"))
    return run


def _expect_tx(ex, s):
    ref, nbytes = s.call.args
    name, get = barrier_args(ex, ref, "mbarrier_expect_tx")
    nb = ex.compile_expr(nbytes)

    def run(env, mask):
        h, off, lanes = get(env, mask)
        n = np.broadcast_to(np.asarray(nb(env, mask), np.int64), (ex.L,))[lanes]
        for e, k in zip(off, n):
            if k < 0:
                raise SimError(f"kernel {ex.kname}: mbarrier_expect_tx of {int(k)} bytes")
            arrive(ex, name, int(e), _bar(ex, name, h, int(e), "mbarrier_expect_tx"), int(k))
    return run


def _wait(ex, s):
    """A generator: yields Blocked while the phase of the parity is in progress."""
    ref, parity = s.call.args
    name, get = barrier_args(ex, ref, "mbarrier_wait")
    par = ex.compile_expr(parity)

    def wait(env, mask):
        h, off, lanes = get(env, mask)
        if not off.size:
            return
        elem = uniform(ex, off, slice(None), "the mbarrier of an mbarrier_wait")
        p = uniform(ex, par(env, mask), lanes, "mbarrier_wait's parity")
        if p not in (0, 1):
            raise SimError(f"kernel {ex.kname}: mbarrier_wait on {name}[{elem}] with parity {p} "
                           f"(a parity is 0 or 1)")
        b = _bar(ex, name, h, elem, "mbarrier_wait")
        if b.phase % 2 == p:
            sync = sync_of(ex)
            what, seen = f"{name}[{elem}]", sync.seen(sync.bar_id(name, elem))
            yield Blocked(lambda: b.phase % 2 != p,
                          lambda: f"mbarrier_wait on {what} for parity {p}: {b.state()}"
                                  f"{_skipped(b, seen)}")
        _observe(ex, h, name, elem, b, p)
    return wait


def _skipped(b: MBar, seen: int) -> str:
    """The deadlock report's hint for a waiter that let a phase go by."""
    if b.phase == 0:
        return ("; nothing has completed yet (on a fresh barrier, a wait for parity 1 returns "
                "at once: the producer's start convention)")
    if seen < b.phase - 1:
        return (f"; phase {b.phase - 1} completed without this task waiting for it (a wrong "
                f"parity, or a producer that ran a whole ring ahead: a missing wait on the "
                f"slot's empty barrier)")
    return ""


def _observe(ex, h, name, elem, b: MBar, parity: int) -> None:
    """The wait returned: the last completed phase is observed. Returning
    again for a phase this waiter already waited for is a parity that does
    not alternate: on the GPU it returns at once and the waiter goes on
    with what that phase delivered (stale data)."""
    sync = sync_of(ex)
    bid, done = sync.bar_id(name, elem), b.phase - 1
    obs = sync.observer()
    seen = sync.observed[obs]
    if done >= 0 and seen.get(bid, -1) >= done:
        who = "" if sync.task is None else f" by {sync.task.describe()}"
        raise SimError(f"kernel {ex.kname}: mbarrier_wait on {name}[{elem}] for parity {parity}"
                       f"{who} returned at once for phase {done}, which it had already waited "
                       f"for: a wrong parity (the phase in progress is {b.phase}, parity "
                       f"{b.phase % 2}; the parity of successive waits on a barrier alternates)")
    seen[bid] = max(seen.get(bid, -1), done)
    sync.last_wait[(obs, bid)] = (parity, done)
    if done >= 0:
        sync.acquire(b.done_clock)
        if sync.task is not None and b.done_arrivers:
            lanes = np.zeros(ex.L, bool)
            for t in sync.tasks:
                if t.index in b.done_arrivers or t is sync.task:
                    lanes |= t.lanes
            sync.reset_thread_marks(lanes)


def _no_op(ex, s):
    def run(env, mask):
        return None
    return run


RULES = {"mbarrier_init": _init, "mbarrier_arrive": _arrive,
         "mbarrier_expect_tx": _expect_tx, "fence_mbarrier_init": _no_op}
BLOCKING = {"mbarrier_wait": _wait}
