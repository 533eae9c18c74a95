"""Float -> integer conversions in CUDA C++: saturating, NaN -> 0.

The language's rule (docs/language.md, "Casts"; npfuncs.saturate) is what
PTX `cvt.rzi` does for every integer width: truncate toward zero, clamp to
the destination's range, NaN gives 0. A C++ cast does not promise it: out of
range it is undefined (a constant may fold to anything), and a cast to an 8-
or 16-bit type converts to 32 bits and keeps the low bits (`(signed char)inf`
is -1 on an H200, not 127). So the conversion is spelled with CUDA's
round-toward-zero intrinsics, which are `cvt.rzi` (saturating, NaN -> 0), at
32 or 64 bits, and an 8- or 16-bit result is clamped from the 32-bit one with
integer min/max: branch-free, e.g. int8 from float is
`(signed char)max(-128, min(127, __float2int_rz(x)))`. float16/bfloat16
sources are converted to float first (exactly).

NaN: only the float -> 32-bit intrinsics (`__float2int_rz`, `__float2uint_rz`)
give 0 for NaN on the H200. The 64-bit ones and every conversion from double
do not (measured 2026-12-02: `__float2ll_rz(NaN)` is INT64_MIN and
`__double2int_rz(NaN)` is INT_MIN, so int8 from a double NaN came out -128),
so those are guarded by a select, `(x != x ? 0 : __double2int_rz(x))`, which
compiles to a compare and a select, no branch. The CPU emulator
(tests/target_cuda/emulator.py) models the unguarded intrinsics the same way,
so a missing guard fails there too.
"""
from __future__ import annotations

import re

from ..lang.dtypes import DType

# destination -> (intrinsic stem, the 32/64-bit type it returns)
_STEM = {"i": {32: "int", 64: "ll"}, "u": {32: "uint", 64: "ull"}}
_CTYPE = {"int8": "signed char", "int16": "short", "uint8": "unsigned char",
          "uint16": "unsigned short"}


def saturating(dst: DType, src: str, x: str) -> str:
    """CUDA C++ converting `x`, of C type `src` ("float" or "double"), to the
    integer type `dst`, saturating (module docstring)."""
    wide = max(dst.bits, 32)
    call = f"__{src}2{_STEM[dst.kind][wide]}_rz({x})"
    if src == "double" or wide == 64:  # x bracketed unless a name or element: it may be a
        v = x if re.fullmatch(r"[\w\[\]]+", x) else f"({x})"  # select, `c ? a : b`
        call = f"({v} != {v} ? 0 : {call})"
    if dst.bits >= 32:
        return call
    top = (1 << (dst.bits - 1)) - 1 if dst.kind == "i" else (1 << dst.bits) - 1
    if dst.kind == "i":
        return f"(({_CTYPE[dst.name]})max({-top - 1}, min({top}, {call})))"
    return f"(({_CTYPE[dst.name]})min({top}u, {call}))"
