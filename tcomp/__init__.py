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


def tune(op, sizes, trials=200, records=None, target="cuda", **options):
    """Search schedules of `op` at `sizes`: `trials` candidates in all,
    measured on `target` ("cuda", "cuda:<arch>", or "sim": checked on the
    CPU and ranked by the cost estimate), kept in the JSON-lines `records`
    file (rerunning resumes). Returns a TuneResult: `.schedule` (the best),
    `.time_ms`, `.history` (every trial). Options and the search itself:
    tcomp.search.tuner.tune and docs/tuning.md."""
    from .search.tuner import tune as _tune
    return _tune(op, sizes, trials, records, target, **options)


__version__ = "0.1.0"

__all__ = ["Axis", "CudaError", "intrinsics", "LangError", "LoweringError", "Op", "Program", "Schedule",
           "ScheduleError", "SimError", "Stage", "TcompError", "build", "evaluate", "load", "lower", "op",
           "parse", "tune"]
