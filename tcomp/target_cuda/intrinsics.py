"""CUDA emitters of the intrinsics (tcomp/lower/intrinsics.py), keyed by the
registry's names. An emitter takes the kernel emitter (`emit(line, depth)`,
`expr(e)`, `k`: codegen._Kernel), the intrinsic statement and the
indentation depth, and prints the statement's CUDA."""
from __future__ import annotations

from .allreduce import emit_allreduce


def _barrier(gen, s, d: int) -> None:
    gen.emit("__syncthreads();", d)


EMIT = {
    "barrier": _barrier,
    "allreduce": emit_allreduce,
}
