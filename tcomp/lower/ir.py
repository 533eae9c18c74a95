"""Kernel IR: loops, buffers with scopes, loads/stores, barriers, intrinsics.

Frozen dataclasses; children are tuples; edit with `dataclasses.replace` or a
`Rewriter` (rewriter.py). A node's children are derived from its fields
(`children`): every field declared as an `Expr`, a `Stmt` or a tuple of them,
so the rewriter, the visitor and the walks below need no list of node types.
A new node touches its definition here, its printer line (printer.py), its
CUDA emitter and its sim rule, nothing else. Types are the language's `DType`s. Integer `/` and
`%` floor toward negative infinity, as in the language.

Designed for what comes next: `Call` carries intrinsics by name with typed
operands (async copies, mbarrier arrive/wait, mma fragments), `Buffer.scope`
names the memory (global, shared, local, and later tensor-map / barrier
objects), `For.kind` covers serial, unrolled, vectorised and thread-bound
loops, and `Kernel.params` may hold launch-time objects.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..lang import dtypes
from ..lang.dtypes import DType
from ..arch import threads
from ..arch.threads import ThreadAxis

int32, bool_ = dtypes.int32, dtypes.bool_


# ----------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Expr:
    pass


@dataclass(frozen=True)
class Imm(Expr):
    """A constant of `dtype` (int, float or bool)."""
    value: int | float | bool
    dtype: DType = int32


@dataclass(frozen=True)
class Var(Expr):
    """A loop variable, a thread/block index (named by its axis's spelling,
    `threadIdx.x`: schedule/threads.py), or a size parameter."""
    name: str
    dtype: DType = int32


@dataclass(frozen=True)
class Load(Expr):
    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True)
class Ref(Expr):
    """The address of the element `buffer[indices]`, not its value: an operand
    of an intrinsic that reads or writes memory there (a fragment's first
    register, a shared-memory row, an asynchronous copy's source and
    destination). Only an intrinsic whose registry entry (intrinsics.py) takes
    a reference at that position consumes one; anywhere else the verifier and
    the sim refuse it. Flattening turns the subscripts into one offset, like a
    Load's; CUDA prints `(&buffer[offset])`. `dtype`: what the address points
    to, where a rule needs it (int32 when left out)."""
    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType = int32


@dataclass(frozen=True)
class Bin(Expr):
    """Binary operation: + - * / % min max < <= > >= == != && ||, and on
    integers the bitwise & | ^ and shifts << >> (two's complement, as in C;
    `>>` is arithmetic, so `x >> s` is `x / 2^s` with floor semantics; a
    shift count is in 0..bits-1). Layouts use them (a swizzle's XOR: see
    `Swizzle`)."""
    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True)
class Un(Expr):
    """Unary operation: '-' (negate) or '!' (logical not)."""
    op: str
    x: Expr
    dtype: DType


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True)
class Call(Expr):
    """A math builtin (`exp`, `fmax`, ...) or an intrinsic."""
    fn: str
    args: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True)
class Cast(Expr):
    dtype: DType
    x: Expr


# ------------------------------------------------------------------ statements
@dataclass(frozen=True)
class Stmt:
    pass


@dataclass(frozen=True)
class Store(Stmt):
    """`buffer[indices] = value`; with `atomic` ('+', 'max', 'min'), the atomic
    update `buffer[indices] = buffer[indices] atomic value` instead (a
    scatter's, lower/scatter_store.py: the threads that run it may hit one
    element together)."""
    buffer: str
    indices: tuple[Expr, ...]
    value: Expr
    # The comprehension statement this store computes (for messages); not part of equality.
    loc: object = field(default=None, compare=False, repr=False, kw_only=True)
    # (part of equality, not of the hash: a plain and an atomic store of one element
    # hash alike, which keeps the hash of every store as it was)
    atomic: str | None = field(default=None, kw_only=True, hash=False)


@dataclass(frozen=True)
class IndexCheck(Stmt):
    """A data-dependent subscript's range check: `0 <= value < extent`, else
    the run stops with an error naming `what` (the sim: a SimError; CUDA: the
    kernel traps). Before a scatter's store (lower/scatter_store.py)."""
    value: Expr
    extent: Expr
    what: str


