"""The thread hierarchy, cluster > block > warpgroup > warp > lane, and the
uniformity lattice over it.

Only the index registers are builtins (threads.py: blockIdx, threadIdx,
Hopper's clusterid and cluster_ctarank). Warpgroups, warps and lanes are
DERIVED from the linear thread index of the block,

    tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)

(just threadIdx.x in a 1-D block), as data (`DerivedAxis`: a divisor and a
modulus of tid): warpgroup = tid / 128, warp = tid / 32, lane = tid % 32, the
warp within its warpgroup (tid / 32) % 4. CUDA forms warps from consecutive
tids, which is what makes these the hardware's groups.

Uniformity: the largest group of threads in which a value is certainly the
same, ordered from most to least uniform,

    GRID < CLUSTER < BLOCK < WARPGROUP < WARP < THREAD

(GRID: the same in every thread of the launch, like a constant or a size;
THREAD: may differ between any two threads). An expression is as uniform as
its least uniform operand (`join`); what makes a derived axis more uniform
than the thread index it is computed from is the quotient: tid / 128 is the
same in all 128 threads of a warpgroup (`quotient_uniformity`). The verifier
(lower/verify.py, through lower/uniformity.py, which reads Kernel IR with
`uniformity`) classifies divergence with it: a collective intrinsic may sit
under a condition uniform within its group (block, warpgroup, warp), instead
of "does the condition mention threadIdx.x". The builders' own choices of one
thread (lower/loops.py one_thread, on its thread loops' variables; the Hopper
builders' `tid % 128 == 0` on THREAD_INDEX) still write their conditions on
the thread index itself, not on a derived axis.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .layout import PY
from .threads import SPECIAL, THREAD, parse

WARP_SIZE = 32
WARPGROUP_WARPS = 4
WARPGROUP_SIZE = WARP_SIZE * WARPGROUP_WARPS

# The index register whose consecutive values form warps: the name of the ir.Var that
# reads it. THREAD_INDEX where code means the thread's index in a 1-D block (tid: the
# Hopper builders' warpgroups of 128, the elected thread of a group); LANE_INDEX where it
# means the lane within the warp, which threadIdx.x is in a block one warp wide along x
# (the mma.sync kernels: lanes along x, warps along y and z). The same register, named
# for what each user assumes of the block.
THREAD_INDEX = THREAD[0].name  # "threadIdx.x"
LANE_INDEX = THREAD_INDEX


class Uniformity(IntEnum):
    GRID = 0
    CLUSTER = 1
    BLOCK = 2
    WARPGROUP = 3
    WARP = 4
    THREAD = 5

    @property
    def threads(self) -> int | None:
        """Threads in one group of this level, when the level fixes it."""
        return {Uniformity.WARPGROUP: WARPGROUP_SIZE, Uniformity.WARP: WARP_SIZE,
                Uniformity.THREAD: 1}.get(self)

    def __str__(self) -> str:
        return self.name.lower()


def join(*us: Uniformity) -> Uniformity:
    """The uniformity of a value computed from values of uniformities `us`:
    the least uniform of them (GRID for none: a constant)."""
    return max(us, default=Uniformity.GRID)


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: the unit its name counts, and within which
    group its index is uniform."""
    name: str
    index_uniformity: Uniformity  # the index of one unit is the same within it
    threads: int | None  # threads per unit, when fixed by the hardware


LEVELS = (Level("cluster", Uniformity.CLUSTER, None),
          Level("block", Uniformity.BLOCK, None),
          Level("warpgroup", Uniformity.WARPGROUP, WARPGROUP_SIZE),
          Level("warp", Uniformity.WARP, WARP_SIZE),
          Level("lane", Uniformity.THREAD, 1))


@dataclass(frozen=True)
class DerivedAxis:
    """An index computed from the block's linear thread index tid:
    (tid / divisor) % modulus (no modulo when modulus is None), uniform within
    `uniform`."""
    name: str
    divisor: int
    modulus: int | None
    uniform: Uniformity

    def expr(self, tid, ops=PY):
        """The index as an expression over `tid` (ints, arrays or what `ops`
        builds: layout.PythonOps's protocol)."""
        x = tid if self.divisor == 1 else ops.floordiv(tid, self.divisor)
        return x if self.modulus is None else ops.mod(x, self.modulus)


