"""tcomp.search: schedule search. The schedule space (graph.py: the op's stage
dataflow graph; rules.py: sketch rules; space.py: candidates; validate.py:
replay, lowering and resource checks) is documented in docs/search.md."""
from .graph import stage_graph, topological_order
from .rules import RULES, Limits
from .space import Candidate, SearchError, Space, generate, mutate
from .validate import Invalid, Valid, validate

__all__ = ["Candidate", "Invalid", "Limits", "RULES", "SearchError", "Space", "Valid", "generate",
           "mutate", "stage_graph", "topological_order", "validate"]
