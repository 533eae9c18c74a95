"""The sim's meaning of the multi-block scans (`scan_lookback_add`, `_mul`,
`_max`, `_min`, `_linear`: lower/intrinsics.py, built by lower/scan_lookback.py;
the CUDA code: target_cuda/scan_lookback.py).

Each block is one tile of a row; its threads along x hold one element each
(the combine of their own elements), in `value` (and `coef`: the linear
recurrence's multiplier). The protocol, on the slot's status (its flag, the
aggregate of flag 1, the prefix of flag 2: slot - j is the tile j before it;
tile 0 has no predecessor):

1. a tile other than 0 publishes its aggregate (the combine of its threads'
   elements, in order): aggregate[slot] (and aggregate_coef), then flags = 1;
2. it looks back: j = 1, 2, ...: flags[slot - j] == 2: the state after that
   tile is prefix[slot - j], done; == 1: combine aggregate[slot - j] in front
   of what it has, go on; == 0: that tile has published nothing yet (the GPU
   spins there). Tile 0's state before it is its `carry` operand;
3. it publishes its inclusive prefix (the state before it followed by its
   aggregate): prefix[slot], then flags = 2.
Each thread's value becomes the state before its element (the tile's state
followed by the elements of the threads before it), its carry the state
after the tile.

The blocks of a batch run together: all publish their aggregates (step 1),
the tiles 0 their prefixes, then the sim resolves the others in groups of
four consecutive blocks, the last of a group first, so that look-backs walk
over aggregates (what a GPU block sees while its predecessors still run) as
well as prefixes. The buffers above are the slot's status words
(schedule/scan.Lookback: flag << 32 | a 32-bit piece of the value, one to four
words a slot), read and written as a whole. A flag that is not 0 before
step 1 (the flags were not zero-filled, or two blocks share a slot) and a look-back that meets a tile
which published nothing (it never ran, or runs later: a deadlock on the GPU)
are SimErrors. Combining is in thread order, left to right (the CUDA code
combines in a tree: float results may differ by rounding).
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import ir
from .scan import _combine

_OPS = {"scan_lookback_add": "+", "scan_lookback_mul": "*", "scan_lookback_max": "max",
        "scan_lookback_min": "min", "scan_lookback_linear": "linear"}
GROUP = 4  # blocks resolved last-first together (module docstring)
_M32 = np.uint64(0xFFFFFFFF)


class _Words:
    """A status buffer (schedule/scan.Lookback: `words` uint64 words a slot, flag <<
    32 | a 32-bit piece, the value's pieces low first; the linear pair a then b) seen
    as the flags F, aggregates G (A: the linear multipliers) and prefixes P the
    protocol reads and writes; `store` packs them back (a prefix: (0, h))."""

    def __init__(self, flat, dt, words: int, linear: bool):
        self.flat, self.dt, self.linear = flat, dt, linear
        self.n = dt.itemsize // 4  # pieces a value
        w = flat.reshape(-1, words)
        self.F = (w[:, 0] >> np.uint64(32)).astype(np.int64)
        pieces = (w & _M32).astype(np.uint64)
        vals = [self._value(pieces[:, k * self.n:(k + 1) * self.n])
                for k in range(words // self.n)]
        self.A = vals[0] if linear else None
        self.G = vals[-1]
        self.P = vals[-1].copy()

    def _value(self, p):
        if self.n == 1:
            return p[:, 0].astype(np.uint32).view(self.dt)
        return (p[:, 0] | (p[:, 1] << np.uint64(32))).view(self.dt)

    def _pieces(self, v):
        u = np.ascontiguousarray(v, self.dt).view(np.uint32 if self.n == 1 else np.uint64)
        u = u.astype(np.uint64)
        return [u] if self.n == 1 else [u & _M32, u >> np.uint64(32)]

    def store(self):
        two = self.F == 2
        vals = [np.where(two, self.P, self.G)]
        if self.linear:
            vals.insert(0, np.where(two, self.dt.type(0), self.A))
        pieces = [x for v in vals for x in self._pieces(v)]
        flag = self.F.astype(np.uint64) << np.uint64(32)
        self.flat.reshape(-1, len(pieces))[:] = np.stack(
            [np.where(self.F == 0, np.uint64(0), flag | x) for x in pieces], axis=1)


def compile_lookback(ex, s: ir.Evaluate):
    op = _OPS[s.call.fn]
    linear = op == "linear"
    args = s.call.args
    if linear:
        coef, value, carry, status, tile, threads = args
        local = [coef, value, carry]
    else:
        value, carry, status, tile, threads = args
        local = [value, carry]
    first_of = ex.compile_expr(status.indices[0])
    tile_of, threads_of = ex.compile_expr(tile), ex.compile_expr(threads)

    def run(env, mask):
        blocks = ex._whole_blocks(mask, "multi-block scan reached by only some threads of "
                                  "block {block}")
        if mask is not None and not mask.any():
            return
        n = int(threads_of(env, None))
        bx, by, bz = ex.block
        if n != bx or by * bz != 1:
            raise SimError(f"kernel {ex.kname}: a multi-block scan needs a block of exactly its "
                           f"{n} threads along x, got {ex.block}")
        locs = [ex.mem[r.buffer] for r in local]
        for r, loc in zip(local, locs):
            w = loc.written[:, 0] if mask is None else loc.written[mask, 0]
            if not w.all():
                raise SimError(f"kernel {ex.kname}: multi-block scan of {r.buffer} before every "
                               f"thread wrote it")
        nb = ex.nb
        vals = [loc.data[:, 0].reshape(nb, bx) for loc in locs]
        dt = vals[-1].dtype
        per_block = []
        for f in (first_of, tile_of):
            v = np.broadcast_to(np.asarray(f(env, None), np.int64), (ex.L,)).reshape(nb, bx)
            if (v != v[:, :1]).any():
                raise SimError(f"kernel {ex.kname}: a multi-block scan's slot and tile must be "
                               f"the same in every thread of a block")
            per_block.append(v[:, 0])
        flat = ex.flat_globals[status.buffer]
        nwords = (2 if linear else 1) * (dt.itemsize // 4)
        if len(flat) % nwords or (per_block[0] % nwords).any():
            raise SimError(f"kernel {ex.kname}: a multi-block scan's status buffer "
                           f"{status.buffer} is not {nwords} words a slot")
        per_block[0] = per_block[0] // nwords
        words = _Words(flat, dt, nwords, linear)
        F, A, G, P = words.F, words.A, words.G, words.P
        slots, tiles = per_block[0], per_block[-1]
        live = range(nb) if blocks is None else [int(x) for x in np.flatnonzero(blocks)]
        f = None if linear else _combine(op, dt.kind == "f")
        # the threads' exclusive prefixes and the blocks' aggregates, in thread order
        if linear:
            a, b = vals[0], vals[1]
            pa, pb = np.ones_like(a), np.zeros_like(b)  # exclusive: before thread x
            for x in range(1, bx):
                pa[:, x] = pa[:, x - 1] * a[:, x - 1]
                pb[:, x] = a[:, x - 1] * pb[:, x - 1] + b[:, x - 1]
            agg = (pa[:, -1] * a[:, -1], a[:, -1] * pb[:, -1] + b[:, -1])
        else:
            inc = f.accumulate(vals[0], axis=1, dtype=dt)
            agg = (None, inc[:, -1])
        for blk in live:
            sl = int(slots[blk])
            if not 0 <= sl < len(F):
                raise SimError(f"kernel {ex.kname}: multi-block scan slot {sl} out of its "
                               f"flags' {len(F)} slots")
            if F[sl] != 0:
                raise SimError(f"kernel {ex.kname}: multi-block scan: the flag of slot {sl} is "
                               f"{int(F[sl])} before its tile ran (the flags must start zeroed, "
                               f"one slot a tile)")
            if tiles[blk] > 0:  # step 1
                G[sl] = agg[1][blk]
                if linear:
                    A[sl] = agg[0][blk]
                F[sl] = 1
        state = np.zeros(nb, dt)

        def publish(blk, h):
            sl = int(slots[blk])
            state[blk] = h
            P[sl] = agg[0][blk] * h + agg[1][blk] if linear else f(h, agg[1][blk])
            F[sl] = 2

        for blk in live:  # tiles 0: the carry operand
            if tiles[blk] == 0:
                publish(blk, vals[-1][blk, 0])
        rest = [blk for blk in live if tiles[blk] > 0]
        for g in range(0, len(rest), GROUP):
            for blk in reversed(rest[g:g + GROUP]):  # step 2, then 3
                sl, t = int(slots[blk]), int(tiles[blk])
                acc_a, acc_b = (dt.type(1), dt.type(0)) if linear else (None, None)
                for j in range(1, t + 1):
                    flag = int(F[sl - j])
                    if flag == 2:
                        p = P[sl - j]
                        break
                    if flag != 1:
                        raise SimError(f"kernel {ex.kname}: multi-block scan: tile {t} looks "
                                       f"back at tile {t - j} (slot {sl - j}), which has "
                                       f"published nothing (it never ran, or runs after this "
                                       f"one: on the GPU it would wait forever)")
                    if linear:  # (A_j, B_j) then (acc_a, acc_b)
                        acc_a, acc_b = A[sl - j] * acc_a, acc_a * G[sl - j] + acc_b
                    else:
                        acc_b = G[sl - j] if acc_b is None else f(G[sl - j], acc_b)
                else:
                    raise SimError(f"kernel {ex.kname}: multi-block scan: tile {t} found no "
                                   f"published prefix before it")
                h = acc_a * p + acc_b if linear else (p if acc_b is None else f(p, acc_b))
                publish(blk, h)
        words.store()
        h = state[:, None]
        out = pa * h + pb if linear else np.concatenate(
            [h, f(h, inc[:, :-1])], axis=1)
        after = np.broadcast_to((agg[0][:, None] * h + agg[1][:, None]) if linear else
                                f(h, agg[1][:, None]), out.shape)
        for loc, r in ((locs[-2], out), (locs[-1], after)):
            r = np.asarray(r).reshape(-1).astype(loc.data.dtype, copy=False)
            if mask is None:
                loc.data[:, 0] = r
            else:
                loc.data[mask, 0] = r[mask]
    return run


RULES = {name: compile_lookback for name in _OPS}
