"""Builtin functions: CUDA math names, their arity and result type rule.

Rules: 'float' — arguments promote to a float (integers -> float32), result is
that float; 'same' — result is the promoted argument type (min, max, abs).
"""
from __future__ import annotations

FLOAT_UNARY = ("exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "logb", "sqrt",
               "rsqrt", "cbrt", "rcbrt", "tanh", "sinh", "cosh", "asinh", "acosh", "atanh", "sin",
               "cos", "tan", "asin", "acos", "atan", "sinpi", "cospi", "erf", "erfc", "normcdf",
               "lgamma", "tgamma", "floor", "ceil", "round", "trunc", "fabs", "sigmoid")
FLOAT_BINARY = ("fmax", "fmin", "pow", "atan2", "fmod", "remainder", "nextafter", "copysign",
                "fdim", "fdivide", "hypot", "rhypot")
FLOAT_MORE = {"fma": 3, "norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4}
SAME = {"min": 2, "max": 2, "abs": 1}

# TC builtins tcomp does not implement yet (no exact NumPy reference for them).
UNSUPPORTED = ("erfinv", "erfcinv", "erfcx", "normcdfinv", "j0", "j1", "y0", "y1",
               "cyl_bessel_i0", "cyl_bessel_i1")

ARITY: dict[str, int] = {**{f: 1 for f in FLOAT_UNARY}, **{f: 2 for f in FLOAT_BINARY},
                         **FLOAT_MORE, **SAME}


def is_builtin(name: str) -> bool:
    return name in ARITY


def returns_float(name: str) -> bool:
    return name not in SAME
