"""The features a lowered program needs of its target, checked against the
Target `lower(..., target=)` was given (arch/target.py; None: DEFAULT, sm_90a,
which has every feature tcomp emits, so nothing is refused).

    every intrinsic statement   its entry's machine-model feature (Intrinsic.feature:
                                "mma_sync", "cp_async", "tma", "wgmma", ...)
    a Role with regs > 0        "setmaxnreg" (per-warpgroup register reallocation)

Run on the program after the passes (tensor_cores and software_pipeline add
the mma, ldmatrix and cp.async statements); the first missing feature is a
LoweringError from `Target.require`, naming the kernel and what needs it.
The CUDA target checks the architecture it compiles for on its own
(target_cuda/arch.py, with the attached GPU's arch when none is named).
"""
from __future__ import annotations

from ..arch.target import Target
from . import intrinsics, ir
from .rewriter import walk_stmts


def check(prog: ir.Program, target: Target) -> None:
    for k in prog.kernels:
        for s in walk_stmts(k.body):
            if isinstance(s, ir.Role) and s.regs:
                target.require("setmaxnreg", f"kernel {k.name}: role '{s.name}' "
                                             f"(regs={s.regs})")
            entry = intrinsics.of(s)
            if entry is not None and entry.feature:
                target.require(entry.feature, f"kernel {k.name}: {entry.what}")
