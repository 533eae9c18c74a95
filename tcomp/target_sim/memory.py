"""Memory of the sim target: shared, local and global buffers of a batch of
blocks, their bounds checks and race tracking (see executor.py for the rules).

A batch runs `nb` blocks of `T` threads as `nb * T` lanes; lane `l` is thread
`l % T` of the batch's block `l // T`. Local memory has one row per lane,
shared memory one copy per block (a leading block axis), global memory is the
caller's arrays. All element positions are flat offsets (for shared memory:
block * size + offset within the block's copy), so the data, the written flags
and the race trackers of a buffer are indexed alike.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError

NOBODY, SEVERAL = -1, -2
# a negative subscript seen as unsigned is huge: one comparison checks both ends
_UNSIGNED = {np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64,
             np.dtype(np.uint32): np.uint32, np.dtype(np.uint64): np.uint64}


class Local:
    """Per-lane registers. `full` holds constant subscripts every lane has
    written since the allocation was entered (their reads skip the check)."""

    def __init__(self, buf, shape, lanes):
        self.buf, self.shape = buf, shape
        self.data = np.zeros((lanes,) + shape, buf.dtype.numpy)
        self.written = np.zeros((lanes,) + shape, bool)
        self.full: set = set()


class Shared:
    """Per-block shared memory with, per element, the thread that wrote it and
    the thread that read it since the block's last barrier (NOBODY, a thread
    index in the block, or SEVERAL: several threads, which wrote the same value)."""

    def __init__(self, buf, shape, blocks):
        self.buf, self.shape = buf, shape
        self.size = int(np.prod(shape, dtype=np.int64))
        full = (blocks,) + shape
        self.data = np.zeros(full, buf.dtype.numpy)
        self.written = np.zeros(full, bool)
        self.writer = np.full(full, NOBODY, np.int32)
        self.reader = np.full(full, NOBODY, np.int32)
        self.fdata, self.fwritten = self.data.reshape(-1), self.written.reshape(-1)
        self.fwriter, self.freader = self.writer.reshape(-1), self.reader.reshape(-1)


class GlobalTrack:
    """Race tracking of a global buffer the kernel writes.

    Within a block (since its last barrier): `lane` is the lane that wrote an
    element, NOBODY, or SEVERAL - b (several threads of the batch's block b
    wrote the same value); `dirty` lists the offsets to clear at barriers.
    Between blocks (the whole launch, all batches): `wblock` is the block that
    wrote an element (SEVERAL: several blocks, the same value), `rblock` the
    block that read it (SEVERAL: several blocks). Blocks are numbered over the
    launch (x fastest), lanes within the batch."""

    def __init__(self, size):
        self.lane = np.full(size, NOBODY, np.int32)
        self.dirty: list = []
        self.wblock = np.full(size, NOBODY, np.int32)
        self.rblock = np.full(size, NOBODY, np.int32)
        self.any_write = False


def same_values(a, b):
    """Elementwise equality where NaN equals NaN (a second identical store of a NaN is no race)."""
    eq = a == b
    if a.dtype.kind not in "biu":  # floats, also bfloat16 (an ml_dtypes kind 'V')
        eq = eq | (np.isnan(np.asarray(a, np.float64)) & np.isnan(np.asarray(b, np.float64)))
    return eq


def _record(who, flat, me):
    """who[flat] = me, or SEVERAL where a different block is already recorded
    (also for two lanes of different blocks at one offset in this step)."""
    r = who[flat]
    new = np.where((r == NOBODY) | (r == me), me, np.int32(SEVERAL))
    who[flat] = new
    several = who[flat] != new
    if several.any():
        who[flat[several]] = SEVERAL


class Memory:
    """Mixin of the launch (executor._Launch): loads and stores with their checks.
    Uses the launch's lanes: self.L, self.T, self.nb, self.lane, self.tid, self.blk,
    self.gblock (launch-wide block number of each lane), self.mem, self.globals,
    self.flat_globals, self.track, and its message helpers."""

    # ------------------------------------------------------------ subscripts
    def subscripts(self, name, vals, shape, mask, what, where=""):
        """Check per-dimension bounds of the active lanes; returns (scalar, subs):
        subscripts the same for all lanes are Python ints (scalar: all are),
        the others integer arrays over the lanes, their inactive out-of-bounds
        lanes moved to 0. `where` ends an out-of-bounds message."""
        if len(vals) != len(shape):
            raise SimError(f"kernel {self.kname}: {name} has {len(shape)} dimensions, "
                           f"indexed with {len(vals)}")
        subs = [v if type(v) is np.ndarray and v.ndim else int(v) for v in vals]
        scalar = True
        for d, (i, n) in enumerate(zip(subs, shape)):
            if type(i) is int:
                if not 0 <= i < n:
                    lane = 0 if mask is None else int(np.argmax(mask))
                    self._out_of_bounds(name, what, where, shape, d, lane, subs)
                continue
            scalar = False
            u = _UNSIGNED.get(i.dtype)
            bad = i.view(u) >= n if u is not None else (i < 0) | (i >= n)
            if bad.any():
                if mask is not None:
                    bad &= mask
                    if not bad.any():  # only guarded (inactive) lanes are outside
                        subs[d] = np.where(mask, i, 0)
                        continue
                self._out_of_bounds(name, what, where, shape, d, int(np.argmax(bad)), subs)
        return scalar, subs

    def _out_of_bounds(self, name, what, where, shape, d, lane, subs):
        sub = self._sub_at(subs, lane)
        raise SimError(f"kernel {self.kname}: {what} {name}{sub} out of bounds (shape "
                       f"{tuple(shape)}, dimension {d}) in block {self._block(lane)}, thread "
                       f"{self._thread(lane)}{where}")

    @staticmethod
    def flatten(subs, shape):
        """Row-major offsets (int64) of per-dimension subscripts (ints or arrays)."""
        flat = np.asarray(subs[0], np.int64) if subs else np.int64(0)
        for i, n in zip(subs[1:], shape[1:]):
            flat = flat * n + i
        return flat

    # ------------------------------------------------------------ local
    def load_local(self, name, h, vals, mask):
        scalar, subs = self.subscripts(name, vals, h.shape, mask, "read of")
        if scalar:
            key = tuple(subs)
            idx = (slice(None),) + key
            if key not in h.full:
                w = h.written[idx]
                if w.all():
                    h.full.add(key)
                else:
                    self._unwritten_local(name, ~w if mask is None else mask & ~w)
            return h.data[idx]
        idx = (self.lane,) + tuple(subs)
        w = h.written[idx]
        if not w.all():
            self._unwritten_local(name, ~w if mask is None else mask & ~w)
        return h.data[idx]

    def _unwritten_local(self, name, unwritten):
        if unwritten.any():
            raise SimError(f"kernel {self.kname}: read of local {name} before any write "
                           f"(thread {self._thread(int(np.argmax(unwritten)))})")

    def store_local(self, h, subs, scalar, vals, mask):
        if scalar:
            key = tuple(subs)
            idx = (slice(None),) + key
            if mask is None:
                h.data[idx] = vals
                h.written[idx] = True
                h.full.add(key)
            else:
                h.data[idx][mask] = vals if np.ndim(vals) == 0 else vals[mask]
                h.written[idx][mask] = True
            return
        lanes = self.lane if mask is None else np.flatnonzero(mask)
        idx = (lanes,) + tuple(s if mask is None or type(s) is int else s[lanes] for s in subs)
        h.data[idx] = vals if np.ndim(vals) == 0 or mask is None else vals[lanes]
        h.written[idx] = True

    # ------------------------------------------------------------ shared
    def _shared_flat(self, h, subs):
        flat = self.flatten(subs, h.shape)
        if self.nb > 1:
            flat = self.blk * h.size + flat
        return np.broadcast_to(np.asarray(flat, np.int64), (self.L,))

    def load_shared(self, name, h, vals, mask):
        _, subs = self.subscripts(name, vals, h.shape, mask, "read of")
        flat = self._shared_flat(h, subs)
        lanes, tid, f = self.lane, self.tid, flat
        if mask is not None:
            lanes = np.flatnonzero(mask)
            tid, f = tid[lanes], flat[lanes]
        w = h.fwritten[f]
        if not w.all():
            lane = int(lanes[int(np.argmax(~w))])
            raise SimError(f"kernel {self.kname}: read of shared {name}"
                           f"{self._sub_at(subs, lane)} that no thread wrote (block "
                           f"{self._block(lane)}, thread {self._thread(lane)})")
        writer = h.fwriter[f]
        race = writer != tid
        if race.any() and writer.max() >= 0:  # else nobody or several (same value) wrote
            race &= writer >= 0
            if race.any():
                j = int(np.argmax(race))
                lane = int(lanes[j])
                self._read_race(f"shared {name}{self._sub_at(subs, lane)}", lane,
                                lane - int(tid[j]) + int(writer[j]))
        # The reader of each element: this thread, or SEVERAL when another thread
        # read it too (now or since the last barrier). Lanes of one step that read
        # one element all store their index and one wins: the others mark SEVERAL.
        r = h.freader[f]
        new = np.where((r == NOBODY) | (r == tid), tid, np.int32(SEVERAL))
        h.freader[f] = new
        several = h.freader[f] != new
        if several.any():
            h.freader[f[several]] = SEVERAL
        return h.fdata[flat]

    def store_shared(self, name, h, subs, vals, mask):
        flat = self._shared_flat(h, subs)
        lanes = self.lane
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        tid = self.tid[lanes]
        order = np.argsort(flat, kind="stable")
        f, v, ln = flat[order], vals[order], lanes[order]
        dup = f[1:] == f[:-1]
        if dup.any():
            differ = dup & ~same_values(v[1:], v[:-1])
            if differ.any():
                j = int(np.argmax(differ))
                raise SimError(f"kernel {self.kname}: threads {self._thread(int(ln[j]))} and "
                               f"{self._thread(int(ln[j + 1]))} write different values to shared "
                               f"{name} at offset {int(f[j]) % h.size} in the same step (block "
                               f"{self._block(int(ln[j]))})")
        r = h.freader[flat]
        war = (r == SEVERAL) | ((r >= 0) & (r != tid))
        if war.any():
            j = int(np.argmax(war))
            who = "several threads" if r[j] == SEVERAL else \
                f"thread {self._thread(int(lanes[j]) - int(tid[j]) + int(r[j]))}"
            raise SimError(f"kernel {self.kname}: thread {self._thread(int(lanes[j]))} overwrites "
                           f"shared {name} at offset {int(flat[j]) % h.size} that {who} read since "
                           f"the last barrier (missing barrier) in block "
                           f"{self._block(int(lanes[j]))}")
        prior = h.fwriter[flat]
        other = ((prior >= 0) & (prior != tid)) | (prior == SEVERAL)
        if other.any():
            bad = other & ~(h.fwritten[flat] & same_values(h.fdata[flat], vals))
            if bad.any():
                j = int(np.argmax(bad))
                raise SimError(f"kernel {self.kname}: thread {self._thread(int(lanes[j]))} "
                               f"overwrites shared {name} at offset {int(flat[j]) % h.size}, "
                               f"written by another thread since the last barrier (missing "
                               f"barrier) in block {self._block(int(lanes[j]))}")
        h.fwriter[flat] = np.where(other, SEVERAL, tid)
        if dup.any():
            h.fwriter[f[1:][dup]] = SEVERAL
        h.fdata[flat] = vals
        h.fwritten[flat] = True

    # ------------------------------------------------------------ global
    def load_global(self, name, arr, vals, mask):
        scalar, subs = self.subscripts(name, vals, arr.shape, mask, "read of")
        g = self.track.get(name)
        flatarr = self.flat_globals.get(name)
        if g is None and flatarr is None:
            return arr[tuple(subs)]
        flat = self.flatten(subs, arr.shape)
        if g is not None:
            self._global_read(name, arr, g, np.broadcast_to(np.asarray(flat, np.int64),
                                                            (self.L,)), mask)
        return flatarr[flat] if flatarr is not None else arr[tuple(subs)]

    def _global_read(self, name, arr, g, flat, mask):
        me = self.gblock
        if g.any_write:
            wb = g.wblock[flat]
            other = (wb >= 0) & (wb != me)
            if mask is not None:
                other &= mask
            if other.any():
                lane = int(np.argmax(other))
                raise SimError(f"kernel {self.kname}: thread {self._thread(lane)} of block "
                               f"{self._block(lane)} reads {name}"
                               f"{self._unflat(flat[lane], arr.shape)} written by block "
                               f"{self._block_of(int(wb[lane]))} in the same launch (blocks run "
                               f"in any order and cannot wait for each other: a race between "
                               f"blocks; write it in another kernel, or in the block that reads "
                               f"it)")
            w = g.lane[flat]
            race = (w >= 0) & (w != self.lane) & (w // self.T == self.blk)
            if mask is not None:
                race &= mask
            if race.any():
                lane = int(np.argmax(race))
                self._read_race(f"{name}{self._unflat(flat[lane], arr.shape)}", lane,
                                int(w[lane]))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, me = flat[lanes], me[lanes]
        _record(g.rblock, flat, me)

    def _read_race(self, what, lane, writer):
        raise SimError(f"kernel {self.kname}: thread {self._thread(lane)} reads {what} written "
                       f"by thread {self._thread(writer)} since the last barrier (missing "
                       f"barrier) in block {self._block(lane)}")

    def store_global(self, name, arr, subs, vals, mask):
        g = self.track[name]
        lanes = self.lane
        flat = np.broadcast_to(np.asarray(self.flatten(subs, arr.shape), np.int64), (self.L,))
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        me, blk = self.gblock[lanes], self.blk[lanes]
        shape = arr.shape
        data = self.flat_globals.get(name)
        current = data[flat] if data is not None else arr[np.unravel_index(flat, shape)]
        changes = ~same_values(current, vals)
        # between blocks (the whole launch): another block wrote or read the element
        wb = g.wblock[flat]
        other = (wb != NOBODY) & (wb != me) & changes
        if other.any():
            j = int(np.argmax(other))
            self._block_race(name, lanes[j], flat[j], shape, "wrote",
                             None if wb[j] == SEVERAL else int(wb[j]))
        rb = g.rblock[flat]
        war = (rb != NOBODY) & (rb != me) & changes
        if war.any():
            j = int(np.argmax(war))
            self._block_race(name, lanes[j], flat[j], shape, "read",
                             None if rb[j] == SEVERAL else int(rb[j]))
        # within the block, since its last barrier
        prior = g.lane[flat]
        mine = ((prior >= 0) & (prior // self.T == blk) & (prior != lanes)) | \
            (prior == SEVERAL - blk)
        bad = mine & changes
        if bad.any():
            j = int(np.argmax(bad))
            raise SimError(f"kernel {self.kname}: thread {self._thread(int(lanes[j]))} "
                           f"overwrites {name} at offset {int(flat[j])} with a different "
                           f"value than another thread wrote since the last barrier (block "
                           f"{self._block(int(lanes[j]))})")
        order = np.argsort(flat, kind="stable")
        f, v, ln = flat[order], vals[order], lanes[order]
        dup = f[1:] == f[:-1]
        if dup.any():  # several threads store to one address in this step
            differ = dup & ~same_values(v[1:], v[:-1])
            if differ.any():
                j = int(np.argmax(differ))
                a, b = int(ln[j]), int(ln[j + 1])
                if self.gblock[a] != self.gblock[b]:
                    self._block_race(name, b, f[j], shape, "wrote", int(self.gblock[a]))
                what = f"{name} at offset {int(f[j])}" if arr.ndim else name
                raise SimError(f"kernel {self.kname}: threads write different values to {what} "
                               f"in the same step (threads {self._thread(a)} and "
                               f"{self._thread(b)} of block {self._block(a)})")
        # The writer: this lane, or "several threads of this block" (SEVERAL - block)
        # when another thread of the block wrote the element too; a write by another
        # block (of the same value) is tracked between blocks, not here.
        g.lane[flat] = np.where(mine, SEVERAL - blk, lanes)
        if dup.any():
            same_blk = dup & (self.blk[ln[1:]] == self.blk[ln[:-1]])
            g.lane[f[1:][same_blk]] = SEVERAL - self.blk[ln[1:][same_blk]]
        _record(g.wblock, flat, me)
        g.any_write = True
        g.dirty.append(flat)
        if data is not None:
            data[flat] = vals
        else:
            arr[np.unravel_index(flat, shape)] = vals

    def _block_race(self, name, lane, flat, shape, did, other):
        who = "several blocks" if other is None else f"block {self._block_of(other)}"
        raise SimError(f"kernel {self.kname}: thread {self._thread(int(lane))} of block "
                       f"{self._block(int(lane))} writes {name}{self._unflat(flat, shape)} that "
                       f"{who} {did} in the same launch (blocks run in any order and cannot wait "
                       f"for each other: a race between blocks; give each element to one block, "
                       f"or split the launch)")

    # ------------------------------------------------------------ barriers
    def reset_trackers(self, blocks):
        """Forget who wrote/read what since the last barrier, for the batch's
        blocks where `blocks` (bool per block) is set; all of them for None."""
        for h in self.mem.values():
            if isinstance(h, Shared):
                if blocks is None:
                    h.writer.fill(NOBODY)
                    h.reader.fill(NOBODY)
                else:
                    h.writer[blocks] = NOBODY
                    h.reader[blocks] = NOBODY
        for g in self.track.values():
            if not g.dirty:
                continue
            offs = np.concatenate(g.dirty)
            if blocks is None:
                g.lane[offs] = NOBODY
                g.dirty = []
                continue
            w = g.lane[offs]
            owner = np.where(w >= 0, w // self.T, SEVERAL - w)
            done = (w == NOBODY) | blocks[np.clip(owner, 0, self.nb - 1)]
            g.lane[offs[done]] = NOBODY
            g.dirty = [offs[~done]]

    # ------------------------------------------------------------ messages
    @staticmethod
    def _sub_at(subs, lane):
        return [int(s) if np.ndim(s) == 0 else int(s[lane]) for s in subs]

    @staticmethod
    def _unflat(flat, shape):
        return [int(i) for i in np.unravel_index(int(flat), shape)] if shape else []
