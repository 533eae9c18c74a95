"""Lowering: schedule -> Kernel IR through a visible pipeline of passes."""
from .ir import Kernel, Program
from .pipeline import PASSES, lower

__all__ = ["Kernel", "PASSES", "Program", "lower"]
