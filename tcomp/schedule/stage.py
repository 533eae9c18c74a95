"""Stages: one per statement of the op (plus cache stages), each with its
loop axes and the transformations applied to them.

A stage's state is: its definition (`StageDef`: what it computes, over which
index ranges), its current leaf axes in loop order, the relations that derived
them (split, fuse), per-axis annotations (bind, unroll, vectorize) and where
it is computed (root, inline, or at a consumer's axis).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lang.ast import Expr
from ..lang.dtypes import DType
from . import threads

THREAD_TAGS = threads.TAGS  # every spelling bind accepts (schedule/threads.py)
SCOPES = ("global", "shared", "local", "fragment")


@dataclass(frozen=True)
class Axis:
    """A handle to one loop axis of a stage (what primitives take and return)."""
    stage: str
    name: str
    kind: str  # 'spatial' or 'reduce'

    def __repr__(self) -> str:
        return f"Axis({self.stage}.{self.name}{', reduce' if self.kind == 'reduce' else ''})"


@dataclass(frozen=True)
class StageDef:
    """What a stage computes: for each point of `spatial`, reduce `rhs` over
    `reduce` with `reduce_op` (None: plain assignment), into `tensor`.
    `ranges` maps every index to (lo, hi) size expressions (hi exclusive)."""
    tensor: str
    spatial: tuple[str, ...]
    reduce: tuple[str, ...]
    ranges: dict = field(hash=False, compare=False)
    rhs: Expr = None
    reduce_op: str | None = None
    init: bool = True  # start from the identity (False: continue the tensor's value)
    acc_dtype: DType | None = None
    lets: dict = field(default_factory=dict, hash=False, compare=False)
    # A tuple (monoid) reduction (lang/monoids.py): `rhs` is a Values, `tensor` its first
    # component, `components` the others, `accs` every component's accumulation type.
    components: tuple[str, ...] = ()
    monoid: str | None = None
    accs: tuple = ()
    # An ordered statement (`where ordered t`, schedule/ordered.py): its ordered indices,
    # outermost first, and the spatial indices its reads of its own tensor leave unchanged.
    ordered: tuple[str, ...] = ()
    independent: tuple[str, ...] = ()
    # A scatter (lang/check_scatter.py): its left-hand-side subscripts, language
    # expressions over its indices (all of them `spatial`), else ().
    scatter: tuple = ()
    # The reduction indices whose range reads a tensor (lang/check_ragged.py): their
    # `ranges` entries are language expressions of the spatial indices and reads.
    ragged: tuple[str, ...] = ()

    @property
    def tensors(self) -> tuple[str, ...]:
        return (self.tensor,) + self.components

    def reads(self) -> set[str]:
        """The tensors the statement reads (a new set each call). Worked out
        once per definition and kept on it (a definition is immutable; the
        lowering of one search candidate asked some 200 times)."""
        got = self.__dict__.get("_reads")
        if got is None:
            from ..lang.ast import Read, walk
            out = set()
            bounds = [e for v in self.ragged for e in self.ranges[v]]
            for e in [self.rhs, *self.lets.values(), *self.scatter, *bounds]:
                out |= {x.tensor for x in walk(e) if isinstance(x, Read)}
            got = frozenset(out)
            object.__setattr__(self, "_reads", got)
        return set(got)


@dataclass(frozen=True)
class SplitRel:
    parent: str
    outer: str
    inner: str
    factor: int | None
    nparts: int | None


@dataclass(frozen=True)
class FuseRel:
    outer: str
    inner: str
    fused: str


class StageState:
    """Mutable per-stage scheduling state, owned by a Schedule."""

    def __init__(self, name: str, definition: StageDef, scope: str = "global",
                 origin: str = "statement"):
        self.name = name
        self.definition = definition
        self.scope = scope  # where its tensor lives
        self.origin = origin  # statement | cache_read | cache_write | snapshot
        # A snapshot stage: (the tensor it copies, the in-place stage that reads the copy).
        self.snapshot: tuple[str, str] | None = None
        self.kinds: dict[str, str] = {}
        for v in definition.spatial:
            self.kinds[v] = "spatial"
        for v in definition.reduce:
            self.kinds[v] = "reduce"
        # An ordered stage's loops: independent, ordered, then the rest (schedule/ordered.py).
        self.leaves: list[str] = self.initial_leaves()
        self.relations: list = []
        self.bind: dict[str, str] = {}
        self.unroll: set[str] = set()
        self.unroll_by: dict[str, int] = {}  # leaf -> factor: a loop CUDA unrolls by it (also in unroll)
        self.vectorize: set[str] = set()
        self.align: dict[str, tuple[int, int]] = {}  # tensor dim index var -> (factor, offset)
        self.storage: tuple[str, ...] | None = None  # storage_order: dims outermost first
        self.swizzle: int | None = None  # swizzle: its span in bytes (ir.Swizzle)
        self.pipeline: dict[str, int] = {}  # leaf -> stages (double-buffered copies there)
        self.tensorize: dict[str, str] = {}  # leaf -> intrinsic computing the loops from it in
        self.attach: tuple = ("root",)  # ('root',) | ('inline',) | ('at', stage, axis)
        # Stage.scan (schedule/scan.py): (the tile loop, the lane loop, threads), else None.
        self.scan: tuple[str, str, int] | None = None
        # Stage.scan(..., lookback=True): its tiles over blocks (schedule/scan.Lookback)
        self.lookback = None
        # the Hopper path (primitives_hopper.py): a copy filled by the TMA engine (its
        # swizzle), the persistent tile loops (outer, inner, group_m), the warp roles
        # (the consumers' loop, producer registers, consumer registers, ping-pong)
        self.tma: int | None = None
        self.persistent: tuple | None = None
        self.roles: tuple | None = None
        self.epilogue: str | None = None  # the elementwise stage computed from its accumulators
        # the stage computed from its running statistics (statistics_epilogue.py)
        self.row_epilogue: str | None = None

    @property
    def tensor(self) -> str:
        return self.definition.tensor

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.kinds:
            name, i = f"{base}{i}", i + 1
        return name

    def transformed(self) -> bool:
        return bool(self.relations or self.bind or self.unroll or self.vectorize or self.pipeline or
                    self.tensorize or self.persistent or self.roles or
                    self.leaves != self.initial_leaves())

    def initial_leaves(self) -> list[str]:
        d = self.definition
        if not d.ordered:
            return list(d.spatial) + list(d.reduce)
        return list(d.independent) + list(d.ordered) + \
            [v for v in d.spatial if v not in d.ordered + d.independent] + list(d.reduce)
