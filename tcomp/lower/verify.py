"""Kernel IR verifier, run between passes in tests (and on request).

Checks: every variable is defined (loop, let, size parameter, thread/block
index); every Load/Store names a known buffer with the right number of
subscripts (before flattening); no barrier sits under a condition that
depends on the thread index (not every thread would reach it); a vectorized
loop's vector accesses are its body's, at offsets defined outside the loop.
"""
from __future__ import annotations

from ..errors import LoweringError
from . import ir

THREAD_VARS = {f"{k}.{a}" for k in ("threadIdx", "blockIdx") for a in "xyz"}


def verify(k: ir.Kernel, program: ir.Program, flat: bool = False) -> None:
    shapes = {b.name: len(b.shape) for b in program.buffers}
    defined = set(THREAD_VARS) | set(program.sizes)
    thread_dep = {f"threadIdx.{a}" for a in "xyz"}

    def check_expr(e, scope):
        for x in ir.walk_expr(e):
            if isinstance(x, ir.Var) and x.name not in scope:
                raise LoweringError(f"kernel {k.name}: variable '{x.name}' used but not defined")
            if isinstance(x, ir.Load):
                check_buf(x.buffer, len(x.indices))

    def check_buf(name, n):
        if name not in shapes:
            raise LoweringError(f"kernel {k.name}: unknown buffer '{name}'")
        if not flat and shapes[name] != n:
            raise LoweringError(f"kernel {k.name}: buffer '{name}' has {shapes[name]} dimensions "
                                f"but is accessed with {n} subscripts")

    def check_vector(s, scope):
        """The vector accesses name the loop's own store and loads; their lane-0
        offsets do not vary with the loop."""
        v = s.vector
        if not isinstance(s.body, ir.Store) or (v.store_base is None and not v.loads):
            raise LoweringError(f"kernel {k.name}: vectorized loop '{s.var}' carries vector "
                                f"accesses but its body is not one store with them")
        reads = set(ir.walk_expr(s.body.value))
        for ld in v.loads:
            if ld not in reads:
                raise LoweringError(f"kernel {k.name}: vectorized loop '{s.var}' names a vector "
                                    f"load of '{ld.buffer}' that its body does not read")
        for base in v.load_bases + ((v.store_base,) if v.store_base is not None else ()):
            check_expr(base, scope)

    def depends(e, tdep):
        return bool(ir.free_vars(e) & tdep)

    def visit(s, scope, tdep, divergent):
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                visit(x, scope, tdep, divergent)
        elif isinstance(s, ir.Store):
            check_buf(s.buffer, len(s.indices))
            for e in s.indices + (s.value,):
                check_expr(e, scope)
        elif isinstance(s, ir.For):
            check_expr(s.lo, scope)
            check_expr(s.extent, scope)
            if s.vector is not None:
                check_vector(s, scope)
            visit(s.body, scope | {s.var}, tdep, divergent)
        elif isinstance(s, ir.Let):
            check_expr(s.value, scope)
            new_dep = tdep | {s.var} if depends(s.value, tdep) else tdep
            visit(s.body, scope | {s.var}, new_dep, divergent)
        elif isinstance(s, ir.If):
            check_expr(s.cond, scope)
            div = divergent or depends(s.cond, tdep)
            visit(s.then, scope, tdep, div)
            if s.else_ is not None:
                visit(s.else_, scope, tdep, div)
        elif isinstance(s, ir.Alloc):
            shapes[s.buffer.name] = len(s.buffer.shape)
            visit(s.body, scope, tdep, divergent)
        elif isinstance(s, ir.AllReduce):
            check_buf(s.buffer, 1)
            check_expr(s.extent, defined)
            if divergent:
                raise LoweringError(f"kernel {k.name}: cross-thread reduction under a "
                                    f"thread-dependent condition")
        elif isinstance(s, ir.Barrier):
            if divergent:
                raise LoweringError(f"kernel {k.name}: barrier under a thread-dependent condition")
        elif isinstance(s, ir.Evaluate):
            check_expr(s.call, scope)

    for g in k.grid + k.block:
        check_expr(g, defined)
    visit(k.body, defined, thread_dep, False)
