"""tcomp: a schedule-based tensor compiler.

Write what a kernel computes as a tensor comprehension, how it runs as a
schedule; tcomp lowers the pair to loop IR and CUDA. The user's reference is
the repository's docs/ (docs/README.md is its index).
"""
from .build import build, load, lower
from .errors import CudaError, LangError, LoweringError, ScheduleError, SimError, TcompError
from .lang import Op, Program, evaluate, op, parse
from .schedule import Axis, Schedule, Stage
from .schedule.tensor_intrinsics import intrinsics
from . import search  # noqa: E402  (tcomp.search.best, runners, records; imports nothing heavy)
from .search.tuner import tune  # noqa: E402  (tcomp.tune: docs/tuning.md)
from .search.auto import auto_schedule  # noqa: E402  (docs/schedules.md)

__version__ = "0.1.0"

__all__ = ["auto_schedule", "Axis", "CudaError", "intrinsics", "LangError", "LoweringError", "Op", "Program", "Schedule",
           "ScheduleError", "SimError", "Stage", "TcompError", "build", "evaluate", "load", "lower", "op",
           "parse", "search", "tune"]
