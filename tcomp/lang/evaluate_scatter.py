"""`evaluate` of a scatter (lang/check_scatter.py): every point of the box
writes `O(subscripts) op= rhs`; duplicates combine as `np.add.at` does (`=`:
the last point in index order wins); each update rounds to the tensor's type,
as an atomic does. A subscript outside the tensor is a LangError naming it."""
from __future__ import annotations

import numpy as np

from ..errors import LangError
from . import minmax, npfuncs
from .printer import expr_to_text


def run_scatter(st, env: dict, sizes: dict, box) -> None:
    """A scatter over `box`. Boxes larger than evaluate.CHUNK run in parts along
    the outermost index, in order."""
    from .evaluate import CHUNK, _Eval  # (the evaluator this module is part of)
    extents = [hi - lo for _, lo, hi in box]
    if 0 in extents:
        return
    if int(np.prod(extents, dtype=np.int64)) > CHUNK and extents[0] > 1:
        v, lo, hi = box[0]
        mid = lo + (hi - lo) // 2
        run_scatter(st, env, sizes, [(v, lo, mid)] + box[1:])
        run_scatter(st, env, sizes, [(v, mid, hi)] + box[1:])
        return
    out = env[st.tensor]
    ev = _Eval(st, env, sizes, [v for v, _, _ in box])
    ev.box = {v: (lo, hi) for v, lo, hi in box}
    shape = tuple(extents)
    vals = np.broadcast_to(ev.ev(st.rhs, None), shape).astype(st.acc_dtype.numpy).reshape(-1)
    subs = []
    for k, (e, n) in enumerate(zip(st.scatter, out.shape)):
        sub = np.broadcast_to(np.asarray(ev.ev(e, None), np.int64), shape)
        bad = (sub < 0) | (sub >= n)
        if bad.any():
            pos = np.argwhere(bad)[0]
            at = ", ".join(f"{v}={lo + int(p)}" for (v, lo, _), p in zip(box, pos))
            lhs = ", ".join(expr_to_text(x) for x in st.scatter)
            raise LangError(f"scatter into '{st.tensor}({lhs})': subscript {expr_to_text(e)} = "
                            f"{int(sub[tuple(pos)])} is outside dimension {k} of "
                            f"'{st.tensor}' (extent {n}) when {at}", e.loc or st.stmt.loc)
        subs.append(sub.reshape(-1))
    flat = np.ravel_multi_index(subs, out.shape) if out.ndim else np.zeros(vals.shape, np.int64)
    target = out.reshape(-1)
    if st.reduce_op is None:  # `=`: the last writer of each element, in index order
        uniq, first = np.unique(flat[::-1], return_index=True)
        target[uniq] = npfuncs.convert(vals[::-1][first], out.dtype)
        return
    # Each update rounds to the tensor's type, as an atomic does (float16/bfloat16
    # too: their scatter sums depend on the order of the points; here index order).
    op = st.reduce_op
    if op in ("max", "min") and out.dtype.kind == "f":
        f = minmax.of(op)
    elif out.dtype.kind == "b":
        f = np.logical_or if op in ("+", "max") else np.logical_and
    else:
        f = {"+": np.add, "*": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(over="ignore"):
        f.at(target, flat, npfuncs.convert(vals, out.dtype))