DERIVED = {a.name: a for a in (
    DerivedAxis("warpgroup", WARPGROUP_SIZE, None, Uniformity.WARPGROUP),
    DerivedAxis("warp", WARP_SIZE, None, Uniformity.WARP),
    DerivedAxis("warp_in_warpgroup", WARP_SIZE, WARPGROUP_WARPS, Uniformity.WARP),
    DerivedAxis("lane", 1, WARP_SIZE, Uniformity.THREAD),
    DerivedAxis("thread_in_warpgroup", 1, WARPGROUP_SIZE, Uniformity.THREAD),
)}


def linear_thread_index(block, tx, ty, tz, ops=PY):
    """tid from the thread index components `tx, ty, tz` in a block of
    `block` = (x, y, z) extents (ints; None where known only at launch, which
    then must not be needed): just tx when y and z are 1."""
    bx, by, bz = block
    if by == 1 and bz == 1:
        return tx
    if bx is None or (bz != 1 and by is None):
        raise ValueError(f"the linear thread index of a block of {block} needs its x (and y) "
                         f"extents")
    out = ops.add(tx, ops.mul(ty, bx))
    return out if bz == 1 else ops.add(out, ops.mul(tz, bx * by))


def _aligned(prefix) -> Uniformity:
    """The uniformity of a thread-index component above `prefix` threads of
    tid (threadIdx.y above blockDim.x): groups of the level fit in one step
    of it when the level's size divides `prefix`."""
    if prefix is None:
        return Uniformity.THREAD
    for u in (Uniformity.WARPGROUP, Uniformity.WARP):
        if prefix % u.threads == 0:
            return u
    return Uniformity.THREAD


def register_uniformity(name: str, block=(None, None, None)) -> Uniformity | None:
    """The uniformity of an index register (threads.py spelling) in a block of
    `block` extents (None where unknown), or None for a name that is not one.
    threadIdx.y is warp-uniform when blockDim.x is a multiple of 32, warpgroup-
    uniform when of 128; a component of extent 1 is 0, a constant."""
    if name in SPECIAL:
        return Uniformity.CLUSTER if name.startswith("clusterid") else Uniformity.BLOCK
    a = parse(name)
    if a is None:
        return None
    if a.is_block:
        return Uniformity.BLOCK
    if block[a.dim] == 1:
        return Uniformity.GRID
    if a.dim == 0:
        return Uniformity.THREAD
    prefix = block[0] if a.dim == 1 else (None if None in block[:2] else block[0] * block[1])
    return _aligned(prefix)


def quotient_uniformity(divisor: int, block=(None, None, None)) -> Uniformity:
    """The uniformity of threadIdx.x / divisor (floor) in a block of `block`
    extents: uniform within the largest group (warpgroup, warp) whose size
    divides `divisor`, when such groups consist of consecutive threadIdx.x
    (a 1-D block, or blockDim.x a multiple of the group); GRID when
    blockDim.x <= divisor (the quotient is 0)."""
    bx = block[0]
    if bx is not None and bx <= divisor:
        return Uniformity.GRID
    one_d = block[1] == 1 and block[2] == 1
    for u in (Uniformity.WARPGROUP, Uniformity.WARP):
        if divisor % u.threads == 0 and (one_d or (bx is not None and bx % u.threads == 0)):
            return u
    return Uniformity.THREAD


def uniformity(expr, view, block=(None, None, None), known=None) -> Uniformity:
    """The uniformity of an expression, read through `view(e)`, which returns
    ("var", name), ("const", value) or (op, a, b) with op one of + - * / %
    (floor division) and others: a variable is a register (register_uniformity)
    or in `known` (name -> Uniformity: loop variables, lets, derived axes) and
    otherwise THREAD (nothing known); threadIdx.x / constant is
    quotient_uniformity; anything else joins its operands."""
    known = known or {}

    def go(e) -> Uniformity:
        v = view(e)
        if v[0] == "const":
            return Uniformity.GRID
        if v[0] == "var":
            if v[1] in known:
                return known[v[1]]
            u = register_uniformity(v[1], block)
            return Uniformity.THREAD if u is None else u
        op, *args = v
        if op == "/" and len(args) == 2:
            a, b = view(args[0]), view(args[1])
            if a == ("var", THREAD_INDEX) and b[0] == "const" and isinstance(b[1], int) \
                    and b[1] > 0:
                return quotient_uniformity(b[1], block)
        return join(*(go(x) for x in args))
    return go(expr)
