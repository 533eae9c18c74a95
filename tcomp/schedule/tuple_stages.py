"""What a tuple (monoid) reduction's stage accepts (lang/monoids.py).

Its state is several registers updated together, one tensor per component
stored at the end, so the stage takes the loop primitives (split, tile,
reorder, fuse, bind of its spatial loops, unroll, compute_at of the stages it
reads) and stays a global stage at root. What it refuses, each with a
ScheduleError naming the remedy: a reduction across threads or blocks (bind of
a reduction axis, rfactor: a combine of partial states is not built yet),
placing it (compute_at, compute_inline), another scope or cache (set_scope,
cache_write), vectorize and tensorize.
"""
from __future__ import annotations

from ..errors import ScheduleError

WHY = {
    "bind": "its reduction axes run in one thread (a cross-thread reduction of a tuple state "
            "is not supported yet); bind its spatial axes, split the reduction and unroll it",
    "rfactor": "a combine of partial tuple states is not supported yet; split its reduction "
               "axis and keep it in one thread",
    "compute_at": "it writes several tensors and stays at root; compute the stages it reads "
                  "at its loops instead",
    "compute_inline": "it writes several tensors and stays at root",
    "set_scope": "its components live in global memory; it keeps its state in registers "
                 "while it reduces",
    "cache_write": "it already accumulates its state in registers and stores each component "
                   "once",
    "vectorize": "its update is not a vector operation; unroll the loop instead",
    "tensorize": "no tensor-core intrinsic computes a tuple reduction",
}


def refuse(st, primitive: str) -> None:
    """ScheduleError when stage state `st` computes a tuple reduction."""
    from .ragged_stages import refuse as refuse_ragged
    from .scatter_stages import refuse as refuse_scatter
    refuse_scatter(st, primitive)  # (the same primitives ask: scatter_stages.py,
    refuse_ragged(st, primitive)  # ragged_stages.py)
    d = st.definition
    if getattr(d, "monoid", None) is None:
        return
    raise ScheduleError(f"{primitive}: stage '{st.name}' computes a tuple reduction "
                        f"('{d.monoid}=!' of {', '.join(d.tensors)}); {WHY[primitive]}")
