"""CUDA emitters of the intrinsics (tcomp/lower/intrinsics.py), keyed by the
registry's names. An emitter takes the kernel emitter (`emit(line, depth)`,
`expr(e)`, `k`: codegen._Kernel), the intrinsic statement and the
indentation depth, and prints the statement's CUDA."""
from __future__ import annotations

from . import sm90_ops, warp_ops
from .allreduce import emit_allreduce


def _barrier(gen, s, d: int) -> None:
    gen.emit("__syncthreads();", d)


def _call(gen, s, d: int) -> None:
    """An `Evaluate` of a call whose CUDA statement warp_ops.py prints."""
    gen.emit(warp_ops.emit(gen, s.call), d)


EMIT = {
    "barrier": _barrier,
    "allreduce": emit_allreduce,
    "mma_m16n8k16": _call,
    **{f"ldmatrix_x{n}{t}": _call for n in (1, 2, 4) for t in ("", "_trans")},
    "cp_async": _call,
    "cp_async_commit": _call,
    "cp_async_wait": _call,
    **sm90_ops.EMIT,
}
