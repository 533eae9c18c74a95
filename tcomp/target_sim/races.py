"""Race checks on global memory for one kernel launch of the sim.

The sim runs the threads of a block in lock-step and the blocks of a launch
together in batches (executor.py), so it computes *one* order of a kernel's
accesses; a GPU may take another. An access is a race when another order
could give a different result, and the sim reports it rather than return the
one it happened to compute:

  * inside a block, since the last barrier: a thread reads an element another
    thread wrote (read after write), overwrites an element another thread
    read (write after read), or writes a different value where another
    thread wrote (write after write);
  * between the blocks of one launch (they run in no fixed order and never
    wait for each other): a block reads an element another block wrote,
    overwrites with a different value an element another block read or
    wrote.

Writing the value an element already holds is never a race (blocks that
recompute the same halo, threads that store the same result); a block may
read an element several blocks wrote if it wrote it too. Only buffers the
kernel writes are tracked; a buffer it only reads cannot race.

Elements are flat offsets into a buffer. Per element, for the threads of a
block (cleared at the block's barriers) the tables hold a lane of the batch,
NOBODY, or SEVERAL - b: several threads of the batch's block b. For the
launch (all batches) they hold a block number (x fastest), NOBODY or SEVERAL.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError

NOBODY, SEVERAL = -1, -2


def same_values(a, b) -> np.ndarray:
    """Elementwise equality where NaN equals NaN."""
    a, b = np.asarray(a), np.asarray(b)
    eq = a == b
    if a.dtype.kind not in "iub":  # floats, also bfloat16 (an ml_dtypes kind 'V')
        eq = eq | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    return eq


def _record_blocks(table: np.ndarray, flat: np.ndarray, me: np.ndarray) -> None:
    """Mark block `me` (per element of `flat`) as an accessor of each element:
    the block where it is the only one, else SEVERAL."""
    prior = table[flat]
    new = np.where((prior == NOBODY) | (prior == me), me, np.int32(SEVERAL))
    table[flat] = new
    lost = table[flat] != new  # blocks of one step at one element: one store won
    if lost.any():
        table[flat[lost]] = SEVERAL


def _owner(v: np.ndarray, T: int) -> np.ndarray:
    """The batch block of thread-table entries (NOBODY: -1)."""
    return np.where(v >= 0, v // T, SEVERAL - v)


def _record_threads(table: np.ndarray, flat: np.ndarray, lanes: np.ndarray, blk: np.ndarray,
                    T: int) -> None:
    """Mark lane `lanes` (of block `blk`) as an accessor of each element: the
    lane where it is the only thread of its block, else SEVERAL - blk. An entry
    of another block is replaced (that block's access is in the block tables)."""
    prior = table[flat]
    ours = (prior != NOBODY) & (_owner(prior, T) == blk) & (prior != lanes)
    new = np.where(ours, SEVERAL - blk, lanes).astype(np.int32)
    table[flat] = new
    won = table[flat]
    lost = (won != new) & (_owner(won, T) == blk)  # a thread of the block won the store
    if lost.any():
        table[flat[lost]] = SEVERAL - blk[lost]


class _Tables:
    def __init__(self, size: int):
        table = lambda: np.full(max(size, 1), NOBODY, np.int32)  # noqa: E731
        self.writer, self.reader = table(), table()      # threads, since the barrier
        self.dirty: list = []
        self.bwriter, self.breader = table(), table()    # blocks, the whole launch
        self.mine: set = set()  # offset * blocks + block, for elements several blocks wrote
        self.written = False


class GlobalRaces:
    """The race tables of the global buffers a kernel writes, for one launch.
    `ex` is the executor: its batch (L, T, nb, lane, tid, blk, gblock,
    first_block) and its naming of threads and blocks."""

    def __init__(self, ex, arrays: dict, written: set, nblocks: int):
        self.ex, self.nblocks = ex, max(nblocks, 1)
        self.tables = {n: _Tables(a.size) for n, a in arrays.items()
                       if n in written and isinstance(a, np.ndarray)}

    def tracks(self, name) -> bool:
        return name in self.tables

    # ------------------------------------------------------------ epochs
    def start_batch(self):
        """New blocks: nothing written or read since their (first) barrier."""
        self.barrier(None)

    def barrier(self, blocks):
        """Clear the thread tables for the batch's blocks where `blocks` (bool
        per block) is set; for all of them when it is None."""
        ex = self.ex
        for t in self.tables.values():
            if not t.dirty:
                continue
            offs = np.concatenate(t.dirty)
            if blocks is None:
                t.writer[offs] = NOBODY
                t.reader[offs] = NOBODY
                t.dirty = []
                continue
            offs = np.unique(offs)
            keep = np.zeros(len(offs), bool)
            for table in (t.writer, t.reader):
                v = table[offs]
                done = (v == NOBODY) | blocks[np.clip(_owner(v, ex.T), 0, ex.nb - 1)]
                table[offs[done]] = NOBODY
                keep |= ~done
            t.dirty = [offs[keep]]

    # ------------------------------------------------------------ accesses
    def read(self, name, shape, flat, mask):
        """Lanes (where `mask`; None: all) read `flat` (an offset per lane)."""
        t, ex = self.tables[name], self.ex
        lanes = ex.lane if mask is None else np.flatnonzero(mask)
        if mask is not None:
            flat = flat[lanes]
        blk, me = ex.blk[lanes], ex.gblock[lanes]
        if t.written:
            w = t.writer[flat]
            bad = (w >= 0) & (w != lanes) & (w // ex.T == blk)
            if bad.any():
                j = int(np.argmax(bad))
                raise SimError(f"kernel {ex.kname}: thread {ex._thread(lanes[j])} reads "
                               f"{name}{_sub(shape, flat[j])} written by thread "
                               f"{ex._thread(w[j])} since the last barrier (missing barrier) "
                               f"in block {ex._block(lanes[j])}")
            bw = t.bwriter[flat]
            bad = (bw >= 0) & (bw != me)
            several = bw == SEVERAL
            if several.any():
                bad |= several & ~self._mine(t, flat, me, several)
            if bad.any():
                j = int(np.argmax(bad))
                raise SimError(f"kernel {ex.kname}: block {ex._block(lanes[j])} reads "
                               f"{name}{_sub(shape, flat[j])}, which {self._blocks(bw[j])} "
                               f"wrote in the same launch; blocks run in no fixed order, so it "
                               f"may read the value before or after that write (race between "
                               f"blocks)")
        _record_threads(t.reader, flat, lanes, blk, ex.T)
        _record_blocks(t.breader, flat, me)
        t.dirty.append(flat)

    def write(self, name, shape, flat, lanes, vals, current):
        """`lanes` store `vals` at `flat` (per lane), where `current` is held now."""
        t, ex = self.tables[name], self.ex
        blk, me = ex.blk[lanes], ex.gblock[lanes]
        same = same_values(current, vals)
        r = t.reader[flat]
        bad = (((r >= 0) & (r != lanes) & (r // ex.T == blk)) | (r == SEVERAL - blk)) & ~same
        if bad.any():
            j = int(np.argmax(bad))
            who = "several threads" if r[j] < 0 else f"thread {ex._thread(r[j])}"
            raise SimError(f"kernel {ex.kname}: thread {ex._thread(lanes[j])} overwrites "
                           f"{name}{_sub(shape, flat[j])} that {who} read since the last barrier "
                           f"(missing barrier) in block {ex._block(lanes[j])}")
        prior = t.writer[flat]
        other = ((prior >= 0) & (prior != lanes) & (prior // ex.T == blk)) | \
            (prior == SEVERAL - blk)
        if (other & ~same).any():
            j = int(np.argmax(other & ~same))
            raise SimError(f"kernel {ex.kname}: thread {ex._thread(lanes[j])} overwrites {name} "
                           f"at offset {int(flat[j])} with a different value than another thread "
                           f"wrote since the last barrier (block {ex._block(lanes[j])})")
        order = np.argsort(flat, kind="stable")
        f, v, ln = flat[order], np.asarray(vals)[order], lanes[order]
        dup = f[1:] == f[:-1]
        if dup.any():
            differ = dup & ~same_values(v[1:], v[:-1])
            if differ.any():
                j = int(np.argmax(differ))
                a, b = int(ln[j]), int(ln[j + 1])
                if ex.blk[a] != ex.blk[b]:
                    self._overwrite(name, shape, b, f[j], ex.gblock[a], "wrote")
                what = f"{name} at offset {int(f[j])}" if shape else name
                raise SimError(f"kernel {ex.kname}: threads write different values to {what} "
                               f"in the same step (threads "
                               f"{ex._thread(a)} and {ex._thread(b)} of block {ex._block(a)})")
        for table, kind in ((t.breader, "read"), (t.bwriter, "wrote")):
            owner = table[flat]
            several = owner == SEVERAL
            foreign = ((owner >= 0) & (owner != me)) | several
            if kind == "wrote" and several.any():
                foreign &= ~(several & self._mine(t, flat, me, several))
            bad = foreign & ~same
            if bad.any():
                j = int(np.argmax(bad))
                self._overwrite(name, shape, lanes[j], flat[j], owner[j], kind)
        _record_threads(t.writer, flat, lanes, blk, ex.T)
        before = t.bwriter[flat]
        _record_blocks(t.bwriter, flat, me)
        self._note_several_writers(t, flat, me, before)
        t.written = True
        t.dirty.append(flat)

    # ------------------------------------------------------------ several writer blocks
    def _note_several_writers(self, t, flat, me, before):
        """Remember which blocks wrote the elements several blocks wrote (rare:
        redundant halos), so that each of them may read the element back."""
        several = t.bwriter[flat] == SEVERAL
        if not several.any():
            return
        keys = [flat[several] * self.nblocks + me[several]]
        prev = before[several]
        single = prev >= 0
        keys.append(flat[several][single] * self.nblocks + prev[single])
        t.mine.update(np.unique(np.concatenate(keys)).tolist())

    def _mine(self, t, flat, me, where):
        """Per lane (computed `where` set, else False): did its block write the
        element (one that several blocks wrote)?"""
        out = np.zeros(len(flat), bool)
        idx = np.flatnonzero(where)
        keys = flat[idx] * self.nblocks + me[idx]
        out[idx] = [k in t.mine for k in keys.tolist()]
        return out

    # ------------------------------------------------------------ naming
    def _overwrite(self, name, shape, lane, offset, owner, kind):
        ex = self.ex
        raise SimError(f"kernel {ex.kname}: block {ex._block(lane)} overwrites "
                       f"{name}{_sub(shape, offset)}, which {self._blocks(owner)} {kind} in the "
                       f"same launch; blocks run in no fixed order (race between blocks)")

    def _blocks(self, who) -> str:
        return "other blocks" if who == SEVERAL else f"block {self.ex._block_of(int(who))}"


def _sub(shape, offset) -> list:
    return [int(i) for i in np.unravel_index(int(offset), shape)] if shape else []
