"""Sim rules of the intrinsics (tcomp/lower/intrinsics.py), keyed by the
registry's names. A rule takes the kernel being compiled (executor._Launch:
`compile_expr`, `mem`, `block`, `_whole_blocks`, ...) and the intrinsic
statement, and returns the statement's closure `(env, mask) -> None`.
The Hopper intrinsics' rules are in mbarriers.py, tma.py, wgmma.py and
tasks.py (named barriers)."""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lang import minmax
from . import async_copy, mbarriers, scan, scan_lookback, tma, warp_ops, wgmma
from .tasks import lockstep, named_barrier, named_barrier_arrive


def _barrier(ex, s):
    def barrier(env, mask):
        blocks = ex._whole_blocks(mask, "barrier reached by only some threads of block "
                                        "{block} ({idle} threads skip it)")
        ex.reset_trackers(blocks)
    return barrier


def _allreduce(ex, s):
    axis = 3 - s.tag.dim  # the block's values are laid out (blocks, z, y, x)
    extent_of = ex.compile_expr(s.extent)
    f = None
    if s.op not in ("+", "*"):
        f = minmax.of(s.op)

    def allreduce(env, mask):
        ex._whole_blocks(mask, "cross-thread reduction reached by only some threads of "
                               "block {block}")
        loc = ex.mem[s.buffer]
        w = loc.written[:, 0] if mask is None else loc.written[mask, 0]
        if not w.all():
            raise SimError(f"kernel {ex.kname}: cross-thread reduction of {s.buffer} "
                           f"before every thread wrote it")
        bx, by, bz = ex.block
        vals = loc.data[:, 0].reshape(ex.nb, bz, by, bx)
        extent = int(extent_of(env, None))
        if vals.shape[axis] != extent:
            raise SimError(f"kernel {ex.kname}: reduction over {extent} threads along "
                           f"{s.tag}, but the block has {vals.shape[axis]}")
        if s.op == "+":
            r = vals.sum(axis=axis, keepdims=True, dtype=vals.dtype)
        elif s.op == "*":
            r = vals.prod(axis=axis, keepdims=True, dtype=vals.dtype)
        else:
            r = f.reduce(vals, axis=axis, keepdims=True)
        r = np.broadcast_to(r, vals.shape).reshape(-1)
        if mask is None:
            loc.data[:, 0] = r
        else:
            loc.data[mask, 0] = r[mask]
    return allreduce


def _warp(ex, s):
    return warp_ops.compile_call(ex, s.call)


def _async(ex, s):
    return async_copy.compile_call(ex, s.call)


RULES = {
    "barrier": _barrier,
    "allreduce": _allreduce,
    "mma_m16n8k16": _warp,
    "quad_max": _warp,
    "quad_sum": _warp,
    **{f"ldmatrix_x{n}{t}": _warp for n in (1, 2, 4) for t in ("", "_trans")},
    "cp_async": _async,
    "cp_async_commit": _async,
    "cp_async_wait": _async,
    **mbarriers.RULES, **tma.RULES, **wgmma.RULES, **scan.RULES,
    **scan_lookback.RULES,
}
# Rules of the blocking intrinsics: generators that yield while they wait
# (tasks.py runs them in a Specialize's tasks; RULES holds their lock-step form).
BLOCKING = {**mbarriers.BLOCKING, **tma.BLOCKING, **wgmma.BLOCKING,
            "named_barrier": named_barrier, "named_barrier_arrive": named_barrier_arrive}
RULES.update({name: lockstep(rule) for name, rule in BLOCKING.items()})
