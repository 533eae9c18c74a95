"""Race checks on global memory for one kernel launch of the sim.

The sim runs blocks one after another and the threads of a block in
lock-step, so it computes *one* order of a kernel's accesses; a GPU may take
another. An access is a race when another order could give a different
result, and the sim reports it rather than return the one it happened to
compute:

  * inside a block, since the last barrier: a thread reads an element another
    thread wrote (read after write), overwrites an element another thread
    read (write after read), or writes a different value where another
    thread wrote (write after write);
  * between the blocks of one launch (they run in no fixed order and never
    wait for each other): a block reads an element another block wrote,
    overwrites with a different value an element another block read or
    wrote.

Writing the value an element already holds is never a race (blocks that
recompute the same halo, threads that store the same result). Only buffers
the kernel writes are tracked; a buffer it only reads cannot race.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError

NOBODY, SEVERAL = -1, -2


def _same(a, b) -> np.ndarray:
    """Elementwise equality where NaN equals NaN."""
    a, b = np.asarray(a), np.asarray(b)
    eq = a == b
    if a.dtype.kind not in "iub":
        eq |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return eq


def _record(table: np.ndarray, flat: np.ndarray, who) -> None:
    """Mark `who` (per element of `flat`, or one id) as an accessor of each
    element: the id where it is the only one, else SEVERAL."""
    who = np.broadcast_to(np.asarray(who, np.int64), flat.shape)
    prior = table[flat]
    table[flat] = np.where((prior == NOBODY) | (prior == who), who, SEVERAL)
    order = np.argsort(flat, kind="stable")
    f, w = flat[order], who[order]
    dup = (f[1:] == f[:-1]) & (w[1:] != w[:-1])
    if dup.any():  # distinct accessors of one element in the same step
        table[f[1:][dup]] = SEVERAL


class GlobalRaces:
    def __init__(self, ex, arrays: dict, written: set[str], grid):
        self.ex = ex  # the executor: kernel name, thread and block naming
        self.grid = grid
        self.arrays = {n: a for n, a in arrays.items()
                       if n in written and isinstance(a, np.ndarray)}
        table = lambda a: np.full(max(a.size, 1), NOBODY, np.int64)  # noqa: E731
        # Since the last barrier of the running block: thread ids.
        self.writer = {n: table(a) for n, a in self.arrays.items()}
        self.reader = {n: table(a) for n, a in self.arrays.items()}
        self.dirty: dict[str, list] = {}
        # The whole launch: linear block ids; `mine`: written by the running block.
        self.bwriter = {n: table(a) for n, a in self.arrays.items()}
        self.breader = {n: table(a) for n, a in self.arrays.items()}
        self.mine = {n: np.zeros(max(a.size, 1), bool) for n, a in self.arrays.items()}
        self.mine_dirty: dict[str, list] = {}
        self.block = 0

    # ------------------------------------------------------------ epochs
    def start_block(self, gx, gy, gz):
        self.barrier()
        for n, offs in self.mine_dirty.items():
            for o in offs:
                self.mine[n][o] = False
        self.mine_dirty = {}
        self.block = gx + self.grid[0] * (gy + self.grid[1] * gz)

    def barrier(self):
        for n, offs in self.dirty.items():
            for o in offs:
                self.writer[n][o] = NOBODY
                self.reader[n][o] = NOBODY
        self.dirty = {}

    # ------------------------------------------------------------ accesses
    def read(self, name, arr, safe, mask):
        if name not in self.arrays:
            return
        lanes = np.nonzero(mask)[0]
        if not len(lanes):
            return
        flat = self._flat(arr, tuple(np.asarray(i)[lanes] for i in safe), len(lanes))
        w = self.writer[name][flat]
        bad = (w >= 0) & (w != lanes)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimError(f"kernel {self.ex.k.name}: thread {self.ex._thread(int(lanes[j]))} "
                           f"reads {name}{self._sub(arr, flat[j])} written by thread "
                           f"{self.ex._thread(int(w[j]))} since the last barrier (missing "
                           f"barrier) in block {self.ex.block_id}")
        bw = self.bwriter[name][flat]
        bad = ((bw >= 0) & (bw != self.block)) | ((bw == SEVERAL) & ~self.mine[name][flat])
        if bad.any():
            j = int(np.argmax(bad))
            raise SimError(f"kernel {self.ex.k.name}: block {self.ex.block_id} reads "
                           f"{name}{self._sub(arr, flat[j])}, which {self._blocks(bw[j])} "
                           f"wrote in the same launch; blocks run in no fixed order, so it may "
                           f"read the value before or after that write (race between blocks)")
        _record(self.reader[name], flat, lanes)
        _record(self.breader[name], flat, self.block)
        self.dirty.setdefault(name, []).append(flat)

    def write(self, name, arr, sub, lanes, vals):
        if name not in self.arrays or not len(lanes):
            return
        flat = self._flat(arr, sub, len(lanes))
        vals = np.broadcast_to(np.asarray(vals), flat.shape)
        same = _same(arr.reshape(-1)[flat], vals)
        r = self.reader[name][flat]
        bad = (((r >= 0) & (r != lanes)) | (r == SEVERAL)) & ~same
        if bad.any():
            j = int(np.argmax(bad))
            who = "several threads" if r[j] == SEVERAL else f"thread {self.ex._thread(int(r[j]))}"
            raise SimError(f"kernel {self.ex.k.name}: thread {self.ex._thread(int(lanes[j]))} "
                           f"overwrites {name}{self._sub(arr, flat[j])} that {who} read since the "
                           f"last barrier (missing barrier) in block {self.ex.block_id}")
        w = self.writer[name]
        prior = w[flat]
        other = ((prior >= 0) & (prior != lanes)) | (prior == SEVERAL)
        if (other & ~same).any():
            j = int(np.argmax(other & ~same))
            raise SimError(f"kernel {self.ex.k.name}: thread {self.ex._thread(int(lanes[j]))} "
                           f"overwrites {name} at offset {int(flat[j])} with a different value "
                           f"than another thread wrote since the last barrier")
        order = np.argsort(flat, kind="stable")
        f, v = flat[order], np.asarray(vals)[order]
        dup = f[1:] == f[:-1]
        if dup.any() and (dup & ~_same(v[1:], v[:-1])).any():
            j = int(np.argmax(dup & ~_same(v[1:], v[:-1])))
            raise SimError(f"kernel {self.ex.k.name}: threads write different values to {name} "
                           f"at offset {int(f[j])} in the same step")
        br = self.breader[name][flat]
        bw = self.bwriter[name][flat]
        mine = self.mine[name][flat]
        for table, kind in ((br, "read"), (bw, "wrote")):
            foreign = (table >= 0) & (table != self.block)
            foreign |= (table == SEVERAL) & (~mine if kind == "wrote" else True)
            bad = foreign & ~same
            if bad.any():
                j = int(np.argmax(bad))
                raise SimError(f"kernel {self.ex.k.name}: block {self.ex.block_id} overwrites "
                               f"{name}{self._sub(arr, flat[j])}, which {self._blocks(table[j])} "
                               f"{kind} in the same launch; blocks run in no fixed order "
                               f"(race between blocks)")
        _record(w, flat, lanes)
        _record(self.bwriter[name], flat, self.block)
        self.mine[name][flat] = True
        self.dirty.setdefault(name, []).append(flat)
        self.mine_dirty.setdefault(name, []).append(flat)

    # ------------------------------------------------------------ naming
    @staticmethod
    def _flat(arr, sub, n: int) -> np.ndarray:
        if arr.ndim == 0:
            return np.zeros(n, np.int64)
        return np.ravel_multi_index(tuple(np.asarray(i, np.int64) for i in sub), arr.shape)

    @staticmethod
    def _sub(arr, offset) -> list:
        return [int(i) for i in np.unravel_index(int(offset), arr.shape)] if arr.ndim else []

    def _blocks(self, who) -> str:
        if who == SEVERAL:
            return "other blocks"
        gx, gy = self.grid[0], self.grid[1]
        b = int(who)
        return f"block {(b % gx, (b // gx) % gy, b // (gx * gy))}"
