"""CUDA emitters of the intrinsics (tcomp/lower/intrinsics.py), keyed by the
registry's names. An emitter takes the kernel emitter (`emit(line, depth)`,
`expr(e)`, `k`: codegen._Kernel), the intrinsic statement and the
indentation depth, and prints the statement's CUDA."""
from __future__ import annotations

import dataclasses

from ..lang import dtypes
from ..lower import ir
from . import sm90_ops, warp_ops
from .allreduce import emit_allreduce
from .scan import emit_scan
from .scan_lookback import emit_lookback


def _barrier(gen, s, d: int) -> None:
    gen.emit("__syncthreads();", d)


def _call(gen, s, d: int) -> None:
    """An `Evaluate` of a call whose CUDA statement warp_ops.py prints. Its
    buffer operands are given to warp_ops under their C++ names (names.py:
    a global tensor named `half` is `tc_u_half` in the source), and the
    buffers it accesses with vectors are recorded under their IR names."""
    args = tuple(dataclasses.replace(a, buffer=gen.name(a.buffer)) if isinstance(a, ir.Ref)
                 else a for a in s.call.args)
    ir_name = {gen.name(a.buffer): a.buffer for a in s.call.args if isinstance(a, ir.Ref)}
    gen.emit(warp_ops.emit(gen, dataclasses.replace(s.call, args=args)), d)
    gen.vector_buffers = {ir_name.get(n, n) for n in gen.vector_buffers}


def _quad(gen, s, d: int) -> None:
    """Two butterfly shuffles over the lanes of a quad (every lane of the warp takes part)."""
    r = s.call.args[0]
    x = gen.expr(ir.Load(r.buffer, r.indices, dtypes.float32))
    comb = "fmaxf({x}, {y})" if s.call.fn == "quad_max" else "{x} + {y}"
    for lane_mask in (1, 2):
        gen.emit(f"{x} = " + comb.format(x=x, y=f"__shfl_xor_sync(0xffffffffu, {x}, {lane_mask})")
                 + ";", d)


EMIT = {
    "barrier": _barrier,
    "quad_max": _quad,
    "quad_sum": _quad,
    "allreduce": emit_allreduce,
    "mma_m16n8k16": _call,
    **{f"ldmatrix_x{n}{t}": _call for n in (1, 2, 4) for t in ("", "_trans")},
    "cp_async": _call,
    "cp_async_commit": _call,
    "cp_async_wait": _call,
    **sm90_ops.EMIT,
    **{name: emit_scan for name in ("scan_add", "scan_mul", "scan_max", "scan_min",
                                    "scan_linear")},
    **{f"scan_lookback_{op}": emit_lookback for op in ("add", "mul", "max", "min", "linear")},
}
