"""The comprehension language: parse, check, infer, print and evaluate."""
from .ast import Module
from .dtypes import DType
from .evaluate import evaluate
from .op import Op, Range, Statement, Tensor
from .parser import parse_module
from .printer import def_to_text, expr_to_text, module_to_text
from .program import Program, op, parse

__all__ = ["DType", "Module", "Op", "Program", "Range", "Statement", "Tensor", "def_to_text",
           "evaluate", "expr_to_text", "module_to_text", "op", "parse", "parse_module"]
