"""The remarks of a lowered program: what its passes declined or chose that
the schedule asked for (a vectorized loop left lane by lane, ...), one line
each, named by kernel. Passes record them on `Kernel.remarks` (printed under
the kernel in every dump); `tcomp.build` puts them on the kernel's `remarks`,
and `strict=True` makes any of them an error."""
from __future__ import annotations

from . import ir


def lowering_remarks(prog: ir.Program) -> tuple[str, ...]:
    return tuple(f"{k.name}: {r}" for k in prog.kernels for r in k.remarks)
