"""Queries about a schedule's stages that loop-nest construction asks: which
tensors a stage reads through inlined stages, the definition of an inlined
tensor, and the source location of a stage's statement."""
from __future__ import annotations

from ..schedule.snapshot import reads_through_inlined


def stage_loc(sched, stage: str):
    """Source location of the statement a stage computes (caches: their reader's)."""
    st = sched.states[stage]
    tensor = st.tensor
    for s in sched.op.statements:
        if s.tensor == tensor:
            return s.stmt.loc
    return None


def effective_reads(sched, stage: str) -> set[str]:
    """Tensors a stage reads, directly or through stages inlined into it (their
    reads happen where the stage computes)."""
    return reads_through_inlined(sched, sched.states[stage])


def inlined_definition(sched, tensor: str):
    """The definition of `tensor` when its only writer is inlined, else None."""
    writers = [s for s in sched.states.values() if s.tensor == tensor]
    if len(writers) == 1 and writers[0].attach == ("inline",):
        return writers[0].definition
    return None
