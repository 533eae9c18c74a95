"""Scalar types of the language and the promotion rules.

Promotion (binary arithmetic, ternary branches, min/max):
  * bool and integers narrower than 32 bits promote to int32 first (C rules);
  * int with float -> the float;
  * two floats -> the wider; two different formats of one width (float16 with
    bfloat16, float8_e4m3fn with float8_e5m2) -> float32;
  * two integers -> the wider; equal width, mixed sign -> the unsigned one.
Comparisons and logic produce bool. float16/bfloat16 and fp8 (float8_e4m3fn,
float8_e5m2) arithmetic is computed in float32 and rounded when stored (as CUDA
code does after converting halves); a conversion to fp8 saturates (npfuncs.convert).
An integer literal is int32; a float literal has the float type it meets
(literals.py), float32 alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str  # canonical name: float32, int8, bool, ...
    kind: str  # 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool
    bits: int

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_low_precision(self) -> bool:
        """float16, bfloat16 and the fp8 types: stored narrow, computed in float32."""
        return self.kind == "f" and self.bits <= 16

    @property
    def is_fp8(self) -> bool:
        """float8_e4m3fn or float8_e5m2 (docs/language.md, "fp8")."""
        return self.kind == "f" and self.bits == 8

    @property
    def numpy(self) -> np.dtype:
        if self.name in ML_DTYPES:  # bfloat16 and fp8: NumPy types of ml_dtypes
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, self.name))
        return np.dtype(self.name)

    @property
    def compute(self) -> "DType":
        """The type arithmetic on values of this type is carried out in."""
        return float32 if self.is_low_precision else self


float16 = DType("float16", "f", 16)
bfloat16 = DType("bfloat16", "f", 16)
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)
int8, int16, int32, int64 = (DType(f"int{b}", "i", b) for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (DType(f"uint{b}", "u", b) for b in (8, 16, 32, 64))
bool_ = DType("bool", "b", 8)
# fp8 (the OCP formats of Hopper's tensor cores; the names of ml_dtypes and torch):
# e4m3fn has 4 exponent bits, 3 mantissa bits, no infinity (max 448, NaN 0x7f/0xff);
# e5m2 is IEEE-like (max 57344, infinities and NaNs)
float8_e4m3fn = DType("float8_e4m3fn", "f", 8)
float8_e5m2 = DType("float8_e5m2", "f", 8)

ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # NumPy dtypes from ml_dtypes

ALL = (float16, bfloat16, float32, float64, int8, int16, int32, int64,
       uint8, uint16, uint32, uint64, bool_, float8_e4m3fn, float8_e5m2)

# Type names of the language, with TC's aliases.
BY_NAME: dict[str, DType] = {t.name: t for t in ALL}
BY_NAME.update({"float": float32, "double": float64, "half": float16})


def from_numpy(dt) -> DType | None:
    dt = np.dtype(dt)
    for t in ALL:
        if t.numpy == dt:
            return t
    return None


def _int_promote(t: DType) -> DType:
    if t.is_bool or (t.is_int and t.bits < 32):
        return int32
    return t


def promote(a: DType, b: DType) -> DType:
    """Result type of arithmetic between a and b (see module docstring)."""
    if a == b and not (a.is_bool or (a.is_int and a.bits < 32)):
        return a
    if a.is_float or b.is_float:
        if not b.is_float:
            return a
        if not a.is_float:
            return b
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return float32 if a != b else a  # float16 with bfloat16, e4m3fn with e5m2
    a, b = _int_promote(a), _int_promote(b)
    if a == b:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "u" else b


def can_store(value: DType, target: DType) -> bool:
    """Whether a statement computing `value` may store into a `target` tensor
    without an explicit cast: no float->integer, no narrowing of integers."""
    if value == target or value.is_bool:
        return True
    if target.is_float:
        return True  # int->float and float rounding are implicit, as in C
    if value.is_float or target.is_bool:
        return False
    return target.bits >= value.bits and (target.kind == value.kind or target.bits > value.bits)
