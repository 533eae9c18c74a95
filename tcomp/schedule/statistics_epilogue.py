"""`epilogue` of a stage over an online-softmax stage's running statistics
(schedule/primitives_hopper.py dispatches here): after `online_softmax`, a
tuple stage such as attention's O.online keeps each row's running max and
sum; the (M, L) stage the rewrite leaves when something else reads M or L
(the log-sum-exp L(z, i) = mx(z, i) + log(l(z, i))) computes the same two
values. `O.online.epilogue(L)` says: that stage is not computed on its own,
its values are O.online's statistics, and L is computed from them when each
tile is done (lower/hopper_attention_plan.py writes it from the registers).

    mx, l: for z, i: expsum over j of x(z, i, j)          (stage mx)
    L:     for z, i: L[z, i] = mx[z, i] + log(l[z, i])
    --O.online.epilogue(L)-->  O.online: ... m_run, l_run; L[tile rows] = m_run + log(l_run)
"""
from __future__ import annotations

from ..errors import ScheduleError

P = "epilogue"


def statistics_stage(sched, s, e):
    """The stage whose tensors stage state `e` reads, when `e` reads only a
    stage other than `s` (the statistics case), else None."""
    read = set(e.definition.reads())
    writers = {w for t in read for w in sched.writers(t)}
    if len(writers) != 1 or s.name in writers:
        return None
    (w,) = writers
    st = sched.states[w]
    return st if read <= set(st.definition.tensors) else None


def attach(stage, e_stage, stats) -> None:
    """`stage.epilogue(e_stage)` where e_stage reads only `stats` (a stage
    state): check that stats is stage's running statistics, then attach both
    to stage's kernel."""
    from .primitives_hopper import _reads_elsewhere
    sched, s, e = stage._sched, stage._s, e_stage._s
    t, d, sd = s.definition, e.definition, stats.definition
    name, ename = stage.name, e_stage.name
    if getattr(s, "row_epilogue", None):
        raise ScheduleError(f"{P}: stage '{name}' has the statistics epilogue "
                            f"'{s.row_epilogue}' already")
    k = len(d.spatial)
    if d.reduce or d.reduce_op is not None or tuple(d.spatial) != tuple(t.spatial[:k]) or \
            k >= len(t.spatial):
        raise ScheduleError(f"{P}: stage '{ename}' reads '{stats.name}', not '{name}'; it must "
                            f"be elementwise over the leading indices ({', '.join(t.spatial[:-1])}"
                            f") of '{name}' to be computed from its running statistics")
    same = (t.monoid is not None and t.monoid == sd.monoid and sd.monoid == "expsum"
            and tuple(sd.reduce) == tuple(t.reduce) and tuple(sd.spatial) == tuple(d.spatial)
            and len(sd.rhs.items) == 1 and sd.rhs.items[0] == t.rhs.items[0]
            and dict(sd.lets) == dict(t.lets)
            and all(sd.ranges[v] == t.ranges[v] for v in (*sd.spatial, *sd.reduce)))
    if not same:
        raise ScheduleError(f"{P}: stage '{ename}' reads '{stats.name}', which is not the "
                            f"running max and sum of '{name}' (the same expsum of the same "
                            f"values over the same axes, as online_softmax leaves it); only those "
                            f"statistics are kept by '{name}'")
    outs = {x.name for x in sched.op.outputs + sched.op.inputs}
    for tensor in sd.tensors:
        others = [r for r in sched.readers(tensor) if r != ename]
        if tensor in outs or others:
            raise ScheduleError(f"{P}: '{tensor}' is "
                                + ("an output" if tensor in outs else
                                   f"also read by stage '{others[0]}'")
                                + f"; the statistics of '{name}' can feed its epilogue only")
        bad = _reads_elsewhere(d, tensor)
        if bad:
            raise ScheduleError(f"{P}: stage '{ename}' reads '{tensor}' at ({bad}), not at "
                                f"its own indices ({', '.join(d.spatial)})")
    for st in (e, stats):
        if st.attach != ("root",) or st.transformed():
            raise ScheduleError(f"{P}: stage '{st.name}' must be unscheduled (computed at root, "
                                f"no loop transformations): the kernel of '{name}' computes it")
    s.row_epilogue = ename
    e.attach = ("epilogue", name)
    stats.attach = ("epilogue", name)
