"""Tuple (monoid) reductions: a reduction whose state is several values.

    mx(n), ix(n)        argmax=!  X(n, d), d          # the max and the lowest d holding it
    mx(n), ix(n)        argmin=!  X(n, d), d
    c(n), mean(n), m2(n) welford=! X(n, d)            # count, mean, sum of squared deviations
    m(n), l(n)          expsum=!  X(n, d)             # max, sum of exp(x - max)
    m(n), l(n), a(n, e) expsum=!  X(n, d), V(d, e)    # ... and sum of exp(x - max) * v

Each monoid is a row of `MONOIDS`: the values its right-hand side lists, the
components its state has (one tensor each on the left), their types, and the
reference semantics `evaluate` uses (direct NumPy over the reduced axis, no
update rule involved). The identity and the update rule, which compiled
kernels use, live with the lowering (lower/monoid_update.py); the algebra of
each is in its docstring there and in docs/language.md.

Semantics (every target):
  argmax/argmin: the max (min) of the values, NaN ignored as `max=` does (a NaN
    counts as -inf for argmax, +inf for argmin), and the smallest payload among
    the positions holding it (ties go to the lowest index, as NumPy's argmax);
    an empty reduction gives (-inf, the payload type's largest value).
  welford: the count (in the value's float type), the mean and the sum of
    squared deviations from the mean; empty: (0, 0, 0); an infinite or NaN
    value makes the mean and M2 NaN (an online mean of infinities depends on
    their order; NaN does not).
  expsum: m = the max (as `max=!`), l = sum of exp(x - m), a = sum of
    exp(x - m) * v: exactly the chain `m max=! x; l +=! exp(x - m); a +=!
    exp(x - m) * v`, infinities and NaNs included (a row whose max is -inf or
    +inf gives l = NaN, as exp(-inf - -inf) does there; an empty row (0, 0)).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LangError
from . import dtypes, minmax


@dataclass(frozen=True)
class Monoid:
    name: str
    nvalues: tuple[int, ...]  # how many values the right-hand side may list
    roles: tuple[str, ...]  # the components' roles, for messages (with the most values)
    values_doc: str  # what the values are, for messages

    def ncomponents(self, nvalues: int) -> int:
        if self.name == "expsum":
            return nvalues + 1
        return len(self.roles)


MONOIDS = {
    "argmax": Monoid("argmax", (2,), ("max", "payload"), "a value and its payload (the index)"),
    "argmin": Monoid("argmin", (2,), ("min", "payload"), "a value and its payload (the index)"),
    "welford": Monoid("welford", (1,), ("count", "mean", "m2"), "one value"),
    "expsum": Monoid("expsum", (1, 2), ("max", "sum", "weighted sum"),
                     "a value (and optionally a weight)"),
}


def component_types(name: str, values, loc) -> tuple[tuple, tuple]:
    """(stored dtypes, accumulation dtypes) of the components of monoid `name`
    for checked `values`; LangError where the values do not fit it."""
    vt = [v.dtype for v in values]
    if name in ("argmax", "argmin"):
        for t, what in zip(vt, ("value", "payload")):
            if t.is_bool:
                raise LangError(f"'{name}=!' needs a numeric {what}, got bool; cast it, e.g. "
                                f"int32(...)", loc)
        stored = (vt[0], vt[1])
    elif name == "welford":
        if not vt[0].is_float:
            raise LangError(f"'welford=!' needs a float value, got {vt[0]}; cast it, e.g. "
                            f"float(...)", loc)
        stored = (vt[0],) * 3
    else:
        if not vt[0].is_float:
            raise LangError(f"'expsum=!' needs a float value, got {vt[0]}; cast it, e.g. "
                            f"float(...)", loc)
        if len(vt) == 2 and vt[1].is_bool:
            raise LangError("'expsum=!' needs a numeric weight, got bool; cast it, e.g. "
                            "float(...)", loc)
        stored = (vt[0], vt[0]) + ((dtypes.promote(vt[0], vt[1]),) if len(vt) == 2 else ())
    return stored, tuple(t.compute for t in stored)


def payload_identity(dt):
    """The payload an empty argmax/argmin holds: the largest value of its type."""
    if dt.is_float:
        return float("inf")
    return int(np.iinfo(dt.numpy).max)


def reference(name: str, values: list, accs: tuple) -> list:
    """The components of monoid `name` over the last axis of each array in
    `values` (already broadcast to one shape, in the accumulation types)."""
    n = values[0].shape[-1]
    if name in ("argmax", "argmin"):
        v, p = values
        big = name == "argmax"
        if v.dtype.kind == "f":
            v = np.where(np.isnan(v), -np.inf if big else np.inf, v)
            ident = v.dtype.type(-np.inf if big else np.inf)
        else:
            info = np.iinfo(v.dtype)
            ident = v.dtype.type(info.min if big else info.max)
        best = (np.max if big else np.min)(v, axis=-1, initial=ident)
        pid = p.dtype.type(payload_identity(dtypes.from_numpy(p.dtype)))
        pay = np.min(np.where(v == best[..., None], p, pid), axis=-1, initial=pid)
        return [best, pay]
    if name == "welford":
        (x,) = values
        count = np.full(x.shape[:-1], n, x.dtype)
        mean = x.sum(axis=-1) / x.dtype.type(n) if n else np.zeros(x.shape[:-1], x.dtype)
        m2 = ((x - mean[..., None]) ** 2).sum(axis=-1)
        mean = np.where(np.isnan(m2), x.dtype.type(np.nan), mean)  # an inf or NaN value
        return [count, mean.astype(x.dtype), m2.astype(x.dtype)]
    x = values[0]
    m = minmax.MAX.reduce(x, axis=-1, initial=-np.inf).astype(x.dtype)
    e = np.exp(x - m[..., None])
    out = [m, e.sum(axis=-1, dtype=accs[1].numpy)]
    if len(values) == 2:
        w = e.astype(accs[2].numpy) * values[1].astype(accs[2].numpy)
        out.append(w.sum(axis=-1))
    return out
