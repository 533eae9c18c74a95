"""The sim's meaning of the block scans (`scan_add`, `scan_mul`, `scan_max`,
`scan_min`, `scan_linear`: lower/intrinsics.py, built by lower/scan.py).

The block's threads along threadIdx.x (the whole x dimension) hold one element
each, in their local `value` (and `coef`, the multiplier of the linear
recurrence); every thread holds the running `carry`. Afterwards each thread's
value is its carry combined with the elements of threads 0..x (inclusive), in
that order, and its carry is advanced over all of them. The sim combines left
to right (the CUDA code in a tree: float results may differ by rounding).
Every thread of a block must reach it, with every operand written.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lang import minmax
from ..lower import ir


def _combine(op: str, float_: bool):
    if op == "+":
        return np.add
    if op == "*":
        return np.multiply
    return minmax.of(op) if float_ else (np.maximum if op == "max" else np.minimum)


def compile_scan(ex, s: ir.Evaluate):
    fn, args = s.call.fn, s.call.args
    linear = fn == "scan_linear"
    refs = [a.buffer for a in args[:-1]]
    op = {"scan_add": "+", "scan_mul": "*", "scan_max": "max", "scan_min": "min"}.get(fn)
    threads_of = ex.compile_expr(args[-1])

    def scan(env, mask):
        ex._whole_blocks(mask, "block scan reached by only some threads of block {block}")
        if mask is not None and not mask.any():
            return
        locs = [ex.mem[b] for b in refs]
        for b, loc in zip(refs, locs):
            w = loc.written[:, 0] if mask is None else loc.written[mask, 0]
            if not w.all():
                raise SimError(f"kernel {ex.kname}: block scan of {b} before every thread "
                               f"wrote it")
        bx, by, bz = ex.block
        if int(threads_of(env, None)) != bx or by * bz != 1:
            raise SimError(f"kernel {ex.kname}: a block scan needs a block of exactly its "
                           f"{int(threads_of(env, None))} threads along x, got {ex.block}")
        vals = [loc.data[:, 0].reshape(ex.nb, bx) for loc in locs]
        carry = vals[-1]
        if linear:
            a, b = vals[0], vals[1]
            pa, pb = a.copy(), b.copy()
            for x in range(1, bx):  # (A, B) then (a, b): (A a, a B + b)
                pb[:, x] = a[:, x] * pb[:, x - 1] + b[:, x]
                pa[:, x] = pa[:, x - 1] * a[:, x]
            out = pa * carry + pb
            new_carry = pa[:, -1:] * carry + pb[:, -1:]
            results = [(locs[1], out), (locs[2], np.broadcast_to(new_carry, out.shape))]
        else:
            f = _combine(op, vals[0].dtype.kind == "f")
            prefix = f.accumulate(vals[0], axis=1, dtype=vals[0].dtype)
            out = f(carry, prefix)
            results = [(locs[0], out),
                       (locs[1], f(carry, prefix[:, -1:]))]
        for loc, r in results:
            r = r.reshape(-1).astype(loc.data.dtype, copy=False)
            if mask is None:
                loc.data[:, 0] = r
            else:
                loc.data[mask, 0] = r[mask]
    return scan


RULES = {name: compile_scan for name in
         ("scan_add", "scan_mul", "scan_max", "scan_min", "scan_linear")}
