"""`evaluate` of a statement with a ragged range (lang/check_ragged.py).

    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)

The bounds are evaluated over the spatial box; the points (b, d, j) with j in
its range are laid out along one axis (np.repeat of each spatial point by its
range's length), the other reduction indices along axes of their own, the
right-hand side is evaluated there with every read bounds-checked (a bound that
takes j outside a tensor it reads is an error naming the point), and the
values are reduced into their spatial point with `ufunc.at`, in index order.
An empty range (hi <= lo) gives the identity.
"""
from __future__ import annotations

import numpy as np

from ..errors import LangError
from . import minmax, npfuncs
from .printer import expr_to_text
from .symbolic import eval_int


def run_ragged(st, env: dict, sizes: dict) -> None:
    from .evaluate import _Eval, _combine, _identity
    (j, rng), = st.ragged.items()
    ranges = {r.var: r for r in st.ranges}
    sbox = [(v, eval_int(ranges[v].lo, sizes), eval_int(ranges[v].hi, sizes)) for v in st.spatial]
    sbox = [(v, lo, max(lo, hi)) for v, lo, hi in sbox]
    others = [(v, eval_int(ranges[v].lo, sizes), eval_int(ranges[v].hi, sizes))
              for v in st.reduce if v != j]
    others = [(v, lo, max(lo, hi)) for v, lo, hi in others]
    out = env[st.tensor]
    for (v, lo, hi), n in zip(sbox, out.shape):
        if hi > lo and (lo < 0 or hi > n):
            raise LangError(f"statement writes '{st.tensor}' at {v} in {lo}:{hi}, outside its "
                            f"shape {out.shape}", st.stmt.loc)
    view = dict(env)
    view[st.tensor] = out.copy()  # (a read of the tensor sees it from before the statement)
    sshape = tuple(hi - lo for _, lo, hi in sbox)
    npoints = int(np.prod(sshape, dtype=np.int64))
    acc = st.acc_dtype.numpy
    region = tuple(slice(lo, hi) for _, lo, hi in sbox)
    if npoints == 0:
        return
    ev = _Eval(st, view, sizes, [v for v, _, _ in sbox])
    ev.box = {v: (lo, hi) for v, lo, hi in sbox}
    lo = np.broadcast_to(np.asarray(ev.ev(rng.lo, None), np.int64), sshape).reshape(-1)
    hi = np.broadcast_to(np.asarray(ev.ev(rng.hi, None), np.int64), sshape).reshape(-1)
    count = np.maximum(hi - lo, 0)
    starts = np.cumsum(count) - count
    total = int(count.sum())
    point = np.repeat(np.arange(npoints), count)
    values = {j: lo[point] + np.arange(total) - starts[point]}
    for k, (v, base, _) in enumerate(sbox):
        values[v] = np.unravel_index(point, sshape)[k] + base
    pe = _PointEval(st, view, sizes, values, total, others)
    ext = tuple(h - l for _, l, h in others)
    res = np.full(npoints, _identity(st.reduce_op, np.dtype(acc)), acc)
    if total and 0 not in ext:
        val = np.broadcast_to(pe.ev(st.rhs, None), (total,) + ext).astype(acc)
        val = val.reshape(total, -1)
        op = st.reduce_op
        if op in ("max", "min"):
            f = minmax.of(op)
        else:
            f = np.add if op == "+" else np.multiply
        if val.shape[1] != 1:
            val = f.reduce(val, axis=1)
        f.at(res, point, val.reshape(-1))
    res = res.reshape(sshape)
    if st.continues:
        res = _combine(st.reduce_op, view[st.tensor][region].astype(acc), res)
    out[region] = npfuncs.convert(res, out.dtype)


def _point_eval_class():
    from .evaluate import _Eval

    class PointEval(_Eval):
        """Evaluates over (point, other reduction indices...): the spatial and
        ragged indices are arrays along the point axis."""

        def __init__(self, st, env, sizes, values, total, others):
            super().__init__(st, env, sizes, ["#point"] + [v for v, _, _ in others])
            self.values, self.total = values, total
            self.box = {"#point": (0, total), **{v: (lo, hi) for v, lo, hi in others}}

        def index(self, name):
            if name in self.values:
                shape = [1] * len(self.axes)
                shape[0] = self.total
                return self.values[name].astype(np.int32).reshape(shape)
            return super().index(name)

        def strided(self, r, squeeze=False):
            return None  # indices are arrays here: every read is a checked gather

        def read(self, r, mask):
            arr = self.env[r.tensor]
            if r.args:
                idx = np.broadcast_arrays(*[np.asarray(self.ev(a, mask), np.int64)
                                            for a in r.args])
                bad = np.zeros(idx[0].shape, bool)
                for i, n in zip(idx, arr.shape):
                    bad |= (i < 0) | (i >= n)
                if mask is not None:
                    bad &= np.broadcast_to(mask, bad.shape)
                if bad.any():
                    pos = tuple(np.argwhere(bad)[0])
                    at = ", ".join(f"{v}={int(a[pos[0]])}" for v, a in self.values.items())
                    at += "".join(f", {v}={self.box[v][0] + int(pos[ax])}"
                                  for v, ax in self.axes.items() if ax and bad.shape[ax] > 1)
                    raise LangError(f"{expr_to_text(r)} reads '{r.tensor}' out of bounds at "
                                    f"index {tuple(int(i[pos]) for i in idx)} (shape "
                                    f"{arr.shape}) when {at}", r.loc)
            return super().read(r, mask)
    return PointEval


def _PointEval(*args):
    global _POINT_EVAL
    if _POINT_EVAL is None:
        _POINT_EVAL = _point_eval_class()
    return _POINT_EVAL(*args)


_POINT_EVAL = None
