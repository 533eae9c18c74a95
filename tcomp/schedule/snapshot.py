"""In-place statements: the snapshot stages that give them the old values.

The language says a statement's right-hand side sees the tensor as it was
before the statement (`O(i) = O(i) + O(i - 1)` adds the *old* left
neighbour). A loop nest that writes `O` while it reads `O` breaks that under
almost every schedule: a serial loop reads the neighbour it has just written,
threads and blocks race. So the statement reads a snapshot instead:

    O:          O[i] = A[i]
    O.1.snap:   O_snap[i] = O[i]                  (a copy of all of O)
    O.1:        O[i] = O_snap[i] + O_snap[i - 1]

Where this lives, and why: `Schedule(op)` adds the snapshot stages when it
creates the stages, by one deterministic rule (below), so that
  * every lowering path (loop nests, caches, rfactor, cross-thread
    reductions, pipelining; the sim and CUDA targets) sees an ordinary
    statement that reads a tensor nobody writes while it runs: no part of the
    lowering has to know about in-place updates;
  * the copy is an ordinary stage the user can schedule (split, bind, unroll,
    vectorize its loops; cache_read its buffer for the reader): a default
    schedule copies with one thread like every default stage;
  * `Schedule.from_json` replays: it creates the same stages from the op
    before it applies the recorded directives, which may name them.
A rewrite of the Op itself was the alternative; it would change what
`tcomp.evaluate` and the printer see, and the oracle must stay the plain
semantics.

The rule. A statement that reads the tensor it writes gets a snapshot unless
it is free: it has no reduction index, and every read of its tensor is at
exactly its left-hand side's subscripts (`O(i, j) = O(i, j) * 2.0`, also
`+=`/`+=!` with nothing to reduce). Each point then reads only the element it
writes itself, before writing it, under any loop order or thread mapping. A
reduction that reads its tensor always gets one, since it would see partial
sums wherever the accumulation runs in the tensor (and `+=!` starts by
overwriting it).

The free case stays free only while one stage both reads and writes: after
`cache_write`, one stage computes from the tensor and another writes it (and
a local buffer computed outside the writer's thread loops has every thread
read the elements the others overwrite), so `cache_write` of a statement that
reads its own tensor gives the computing stage a snapshot too ("O.1.snap"
before "O.1.local"; the directive replays it).

The snapshot must be complete before the statement starts writing, so it
stays a kernel of its own: it cannot be inlined or kept in shared or local
memory, and more generally no stage that reads a tensor may be computed
inside a stage that writes it (`check_placement`, run by compute_at and
compute_inline: a snapshot would copy updated values, a cache_read copy of
the tensor would race with the writes). The copy covers the whole tensor (its
shape), which is always correct; copying only the region the statement reads
would be cheaper for a statement that reads a small part of a large tensor.

The sim checks the result: it reports any kernel in which a thread or block
overwrites an element another one read, or reads one another one wrote
(target_sim/races.py), so a lowering that read and wrote one buffer across
threads would fail there rather than pass.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..lang import dtypes
from ..lang.ast import Const, Index, Read, walk
from .stage import StageDef, StageState

ORIGIN = "snapshot"


def self_reads(d: StageDef) -> list[Read]:
    """The reads of the stage's own tensor (right-hand side and where-bindings)."""
    out = []
    for e in [d.rhs, *d.lets.values()]:
        out += [x for x in walk(e) if isinstance(x, Read) and x.tensor == d.tensor]
    return out


def needs_snapshot(d: StageDef) -> bool:
    reads = self_reads(d)
    if not reads or d.ordered:  # an ordered stage reads its own stores (schedule/ordered.py)
        return False
    if d.reduce:
        return True
    exact = tuple(Index(v, dtypes.int32) for v in d.spatial)
    return any(r.args != exact for r in reads)


def add_snapshots(sched) -> None:
    """Give every statement stage that needs one a snapshot stage just before it."""
    items = []
    for name, st in sched.states.items():
        if st.origin == "statement" and needs_snapshot(st.definition):
            snap = read_through_snapshot(sched, name, name)
            items.append((snap.name, snap))
        items.append((name, st))
    sched.states = dict(items)


def read_through_snapshot(sched, base: str, reader: str) -> StageState:
    """A snapshot of the tensor that stage `base` writes, named after `base`,
    for stage `reader`, whose reads of that tensor now read the snapshot. The
    caller places the new stage (just before `reader`)."""
    from .schedule import _rename_reads
    tensor = sched.states[base].tensor
    dtype, shape, _ = sched.tensors[tensor]
    buf, i = f"{tensor}_snap", 1
    while buf in sched.tensors:
        buf, i = f"{tensor}_snap{i}", i + 1
    sched.tensors[buf] = (dtype, shape, "global")
    vars_ = tuple(f"ax{d}" for d in range(len(shape)))
    ranges = {v: (Const(0, dtypes.int32), dim) for v, dim in zip(vars_, shape)}
    rhs = Read(tensor, tuple(Index(v, dtypes.int32) for v in vars_), dtype)
    definition = StageDef(buf, vars_, (), ranges, rhs, None, True, dtype.compute)
    name, i = f"{base}.snap", 1
    while name in sched.states:
        name, i = f"{base}.snap{i}", i + 1
    snap = StageState(name, definition, "global", ORIGIN)
    snap.snapshot = (tensor, reader)
    st = sched.states[reader]
    st.definition = _rename_reads(st.definition, tensor, buf)
    return snap


