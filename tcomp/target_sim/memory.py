"""Memory of the sim target: shared, local and global buffers of a batch of
blocks, their bounds checks and the race tracking of shared memory (global
memory: races.py; the rules: executor.py).

A batch runs `nb` blocks of `T` threads as `nb * T` lanes; lane `l` is thread
`l % T` of the batch's block `l // T`. Every buffer is stored flat, as the
final Kernel IR (after storage flattening) addresses it: local memory has one
row of `size` elements per lane, shared memory one row per block, global
memory is a flat view of the caller's arrays. Shared elements are flat offsets
(block * size + offset within the block's copy), so the data, the written
flags and the race trackers of a buffer are indexed alike.

An access carries either one subscript (the flat offset of the final IR),
checked against the buffer's element count, or one subscript per dimension
(the IR before flattening, or a 1-d buffer), each checked against its own
dimension. Messages name elements by their multi-index in the buffer's shape.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import SimError
from .races import NOBODY, SEVERAL, same_values

# a negative subscript seen as unsigned is huge: one comparison checks both ends
_UNSIGNED = {np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64,
             np.dtype(np.uint32): np.uint32, np.dtype(np.uint64): np.uint64}


class Local:
    """Per-lane registers, `size` per lane. `full` holds constant offsets every
    lane has written since the allocation was entered (their reads skip the check).
    `pending`: per register, the wgmma in flight that write it (wgmma.py)."""
    pending = None

    def __init__(self, buf, shape, lanes):
        self.buf, self.shape = buf, shape
        self.size = int(np.prod(shape, dtype=np.int64))
        self.data = np.zeros((lanes, self.size), buf.dtype.numpy)
        self.written = np.zeros((lanes, self.size), bool)
        self.full: set = set()


class Shared:
    """Per-block shared memory with, per element, the thread that wrote it and
    the thread that read it since the block's last barrier (NOBODY, a thread
    index in the block, or SEVERAL: several threads, which wrote the same value).
    `proxy`: what the async proxy (TMA, wgmma) knows of it (tma.ProxyState)."""
    proxy = None

    def __init__(self, buf, shape, blocks):
        self.buf, self.shape = buf, shape
        self.size = int(np.prod(shape, dtype=np.int64))
        full = (blocks, self.size)
        self.data = np.zeros(full, buf.dtype.numpy)
        self.written = np.zeros(full, bool)
        self.writer = np.full(full, NOBODY, np.int32)
        self.reader = np.full(full, NOBODY, np.int32)
        self.fdata, self.fwritten = self.data.reshape(-1), self.written.reshape(-1)
        self.fwriter, self.freader = self.writer.reshape(-1), self.reader.reshape(-1)

    @staticmethod
    def foreign(marks, tid):
        """Where the tracker `marks` (freader or fwriter at some elements) names a
        thread other than `tid`, or several threads."""
        return (marks == SEVERAL) | ((marks >= 0) & (marks != tid))

    @staticmethod
    def who(launch, mark, lane, tid) -> str:
        """The thread(s) a tracker `mark` names, as a message says it, for the
        thread of `lane` (whose index in its block is `tid`)."""
        return "several threads" if mark == SEVERAL else \
            f"thread {launch._thread(int(lane) - int(tid) + int(mark))}"


class Memory:
    """Mixin of the launch (executor._Launch): loads and stores with their checks.
    Uses the launch's lanes: self.L, self.T, self.nb, self.lane, self.tid, self.blk,
    self.gblock (launch-wide block number of each lane), self.mem, self.globals,
    self.flat_globals, self.races (races.GlobalRaces), and its message helpers."""

    # ------------------------------------------------------------ subscripts
    def offsets(self, name, vals, shape, mask, what, where=""):
        """Check the bounds of the active lanes' access; returns (scalar, off):
        the flat offset, a Python int when the same for all lanes (scalar), else
        an int64 array over the lanes, its inactive out-of-bounds lanes moved
        to 0. One subscript into a buffer of several (or no) dimensions is a
        flat offset, checked against the element count; otherwise there is one
        subscript per dimension, each checked against its dimension. `where`
        ends an out-of-bounds message."""
        if len(vals) == 1 and len(shape) != 1:
            scalar, (off,) = self._check(name, vals, (math.prod(shape),), mask, what, where,
                                         shape)
            return scalar, off
        if len(vals) != len(shape):
            raise SimError(f"kernel {self.kname}: {name} has {len(shape)} dimensions, "
                           f"indexed with {len(vals)}")
        scalar, subs = self._check(name, vals, shape, mask, what, where)
        return scalar, self.flatten(subs, shape)

    def _check(self, name, vals, dims, mask, what, where, flat_of=None):
        """Subscripts the same for all lanes become Python ints, the others stay
        integer arrays over the lanes; each is checked against its entry of `dims`.
        flat_of: the buffer's shape when `dims` is its element count (a flat offset)."""
        subs = [v if type(v) is np.ndarray and v.ndim else int(v) for v in vals]
        scalar = True
        for d, (i, n) in enumerate(zip(subs, dims)):
            if type(i) is int:
                if not 0 <= i < n:
                    lane = 0 if mask is None else int(np.argmax(mask))
                    self._out_of_bounds(name, what, where, dims, d, lane, subs, flat_of)
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
                self._out_of_bounds(name, what, where, dims, d, int(np.argmax(bad)), subs,
                                    flat_of)
        return scalar, subs

    def _out_of_bounds(self, name, what, where, dims, d, lane, subs, flat_of):
        sub = self._sub_at(subs, lane)
        at = f"in block {self._block(lane)}, thread {self._thread(lane)}{where}"
        if flat_of is not None:
            raise SimError(f"kernel {self.kname}: {what} {name} at flat offset {sub[0]} out of "
                           f"bounds (shape {tuple(flat_of)}: {dims[0]} elements) {at}")
        raise SimError(f"kernel {self.kname}: {what} {name}{sub} out of bounds (shape "
                       f"{tuple(dims)}, dimension {d}) {at}")

    @staticmethod
    def flatten(subs, shape):
        """Row-major offset of per-dimension subscripts: an int when they all
        are ints, else an int64 array."""
        if not subs:
            return 0
        if all(type(i) is int for i in subs):
            flat = subs[0]
            for i, n in zip(subs[1:], shape[1:]):
                flat = flat * n + i
            return flat
        flat = np.asarray(subs[0], np.int64)
        for i, n in zip(subs[1:], shape[1:]):
            flat = flat * n + i
        return flat

    # ------------------------------------------------------------ local
    def load_local(self, name, h, vals, mask):
        scalar, off = self.offsets(name, vals, h.shape, mask, "read of")
        if h.pending is not None:
            from .wgmma import pending_registers
            pending_registers(self, name, h, off, self._active(mask), "read of")
        if scalar:
            if off not in h.full:
                w = h.written[:, off]
                if w.all():
                    h.full.add(off)
                else:
                    self._unwritten_local(name, ~w if mask is None else mask & ~w)
            return h.data[:, off]
        idx = (self.lane, off)
        w = h.written[idx]
        if not w.all():
            self._unwritten_local(name, ~w if mask is None else mask & ~w)
        return h.data[idx]

    def _unwritten_local(self, name, unwritten):
        if unwritten.any():
            raise SimError(f"kernel {self.kname}: read of local {name} before any write "
                           f"(thread {self._thread(int(np.argmax(unwritten)))})")

    def store_local(self, h, off, scalar, vals, mask):
        if h.pending is not None:
            from .wgmma import pending_registers
            pending_registers(self, h.buf.name, h, off, self._active(mask), "write to")
        if scalar:
            if mask is None:
                h.data[:, off] = vals
                h.written[:, off] = True
                h.full.add(off)
            else:
                h.data[:, off][mask] = vals if np.ndim(vals) == 0 else vals[mask]
                h.written[:, off][mask] = True
            return
        lanes = self.lane if mask is None else np.flatnonzero(mask)
        idx = (lanes, off if mask is None else off[lanes])
        h.data[idx] = vals if np.ndim(vals) == 0 or mask is None else vals[lanes]
        h.written[idx] = True

    # ------------------------------------------------------------ shared
    def _shared_flat(self, h, off):
        if self.nb > 1:
            off = self.blk * h.size + off
        return np.broadcast_to(np.asarray(off, np.int64), (self.L,))

    def load_shared(self, name, h, vals, mask):
        _, off = self.offsets(name, vals, h.shape, mask, "read of")
        flat = self._shared_flat(h, off)
        lanes, tid, f = self.lane, self.tid, flat
        if mask is not None:
            lanes = np.flatnonzero(mask)
            tid, f = tid[lanes], flat[lanes]
        pend = getattr(h, "pending", None)
        if pend is not None and pend[f].any():
            lane = int(lanes[int(np.argmax(pend[f]))])
            raise SimError(f"kernel {self.kname}: read of shared {name}"
                           f"{self._element(h, flat, lane)} before the asynchronous copy to it "
                           f"completed (a cp_async_wait for its group is missing; block "
                           f"{self._block(lane)}, thread {self._thread(lane)})")
        w = h.fwritten[f]
        if not w.all():
            lane = int(lanes[int(np.argmax(~w))])
            raise SimError(f"kernel {self.kname}: read of shared {name}"
                           f"{self._element(h, flat, lane)} that no thread wrote (block "
                           f"{self._block(lane)}, thread {self._thread(lane)})")
        writer = h.fwriter[f]
        race = writer != tid
        if race.any() and writer.max() >= 0:  # else nobody or several (same value) wrote
            race &= writer >= 0
            if race.any():
                j = int(np.argmax(race))
                lane = int(lanes[j])
                self._read_race(f"shared {name}{self._element(h, flat, lane)}", lane,
                                lane - int(tid[j]) + int(writer[j]))
        # The reader of each element: this thread, or SEVERAL when another thread
        # read it too (now or since the last barrier). Lanes of one step that read
        # one element all store their index and one wins: the others mark SEVERAL.
        if h.proxy is not None:
            h.proxy.generic_read(self, name, h, f)
        r = h.freader[f]
        new = np.where((r == NOBODY) | (r == tid), tid, np.int32(SEVERAL))
        h.freader[f] = new
        several = h.freader[f] != new
        if several.any():
            h.freader[f[several]] = SEVERAL
        return h.fdata[flat]

    def store_shared(self, name, h, off, vals, mask):
        flat = self._shared_flat(h, off)
        lanes = self.lane
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        tid = self.tid[lanes]
        pend = getattr(h, "pending", None)
        if pend is not None and pend[flat].any():
            j = int(np.argmax(pend[flat]))
            raise SimError(f"kernel {self.kname}: thread {self._thread(int(lanes[j]))} writes "
                           f"shared {name} at offset {int(flat[j]) % h.size} while an "
                           f"asynchronous copy to it is pending (block "
                           f"{self._block(int(lanes[j]))})")
        if h.proxy is not None:
            h.proxy.generic_write(self, name, h, flat, lanes)
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
        war = Shared.foreign(r, tid)
        if war.any():
            j = int(np.argmax(war))
            who = Shared.who(self, r[j], lanes[j], tid[j])
            raise SimError(f"kernel {self.kname}: thread {self._thread(int(lanes[j]))} overwrites "
                           f"shared {name} at offset {int(flat[j]) % h.size} that {who} read since "
                           f"the last barrier (missing barrier) in block "
                           f"{self._block(int(lanes[j]))}")
        prior = h.fwriter[flat]
        other = Shared.foreign(prior, tid)
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
        scalar, off = self.offsets(name, vals, arr.shape, mask, "read of")
        flatarr = self.flat_globals[name]
        if not self.races.tracks(name):
            return flatarr[off]
        flat = np.broadcast_to(np.asarray(off, np.int64), (self.L,))
        self.races.read(name, arr.shape, flat, mask)
        return flatarr[flat]

    def store_global(self, name, arr, off, vals, mask):
        lanes = self.lane
        flat = np.broadcast_to(np.asarray(off, np.int64), (self.L,))
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        data = self.flat_globals[name]
        self.races.write(name, arr.shape, flat, lanes, vals, data[flat])
        data[flat] = vals

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
    def _active(self, mask):
        return self.lane if mask is None else np.flatnonzero(mask)

    @staticmethod
    def _sub_at(subs, lane):
        return [int(s) if np.ndim(s) == 0 else int(s[lane]) for s in subs]

    def _element(self, h, flat, lane):
        """The multi-index of lane `lane`'s element (`flat`: batch-wide offsets
        of per-block copies) in shared buffer `h`."""
        return element(h.shape, int(flat[lane]) % max(h.size, 1))


def element(shape, offset: int) -> list:
    """The multi-index, in `shape`, of an in-bounds flat offset."""
    return [int(i) for i in np.unravel_index(offset, shape)] if shape else []

