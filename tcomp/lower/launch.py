"""Launch geometry: a kernel's grid and block from its thread-bound loops, and
the check of a launch's dimensions against a device's limits.

Grid and block dimensions are size expressions: a loop whose extent depends
on the sizes (`h` in `0:H - KH + 1` bound to threadIdx.y) gives a dimension
known only at launch. What is constant is checked here, when the kernel is
built; the rest is checked by the target at launch (`launch_problem`), with
the limits of the device it runs on.
"""
from __future__ import annotations

from ..arch.limits import CUDA_LIMITS, LaunchLimits  # noqa: F401  (defined in the machine model)
from ..errors import LoweringError
from ..arch import threads
from . import ir
from .printer import expr as show
from .rewriter import Visitor, walk_stmts
from .simplify import simplify_expr


def launch_problem(kernel: str, grid, block, limits: LaunchLimits = CUDA_LIMITS,
                   block_exprs=None) -> str | None:
    """Why launching `kernel` with these (evaluated) dimensions would fail on
    a device with `limits`, or None when it can launch. `block_exprs` (size
    expressions as text, one per axis) make the message say where a runtime
    dimension came from. Call it only for non-empty launches: an empty grid or
    block launches nothing."""
    def where():
        if block_exprs is None:
            return ""
        parts = [f"blockDim.{d}: {e} = {n}" for d, e, n in
                 zip(threads.DIMS, block_exprs, block)
                 if not str(e).isdigit()]  # (a constant needs no explanation)
        return f" ({', '.join(parts)})" if parts else ""

    remedy = ("; split the loops bound to threads by constant factors (and bind the outer "
              "parts to blocks or loop over them), or run smaller sizes")
    count = block[0] * block[1] * block[2]
    dims = "x".join(str(n) for n in block)
    if count > limits.threads_per_block:
        return (f"kernel {kernel}: a block of {dims} = {count} threads{where()} exceeds the "
                f"device's {limits.threads_per_block} threads per block{remedy}")
    if limits.kernel_threads is not None and count > limits.kernel_threads:
        return (f"kernel {kernel}: a block of {dims} = {count} threads{where()} exceeds the "
                f"{limits.kernel_threads} threads per block this compiled kernel can run (its "
                f"register use limits it){remedy}")
    for axis, (n, most) in enumerate(zip(block, limits.block)):
        if n > most:
            return (f"kernel {kernel}: block dimension {threads.DIMS[axis]} is {n}{where()}, "
                    f"but the device allows at most {most}{remedy}")
    for axis, (n, most) in enumerate(zip(grid, limits.grid)):
        if n > most:
            return (f"kernel {kernel}: grid dimension {threads.DIMS[axis]} is {n} blocks, but "
                    f"the device allows at most {most}; bind a larger loop to "
                    f"{threads.BLOCK[0]}, or split the loop bound to {threads.BLOCK[axis]} and "
                    f"loop over the outer part")
    return None


def launch_dims(body: ir.Stmt, stage: str):
    """Grid and block of a kernel from its thread-bound loops (size expressions),
    with the checks that need no sizes: one extent per thread tag, block loops
    outside serial loops, and constant dimensions within CUDA's limits."""
    v = _Dims(stage)
    v.visit(body)
    grid, block = v.grid, v.block
    # A cross-thread reduction keeps at least one thread along its axis (see
    # AllReduce): the block's dimension there is the reduction's extent.
    for x in walk_stmts(body):
        if isinstance(x, ir.AllReduce):
            block[x.tag.dim] = x.extent
    for name, dims in (("block", block), ("grid", grid)):
        for axis, d in enumerate(dims):
            if ir.loaded(d):
                # launch dimensions are computed on the host, before the kernel reads
                # any tensor (fuzz seed 10 pair 69110: a thread loop over a region whose
                # extent reads a tensor; the sim crashed)
                raise LoweringError(
                    f"stage '{stage}': the {name}'s dimension {'xyz'[axis]} ({show(d)}) reads a "
                    f"tensor; launch dimensions are fixed before the kernel runs: bind loops "
                    f"whose extents depend on sizes only (compute the stage at a loop where "
                    f"its region does not depend on data, or do not bind its loops)")
    _check_constant(block, stage)
    _check_grid(grid, stage)
    return tuple(grid), tuple(block)


