"""Kernel IR: loops, buffers with scopes, loads/stores, barriers, intrinsics.

Frozen dataclasses; children are tuples; edit with `dataclasses.replace` or a
`Rewriter` (rewriter.py). Types are the language's `DType`s. Integer `/` and
`%` floor toward negative infinity, as in the language.

Designed for what comes next: `Call` carries intrinsics by name with typed
operands (async copies, mbarrier arrive/wait, mma fragments), `Buffer.scope`
names the memory (global, shared, local, and later tensor-map / barrier
objects), `For.kind` covers serial, unrolled, vectorised and thread-bound
loops, and `Kernel.params` may hold launch-time objects.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lang import dtypes
from ..lang.dtypes import DType

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
    """A loop variable, a thread/block index (`threadIdx.x`), or a size parameter."""
    name: str
    dtype: DType = int32


@dataclass(frozen=True)
class Load(Expr):
    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True)
class Ref(Expr):
    """The address of `buffer[indices]`: an intrinsic's operand (a fragment's
    first register, a shared-memory row), not a value. Only intrinsic calls take it."""
    buffer: str
    indices: tuple[Expr, ...]
    dtype: DType = int32


@dataclass(frozen=True)
class Bin(Expr):
    """Binary operation: + - * / % min max < <= > >= == != && ||."""
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
    buffer: str
    indices: tuple[Expr, ...]
    value: Expr
    # The comprehension statement this store computes (for messages); not part of equality.
    loc: object = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class VectorAccess:
    """How a vectorized loop moves memory, decided by the `vectorize` pass
    (lower/vectorize.py): each access below moves the loop's `extent` lanes,
    `bytes` (8 or 16) in all, as one vector. `loads` are loads of the loop's
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
    tensorize. A thread loop has `tag` (threadIdx.x, blockIdx.y, ...): its
    iterations are spread over threads or blocks instead of executed in
    sequence. A tensorize loop names `intrin`, the intrinsic that computes it
    and the loops inside it (lower/tensor_cores.py replaces them by it). A
    vectorized loop may carry `vector`, its vector accesses (after the
    `vectorize` pass); its meaning is the loop's, lane by lane. A loop with
    `stages` >= 3 starts with copies into rings of that many shared buffers,
    which software_pipeline.py issues that many iterations ahead."""
    var: str
    lo: Expr
    extent: Expr
    kind: str
    body: Stmt
    tag: str | None = None
    intrin: str | None = None
    vector: VectorAccess | None = None
    stages: int = 0  # > 0: the shared copies at the top of its body form a ring of that depth


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
    var: str
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class Barrier(Stmt):
    """Synchronise the threads of a block (`__syncthreads`)."""
    scope: str = "block"


@dataclass(frozen=True)
class AllReduce(Stmt):
    """Cross-thread reduction: combine `buffer[0]` (a per-thread local scalar)
    with `op` over the `extent` threads along `tag`; afterwards every one of
    those threads holds the result. Reached by every thread of the block.
    `extent` is a size expression equal to the block's dimension along `tag`
    (any count from 1 to 1024, possibly known only at launch)."""
    op: str  # '+', '*', 'max', 'min'
    buffer: str
    dtype: DType
    tag: str
    extent: Expr


@dataclass(frozen=True)
class Evaluate(Stmt):
    """Evaluate an intrinsic call for its effect."""
    call: Call


@dataclass(frozen=True)
class Alloc(Stmt):
    """Allocate `buffer` (shared or local scope) for the duration of `body`."""
    buffer: "Buffer"
    body: Stmt


# -------------------------------------------------------------------- programs
@dataclass(frozen=True)
class Buffer:
    """A named array. `shape` uses size expressions (Var parameters allowed for
    global buffers); shared/local buffers have constant shapes."""
    name: str
    dtype: DType
    shape: tuple[Expr, ...]
    scope: str = "global"  # global | shared | local
    role: str = "temp"  # input | output | temp


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


def expr_children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Load, Ref)):
        return e.indices
    if isinstance(e, Bin):
        return (e.a, e.b)
    if isinstance(e, (Un, Cast)):
        return (e.x,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Call):
        return e.args
    return ()


def walk_expr(e: Expr):
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(expr_children(x))


def free_vars(e: Expr) -> set[str]:
    return {x.name for x in walk_expr(e) if isinstance(x, Var)}


def identity(op: str, dt) -> Imm:
    """The identity of reduction operator `op` ('+', '*', 'max', 'min') in type
    `dt`: where an accumulation starts, and what an `AllReduce` lane past the
    reduction's extent contributes."""
    if op == "+":
        return Imm(0.0 if dt.is_float else (False if dt.is_bool else 0), dt)
    if op == "*":
        return Imm(1.0 if dt.is_float else (True if dt.is_bool else 1), dt)
    if dt.is_float:
        return Imm(float("-inf") if op == "max" else float("inf"), dt)
    if dt.is_bool:
        return Imm(op == "min", dt)
    import numpy as np
    info = np.iinfo(dt.numpy)
    return Imm(int(info.min if op == "max" else info.max), dt)
