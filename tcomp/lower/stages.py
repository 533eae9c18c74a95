"""Queries about a schedule's stages that loop-nest construction asks: which
tensors a stage reads through inlined stages, the definition of an inlined
tensor, and the source location of a stage's statement."""
from __future__ import annotations


def stage_loc(sched, stage: str):
    """Source location of the statement a stage computes (caches: their reader's)."""
    st = sched.states[stage]
    tensor = st.tensor
    for s in sched.op.statements:
        if s.tensor == tensor:
            return s.stmt.loc
    return None


def effective_reads(sched, stage: str) -> set[str]:
    """Tensors a stage reads, directly or through stages inlined into it."""
    out, todo = set(), [stage]
    while todo:
        for t in sched.states[todo.pop()].definition.reads():
            if t in out:
                continue
            out.add(t)
            writers = [n for n, s in sched.states.items() if s.tensor == t]
            if len(writers) == 1 and sched.states[writers[0]].attach == ("inline",):
                todo.append(writers[0])
    return out


def reads_here(sched, stage: str, tensor: str) -> bool:
    """Whether `stage` reads `tensor` directly or through inlined stages (whose
    reads happen where `stage` computes): what a producer computed at the same
    loop must cover."""
    seen, todo = set(), [sched.states[stage].definition]
    while todo:
        reads = todo.pop().reads()
        if tensor in reads:
            return True
        for t in reads - seen:
            seen.add(t)
            inlined = inlined_definition(sched, t)
            if inlined is not None:
                todo.append(inlined)
    return False


def inlined_definition(sched, tensor: str):
    """The definition of `tensor` when its only writer is inlined, else None."""
    writers = [s for s in sched.states.values() if s.tensor == tensor]
    if len(writers) == 1 and writers[0].attach == ("inline",):
        return writers[0].definition
    return None
