"""tcomp: a schedule-based tensor compiler.

Write what a kernel computes as a tensor comprehension, how it runs as a
schedule; tcomp lowers the pair to loop IR and CUDA. See API.md for the contract.
"""
from .errors import CudaError, LangError, LoweringError, ScheduleError, TcompError
from .lang import Op, Program, evaluate, op, parse

__version__ = "0.1.0"

__all__ = ["CudaError", "LangError", "LoweringError", "Op", "Program", "ScheduleError",
           "TcompError", "evaluate", "op", "parse"]
