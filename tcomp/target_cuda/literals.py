"""CUDA C++ literals of IR constants (codegen.py's `imm`)."""
from __future__ import annotations

import math

import numpy as np

from ..lower import ir
from .ctypes_table import ctype


def literal(e: ir.Imm) -> str:
    """A constant as CUDA C++ text (exact floats, infinities and NaN by their
    bits, half types through float, the narrow integers cast)."""
    dt = e.dtype
    if dt.is_bool:
        return "true" if e.value else "false"
    if dt.is_float:
        # Exact: the shortest decimal that reads back as the value (repr; a
        # double needs at most 17 digits), a float with the `f` suffix, a
        # half through float; infinities and NaN by their bits.
        v = float(e.value)
        if dt.name == "float64":
            if math.isnan(v):
                return "__longlong_as_double(0x7ff8000000000000LL)"
            if math.isinf(v):
                return ("-" if v < 0 else "") + "__longlong_as_double(0x7ff0000000000000LL)"
            return repr(v) if ("." in repr(v) or "e" in repr(v)) else repr(v) + ".0"
        with np.errstate(over="ignore"):
            f32 = float(np.float32(v))  # a float32 value already, but for hand-built IR
        if math.isnan(f32):
            text = "__int_as_float(0x7fffffff)"
        elif math.isinf(f32):
            text = "__int_as_float(0xff800000)" if f32 < 0 else "__int_as_float(0x7f800000)"
        else:
            text = repr(f32)
            if "e" not in text and "." not in text:
                text += ".0"
            text += "f"
        if dt.is_fp8:
            return f"{ctype(dt)}({text})"
        if dt.is_low_precision:
            conv = "__float2half_rn" if dt.name == "float16" else "__float2bfloat16_rn"
            return f"{conv}({text})"
        return text
    v = int(e.value)
    suffix = {"int64": "LL", "uint64": "ULL", "uint32": "u"}.get(dt.name, "")
    if dt.name in ("int8", "int16", "uint8", "uint16"):
        return f"(({ctype(dt)}){v})"
    if (dt.name, v) in (("int32", -2 ** 31), ("int64", -2 ** 63)):
        # -2147483648 is `-` applied to a long literal in C++ (2147483648 is no int), which
        # makes max(int, -2147483648) ambiguous (issue 22, fuzz seed 11 pair 72673)
        return f"({v + 1}{suffix} - 1)"
    return f"{v}{suffix}"
