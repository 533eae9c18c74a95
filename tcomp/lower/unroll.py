"""Pass: unroll and vectorize checks.

Pre: loops marked `unroll` / `vectorize`.
Post: unrolled loops of constant extent (up to MAX_UNROLL) are expanded into
copies of their body; an unrolled loop whose extent is known only at run time
stays a loop of kind `unroll`, a hint the target may follow (CUDA: `#pragma
unroll`; the sim runs it as a loop). Vectorized loops are checked to be
innermost (no loops, allocations or collective intrinsics, such as barriers,
inside) with a constant extent, and kept for the `vectorize` pass to decide
their vector accesses.
"""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from . import intrinsics, ir
from .printer import expr as show
from .rewriter import Rewriter, substitute, walk_stmts

MAX_UNROLL = 128


class _Unroll(Rewriter):
    def stmt_For(self, s: ir.For) -> ir.Stmt:
        body = self.stmt(s.body)
        if s.kind == "vectorize":
            if not isinstance(s.extent, ir.Imm):
                raise LoweringError(f"vectorized loop '{s.var}' has non-constant extent "
                                    f"{show(s.extent)}; split it by a constant factor and "
                                    f"vectorize the inner loop")
            for x in walk_stmts(body):
                entry = intrinsics.of(x)
                if isinstance(x, (ir.For, ir.Alloc)) or (entry is not None and entry.collective):
                    what = entry.name if entry is not None else type(x).__name__.lower()
                    raise LoweringError(f"vectorized loop '{s.var}' is not innermost: it contains "
                                        f"{what}")
        if s.kind != "unroll":
            return s if body is s.body else dataclasses.replace(s, body=body)
        if not isinstance(s.extent, ir.Imm):
            return s if body is s.body else dataclasses.replace(s, body=body)
        n = int(s.extent.value)
        if n > MAX_UNROLL:
            raise LoweringError(f"unrolled loop '{s.var}' has {n} iterations (at most "
                                f"{MAX_UNROLL})")
        return ir.seq(*[substitute(body, {s.var: ir.Bin("+", s.lo, ir.const(i), ir.int32)})
                        for i in range(n)])


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    return dataclasses.replace(k, body=_Unroll().stmt(k.body))