class _Dims(Visitor):
    """The thread-bound loops' extents, with `serial_outside`: whether a serial
    loop or a condition encloses the statement visited."""

    def __init__(self, stage: str):
        self.stage = stage
        self.grid = [ir.const(1)] * 3
        self.block = [ir.const(1)] * 3
        self.seen_grid = {}
        self.thread_ext: dict[str, tuple[str, ir.Expr]] = {}
        self.serial_outside = False

    def _in(self, body, serial_outside: bool):
        saved, self.serial_outside = self.serial_outside, serial_outside
        self.visit(body)
        self.serial_outside = saved

    def visit_For(self, s):
        stage = self.stage
        if s.kind == "thread" and s.tag.is_block:
            if self.serial_outside:
                raise LoweringError(f"stage '{stage}': loop '{s.var}' bound to {s.tag} is "
                                    f"nested inside a serial loop; reorder it outward")
            axis = s.tag.dim
            if s.tag in self.seen_grid:
                raise LoweringError(f"stage '{stage}': two loops bound to {s.tag}")
            self.seen_grid[s.tag] = s.extent
            self.grid[axis] = s.extent
            self.visit(s.body)
            return
        if s.kind == "thread":
            axis = s.tag.dim
            n = simplify_expr(s.extent)
            if s.tag in self.thread_ext and self.thread_ext[s.tag][1] != n:
                other, m = self.thread_ext[s.tag]
                raise LoweringError(f"stage '{stage}': {s.tag} is bound to loops of "
                                    f"different extents in one kernel: '{other}' "
                                    f"({show(m)}) and '{s.var}' ({show(n)}); give them "
                                    f"the same extent")
            self.thread_ext[s.tag] = (s.var, n)
            self.block[axis] = n
        self._in(s.body, self.serial_outside or s.kind != "thread")

    def visit_If(self, s):
        self._in(s.then, True)
        if s.else_ is not None:
            self._in(s.else_, True)


def _check_constant(block, stage: str):
    """The parts of the block known now must fit CUDA's limits whatever the
    sizes (a runtime dimension is at least 1 in any launch that runs)."""
    known = [int(b.value) if isinstance(b, ir.Imm) else 1 for b in block]
    if known[0] * known[1] * known[2] > CUDA_LIMITS.threads_per_block:
        dims = "x".join(str(b.value) if isinstance(b, ir.Imm) else f"({show(b)})" for b in block)
        raise LoweringError(f"stage '{stage}': {dims} threads per block exceed "
                            f"{CUDA_LIMITS.threads_per_block}")
    for axis, (n, most) in enumerate(zip(known, CUDA_LIMITS.block)):
        if n > most:
            raise LoweringError(f"stage '{stage}': {n} threads along {threads.THREAD[axis]} "
                                f"exceed CUDA's limit of {most} for that dimension; bind a loop "
                                f"of at most {most} iterations there")


def _check_grid(grid, stage: str):
    """A grid dimension known now (sizes bound at build) must fit CUDA's limit
    along its axis: refused here, not at the first launch (issue 22, defect 8)."""
    for axis, (g, most) in enumerate(zip(grid, CUDA_LIMITS.grid)):
        n = simplify_expr(g)
        if isinstance(n, ir.Imm) and int(n.value) > most:
            raise LoweringError(f"stage '{stage}': a grid of {int(n.value)} blocks along "
                                f"{threads.BLOCK[axis]} exceeds CUDA's limit of {most} for that "
                                f"dimension; bind a larger loop to {threads.BLOCK[0]}, or split "
                                f"the loop bound to {threads.BLOCK[axis]} and loop over the "
                                f"outer part")
