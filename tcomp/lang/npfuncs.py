"""NumPy meaning of each builtin, applied to arrays already in the result's
float compute type (float32 or float64). Functions NumPy lacks are computed
element-wise in float64 with the `math` module, then rounded to the type."""
from __future__ import annotations

import math

import numpy as np

from . import minmax


def _via_math(fn):
    vec = np.vectorize(fn, otypes=[np.float64])

    def apply(x):
        if x.size == 0:
            return x.copy()
        return vec(x.astype(np.float64)).astype(x.dtype)
    return apply


def _f64(fn):
    """Compute in float64 and round once (for compound formulas)."""
    def apply(*xs):
        return fn(*(x.astype(np.float64) for x in xs)).astype(xs[0].dtype)
    return apply


def _c_round(x):
    """C round(): halfway cases away from zero (NumPy rounds half to even).
    `floor(|x| + 0.5)` is wrong in floating point: the sum rounds, so
    0.49999997f gives 1 and 8388609f gives 8388610. x - trunc(x) is exact."""
    t = np.trunc(x)
    away = t + np.copysign(np.ones((), x.dtype), x)
    return np.where(np.abs(x - t) >= 0.5, away, t).astype(x.dtype)


def _logb(x):
    """The unbiased exponent, exactly: frexp's exponent - 1 (floor(log2|x|)
    rounds up just below a power of two, e.g. 16777215f gives 24, not 23).
    logb(0) = -inf, logb(+-inf) = inf, logb(nan) = nan."""
    _, e = np.frexp(x)
    special = np.where(x == 0, -np.inf, np.abs(x))
    return np.where(np.isfinite(x) & (x != 0), e - 1, special).astype(x.dtype)


def _sinpi(x):
    """sin(pi x) with the argument reduced exactly (fmod by 2 is exact) and exact
    zeros at integers, as CUDA's sinpi: sin(np.pi * x) is 1.2e-16 at x = 1 and
    wrong for large x, where np.pi * x has lost the fraction."""
    x = x.astype(np.float64)
    r = np.fmod(x, 2.0)
    return np.where(r == np.trunc(r), np.copysign(np.zeros((), np.float64), x),
                    np.sin(np.pi * r))


def _cospi(x):
    """cos(pi x), reduced as in `_sinpi`, exactly 0 at odd multiples of 1/2."""
    r = np.fmod(np.abs(x.astype(np.float64)), 2.0)
    return np.where((r == 0.5) | (r == 1.5), 0.0, np.cos(np.pi * r))


def _lgamma(v):
    try:
        return math.lgamma(v)
    except ValueError:  # poles
        return math.inf


def _tgamma(v):
    try:
        return math.gamma(v)
    except (ValueError, OverflowError):
        if v == 0:
            return math.copysign(math.inf, v)
        if v == -math.inf:  # (C: a domain error; math.floor(-inf) would raise)
            return math.nan
        return math.nan if v < 0 and v == math.floor(v) else math.inf


def _remainder(a, b):
    try:
        return math.remainder(a, b)
    except ValueError:
        return math.nan


def _copysign(a, b):
    """copysign(a, b), with the sign of a NaN `b` taken as + (|a|): a NaN's sign
    bit is not the same on every target (x86's default NaN is negative, the
    GPU's canonical NaN positive), so tcomp defines it away (docs/language.md)."""
    return np.where(np.isnan(b), np.abs(a), np.copysign(a, b)).astype(np.result_type(a, b))

