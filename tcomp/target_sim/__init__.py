"""The "sim" target: Kernel IR executed on the CPU with GPU semantics."""
from .executor import run_program

__all__ = ["run_program"]
