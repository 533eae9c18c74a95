"""Float literals: typed by what they meet, rounded once from their text.

A float literal (`0.2`, `1e-5`, `inf`, `nan`) has no type of its own until it
meets one (check.py, "weak" literals): `X(i) * 2.0` has X's float type, `0.2`
in a double statement is the double nearest 0.2, a literal alone is float32.
Its value is the literal's *text* rounded once, to nearest even, to that type.
The parser keeps the nearest double (`Const.value`) and the text
(`Const.text`); rounding the double again to a narrower type is the same as
rounding the text, except where the double lies exactly halfway between two
values of that type and the text does not (a literal of 18 digits or more):
then the text decides the direction. Beyond the type's range a literal is
infinity (`1e999`, `-1e999`; `1e39` alone is float32 infinity), except in fp8,
where it saturates as every conversion to fp8 does (`X(i) * 1000.0` multiplies an
e4m3 X by 448: npfuncs.to_fp8).
"""
from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from . import npfuncs

# The reserved words that are float literals.
WORDS = {"inf": math.inf, "nan": math.nan}

_BITS = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _step(c: np.ndarray, up: bool) -> np.ndarray:
    """The neighbour of finite or infinite `c` one unit of magnitude up or down."""
    u = _BITS[c.dtype.itemsize * 8]
    return (c.view(u) + u(1) if up else c.view(u) - u(1)).view(c.dtype)


def _value(c: np.ndarray, prev: np.ndarray) -> float:
    """c as a float; infinity as the power of two just past the largest value."""
    v = float(c.astype(np.float64)[0])
    if math.isinf(v):
        m = float(prev.astype(np.float64)[0])
        below = float(_step(prev, False).astype(np.float64)[0])
        return math.copysign(2 * abs(m) - abs(below), v)
    return v


def rounded(value: float, text: str | None, dt) -> float:
    """The literal's value in float type `dt` (a `DType`), as a Python float:
    `text` (when given; `value` is float(text)) rounded once to `dt`."""
    if math.isnan(value):
        return math.nan  # one object: nodes holding it compare equal (nan != nan)
    if dt.bits == 64:
        return value
    with np.errstate(over="ignore"):
        c = np.asarray(npfuncs.convert(np.array([value]), dt.numpy))  # one element: views work
    cv = float(c.astype(np.float64)[0])
    if text is None or value == 0 or math.isinf(value):
        return cv
    if cv == value:
        return cv
    # the other candidate: the neighbour of c on the side of value
    up = abs(value) > abs(cv)
    other = _step(c, up)
    lo, hi = (c, other) if up else (other, c)
    mid = (_value(lo, _step(lo, False)) + _value(hi, lo)) / 2
    if mid != value:
        return cv
    exact = Decimal(text)
    if exact == Decimal(value):
        return cv  # a true tie: to even, as converted
    beyond = (exact > Decimal(value)) == (value > 0)  # farther from zero than the double
    return float((hi if beyond else lo).astype(np.float64)[0])


def exact_text(value: float, text: str | None) -> bool:
    """Whether printing must keep `text`: the double alone would round
    differently to a narrower type (see `rounded`)."""
    if text is None or text in WORDS or math.isinf(value) or value == 0:
        return False
    from . import dtypes
    return any(rounded(value, text, t) != rounded(value, None, t)
               for t in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn,
                         dtypes.float8_e5m2))


# ------------------------------------------------------------ weak literals
# A *weak* expression has a float type and is made of literals in every value
# position: literals, and `-`, arithmetic, ternary branches (the condition may
# be anything) and builtins over them; no reads, indices, sizes or casts. It
# is float32 until it meets a float type (check.py calls `meet`). A
# where-binding of such an expression is weak as well, where it is used.

def is_weak(e, lets: dict) -> bool:
    """Whether checked expression `e` is weak (`lets`: binding name -> value)."""
    from .ast import Binary, Call, Const, LetRef, Select, Unary
    if e.dtype is None or not e.dtype.is_float:
        return False
    stack = [e]
    while stack:  # iterative: a chain of literals may be long
        x = stack.pop()
        if isinstance(x, Const):
            continue
        if isinstance(x, LetRef):
            stack.append(lets[x.name])
        elif isinstance(x, Unary) and x.op == "-":
            stack.append(x.x)
        elif isinstance(x, Binary) and x.op in ("+", "-", "*", "/", "%"):
            stack += [x.a, x.b]
        elif isinstance(x, Select):
            stack += [x.a, x.b]
        elif isinstance(x, Call):
            stack += x.args
        else:
            return False
    return True


def retype(e, t, lets: dict):
    """Weak `e` with float type `t`: its float literals rounded from their text
    to `t`, the operators between them of type `t`. A binding is replaced by
    its value so typed (another use may give it another type)."""
    import dataclasses

    from .ast import Binary, Call, Const, LetRef, Select, Unary
    if e.dtype == t or not e.dtype.is_float:
        return e  # integer operands and conditions keep their types
    if isinstance(e, LetRef):
        return retype(lets[e.name], t, lets)
    if isinstance(e, Const):
        return typed(e, t)
    if isinstance(e, Unary):
        return dataclasses.replace(e, x=retype(e.x, t, lets), dtype=t)
    if isinstance(e, Binary):
        return dataclasses.replace(e, a=retype(e.a, t, lets), b=retype(e.b, t, lets), dtype=t)
    if isinstance(e, Select):
        return dataclasses.replace(e, a=retype(e.a, t, lets), b=retype(e.b, t, lets), dtype=t)
    if isinstance(e, Call):
        return dataclasses.replace(e, args=tuple(retype(a, t, lets) for a in e.args), dtype=t)
    raise AssertionError(f"not a weak expression: {e!r}")


def typed(c, t):
    """Literal `c` with type `t`: a float literal's value is its text rounded to `t`."""
    import dataclasses
    if not isinstance(c.value, float):
        return dataclasses.replace(c, dtype=t)
    value = float(c.text) if c.text is not None else c.value
    return dataclasses.replace(c, dtype=t, value=rounded(value, c.text, t))


def meet(exprs: list, lets: dict) -> list:
    """Operands that meet (of one operator, ternary or builtin): the weak ones
    take the float type the others promote to, when that is a float type."""
    from .dtypes import promote
    weak = [is_weak(x, lets) for x in exprs]
    strong = [x.dtype for x, w in zip(exprs, weak) if not w]
    if not any(weak) or not strong:
        return exprs
    t = strong[0]
    for s in strong[1:]:
        t = t if t == s else promote(t, s)
    if not t.is_float:
        return exprs
    return [retype(x, t, lets) if w else x for x, w in zip(exprs, weak)]