FUNCS = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    # (IR only, not a language builtin: the GPU's ex2.approx.ftz, relative error 2^-22, results
    # below 2^-126 flushed to 0; the sim computes exp2 exactly)
    "exp2_approx": np.exp2,
    "exp10": _f64(lambda x: np.power(10.0, x)),
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "logb": _logb,
    "sqrt": np.sqrt, "rsqrt": _f64(lambda x: 1.0 / np.sqrt(x)), "cbrt": np.cbrt,
    "rcbrt": _f64(lambda x: 1.0 / np.cbrt(x)),
    "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinpi": _sinpi, "cospi": _cospi,
    "erf": _via_math(math.erf), "erfc": _via_math(math.erfc),
    "normcdf": _via_math(lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0))),
    "lgamma": _via_math(_lgamma), "tgamma": _via_math(_tgamma),
    "floor": np.floor, "ceil": np.ceil, "round": _c_round, "trunc": np.trunc, "fabs": np.abs,
    "sigmoid": _f64(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "fmax": minmax.MAX, "fmin": minmax.MIN, "pow": np.power, "atan2": np.arctan2, "fmod": np.fmod,
    "remainder": lambda a, b: np.vectorize(_remainder, otypes=[np.float64])(a, b).astype(a.dtype)
    if np.broadcast(a, b).size else (a + b),
    "nextafter": np.nextafter, "copysign": _copysign,
    "fdim": lambda a, b: np.where(a > b, a - b, np.where(np.isnan(a - b), a - b, 0)).astype(a.dtype),
    "fdivide": np.divide, "hypot": np.hypot, "rhypot": _f64(lambda a, b: 1.0 / np.hypot(a, b)),
    "fma": _f64(lambda a, b, c: a * b + c),
    "norm3d": _f64(lambda a, b, c: np.sqrt(a * a + b * b + c * c)),
    "rnorm3d": _f64(lambda a, b, c: 1.0 / np.sqrt(a * a + b * b + c * c)),
    "norm4d": _f64(lambda a, b, c, d: np.sqrt(a * a + b * b + c * c + d * d)),
    "rnorm4d": _f64(lambda a, b, c, d: 1.0 / np.sqrt(a * a + b * b + c * c + d * d)),
}


def apply(fn: str, args, float_result: bool):
    """Apply builtin `fn` to arrays already converted to the result type."""
    if fn in ("min", "max"):
        return minmax.of(fn)(*args)
    if fn == "abs":
        return np.abs(args[0])
    out = FUNCS[fn](*args)
    return np.asarray(out).astype(args[0].dtype, copy=False)


def convert(x, dt) -> np.ndarray:
    """`x` (an array or NumPy scalar) as NumPy dtype `dt`, rounded once, to
    nearest even: the conversion of every target (docs/language.md, "float16 and bfloat16").
    A float becomes an integer by `saturate`; an integer becomes a narrower
    integer by wrapping (two's complement, as C and NumPy do).

    NumPy rounds once for every pair but one: ml_dtypes converts to bfloat16
    through float32, which rounds float64 values and integers beyond 2^24
    twice (1 + 2^-8 + 2^-30 becomes 1, not 1 + 2^-7). For those, x is first
    rounded to float32 *to odd* (truncated, the last bit set when inexact):
    with 16 bits to spare, rounding that to bfloat16 gives x's own rounding.
    fp8 likewise (ml_dtypes rounds float64 to fp8 through float32 too), and
    saturating: `to_fp8`."""
    x = np.asarray(x)
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x
    if dt.kind in "iu" and is_float(x.dtype):
        return saturate(x, dt)
    if dt.name in FP8:
        return to_fp8(x, dt)
    if dt.name != "bfloat16" or x.dtype.kind not in "fiu" or \
            (x.dtype.kind == "f" and x.dtype.itemsize <= 4) or x.dtype.itemsize <= 2:
        return x.astype(dt)
    return _to_odd_float32(x).astype(dt)


FP8 = ("float8_e4m3fn", "float8_e5m2")


