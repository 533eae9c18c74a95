"""Float max and min as tcomp defines them, for every NumPy evaluation of them
(`tcomp.evaluate`, the sim): NaN is ignored (IEEE 754-2019 maximumNumber /
minimumNumber, C's fmax / fmin, CUDA's fmaxf / fminf), and zeros are ordered
by their sign, -0 < +0: max(+0, -0) = +0 and min(+0, -0) = -0, in either
order. NumPy's np.fmax / np.fmin leave the sign of a zero result unspecified
(their SIMD lanes and scalar code differ: np.fmax([+0] * 3, [-0] * 3) has
given [0, -0, -0]); the GPU's max.f32 / min.f32 order zeros, so a result such
as rsqrt(max(a, b)) is +inf or -inf alike on every target (issue 22, fuzz
seed 7 pair 27361). Integers: np.maximum / np.minimum.

Each of MAX and MIN is used as the NumPy ufunc it replaces: called, `.reduce`,
`.accumulate`, `.at`. The fix costs one comparison with zero and is skipped
where no result is zero."""
from __future__ import annotations

import numpy as np


class _Ordered:
    def __init__(self, name: str, f, g):
        self.__name__ = name
        self.f, self.g = f, g  # float (NaN ignored), integer
        self.is_max = name == "max"

    def _zero_sign(self, r, pos, neg):
        """`r` with its zeros signed: max is +0 where a +0 took part, else -0;
        min -0 where a -0 took part, else +0."""
        z = r == 0
        if not np.any(z):
            return r
        signed = np.where(pos, 0.0, -0.0) if self.is_max else np.where(neg, -0.0, 0.0)
        return _scalar(np.where(z, signed.astype(r.dtype), r))

    def __call__(self, a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind != "f" and b.dtype.kind != "f":
            return self.g(a, b)
        r = self.f(a, b)
        if not np.any(r == 0):
            return r
        # (+0) + (-0) = +0 and (-0) + (-0) = -0: the max of two zeros; the min negated
        both = (a == 0) & (b == 0)
        z = (a + b) if self.is_max else -((-a) + (-b))
        return _scalar(np.where(both, z.astype(r.dtype), r))

    def reduce(self, x, axis=0, initial=None, keepdims=False):
        x = np.asarray(x)
        kw = {"keepdims": keepdims} if initial is None else {"initial": initial,
                                                              "keepdims": keepdims}
        if x.dtype.kind != "f":
            return self.g.reduce(x, axis=axis, **kw)
        r = self.f.reduce(x, axis=axis, **kw)
        if not np.any(r == 0):
            return r
        zero = x == 0
        return self._zero_sign(r, np.any(zero & ~np.signbit(x), axis=axis, keepdims=keepdims),
                               np.any(zero & np.signbit(x), axis=axis, keepdims=keepdims))

    def accumulate(self, x, axis=0, dtype=None):
        x = np.asarray(x, dtype)
        if x.dtype.kind != "f":
            return self.g.accumulate(x, axis=axis)
        r = self.f.accumulate(x, axis=axis)
        if not np.any(r == 0):
            return r
        zero = x == 0
        return self._zero_sign(r, np.logical_or.accumulate(zero & ~np.signbit(x), axis=axis),
                               np.logical_or.accumulate(zero & np.signbit(x), axis=axis))

    def at(self, a, index, values):
        """In place, as np.ufunc.at: a[index] = self(a[index], values) for each
        index in turn (repeats accumulate)."""
        if a.dtype.kind != "f":
            self.g.at(a, index, values)
            return
        values = np.broadcast_to(np.asarray(values, a.dtype), np.shape(a[index]))
        pos = (a == 0) & ~np.signbit(a)
        neg = (a == 0) & np.signbit(a)
        np.logical_or.at(pos, index, (values == 0) & ~np.signbit(values))
        np.logical_or.at(neg, index, (values == 0) & np.signbit(values))
        self.f.at(a, index, values)
        z = a == 0
        if np.any(z):
            a[...] = self._zero_sign(a, pos, neg)


def _scalar(r):
    return r[()] if r.ndim == 0 else r


MAX = _Ordered("max", np.fmax, np.maximum)
MIN = _Ordered("min", np.fmin, np.minimum)


def of(op: str):
    """MAX or MIN for 'max' / 'min'."""
    return MAX if op == "max" else MIN
