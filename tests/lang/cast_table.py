"""The cast table every target must give exactly (docs/language.md, "Casts").

Float -> integer: truncate toward zero, clamp to the type's range, NaN -> 0
(PTX cvt.rzi on every width). Integer -> integer: wrap (two's complement).
Anything -> bool: != 0 (NaN is true). The expected values come from Python
integers here, not from NumPy, whose own casts are undefined out of range.
"""
from __future__ import annotations

import math

import numpy as np

import tcomp
from tcomp.lang import dtypes

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def int_range(name: str) -> tuple[int, int]:
    t = dtypes.BY_NAME[name]
    return (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.kind == "i" else \
        (0, (1 << t.bits) - 1)


def float_values(src: str) -> np.ndarray:
    """NaN, infinities, huge values, each integer type's edges and one beyond,
    just below the powers of two the float cannot pass exactly, values in range,
    negative fractions and -0.0, all as `src` values."""
    np_t = dtypes.BY_NAME[src].numpy
    vals = [math.nan, math.inf, -math.inf, 1e300, -1e300, 3e38, 65504.0, -65504.0,
            3e9, -3e9, 5e9, 1e19, -1e19, 2.9, -2.9, 0.9, -0.5, -0.999, -1.0, -0.0, 0.0,
            300.0, -200.0, 127.5, -128.5, 255.5, 256.0]
    for name in INTS:
        lo, hi = int_range(name)
        vals += [float(lo), float(lo) - 1, float(hi), float(hi) + 1]
    with np.errstate(over="ignore"):
        for bits in (8, 16, 31, 32, 63, 64):  # the largest value below 2^bits, in src
            vals.append(float(np.nextafter(np.asarray(2.0 ** bits, np_t), np.asarray(0, np_t))))
        return np.asarray(vals, np.float64).astype(np_t)


def saturated(v: float, name: str) -> int:
    lo, hi = int_range(name)
    if math.isnan(v):
        return 0
    if math.isinf(v):
        return hi if v > 0 else lo
    return min(max(math.trunc(v), lo), hi)


def wrapped(v: int, name: str) -> int:
    lo, hi = int_range(name)
    span = hi - lo + 1
    return (v - lo) % span + lo


INT_VALUES = {  # integer sources, as int64 or uint64 inputs
    "int64": [0, 1, -1, 127, 128, -128, -129, 255, 256, 300, -300, 32767, 32768, -32769, 65535,
              65536, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1, 2**32, 2**63 - 1, -2**63],
    "uint64": [0, 1, 255, 256, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1],
}


def float_program(src: str) -> tcomp.Op:
    """X of type `src` cast to every integer type and to bool."""
    outs = [f"O_{t}" for t in INTS] + ["O_bool"]
    body = "\n".join(f"  O_{t}(i) = {t}(X(i))" for t in INTS + ("bool",))
    return tcomp.op(f"def casts({src}(N) X) -> ({', '.join(outs)}) {{\n{body}\n}}")


def float_expected(src: str, x: np.ndarray) -> list[np.ndarray]:
    vals = [float(v) for v in x.astype(np.float64)]
    out = [np.array([saturated(v, t) for v in vals], dtypes.BY_NAME[t].numpy) for t in INTS]
    out.append(np.array([v != 0 for v in vals], bool))  # NaN != 0
    return out


def int_program(src: str) -> tcomp.Op:
    """X of integer type `src` cast to every integer type and to bool."""
    outs = [f"O_{t}" for t in INTS] + ["O_bool"]
    body = "\n".join(f"  O_{t}(i) = {t}(X(i))" for t in INTS + ("bool",))
    return tcomp.op(f"def wraps({src}(N) X) -> ({', '.join(outs)}) {{\n{body}\n}}")


def int_expected(x: np.ndarray) -> list[np.ndarray]:
    vals = [int(v) for v in x]
    out = [np.array([wrapped(v, t) for v in vals], dtypes.BY_NAME[t].numpy) for t in INTS]
    out.append(np.array([v != 0 for v in vals], bool))
    return out


# Casts of literals, folded at compile time: (expression, dtype, value).
LITERALS = [
    ("int32(3e9)", "int32", 2**31 - 1), ("int32(nan)", "int32", 0), ("uint8(-1.0)", "uint8", 0),
    ("uint8(-200.0)", "uint8", 0), ("int8(inf)", "int8", 127), ("int8(-inf)", "int8", -128),
    ("uint32(-1.0)", "uint32", 0), ("uint32(5e9)", "uint32", 2**32 - 1),
    ("int64(1e19)", "int64", 2**63 - 1), ("uint64(-0.5)", "uint64", 0),
    ("int16(-0.999)", "int16", 0), ("int8(300.0)", "int8", 127),
    ("int8(300)", "int8", 44), ("uint8(-1)", "uint8", 255), ("uint16(-1)", "uint16", 65535),
    ("int32(uint32(4294967295.0))", "int32", -1), ("bool(nan)", "bool", True),
]


def literal_program() -> tcomp.Op:
    outs = [f"L{k}" for k in range(len(LITERALS))]
    body = "\n".join(f"  L{k}(i) = {e} where i in 0:N" for k, (e, _, _) in enumerate(LITERALS))
    return tcomp.op(f"def lits(float(N) X) -> ({', '.join(outs)}) {{\n{body}\n}}")
