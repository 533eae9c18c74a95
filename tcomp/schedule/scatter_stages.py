"""What a scatter's stage accepts (lang/check_scatter.py).

A scatter writes through data-dependent subscripts: each point of its loops
updates one element that only the subscripts' values name. Its stage takes
the loop primitives (split, tile, reorder, fuse, bind, unroll) and stays a
global stage at root; lowering picks atomic updates where a loop over an
index that is not a whole subscript is spread over threads or blocks
(lower/scatter_store.py). What it refuses, each with a ScheduleError naming
the remedy: placing it (compute_at, compute_inline: the region it writes is
data), another scope or a cache (set_scope, cache_write), vectorize and
tensorize.
"""
from __future__ import annotations

from ..errors import ScheduleError

WHY = {
    "compute_at": "the elements it writes are known only when it runs, so it stays at root; "
                  "compute the stages it reads at its loops instead",
    "compute_inline": "the elements it writes are known only when it runs, so it stays at root",
    "set_scope": "its tensor lives in global memory, where its updates land",
    "cache_write": "its updates land in the tensor itself (atomically where its loops run in "
                   "parallel)",
    "vectorize": "the elements its lanes would write are not contiguous; unroll the loop "
                 "instead",
    "tensorize": "no tensor-core intrinsic computes a scatter",
    "bind": "",
    "rfactor": "",
}


def refuse(st, primitive: str) -> None:
    """ScheduleError when stage state `st` computes a scatter and `primitive` is
    one it refuses."""
    d = st.definition
    if not getattr(d, "scatter", ()) or not WHY.get(primitive):
        return
    raise ScheduleError(f"{primitive}: stage '{st.name}' is a scatter (it writes '{d.tensor}' "
                        f"through data-dependent subscripts); {WHY[primitive]}")
