"""Per-block state of the sim's Hopper mechanisms (mbarriers, named barriers,
TMA, wgmma): who is running, what each task has observed, and the
happens-before order between the tasks of a `Specialize` (tasks.py).

A kernel that uses any of them runs one block per batch (executor.py), so
the state here belongs to one block. Happens-before is kept with vector
clocks (one entry per task): a task's release (an mbarrier arrive, a named
barrier) carries its clock into the barrier and advances its own entry; a
wait that returns joins the clock of the phase it observed. An access of
shared memory by task `u` is stamped with `u`'s own entry, so a later write
by task `p` is ordered after it when `p`'s clock has reached that stamp.
Lock-step code (outside a Specialize) has no clock: it runs before or after
every task.

`observed[observer]` maps a barrier (its id, `bar_id`) to the last phase the
observer's waits returned for: a read of a TMA destination needs the phase
its copy completes on to have been observed (tma.py). The observer is the
running task, or None for lock-step code.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import ir

INFLIGHT = np.iinfo(np.int64).max  # a read stamp while the read is in flight (wgmma)


class Task:
    """One warpgroup of a role: its lanes run together, as a generator that
    yields a `Blocked` whenever it has to wait."""

    def __init__(self, index: int, role, k: int, lanes: np.ndarray, gen, ntasks: int):
        self.index, self.role, self.k = index, role, k
        self.warpgroup = role.first + k
        self.name = role.name if role.count == 1 else f"{role.name} {k}"
        self.lanes, self.gen = lanes, gen
        self.clock = np.zeros(ntasks, np.int64)
        self.clock[index] = 1  # its accesses before its first release are ordered for no one
        self.blocked = None

    def describe(self) -> str:
        first = 128 * self.warpgroup
        return f"{self.name} (warpgroup {self.warpgroup}, threads {first}..{first + 127})"


class Blocked:
    """Why a task cannot go on: `ready()` says when it can, `what()` says why
    not (the deadlock report)."""

    def __init__(self, ready, what):
        self.ready, self.what = ready, what


ALWAYS = Blocked(lambda: True, lambda: "nothing")  # a yield point that never waits


class BlockSync:
    def __init__(self, launch):
        self.launch = launch
        self.batch = launch.batch
        self.task: Task | None = None
        self.tasks: list[Task] = []
        self.observed: dict = {None: {}}
        self.last_wait: dict = {}   # (observer, bar id) -> (parity, phase it returned for)
        self.bar_ids: dict = {}     # (buffer, element) -> id
        self.bar_names: list = []
        self.fences = np.zeros(launch.L, np.int64)  # fence_proxy_async count per lane
        self.named: dict = {}       # named barrier id -> NamedBarrier (tasks.py)
        self.wgmma: dict = {}       # warpgroup -> wgmma.Queue
        self.stores: dict = {}      # lane -> tma.StoreQueue

    # ------------------------------------------------------------ identities
    def bar_id(self, name: str, elem: int) -> int:
        key = (name, elem)
        i = self.bar_ids.get(key)
        if i is None:
            i = self.bar_ids[key] = len(self.bar_names)
            self.bar_names.append(f"{name}[{elem}]")
        return i

    def observer(self):
        return None if self.task is None else self.task.index

    def seen(self, bar: int, observer="current") -> int:
        obs = self.observer() if observer == "current" else observer
        return self.observed[obs].get(bar, -1)

    # ------------------------------------------------------------ tasks
    def start_tasks(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        for t in tasks:
            self.observed[t.index] = dict(self.observed[None])

    def end_tasks(self) -> None:
        """The Specialize is over: lock-step code after it has seen what every
        task saw."""
        for t in self.tasks:
            for bar, ph in self.observed.pop(t.index, {}).items():
                self.observed[None][bar] = max(self.observed[None].get(bar, -1), ph)
        self.tasks, self.task = [], None

    # ------------------------------------------------------------ clocks
    def release(self):
        """The running task's clock for a barrier to carry (None in lock-step
        code); its own entry advances."""
        t = self.task
        if t is None:
            return None
        c = t.clock.copy()
        t.clock[t.index] += 1
        return c

    def acquire(self, clock) -> None:
        if self.task is not None and clock is not None:
            np.maximum(self.task.clock, clock, out=self.task.clock)

    def stamp(self) -> int | None:
        """The running task's own clock entry (what its accesses are stamped with)."""
        t = self.task
        return None if t is None else int(t.clock[t.index])

    def ordered_before_me(self, u: int, stamp) -> np.ndarray:
        """Which stamps of task `u`'s reads happen before the running task now."""
        t = self.task
        if t is None or u == t.index:
            return stamp != INFLIGHT
        return stamp <= t.clock[u]

    def task_named(self, u: int) -> str:
        for t in self.tasks:
            if t.index == u:
                return t.describe()
        return f"task {u}"

    def reset_thread_marks(self, lanes: np.ndarray) -> None:
        """Forget the block's per-thread race marks of threads `lanes` (bool
        over the lanes), and marks of several threads: a barrier between
        them (named barrier, an mbarrier phase) orders what they did."""
        from .memory import NOBODY, SEVERAL, Shared
        tids = np.flatnonzero(lanes)
        for h in self.launch.mem.values():
            if isinstance(h, Shared):
                for table in (h.fwriter, h.freader):
                    hit = (table == SEVERAL) | np.isin(table, tids)
                    table[hit] = NOBODY


def sync_of(launch) -> BlockSync:
    """The running block's state (made on first use)."""
    s = getattr(launch, "sync", None)
    if s is None or s.batch is not launch.batch:
        s = launch.sync = BlockSync(launch)
    return s


def group_count(kname: str, call) -> int:
    """The constant `n` of a wait for all but the n newest groups (cp_async_wait,
    tma_store_wait, wgmma_wait): the groups a thread keeps are known when the
    sim compiles the statement."""
    (n,) = call.args
    if not isinstance(n, ir.Imm):
        raise SimError(f"kernel {kname}: {call.fn} needs a constant group count")
    return int(n.value)
