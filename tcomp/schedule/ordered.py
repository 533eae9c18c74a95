"""What the stage of an ordered statement accepts (`where ordered t`,
lang/check_ordered.py).

Such a stage reads, at each point of its ordered indices, what it stored at
earlier points, from the tensor it writes: it has no snapshot, and is lowered
as an ordinary loop nest whose *serial* loops keep their order. Its loops, at
creation: the independent indices (below) outermost, then the ordered ones
(in the order of their clauses), then the other spatial indices, then the
reductions.

The serial loops are the ordered axes, the *dependent* spatial axes (a read of
the tensor uses another value of that index, `O(i - 1, t - 1)`: across
threads it would race with the writes, and outside the ordered loop it would
read a point not yet computed) and the reduction axes (they read earlier
points through the tensor, which another thread of a cross-thread reduction
would not have stored yet). They run one after another in one thread: they
cannot be split, fused, bound, vectorized or reordered among themselves (a
ScheduleError naming the axis and why). The *independent* axes (every read of
the tensor uses that index unchanged) take every loop primitive: bind them to
threads and blocks, each thread then runs its own serial recurrence
(`O(b, t) = O(b, t - 1) + X(b, t)`: one thread per row `b`).

The stage stays a global stage at root: compute_at, compute_inline,
set_scope, cache_write, rfactor, tensorize and pipeline are refused (each
would read the tensor somewhere the ordered loop's stores have not reached),
and so is a cache_read of its own tensor for it (a copy made before the
stage runs holds none of its stores).
"""
from __future__ import annotations

from ..errors import ScheduleError

STAGE_WHY = {
    "compute_at": "its ordered loop reads what it stored at earlier points, so it runs at root "
                  "in its own loop nest; compute the stages it reads at its loops instead",
    "compute_inline": "its ordered loop reads what it stored at earlier points, so it must be "
                      "stored",
    "set_scope": "it reads its own stores at earlier points from global memory",
    "cache_write": "its ordered loop reads its stores at earlier points from the tensor itself",
    "rfactor": "its reduction reads earlier points of the tensor and runs in one thread",
    "tensorize": "no tensor-core intrinsic computes an ordered recurrence",
    "pipeline": "its serial loops read what they stored; pipelining reorders loads and stores",
    "cache_read": "a copy made before the stage runs holds none of the values it stores at "
                  "earlier points",
}


def is_ordered(st) -> bool:
    return bool(getattr(st.definition, "ordered", ()))


def serial(st) -> list[str]:
    """The stage's serial leaves (module docstring), in their original loop order."""
    d = st.definition
    if not d.ordered:
        return []
    scanned = st.scan[:2] if st.scan is not None else ()
    if st.lookback is not None and st.lookback.items is not None:
        scanned += (st.lookback.items,)
    return [v for v in st.leaves if v in d.ordered or v in d.reduce or v in scanned or
            (v in d.spatial and v not in d.independent)]


def refuse_stage(st, primitive: str) -> None:
    """ScheduleError when stage state `st` is ordered and `primitive` places or caches it."""
    if not is_ordered(st):
        return
    raise ScheduleError(f"{primitive}: stage '{st.name}' computes an ordered recurrence "
                        f"({_clause(st)}); {STAGE_WHY[primitive]}")


def refuse_axis(st, primitive: str, leaf: str) -> None:
    """ScheduleError when `leaf` is a serial loop of an ordered stage."""
    d = st.definition
    if not d.ordered or leaf not in serial(st):
        return
    if st.scan is not None and (leaf in st.scan[:2] or st.lookback is not None and
                                leaf == st.lookback.items):
        why = (f"axis '{leaf}' is a loop of the scan over '{d.ordered[0]}' (its tiles, "
               f"its lanes on threadIdx.x, or a thread's elements): the scan fixes it")
    elif leaf in d.ordered:
        why = (f"axis '{leaf}' is ordered ({_clause(st)}): each iteration reads what the ones "
               f"before it stored, so its iterations run one after another, in one thread")
    elif leaf in d.reduce:
        why = (f"axis '{leaf}' is a reduction of an ordered stage: it reads earlier points of "
               f"'{d.tensor}', stored by one thread, so it runs serially in that thread")
    else:
        why = (f"axis '{leaf}' of the ordered stage is not independent: a read of "
               f"'{d.tensor}' uses another value of '{leaf}', stored by another iteration, so "
               f"it runs serially inside the ordered loop")
    if st.scan is not None:
        hint = f"; bind the independent axes ({', '.join(d.independent)}) to blocks" \
            if d.independent else ""
    else:
        hint = (f"; spread the independent axes ({', '.join(d.independent)}) over threads "
                f"instead" if d.independent else "")
    raise ScheduleError(f"{primitive}: {why}{hint}")


def check_reorder(st, new_leaves: list[str]) -> None:
    """A reorder keeps an ordered stage's serial loops in their order."""
    before = serial(st)
    if not before:
        return
    after = [v for v in new_leaves if v in before]
    if after != before:
        raise ScheduleError(f"reorder: the serial loops of ordered stage '{st.name}' "
                            f"({_clause(st)}) must stay in the order {', '.join(before)} (the "
                            f"ordered axes outermost, then the axes that read other points, "
                            f"then the reductions); move only its independent axes "
                            f"({', '.join(st.definition.independent) or 'none'})")


def _clause(st) -> str:
    return "where " + ", ".join(f"ordered {v}" for v in st.definition.ordered)
