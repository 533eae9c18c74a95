"""What every sketch rule reads and is: the device `Limits`, the `Context`
(the op, its stage graph, the loop extents at the tuning sizes), the `Rule`
record, and the small helpers the rule families share (rules/__init__.py
lists the rules)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...lang.symbolic import eval_int

@dataclass(frozen=True)
class Limits:
    """What one thread block may use (an H200 by default: sm_90)."""
    threads: int = 1024
    block_dims: tuple[int, int, int] = (1024, 1024, 64)
    grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    shared_bytes: int = 227 * 1024
    registers: int = 255  # per thread; the estimate in space.py is rough, so rules stay below
    block_registers: int = 65536  # 32-bit registers of one block (a thread: this / threads)
    sm_count: int = 132  # multiprocessors: a persistent grid's size (ir.SM_COUNT)
    arch: str = "sm_90a"  # what candidates are built for: the Hopper rules need sm_90a (wgmma)


def limits_for(target: str, limits: "Limits | None" = None) -> "Limits":
    """The limits of a search for `target`: `limits` when given; else an
    H200's, with the architecture the candidates are built for: "cuda:<arch>"
    names it, "cuda" is the local GPU's (sm_90a without one: the CUDA target
    then builds for sm_90a), "sim" runs every mechanism (sm_90a)."""
    if limits is not None:
        return limits
    import dataclasses
    arch = "sm_90a"
    if target.startswith("cuda:"):
        arch = target.split(":", 1)[1]
    elif target == "cuda":
        from ...target_cuda import cuda_api
        if cuda_api.have_device():
            arch = cuda_api.device().arch
    return dataclasses.replace(Limits(), arch=arch)


@dataclass
class Context:
    """What the rules read: the op, its stage graph, every stage's loop
    extents at the tuning sizes, the limits, and the stages the plan inlines."""
    op: object
    graph: object
    sizes: dict
    extents: dict  # stage -> {var: int}
    limits: Limits = field(default_factory=Limits)
    inlined: frozenset = frozenset()
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # rules' graph readings

    def node(self, stage):
        return self.graph.nodes[stage]


def extents_of(schedule, sizes) -> dict:
    out = {}
    for name, st in schedule.states.items():
        # (a ragged range's extent is data: taken as 1, so no rule splits or binds it)
        out[name] = {v: max(0, eval_int(hi, sizes) - eval_int(lo, sizes))
                     if v not in st.definition.ragged else 1
                     for v, (lo, hi) in st.definition.ranges.items()}
    return out


def pow2_upto(n: int, lo: int = 1, hi: int = 1 << 30) -> list[int]:
    """Powers of two from lo to min(hi, the smallest power of two >= n)."""
    top, out, p = max(lo, min(hi, 1 << max(0, int(n - 1).bit_length()))), [], lo
    while p <= top:
        out.append(p)
        p *= 2
    return out


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _fuse_all(st, axes):
    f = axes[0]
    for a in axes[1:]:
        f = st.fuse(f, a)
    return f



@dataclass(frozen=True)
class Rule:
    name: str
    applies: object
    sample: object
    feasible: object
    apply: object
    claims: object = None  # (ctx, stage) -> producers the rule schedules at the stage
    keeps: object = None  # (ctx, stage, params) -> inlinable producers it keeps as stages
    # (ctx, stage) -> [params, ...]: measured-good points, best first (references.py)
    reference: object = None
    weight: float = 1.0

