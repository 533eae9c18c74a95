"""GPU architectures: which ones the compiler can target, and which one the
generated code needs.

`check_arch(arch)` refuses an architecture that is not `sm_` and a compute
capability this NVRTC compiles for (NVRTC 13: sm_75 and up), or a suffix the
capability does not have, before NVRTC runs (which would answer with its log
and the whole source). `check_features(prog, arch)` refuses a program whose
intrinsics need a newer GPU than `arch` (`Intrinsic.feature`, a feature of the machine model
(tcomp/arch/target.py), gives `min_arch` and `only_in`: tensor-core mma
and cp.async need sm_80, ldmatrix sm_75), naming the kernel and the intrinsic.
"""
from __future__ import annotations

import re

from ..errors import CudaError
from ..lower import intrinsics, ir
from ..lower.rewriter import walk_stmts
from . import cuda_api

_ARCH = re.compile(r"sm_(\d{2,3})([af]?)")
# The suffixes of arch-specific ("a": wgmma, setmaxnreg, ...) and family ("f") targets,
# and the first compute capability that has each.
SUFFIX_FROM = {"a": 90, "f": 100}


def arch_number(arch: str) -> int:
    """75 for "sm_75", 90 for "sm_90a" (a checked arch)."""
    return int(_ARCH.fullmatch(arch).group(1))


def check_arch(arch) -> None:
    """Raise CudaError unless `arch` is an architecture this NVRTC compiles for:
    `sm_XY`, `sm_XYa` from sm_90, `sm_XYf` from sm_100 (NVRTC 13: sm_75 and up).
    Checked before NVRTC runs, which would answer with its whole log."""
    m = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if m is None:
        raise CudaError(f"unknown GPU architecture {arch!r} (expected sm_ and the compute "
                        f"capability, e.g. sm_80, sm_90a)")
    cc, suffix = int(m.group(1)), m.group(2)
    archs = cuda_api.nvrtc_archs()
    if archs is not None and cc not in archs:
        major, minor = cuda_api.nvrtc_version()
        known = ", ".join(f"sm_{a}" for a in archs)
        raise CudaError(f"GPU architecture {arch} is not one this NVRTC ({major}.{minor}) "
                        f"compiles for: sm_{min(archs)} and up ({known})")
    if suffix and cc < SUFFIX_FROM[suffix]:
        kind = "arch-specific" if suffix == "a" else "family"
        raise CudaError(f"GPU architecture {arch}: the {kind} suffix '{suffix}' exists from "
                        f"sm_{SUFFIX_FROM[suffix]}{suffix} on; use sm_{cc}")


def check_features(prog: ir.Program, arch: str) -> None:
    """Raise CudaError when a kernel of `prog` uses an intrinsic that `arch` lacks."""
    cc = arch_number(arch)
    for k in prog.kernels:
        for s in walk_stmts(k.body):
            if isinstance(s, ir.Role) and s.regs and arch != "sm_90a":
                raise CudaError(f"kernel {k.name}: role '{s.name}' sets its register count "
                                f"(setmaxnreg), which only sm_90a has; it cannot be compiled for "
                                f"{arch} (compile for sm_90a, or give the role regs=0)")
            entry = intrinsics.of(s)
            if entry is not None and entry.only_in and arch not in entry.only_in:
                raise CudaError(f"kernel {k.name} uses {entry.what}, which only "
                                f"{' and '.join(entry.only_in)} has (arch-specific "
                                f"instructions); it cannot be compiled for {arch}")
            if entry is not None and entry.min_arch > cc:
                raise CudaError(f"kernel {k.name} uses {entry.what}, which needs sm_"
                                f"{entry.min_arch} or newer; it cannot be compiled for {arch} "
                                f"(compile for sm_{entry.min_arch} or newer, or schedule it "
                                f"without {entry.what})")
