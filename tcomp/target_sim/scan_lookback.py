"""The sim's meaning of the multi-block scans (`scan_lookback_add`, `_mul`,
`_max`, `_min`, `_linear`: lower/intrinsics.py, built by lower/scan_lookback.py;
the CUDA code: target_cuda/scan_lookback.py).

Each block is one tile of a row; its threads along x hold one element each
(the combine of their own elements), in `value` (and `coef`: the linear
recurrence's multiplier). The protocol, on the global buffers at the block's
slot (slot - j is the tile j before it; tile 0 has no predecessor):

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
well as prefixes. The packed form (scan_lookback_word_*: one uint64 word
a slot, flag << 32 | the value's bits, the aggregate under flag 1, the prefix
under flag 2) runs the same protocol on the words. A flag that is not 0 before
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
_WORD_OPS = {"scan_lookback_word_add": "+", "scan_lookback_word_mul": "*",
             "scan_lookback_word_max": "max", "scan_lookback_word_min": "min"}
GROUP = 4  # blocks resolved last-first together (module docstring)


class _Words:
    """The packed status words of a scan_lookback_word_* call (flag << 32 | the
    32-bit value: the aggregate under flag 1, the prefix under flag 2) seen as
    the flags, aggregates and prefixes the protocol reads and writes; `store`
    packs them back."""

    def __init__(self, words, dt):
        self.words, self.dt = words, dt
        self.F = (words >> np.uint64(32)).astype(np.int64)
        low = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(dt)
        self.G, self.P = low.copy(), low.copy()

    def store(self):
        v = np.where(self.F == 2, self.P, self.G).astype(self.dt).view(np.uint32)
        self.words[:] = (self.F.astype(np.uint64) << np.uint64(32)) | v.astype(np.uint64)


def compile_lookback(ex, s: ir.Evaluate):
    packed = s.call.fn in _WORD_OPS
    op = _WORD_OPS[s.call.fn] if packed else _OPS[s.call.fn]
    linear = op == "linear"
    args = s.call.args
    if packed:
        value, carry, status, tile, threads = args
        acoef = flags = agg = prefix = None
        local = [value, carry]
    elif linear:
        coef, value, carry, flags, acoef, agg, prefix, tile, threads = args
        local = [coef, value, carry]
    else:
        value, carry, flags, agg, prefix, tile, threads = args
        acoef = None
        local = [value, carry]
    glob = [status] if packed else [r for r in (flags, acoef, agg, prefix) if r is not None]
    slot_of = [ex.compile_expr(r.indices[0]) for r in glob]
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
        for f in slot_of + [tile_of]:
            v = np.broadcast_to(np.asarray(f(env, None), np.int64), (ex.L,)).reshape(nb, bx)
            if (v != v[:, :1]).any():
                raise SimError(f"kernel {ex.kname}: a multi-block scan's slot and tile must be "
                               f"the same in every thread of a block")
            per_block.append(v[:, 0])
        arrays = [ex.flat_globals[r.buffer] for r in glob]
        words = _Words(arrays[0], dt) if packed else None
        if packed:
            F, A, G, P = words.F, None, words.G, words.P
        else:
            F, A, G, P = (arrays[0], arrays[1], arrays[2], arrays[3]) if linear else \
                (arrays[0], None, arrays[1], arrays[2])
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
        if words is not None:
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


RULES = {name: compile_lookback for name in (*_OPS, *_WORD_OPS)}
