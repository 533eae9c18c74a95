"""tcomp: a schedule-based tensor compiler.

Write what a kernel computes as a tensor comprehension, how it runs as a
schedule; tcomp lowers the pair to loop IR and CUDA. The user's reference is
the repository's docs/ (docs/README.md is its index).
"""
from .build import build, load, lower
from .errors import CudaError, LangError, LoweringError, ScheduleError, SimError, TcompError
from .lang import Op, Program, evaluate, op, parse
from .lower.intrinsics import tensorize_intrinsics as _tensorize_intrinsics
from .schedule import Axis, Schedule, Stage

__version__ = "0.1.0"


def intrinsics() -> dict[str, str]:
    """name -> one-line description of every intrinsic `Stage.tensorize`
    accepts, sorted by name. The registry (tcomp/lower/intrinsics.py) also
    holds intrinsics the compiler places itself (barriers, cross-thread
    reductions); those are not listed. No tensor-core intrinsic is
    registered yet, so this is an empty dict for now."""
    return _tensorize_intrinsics()


__all__ = ["Axis", "CudaError", "LangError", "LoweringError", "Op", "Program", "Schedule",
           "ScheduleError", "SimError", "Stage", "TcompError", "build", "evaluate", "intrinsics", "load", "lower",
           "op",
           "parse"]