def to_fp8(x, dt) -> np.ndarray:
    """`x` as fp8 dtype `dt`, as CUDA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE,
    ...)` and PTX `cvt.rn.satfinite.{e4m3,e5m2}x2` convert (docs/language.md,
    "fp8"): rounded once to nearest even, then saturated: a finite value or an
    infinity beyond the largest finite value (448 for e4m3fn, 57344 for e5m2)
    becomes that value with its sign; NaN stays NaN; -0.0 stays -0.0.

    Clamping x to +-max first and rounding after gives the same: rounding is
    monotonic and max rounds to itself. Sources wider than float32 (float64,
    integers beyond 2^24) are first rounded to float32 to odd, as for
    bfloat16 (convert), so that the one rounding is x's own."""
    x = np.asarray(x)
    dt = np.dtype(dt)
    import ml_dtypes
    top = float(ml_dtypes.finfo(dt).max)
    if x.dtype.kind == "b":
        x = x.astype(np.float32)
    elif x.dtype.kind in "iu" or (x.dtype.kind == "f" and x.dtype.itemsize > 4):
        x = _to_odd_float32(x) if x.dtype.itemsize > 2 else x.astype(np.float32)
    elif not is_float(x.dtype):
        raise TypeError(f"to_fp8: cannot convert {x.dtype}")
    else:  # float16, bfloat16, float32 and fp8: exact in float32
        x = x.astype(np.float32)
    with np.errstate(invalid="ignore"):
        x = np.clip(x, np.float32(-top), np.float32(top))  # (NaN stays NaN)
    return x.astype(dt)


def _to_odd_float32(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":  # float64 (float128 alike)
        with np.errstate(over="ignore"):  # beyond float32: inf, stepped back below
            f = x.astype(np.float32)
        wide = f.astype(x.dtype)
        inexact = np.isfinite(x) & (wide != x)
        f = np.where(inexact & (np.abs(wide) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
    else:  # integers: the magnitude cut to at most 24 bits, a sticky last bit
        mag = np.abs(x.astype(np.int64)).astype(np.uint64) if x.dtype.kind == "i" else \
            x.astype(np.uint64)
        if x.dtype == np.int64:  # abs(-2^63) wraps to -2^63, whose uint64 view is 2^63
            mag = np.where(x == np.iinfo(np.int64).min, np.uint64(1 << 63), mag)
        _, e = np.frexp(mag.astype(np.float64))  # >= the bit length (rounding may add one)
        shift = np.maximum(e - 24, 0).astype(np.uint64)
        kept = mag >> shift
        inexact = (kept << shift) != mag
        f = np.ldexp(kept.astype(np.float32), shift.astype(np.int32)).astype(np.float32)
        if x.dtype.kind == "i":
            f = np.where(x < 0, -f, f)
    bits = f.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def is_float(dt) -> bool:
    """A NumPy float dtype, bfloat16 and fp8 included (ml_dtypes gives bfloat16
    and float8_e4m3fn kind 'V', float8_e5m2 kind 'f')."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name in ("bfloat16",) + FP8


def saturate(x, dt) -> np.ndarray:
    """Float `x` as integer dtype `dt`, as PTX `cvt.rzi` converts on every
    integer width: truncated toward zero, clamped to `dt`'s range, NaN -> 0
    (-0.0 and values in (-1, 0) give 0 also for unsigned types). NumPy's own
    cast is undefined out of range (it differs by platform and by width).

    In float64 (exact for every source type), the bounds are exact too: the
    smallest value, -2^(b-1) or 0, and one past the largest, 2^(b-1) or 2^b;
    the largest itself (2^63 - 1) is not a double."""
    x = np.asarray(x)
    dt = np.dtype(dt)
    info = np.iinfo(dt)
    f = x.astype(np.float64)
    below = f < float(info.min)
    above = f >= 2.0 ** (info.bits - (dt.kind == "i"))
    inside = ~(below | above | np.isnan(f))
    out = np.trunc(np.where(inside, f, 0.0)).astype(dt)
    out = np.where(below, dt.type(info.min), np.where(above, dt.type(info.max), out))
    out = np.asarray(out, dt)
    return out[()] if out.ndim == 0 else out  # a NumPy scalar for a scalar, as astype gives