@dataclass(frozen=True)
class VectorAccess:
    """How a vectorized loop moves memory, decided by the `vectorize` pass
    (lower/vectorize.py): each access below moves the loop's `extent` lanes
    of its own element type as one vector (4, 8 or 16 bytes); `bytes` is the
    size of the store's vector (of the loads' when stored lane by lane: then
    all loads have it). `loads` are loads of the loop's
    body (as they appear there) read as one vector each, lane 0 at the flat
    offset `load_bases[i]`; `store_base` is the offset of lane 0 of the body's
    one store written as one vector, or None when it is stored lane by lane.
    Every base is a multiple of the lane count (the buffers themselves are
    aligned to the vector at launch)."""
    bytes: int
    loads: tuple[Load, ...]
    load_bases: tuple[Expr, ...]
    store_base: Expr | None


@dataclass(frozen=True)
class For(Stmt):
    """`for var in lo:lo+extent`. kind: serial | unroll | vectorize | thread |
    tensorize. A thread loop has `tag`, the ThreadAxis (threadIdx.x,
    blockIdx.y, ...) its iterations are spread over instead of executed in
    sequence; the spelling ("threadIdx.x") is accepted and parsed
    (schedule/threads.py). A tensorize loop names `intrin`, the intrinsic that
    computes it and the loops inside it (lower/tensor_cores.py replaces them
    by it). A vectorized loop may carry `vector`, its vector accesses (after
    the `vectorize` pass); its meaning is the loop's, lane by lane. A loop
    with `stages` >= 3 starts with copies into rings of that many shared
    buffers, which software_pipeline.py issues that many iterations ahead. A serial
    loop with `unroll_by` > 0 asks the CUDA compiler to unroll it by that factor
    (`#pragma unroll N`; 1: not at all); its meaning is the loop's."""
    BINDS: ClassVar[str] = "body"  # `var` is defined in `body` (not in lo, extent)
    var: str
    lo: Expr
    extent: Expr
    kind: str
    body: Stmt
    tag: ThreadAxis | None = None
    intrin: str | None = None
    vector: VectorAccess | None = None
    stages: int = 0  # > 0: the shared copies at the top of its body form a ring of that depth
    unroll_by: int = 0  # > 0: `#pragma unroll unroll_by` on a serial loop (schedule unroll factor)

    def __post_init__(self):
        if self.tag is not None and type(self.tag) is not ThreadAxis:
            object.__setattr__(self, "tag", threads.axis(self.tag))


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(frozen=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class Let(Stmt):
    """Bind `var` to `value` in `body` (thread indices, hoisted offsets)."""
    BINDS: ClassVar[str] = "body"
    var: str
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class Barrier(Stmt):
    """Synchronise the threads of a block (`__syncthreads`): the intrinsic
    "barrier" (intrinsics.py), a node of its own because passes place it."""
    INTRINSIC: ClassVar[str] = "barrier"
    scope: str = "block"


@dataclass(frozen=True)
class AllReduce(Stmt):
    """Cross-thread reduction: combine `buffer[0]` (a per-thread local scalar)
    with `op` over the `extent` threads along `tag`; afterwards every one of
    those threads holds the result. Reached by every thread of the block.
    `extent` is a size expression equal to the block's dimension along `tag`
    (any count from 1 to 1024, possibly known only at launch). The intrinsic
    "allreduce" (intrinsics.py), with its operands as fields."""
    INTRINSIC: ClassVar[str] = "allreduce"
    op: str  # '+', '*', 'max', 'min'
    buffer: str
    dtype: DType
    tag: ThreadAxis  # (a spelling such as "threadIdx.x" is parsed)
    extent: Expr

    def __post_init__(self):
        if type(self.tag) is not ThreadAxis:
            object.__setattr__(self, "tag", threads.axis(self.tag))


@dataclass(frozen=True)
class Evaluate(Stmt):
    """Evaluate an intrinsic call for its effect: `call.fn` names an entry of
    the registry (intrinsics.py), `call.args` are its operands in order."""
    call: Call


@dataclass(frozen=True)
class Alloc(Stmt):
    """Allocate `buffer` (shared or local scope) for the duration of `body`."""
    buffer: "Buffer"
    body: Stmt


@dataclass(frozen=True)
class Role(Stmt):
    """One role of a `Specialize`: warpgroups `first` .. `first + count - 1`
    of the block (128 consecutive threads of threadIdx.x each) run `body`,
    with `var` their index within the role (0 .. count - 1, uniform across a
    warpgroup). `regs` > 0 sets the role's registers per thread when it
    starts (`setmaxnreg`: a producer gives registers back, consumers take
    them; 24..256, a multiple of 8); 0 keeps what the kernel launched with."""
    BINDS: ClassVar[str] = "body"
    var: str
    name: str
    first: int
    count: int
    regs: int
    body: Stmt


@dataclass(frozen=True)
class Specialize(Stmt):
    """Warp specialisation (Halide's `Fork`, a structured form of
    `if (warpgroup == ...)`): the block's warpgroups are split into `roles`
    that run different bodies at the same time and meet only through
    barrier objects (mbarriers) and named barriers. The roles cover the
    block's warpgroups without overlap; every thread of the block reaches
    the Specialize. The sim runs each role's warpgroups as tasks that block
    at waits (target_sim); CUDA prints one branch per role."""
    roles: tuple[Role, ...]


# -------------------------------------------------------------------- programs
CHUNK_BYTES = 16  # the unit a swizzle moves: what one lane of ldmatrix or cp.async addresses
LINE_BYTES = 128  # the 32 banks of shared memory, 4 bytes each


@dataclass(frozen=True)
class Swizzle:
    """An XOR swizzle of a shared buffer's 16-byte chunks (Stage.swizzle).

    A row is the buffer's innermost dimension (R bytes, every other
    dimension counts rows: a ring's stages, then the tile's rows). Chunk c
    of row r (the element at column j is in chunk j*itemsize / 16) is stored
    at chunk

        c ^ ((r / g) % n)   of the same row,   n = min(R, span) / 16,
                                               g = max(1, 128 / R)

    (only the low log2(n) bits of c change). For rows of 128 bytes and
    span 128 this is the Hopper 128-byte swizzle, chunk c ^ (r & 7); rows of
    64 or 32 bytes with span = R are TMA's 64- and 32-byte swizzles; rows of
    n x 128 bytes XOR the row index into the low 3 bits of each chunk. Any 8
    consecutive rows' chunks at one column then lie in 8 distinct groups of
    4 banks (ldmatrix reads such 8 rows per phase). Flattening
    (lower/flatten.py) applies it to every access, in one place; the
    buffer's shape and size do not change."""
    span: int = LINE_BYTES  # bytes: 32, 64 or 128

    def chunks(self, row_bytes: int) -> tuple[int, int]:
        """(n, g) for rows of `row_bytes`: the chunks a row's XOR permutes
        and the rows that share one XOR value (see the class docstring)."""
        n = min(row_bytes, self.span) // CHUNK_BYTES
        g = max(1, LINE_BYTES // row_bytes)
        return n, g

    def problem(self, row_bytes: int) -> str | None:
        """Why rows of `row_bytes` cannot be swizzled (None: they can)."""
        if row_bytes < LINE_BYTES:
            if row_bytes < 2 * CHUNK_BYTES:
                return (f"a row of {row_bytes} bytes holds fewer than two 16-byte chunks, "
                        f"nothing to permute")
            if row_bytes not in (32, 64):
                return (f"a row of {row_bytes} bytes is shorter than 128 bytes but not 32 or "
                        f"64 bytes (its 16-byte chunks must be a power of two)")
            return None
        if row_bytes % self.span:
            return (f"a row of {row_bytes} bytes is not a multiple of the swizzle span "
                    f"({self.span} bytes)")
        return None

    def __str__(self) -> str:
        return f"swizzle({self.span})"


@dataclass(frozen=True)
class Buffer:
    """A named array. `shape` uses size expressions (Var parameters allowed for
    global buffers); shared/local buffers have constant shapes. `layout`: how
    the shape's row-major offsets map to memory (None: as they are; a
    `Swizzle` for a shared buffer), applied when addresses are formed."""
    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    scope: str = "global"  # global | shared | local
    role: str = "temp"  # input | output | temp
    layout: Swizzle | None = None


@dataclass(frozen=True)
class TensorMap:
    """A kernel parameter describing a global buffer to the TMA engine (a
    128-byte `CUtensorMap`, passed by value as a `__grid_constant__`): the
    buffer's dimensions and strides (from its shape, at launch), the `box`
    one copy moves (elements per dimension, outermost first, like the
    shape) and the shared-memory `swizzle` (0, 32, 64 or 128 bytes) the box
    lands in. Out-of-bounds box elements read as zero and are not written.
    Intrinsics name it by `Var(name)`; the target encodes it at launch from
    the buffer's address and sizes."""
    name: str
    buffer: str
    box: tuple[int, ...]
    swizzle: int = 128
    # im2col mode (a convolution's windows, lower/im2col.py) instead of boxes: the box is
    # (pixels, channels), the rows one copy moves and the channels of each
    im2col: "Im2col | None" = None


@dataclass(frozen=True)
class Im2col:
    """A tensor map's im2col mode over an (N, spatial..., C) buffer: a copy
    at (n, spatial..., c) with filter offsets moves `pixels` consecutive
    window starts (walking the innermost spatial dimension first, then the
    next, then n) of `channels` channels each, the pixel read being the
    start plus the offsets (zeros outside the buffer). Window starts range
    over [lower, dim - 1 + upper] per spatial dimension (outermost first):
    lower = -padding, upper = padding - (filter - 1) for stride 1."""
    lower: tuple[int, ...]
    upper: tuple[int, ...]


SM_COUNT = "tc_sm_count"  # size parameter: the device's multiprocessor count, set at launch


@dataclass(frozen=True)
class Kernel:
    """One launch: `body` runs once per (block, thread) of grid x block.
    `grid` and `block` hold expressions over size parameters (constants when
    the bound loops have constant extents); a launch where either has a zero
    dimension runs nothing. Runtime block dimensions are checked against the
    device's limits at launch."""
    name: str
    buffers: tuple[str, ...]  # global buffers it touches, in parameter order
    sizes: tuple[str, ...]  # size parameters it needs
    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    body: Stmt
    # What a pass declined or chose that the schedule asked for (a vectorized loop left
    # lane by lane, ...): one line each, printed under the kernel, on `k.remarks`.
    remarks: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # TMA descriptors it takes after the buffers and sizes (TensorMap), in parameter order
    tensor_maps: tuple = ()
    # launch bounds' second number: blocks per multiprocessor the compiler must allow (0: none)
    min_blocks: int = 0
    # A kernel built whole from a plan (lower/hopper_plan.py) rather than from loop nests:
    # the plan in one line, printed under the kernel; of the passes only those in
    # pipeline.PLANNED_PASSES run on it (its synchronisation and unrolling are the plan's)
    plan: str = ""

    def const_block(self) -> tuple[int, int, int] | None:
        """The block dimensions when all three are constants, else None."""
        if all(isinstance(b, Imm) for b in self.block):
            return tuple(int(b.value) for b in self.block)
        return None


@dataclass(frozen=True)
class Program:
    """Kernels in launch order, every global buffer they share, and what a
    target needs to run them (size sources, zero-fill, declared shapes, the
    inputs' signature)."""
    name: str
    buffers: tuple[Buffer, ...]
    kernels: tuple[Kernel, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    sizes: tuple[str, ...]  # symbolic size parameters (bound at run time)
    bound_sizes: dict = field(default_factory=dict, compare=False, hash=False)
    # What a target needs besides the kernels (lower/interface.py), so that no
    # target calls back into lowering:
    # size parameter -> (input position, dimension) it is read from at a call
    size_sources: dict = field(default_factory=dict, compare=False, hash=False)
    # outputs and temporaries that must start zero-filled
    zero_fill: frozenset = field(default=frozenset(), compare=False, hash=False)
    # output -> its declared shape (size expressions), for typed outputs
    declared_shapes: dict = field(default_factory=dict, compare=False, hash=False)
    # the inputs' contract (lang.signature.Signature), checked before a run
    signature: object = field(default=None, compare=False, hash=False)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def __str__(self) -> str:
        from .printer import program_to_text
        return program_to_text(self)


# -------------------------------------------------------------------- helpers
def const(v: int) -> Imm:
    return Imm(int(v), int32)


ZERO, ONE = const(0), const(1)
TRUE = Imm(True, bool_)


def seq(*stmts) -> Stmt:
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


# ------------------------------------------------------------------ machinery
# hashing, children, walks (ir_walk.py), re-exported here
from .ir_walk import (_CHILD_FIELDS, _INIT_FIELDS, _REMEMBERED, _holds_nodes,  # noqa: E402,F401
                      _node_state, _remember_hash, binding, child_fields, children, expr_children,
                      free_vars, gather_fields, has_ref, identity, loaded, memory_nodes, plain,
                      rebuild, walk, walk_expr)
