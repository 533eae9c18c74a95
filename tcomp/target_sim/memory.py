"""Memory of the sim target: shared, local and global buffers of a batch of
blocks, their bounds checks and the race tracking of shared memory (global
memory: races.py; the rules: executor.py).

A batch runs `nb` blocks of `T` threads as `nb * T` lanes; lane `l` is thread
`l % T` of the batch's block `l // T`. Local memory has one row per lane,
shared memory one copy per block (a leading block axis), global memory is the
caller's arrays. Shared elements are flat offsets (block * size + offset
within the block's copy), so the data, the written flags and the race
trackers of a buffer are indexed alike.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from .races import NOBODY, SEVERAL, same_values

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


class Memory:
    """Mixin of the launch (executor._Launch): loads and stores with their checks.
    Uses the launch's lanes: self.L, self.T, self.nb, self.lane, self.tid, self.blk,
    self.gblock (launch-wide block number of each lane), self.mem, self.globals,
    self.flat_globals, self.races (races.GlobalRaces), and its message helpers."""

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

    def _read_race(self, what, lane, writer):
        raise SimError(f"kernel {self.kname}: thread {self._thread(lane)} reads {what} written "
                       f"by thread {self._thread(writer)} since the last barrier (missing "
                       f"barrier) in block {self._block(lane)}")

    # ------------------------------------------------------------ global
    def load_global(self, name, arr, vals, mask):
        scalar, subs = self.subscripts(name, vals, arr.shape, mask, "read of")
        flatarr = self.flat_globals.get(name)
        if not self.races.tracks(name):
            if flatarr is None or scalar:
                return arr[tuple(subs)]
            return flatarr[self.flatten(subs, arr.shape)]
        flat = np.broadcast_to(self.flatten(subs, arr.shape), (self.L,))
        self.races.read(name, arr.shape, flat, mask)
        return flatarr[flat] if flatarr is not None else arr[tuple(subs)]

    def store_global(self, name, arr, subs, vals, mask):
        lanes = self.lane
        flat = np.broadcast_to(self.flatten(subs, arr.shape), (self.L,))
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        data = self.flat_globals.get(name)
        at = flat if data is not None else np.unravel_index(flat, arr.shape)
        target = data if data is not None else arr
        self.races.write(name, arr.shape, flat, lanes, vals, target[at])
        target[at] = vals

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
        self.races.barrier(blocks)

    # ------------------------------------------------------------ messages
    @staticmethod
    def _sub_at(subs, lane):
        return [int(s) if np.ndim(s) == 0 else int(s[lane]) for s in subs]

