"""Pass: unroll and vectorize checks.

Pre: loops marked `unroll` / `vectorize`.
Post: unrolled loops of constant extent (up to MAX_UNROLL) are expanded into
copies of their body, nested ones making at most MAX_UNROLL_COPIES copies of
the innermost body in all (64 x 64 x 64 made 262,144: 40 s and 600 MB of
lowering; a ScheduleError naming the loops, before anything is expanded); an unrolled loop whose extent is known only at run time
stays a loop of kind `unroll`, a hint the target may follow (CUDA: `#pragma
unroll`; the sim runs it as a loop). Vectorized loops are checked to be
innermost (no loops, allocations or collective intrinsics, such as barriers,
inside) with a constant extent, and kept for the `vectorize` pass to decide
their vector accesses.

`check(k)` raises the errors this pass would raise, without expanding
anything: what a caller that stops before `unroll` (the schedule search,
which reads features from the loops as they are) runs instead of the pass.
"""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError, ScheduleError
from . import intrinsics, ir
from .printer import expr as show
from .rewriter import Rewriter, substitute, walk_stmts

MAX_UNROLL = 128
MAX_UNROLL_COPIES = 4096


def _expanded(s: ir.Stmt) -> bool:
    """Whether this pass replaces loop `s` by copies of its body."""
    return isinstance(s, ir.For) and s.kind == "unroll" and isinstance(s.extent, ir.Imm)


def _inside(body: ir.Stmt, expand: bool):
    """The statements of `body`; with `expand`, loops this pass expands are
    left out (their bodies are not): what the body holds once expanded."""
    for x in walk_stmts(body):
        if not (expand and _expanded(x)):
            yield x


def _check_loop(s: ir.For, body: ir.Stmt, expand: bool = False) -> None:
    """The errors of loop `s` (with `body`, its body as this pass left it;
    `expand`: the body's unrolled loops are still to be expanded)."""
    if s.kind == "vectorize":
        if not isinstance(s.extent, ir.Imm):
            raise LoweringError(f"vectorized loop '{s.var}' has non-constant extent "
                                f"{show(s.extent)}; split it by a constant factor and "
                                f"vectorize the inner loop")
        for x in _inside(body, expand):
            entry = intrinsics.of(x)
            if isinstance(x, (ir.For, ir.Alloc)) or (entry is not None and entry.collective):
                what = entry.name if entry is not None else type(x).__name__.lower()
                raise LoweringError(f"vectorized loop '{s.var}' is not innermost: it contains "
                                    f"{what}")
    if s.kind == "unroll" and isinstance(s.extent, ir.Imm) and int(s.extent.value) > MAX_UNROLL:
        raise LoweringError(f"unrolled loop '{s.var}' has {int(s.extent.value)} iterations "
                            f"(at most {MAX_UNROLL})")


def _nest(s: ir.Stmt) -> tuple[int, tuple[ir.For, ...]]:
    """The most copies of one body that nested expanded loops in `s` make, and
    those loops, outermost first."""
    best = (1, ())
    for c in ir.children(s):
        if isinstance(c, ir.Stmt):
            n = _nest(c)
            best = n if n[0] > best[0] else best
    if _expanded(s):
        best = (best[0] * max(1, int(s.extent.value)), (s, *best[1]))
    return best


def _check_copies(k: ir.Kernel) -> None:
    total, loops = _nest(k.body)
    if total > MAX_UNROLL_COPIES:
        sizes = " x ".join(f"{f.var} ({int(f.extent.value)})" for f in loops)
        raise ScheduleError(f"unroll: the nested unrolled loops {sizes} of kernel {k.name} "
                            f"would make {total} copies of their body (at most "
                            f"{MAX_UNROLL_COPIES}); unroll fewer of them, or split one and "
                            f"unroll only its inner loop")


def check(k: ir.Kernel) -> None:
    """Raise the LoweringError `run` would raise on `k`, expanding nothing.
    Loops are checked innermost first, as `run` meets them; an expanded copy
    of a body has the loops of the body, so checking the body once suffices."""
    def visit(s):
        for c in ir.children(s):
            if isinstance(c, ir.Stmt):
                visit(c)
        if isinstance(s, ir.For):
            _check_loop(s, s.body, expand=True)
    visit(k.body)
    _check_copies(k)


class _Unroll(Rewriter):
    def stmt_For(self, s: ir.For) -> ir.Stmt:
        body = self.stmt(s.body)
        _check_loop(s, body)
        if s.kind != "unroll":
            return s if body is s.body else dataclasses.replace(s, body=body)
        if not isinstance(s.extent, ir.Imm):
            return s if body is s.body else dataclasses.replace(s, body=body)
        n = int(s.extent.value)
        return ir.seq(*[substitute(body, {s.var: ir.Bin("+", s.lo, ir.const(i), ir.int32)})
                        for i in range(n)])


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    _check_copies(k)
    return dataclasses.replace(k, body=_Unroll().stmt(k.body))
