"""The GPU's index registers as types: which level of the hierarchy a loop is
spread over, and along which dimension.

    ThreadAxis("block", 0)   spelled "blockIdx.x"   (the grid's x dimension)
    ThreadAxis("thread", 2)  spelled "threadIdx.z"  (the block's z dimension)

All parsing and printing of the spellings is here: schedules take the
spelling (`bind(ax, "threadIdx.x")`, the public API), Kernel IR holds the
typed axis (`For.tag`, `AllReduce.tag`), and the CUDA and sim targets name an
axis's index variable by its spelling, which is also the name of the
`ir.Var` that reads it. These six are the axes a schedule may bind (TAGS).

Hopper adds cluster registers (SPECIAL): `clusterid.x..z`, the cluster's
index in the grid, and `cluster_ctarank`, the block's rank within its
cluster (PTX special registers %clusterid and %cluster_ctarank). They are
read, never bound. Warpgroups, warps and lanes are not registers at all:
they are derived from the thread index (hierarchy.py).

(Moved here from schedule/threads.py, which re-exports it: arch is the layer
below schedule, so the schedule's checks and the lowering share it.)
"""
from __future__ import annotations

from dataclasses import dataclass

# level -> the CUDA name of its index (the prefix of the spelling)
LEVELS = {"block": "blockIdx", "thread": "threadIdx"}
DIMS = "xyz"


@dataclass(frozen=True)
class ThreadAxis:
    level: str  # a key of LEVELS
    dim: int  # 0, 1, 2 for x, y, z

    def __post_init__(self):
        if self.level not in LEVELS or self.dim not in (0, 1, 2):
            raise ValueError(f"no thread axis at level {self.level!r}, dimension {self.dim!r}")

    @property
    def name(self) -> str:
        """The spelling, "threadIdx.x": also the name of its index variable."""
        return f"{LEVELS[self.level]}.{DIMS[self.dim]}"

    @property
    def is_block(self) -> bool:
        return self.level == "block"

    @property
    def is_thread(self) -> bool:
        return self.level == "thread"

    def __str__(self) -> str:
        return self.name


BLOCK = tuple(ThreadAxis("block", d) for d in range(3))
THREAD = tuple(ThreadAxis("thread", d) for d in range(3))
AXES = BLOCK + THREAD
_BY_NAME = {a.name: a for a in AXES}
TAGS = tuple(a.name for a in AXES)  # every spelling a schedule may bind
INDEX_VARS = frozenset(TAGS)  # the names of the thread and block index variables


@dataclass(frozen=True)
class SpecialRegister:
    """A read-only index register beyond blockIdx/threadIdx: its name (also
    the name of the `ir.Var` that will read it), the PTX register, and the
    target feature it needs (target.py)."""
    name: str
    ptx: str
    feature: str
    doc: str


SPECIAL = {r.name: r for r in (
    *(SpecialRegister(f"clusterid.{d}", f"%clusterid.{d}", "clusters",
                      f"the cluster's index in the grid along {d}") for d in DIMS),
    SpecialRegister("cluster_ctarank", "%cluster_ctarank", "clusters",
                    "the block's rank within its cluster (0 .. blocks per cluster - 1)"),
)}


def parse(tag) -> ThreadAxis | None:
    """The axis a spelling ("blockIdx.y") names, or None; an axis is itself."""
    if isinstance(tag, ThreadAxis):
        return tag
    return _BY_NAME.get(tag) if isinstance(tag, str) else None


def axis(tag) -> ThreadAxis:
    """Like `parse`, but an unknown spelling is an error (a programming error:
    the schedule has checked every tag it accepts)."""
    a = parse(tag)
    if a is None:
        raise ValueError(f"unknown thread tag {tag!r} (one of {', '.join(TAGS)})")
    return a


def is_block(tag) -> bool:
    a = parse(tag)
    return a is not None and a.is_block


def is_thread(tag) -> bool:
    a = parse(tag)
    return a is not None and a.is_thread
