"""The intrinsics `Stage.tensorize` accepts: defined in the machine model
(tcomp/arch/tensorize.py), re-exported here for existing imports."""
from __future__ import annotations

from ..arch.tensorize import TENSORIZE, TensorIntrinsic, intrinsics

__all__ = ["TENSORIZE", "TensorIntrinsic", "intrinsics"]
