"""The GPU a kernel is built for, as data: its architecture name and the
features tcomp may use there.

    parse("sm_90a")  -> Target("sm_90a", cc=(9, 0), features={cp_async, ..., wgmma})
    parse("sm_80")   -> Target("sm_80", cc=(8, 0), features={cp_async, ldmatrix, mma_sync})

A feature comes with a compute capability (FEATURES: the first one whose
PTX ISA has the instruction tcomp emits for it), except the
architecture-specific ones (ARCH_SPECIFIC), which exist only on the "a"
target they are listed for: `wgmma.mma_async` and `setmaxnreg` need sm_90a
(PTX ISA, "Target ISA notes" of each), so sm_90 has TMA, mbarrier
transaction counts, clusters and stmatrix but not those two, and sm_100a
(which has tcgen05 instead) has no wgmma.

`resolve(target)` is what `lower(..., target=)` (lower/pipeline.py, and
`tcomp.lower`) calls to get a Target from what the user passed (a Target,
"sm_90a", "cuda:sm_80", or None for DEFAULT, the architecture the CUDA
target compiles for by default). The builder holds it (its plans read the
shared memory a block may have there: hopper_attention_plan.py), and
`Target.require`, the check an instruction that needs a feature makes, runs
on every intrinsic of the lowered program (lower/target_features.py). Not
yet passed a Target: the schedule's checks (they accept what sm_90a has) and
`tcomp.build`, whose CUDA target checks the architecture it compiles for
itself (target_cuda/arch.py: the attached GPU's when none is named).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LoweringError

# feature -> (the smallest compute capability with it, what it is)
FEATURES = {
    "ldmatrix": ((7, 5), "ldmatrix: warp-wide loads of 8x8 matrices from shared memory"),
    "cp_async": ((8, 0), "cp.async: asynchronous global-to-shared copies in commit groups"),
    "mma_sync": ((8, 0), "mma.sync.m16n8k16 with bfloat16/float16 inputs, float32 accumulators"),
    "tma": ((9, 0), "cp.async.bulk.tensor: TMA copies described by a tensor map"),
    "mbarrier_tx": ((9, 0), "mbarrier expect-tx / complete-tx: barriers that count bytes"),
    "clusters": ((9, 0), "thread-block clusters and distributed shared memory"),
    "stmatrix": ((9, 0), "stmatrix: warp-wide stores of 8x8 matrices to shared memory"),
    "wgmma": (None, "wgmma.mma_async: warpgroup-wide MMA from shared-memory descriptors"),
    "setmaxnreg": (None, "setmaxnreg: per-warpgroup register reallocation"),
}
# feature -> the architectures (with their suffix) that have it, for the
# architecture-specific features (FEATURES' capability None)
ARCH_SPECIFIC = {"wgmma": ("sm_90a",), "setmaxnreg": ("sm_90a",)}

_NAME = re.compile(r"sm_(\d+)(\d)([af]?)$")


@dataclass(frozen=True)
class Target:
    name: str  # "sm_90a"
    cc: tuple[int, int]  # compute capability (9, 0)
    features: frozenset = field(default_factory=frozenset)

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise ValueError(f"unknown target feature {feature!r} (one of {', '.join(FEATURES)})")
        return feature in self.features

    def require(self, feature: str, what: str) -> None:
        """Raise LoweringError when this target lacks `feature`, naming `what`
        needs it and the targets that have it."""
        if self.has(feature):
            return
        where = targets_with(feature)
        raise LoweringError(f"{what} needs {FEATURES[feature][1]} (target feature '{feature}'), "
                            f"which target {self.name} does not have; build for "
                            f"{' or '.join(where)}")

    def __str__(self) -> str:
        return self.name


def targets_with(feature: str) -> tuple[str, ...]:
    """The architectures to suggest for `feature`."""
    cc, _ = FEATURES[feature]
    return ARCH_SPECIFIC[feature] if cc is None else (f"sm_{cc[0]}{cc[1]}", "later")


def parse(name: str) -> Target:
    """The Target an architecture name ("sm_80", "sm_90a", "sm_100f") names."""
    m = _NAME.match(name) if isinstance(name, str) else None
    if m is None:
        raise LoweringError(f"target {name!r} is not a GPU architecture name (expected e.g. "
                            f"'sm_80' or 'sm_90a')")
    cc = (int(m.group(1)), int(m.group(2)))
    feats = {f for f, (least, _) in FEATURES.items() if least is not None and cc >= least}
    feats |= {f for f, names in ARCH_SPECIFIC.items() if name in names}
    return Target(name, cc, frozenset(feats))


SM80 = parse("sm_80")
SM90 = parse("sm_90")
SM90A = parse("sm_90a")
DEFAULT = SM90A  # (the CUDA target's default architecture: target_cuda/compile.py)


def resolve(target=None) -> Target:
    """The Target for what a user passed: a Target, an architecture name, a
    CUDA target string with one ("cuda:sm_80"), or None (DEFAULT)."""
    if target is None:
        return DEFAULT
    if isinstance(target, Target):
        return target
    if isinstance(target, str) and target.startswith("cuda:"):
        target = target[len("cuda:"):].strip()
    return parse(target)
