"""The machine model: what tcomp knows of the GPU, below every compiler layer
(it imports nothing from schedule, lower or the targets; they import it).

* threads.py: the index registers (blockIdx, threadIdx: the axes a schedule
  binds; Hopper's clusterid and cluster_ctarank).
* hierarchy.py: cluster > block > warpgroup > warp > lane, with warpgroups,
  warps and lanes derived from the thread index (as data), and the
  uniformity lattice GRID < CLUSTER < BLOCK < WARPGROUP < WARP < THREAD.
* limits.py: launch and device limits (LaunchLimits, shared memory and
  registers per architecture) and launch-time values (the SM count).
* target.py: `Target` ("sm_80", "sm_90a") with its feature flags; `resolve`.
* layout.py: layouts as data (CuTe's shape:stride, swizzles, thread-value
  fragments), evaluated on ints, arrays or expressions.
* fragments.py: the register layouts of mma.sync, wgmma and ldmatrix and the
  shared-memory swizzle atoms, as layout objects.
* instructions.py: the one table of tensor-core instructions.

docs/lowering.md ("The machine model") describes it for users.
"""
from . import fragments, hierarchy, instructions, layout, limits, target, threads
from .hierarchy import Uniformity, join
from .instructions import TENSOR_CORE
from .layout import E, ComposedLayout, Fragment, Layout, Swizzle
from .limits import CUDA_LIMITS, LaunchLimits, SM_COUNT
from .target import Target, resolve

__all__ = ["CUDA_LIMITS", "ComposedLayout", "E", "Fragment", "Layout", "LaunchLimits", "SM_COUNT",
           "TENSOR_CORE", "Target", "Uniformity", "Swizzle", "fragments", "hierarchy",
           "instructions", "join", "layout", "limits", "resolve", "target", "threads"]
