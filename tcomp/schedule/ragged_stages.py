"""What the stage of a statement with a ragged range accepts (lang/check_ragged.py).

Its ragged loop runs from a bound read from a tensor at each point of the
loops its bounds use, so the stage takes split, reorder (the ragged loops
inside the loops their bounds read), fuse, unroll, and bind of every axis but
the ragged one's (lower/ragged_loops.py checks those two), and stays a
global stage at root. It refuses, with a ScheduleError naming the remedy:
compute_at, set_scope, cache_write, rfactor, vectorize and tensorize.
"""
from __future__ import annotations

from ..errors import ScheduleError

WHY = {
    "compute_at": "the region a consumer would need of it depends on data; it stays at root",
    "set_scope": "it stays a global stage at root",
    "cache_write": "it accumulates in a register already where its reduction loops are inside "
                   "its spatial loops",
    "rfactor": "its ragged loop's extent differs from point to point; split a spatial axis "
               "and bind that instead",
    "vectorize": "its loop's extent is known only when it runs; unroll instead",
    "tensorize": "no tensor-core intrinsic computes a ragged loop",
}


def refuse(st, primitive: str) -> None:
    """ScheduleError when stage state `st` has a ragged range and refuses `primitive`."""
    d = st.definition
    ragged = getattr(d, "ragged", ())
    if not ragged or primitive not in WHY:
        return
    raise ScheduleError(f"{primitive}: stage '{st.name}' has a ragged range (index "
                        f"'{ragged[0]}' runs between bounds read from a tensor); "
                        f"{WHY[primitive]}")
