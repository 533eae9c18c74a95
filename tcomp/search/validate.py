"""Checking a candidate before it is measured: replay its directives, lower
it at the tuning sizes, and check what the lowered kernels need against the
device's limits.

`validate(op, candidate, sizes, target)` returns `Valid` (the Schedule, its
Kernel IR, the resources per kernel) or `Invalid(kind, message)`.

Lowering stops before the `unroll` pass (ANALYSIS_UNTIL): everything after
it expands unrolled loops into copies and simplifies, flattens and
vectorizes each copy, which is 3-10x the cost of the rest for a tiled
kernel and tells the checks and the features nothing new. The errors those
passes can raise are raised by `unroll.check` instead (an unrolled loop of
more than 128 iterations, a vectorized loop that is not innermost or has no
constant extent), resources need only the buffers, and features.py reads
loops with their trip counts and predicts the vector accesses. So a
candidate is lowered once, only as far as the search needs; the candidates
chosen for measurement are lowered in full where they are compiled (the
runner's workers). `validate(..., full=True)` lowers through every pass, and
`Valid.finish()` completes a partial lowering. Error kinds:
  "schedule"   a primitive refused a directive on replay (ScheduleError)
  "lowering"   lowering refused the schedule (LoweringError)
  "resources"  a kernel needs more threads, shared memory or registers than
               the limits allow, or a grid larger than the device's
  "error"      any other TcompError (the message says which)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError, ScheduleError, TcompError
from ..lower import ir, registers, unroll
from ..lower.pipeline import PASSES, lower, run_passes
from ..lower.rewriter import walk_stmts
from ..schedule import Schedule

ERROR_KINDS = ("schedule", "lowering", "resources", "error")
ANALYSIS_UNTIL = "unroll"  # the pass a search's lowering stops before


@dataclass(frozen=True)
class Resources:
    """What one kernel launch needs (sizes bound): grid and block dimensions,
    static shared memory bytes, and an estimate of 32-bit registers per thread
    (its local and fragment buffers plus a fixed overhead for indices; a
    local buffer that the `registers` pass compacts counts the elements each
    thread keeps, not its declared size)."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    registers: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


REGISTER_OVERHEAD = 32  # addresses, loop indices, predicates


@dataclass(frozen=True)
class Valid:
    """A candidate that passed: its replayed Schedule, its Kernel IR (lowered
    up to, not including, pass `until`; None: through every pass), and what
    each kernel needs."""
    schedule: Schedule
    program: ir.Program
    resources: tuple[Resources, ...]
    until: str | None = None
    ok = True

    def finish(self) -> ir.Program:
        """The program through every pass (the rest of the pipeline run on
        `program`; `program` itself when it is complete)."""
        if self.until is None:
            return self.program
        return run_passes(self.program, start=self.until)


@dataclass(frozen=True)
class Invalid:
    kind: str  # one of ERROR_KINDS
    message: str
    ok = False

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def validate(op, candidate, sizes: dict, target: str = "cuda", limits=None,
             full: bool = False):
    """Valid or Invalid (see the module docstring). `candidate` is a
    Candidate, the JSON text of a schedule, or a Schedule of `op` (lowered
    as it is, not replayed); `full`: lower through every pass (default: up
    to ANALYSIS_UNTIL, with that pass's checks)."""
    from .rules import Limits
    limits = limits or Limits()
    if isinstance(candidate, Schedule) and candidate.op is op:
        s = candidate
    else:
        text = candidate if isinstance(candidate, str) else candidate.schedule
        try:
            s = Schedule.from_json(op, text)
        except TcompError as e:
            return Invalid("schedule" if isinstance(e, ScheduleError) else "error", str(e))
    until = None if full else ANALYSIS_UNTIL
    try:
        prog = lower(s, sizes, until=until)
        if until is not None:
            for k in prog.kernels:
                unroll.check(k)
    except LoweringError as e:
        return Invalid("lowering", str(e))
    except ScheduleError as e:
        return Invalid("schedule", str(e))
    except TcompError as e:
        return Invalid("error", f"{type(e).__name__}: {e}")
    compacted = _ran(REGISTERS_PASS, until)
    at = {**sizes, ir.SM_COUNT: limits.sm_count}  # a persistent grid: one block per SM
    res = tuple(resources(k, at, compacted) for k in prog.kernels)
    for k, r in zip(prog.kernels, res):
        why = _over(r, limits)
        if why:
            return Invalid("resources", f"kernel '{k.name}' {why}")
    return Valid(s, prog, res, until)


REGISTERS_PASS = "registers"  # the pass that compacts per-thread slices of local arrays


def _ran(name: str, until: str | None) -> bool:
    """Whether pass `name` has run on a program lowered up to `until`."""
    names = [n for n, _ in PASSES]
    return until is None or names.index(name) < names.index(until)


def resources(k: ir.Kernel, sizes: dict, compacted: bool = False) -> Resources:
    """What kernel `k` (lowered at `sizes`) needs. `compacted`: the
    `registers` pass has run on `k`; otherwise the local buffers it will
    compact count what it keeps per thread (registers.kept: the pass's own
    rule, applied before `unroll` as that pass will expand the loops), so a
    row held in registers across a block counts its slice per thread, not
    the row."""
    # One entry per buffer: an unrolled loop allocates the same buffer once per copy
    # of its body, one after the other, not all at once.
    kept = {} if compacted else registers.kept(k)
    shared, regs = {}, {}
    for st in walk_stmts(k.body):
        if isinstance(st, ir.Alloc):
            b = st.buffer
            n = 1
            for d in b.shape:
                n *= _int(d, sizes)
            if b.scope == "shared":
                shared[b.name] = max(shared.get(b.name, 0), n * max(1, b.dtype.bits // 8))
            elif b.scope in ("local", "fragment"):
                n = kept.get(b.name, n) if b.scope == "local" else n
                regs[b.name] = max(regs.get(b.name, 0), -(-n * max(b.dtype.bits, 8) // 32))
    return Resources(tuple(_int(g, sizes) for g in k.grid), tuple(_int(b, sizes) for b in k.block),
                     sum(shared.values()), sum(regs.values()) + REGISTER_OVERHEAD)


def _over(r: Resources, limits) -> str | None:
    if r.threads > limits.threads:
        return f"has {r.threads} threads per block (limit {limits.threads})"
    for i, (d, lim) in enumerate(zip(r.block, limits.block_dims)):
        if d > lim:
            return f"has block dimension {'xyz'[i]} = {d} (limit {lim})"
    for i, (d, lim) in enumerate(zip(r.grid, limits.grid_dims)):
        if d > lim:
            return f"has grid dimension {'xyz'[i]} = {d} (limit {lim})"
    if r.shared_bytes > limits.shared_bytes:
        return f"uses {r.shared_bytes} bytes of shared memory (limit {limits.shared_bytes})"
    if r.registers > limits.registers:
        return f"needs about {r.registers} registers per thread (limit {limits.registers})"
    return None


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
        "min": min, "max": max}


def _int(e, sizes) -> int:
    """A launch dimension or buffer extent at the bound sizes."""
    if isinstance(e, ir.Imm):
        return int(e.value)
    if isinstance(e, ir.Var) and e.name in sizes:
        return int(sizes[e.name])
    if isinstance(e, ir.Bin) and e.op in _OPS:
        return _OPS[e.op](_int(e.a, sizes), _int(e.b, sizes))
    raise LoweringError(f"validate: cannot evaluate {e} at sizes {sizes}")
