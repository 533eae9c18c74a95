"""tcomp.search: schedule search.

- The schedule space (graph.py: the op's stage dataflow graph; rules/:
  sketch rules; space.py: candidates; validate.py: replay, lowering and
  resource checks), documented in docs/search.md.
- `MeasureInput`, `MeasureResult`, `Runner`, `DeviceProgram` (runner.py): the
  measurement interface; `SimRunner` (no GPU: correctness only),
  `LocalRunner` (one process per local GPU), `RayRunner` (one Ray actor per
  GPU, `pip install tcomp[ray]`).
- `Records`, `Record`, `best` (records.py): tuning records as JSON lines
  (docs/tuning.md); recheck.py: a recorded winner checked again before it
  is trusted (`RecordCheckWarning`).
- The search (docs/tuning.md): features.py (features of lowered candidates and
  the analytic cost proxy), model.py (`CostModel`, the learned cost model),
  tuner.py (`tune`, the evolutionary search behind tcomp.tune), quality.py
  (`model_quality`, `plot_quality`: the cost model's hit rate and the tuning
  curves, read from records).
"""
from .cuda_program import CudaProgram
from .graph import stage_graph, topological_order
from .identity import op_hash, small_sizes
from .local_runner import LocalRunner
from .oracle import OracleError
from .records import Record, Records, RecordsError, RecordsWarning, best
from .rules import RULES, Limits
from .runner import (ERROR_KINDS, CandidateFailed, DeviceInfo, DeviceProgram, MeasureInput,
                     MeasureResult, Runner)
from .sim_runner import SimProgram, SimRunner
from .space import Candidate, SearchError, Space, generate, mutate
from .validate import Invalid, Valid, validate
from .model import CostModel
from .recheck import RecordCheckWarning
from .tuner import ProgressWarning, Trial, TuneResult, tune
from .quality import Batch, Quality, model_quality, plot_quality

__all__ = ["Batch", "Candidate", "CandidateFailed", "CostModel", "CudaProgram",
           "DeviceInfo", "DeviceProgram", "ERROR_KINDS", "Invalid", "Limits",
           "LocalRunner", "MeasureInput", "MeasureResult", "OracleError",
           "ProgressWarning", "Quality", "RULES", "RayRunner", "Record",
           "RecordCheckWarning", "Records", "RecordsError", "RecordsWarning", "Runner",
           "SearchError", "SimProgram", "SimRunner", "Space", "Trial", "TuneResult",
           "Valid", "best", "generate", "model_quality", "mutate", "op_hash",
           "plot_quality", "small_sizes", "stage_graph", "topological_order", "tune",
           "validate"]


def __getattr__(name):
    if name == "RayRunner":  # imported on use: ray is an optional extra
        from .ray_runner import RayRunner
        return RayRunner
    raise AttributeError(f"module 'tcomp.search' has no attribute {name!r}")
