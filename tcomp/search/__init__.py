"""tcomp.search: schedule search. The schedule space (graph.py: the op's stage
dataflow graph; rules.py: sketch rules; space.py: candidates; validate.py:
replay, lowering and resource checks) is documented in docs/search.md; the
search over it (features.py: features of lowered candidates and the analytic
cost proxy; model.py: the learned cost model; tuner.py: the evolutionary
search behind tcomp.tune) in docs/tuning.md."""
from .graph import stage_graph, topological_order
from .rules import RULES, Limits
from .space import Candidate, SearchError, Space, generate, mutate
from .validate import Invalid, Valid, validate
from .model import CostModel
from .tuner import Trial, TuneResult, tune

__all__ = ["Candidate", "CostModel", "Invalid", "Limits", "RULES", "SearchError", "Space", "Trial",
           "TuneResult", "Valid", "generate", "mutate", "stage_graph", "topological_order", "tune",
           "validate"]
