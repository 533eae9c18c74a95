"""tcomp.search: measuring candidate schedules and keeping the results.

- `MeasureInput`, `MeasureResult`, `Runner`, `DeviceProgram` (runner.py): the
  measurement interface; `SimRunner` (no GPU: correctness only),
  `LocalRunner` (one process per local GPU), `RayRunner` (one Ray actor per
  GPU, `pip install tcomp[ray]`).
- `Records`, `Record`, `best` (records.py): tuning records as JSON lines.

docs/tuning.md is the user's guide.
"""
from .cuda_program import CudaProgram
from .identity import op_hash, small_sizes
from .local_runner import LocalRunner
from .oracle import OracleError
from .records import Record, Records, RecordsError, RecordsWarning, best
from .runner import (ERROR_KINDS, CandidateFailed, DeviceInfo, DeviceProgram, MeasureInput,
                     MeasureResult, Runner)
from .sim_runner import SimProgram, SimRunner

__all__ = ["CandidateFailed", "CudaProgram", "DeviceInfo", "DeviceProgram", "ERROR_KINDS",
           "LocalRunner", "MeasureInput", "MeasureResult", "OracleError", "RayRunner", "Record",
           "Records", "RecordsError", "RecordsWarning", "Runner", "SimProgram", "SimRunner",
           "best", "op_hash", "small_sizes"]


def __getattr__(name):
    if name == "RayRunner":  # imported on use: ray is an optional extra
        from .ray_runner import RayRunner
        return RayRunner
    raise AttributeError(f"module 'tcomp.search' has no attribute {name!r}")