def snapshot_of(sched, stage: str, tensor: str) -> str | None:
    """The snapshot stage through which `stage` reads `tensor` instead, else None."""
    for name, st in sched.states.items():
        if st.snapshot is not None and st.snapshot[0] == tensor and \
                st.tensor in sched.states[stage].definition.reads():
            return name
    return None


def epilogue_refusal(sched, stage: str, target: str) -> str | None:
    """Why stage `stage`, one of several writers of its tensor, may not be
    computed at `target`'s loops; None when it may: `target` is the next
    statement writing the tensor and updates it in place element by element
    (an *in-place epilogue*: P(i, j) +=! A(i, k) * B(k, j); P(i, j) =
    P(i, j) * s). Then one iteration of any of `target`'s loops reads only
    elements it writes itself, so computing `stage` there, over that region
    (bound inference), gives every element its first value just before its
    update, and nothing else may read the tensor in between. The conditions:
    `target` follows `stage` among the tensor's writers with no writer
    between; `stage` defines the tensor (an initialising statement that does
    not read it, or its cache_write copy); `target` has no reduction, needs
    no snapshot (its every read of the tensor, if any, is at its own
    indices), and ranges over the same indices; no other stage reads the
    tensor between the two."""
    from .primitives import _siblings
    me, tg = sched.states[stage], sched.states[target]
    writers = sched.writers(me.tensor)
    if target not in writers:
        return f"'{target}' does not write '{me.tensor}'"
    order = list(sched.states)
    i, j = order.index(stage), order.index(target)
    if writers.index(target) != writers.index(stage) + 1:
        return f"'{target}' is not the next statement after '{stage}' that writes '{me.tensor}'"
    if not me.definition.init or self_reads(me.definition):
        return f"'{stage}' continues an earlier value of '{me.tensor}'"
    d = tg.definition
    # (an ordered stage reads the points it stored before: not from each element alone)
    if d.reduce or needs_snapshot(d) or tg.snapshot is not None or d.ordered:
        return (f"'{target}' does not update each element of '{me.tensor}' from that element "
                f"alone")
    snap = snapshot_of(sched, target, me.tensor)
    if snap is not None:
        return (f"'{target}' does not update each element of '{me.tensor}' from that element "
                f"alone (it reads other elements through the snapshot '{snap}')")
    if not _siblings(me, tg):
        return f"'{target}' ranges over other indices than '{stage}'"
    between = [n for n in order[i + 1:j] if me.tensor in sched.states[n].definition.reads()]
    if between:
        return f"'{between[0]}' reads '{me.tensor}' between them"
    return None


def reads_through_inlined(sched, st, where=None) -> set:
    """What stage state `st` reads where it is computed: its own reads and
    those of the inlined stages it reads, whose reads happen there (`where`:
    stage name -> placement, to judge a placement before it is made; default
    the current ones)."""
    where = where or (lambda n: sched.states[n].attach)
    reads, todo = set(), [st]
    while todo:
        for t in todo.pop().definition.reads():
            if t in reads:
                continue
            reads.add(t)
            writers = [n for n, s in sched.states.items() if s.tensor == t]
            if len(writers) == 1 and where(writers[0]) == ("inline",):
                todo.append(sched.states[writers[0]])
    return reads


def check_placement(sched, primitive: str, attach: dict) -> None:
    """Raise unless, with the placements in `attach` (stage -> attach,
    overriding the current ones), no snapshot is inlined and no stage that
    reads a tensor is computed inside a stage that writes it (it would read
    the tensor while that stage overwrites it: a snapshot would copy updated
    values, a copy for an in-place statement would race with its writes)."""
    def where(n):
        return attach.get(n, sched.states[n].attach)

    for name, st in sched.states.items():
        if st.snapshot is not None and where(name) == ("inline",):
            src, reader = st.snapshot
            raise ScheduleError(
                f"{primitive}: stage '{name}' is the snapshot of '{src}' that '{reader}' "
                f"reads (it updates '{src}' in place); inlined, it would read "
                f"'{src}' while '{reader}' overwrites it. Keep it at root")
        reads = reads_through_inlined(sched, st, where)
        host, seen = name, {name}
        while where(host)[0] == "at":
            host = where(host)[1]
            if host in seen:
                break
            seen.add(host)
            t = sched.states[host].tensor
            if t not in reads:
                continue
            if st.snapshot is not None:
                src, reader = st.snapshot
                raise ScheduleError(
                    f"{primitive}: stage '{name}' is the snapshot of '{src}' that '{reader}' "
                    f"reads (it updates '{src}' in place); computed inside '{host}', which "
                    f"writes '{src}', it would copy values '{host}' has already overwritten. "
                    f"Keep it at root (split and bind its own loops instead)")
            raise ScheduleError(
                f"{primitive}: stage '{name}' reads '{t}' and would be computed inside "
                f"'{host}', which writes '{t}' (an in-place update): it would read '{t}' while "
                f"'{host}' overwrites it, racing with the threads that write it. Keep "
                f"'{name}' at root, where it runs before '{host}'")
