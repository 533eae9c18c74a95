"""The sim's part of scatters (lower/scatter_store.py) and ragged loops
(lower/ragged_loops.py): the range check of a data-dependent subscript and
atomic updates of global tensors, as a mixin of the executor's `_Launch` (it
uses the launch's lanes, masks and messages); which loops run per thread."""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lang import minmax
from ..lower import ir
from ..lower.printer import expr as expr_text
from ..lower.rewriter import walk_stmts

# Statements a thread runs alone (no barrier, collective or asynchronous operation).
_THREAD_LOCAL = (ir.Seq, ir.Let, ir.For, ir.If, ir.Store, ir.Alloc, ir.IndexCheck)


def per_thread_bounds(s: ir.For) -> bool:
    """Whether loop `s` may run a trip count of its own in each thread: a body with
    nothing threads do together, as on the GPU, whatever the bounds (read from
    memory in a ragged loop, or an index of the thread: a producer computed at a
    thread-bound loop whose region moves with the thread, `O(0) + O(j)`). Bounds
    that differ between the threads of a block around a barrier, a collective
    or an asynchronous operation are an error (`_block_uniform`): the threads
    would not meet there."""
    return all(type(x) in _THREAD_LOCAL for x in walk_stmts(s.body))


class ScatterOps:
    def _s_IndexCheck(self, s):
        """A scatter's data-dependent subscript, checked on the active lanes."""
        value, extent = self.compile_expr(s.value), self.compile_expr(s.extent)

        def check(env, mask):
            v = np.broadcast_to(np.asarray(value(env, mask), np.int64), (self.L,))
            n = int(extent(env, mask))
            bad = (v < 0) | (v >= n)
            if mask is not None:
                bad = bad & mask
            if bad.any():
                lane = int(np.argmax(bad))
                raise SimError(f"kernel {self.kname}: {s.what} = {int(v[lane])} is outside "
                               f"0:{n} in block {self._block(lane)}, thread "
                               f"{self._thread(lane)}")
        return check


    def atomic_global(self, name, h, off, vals, mask, op):
        """The active lanes' atomic updates `name[off] op= vals`, each one
        rounded in the tensor's type, lanes hitting one element all counted
        (np.add.at); a scatter's (lower/scatter_store.py). Atomics order
        themselves, so no race is recorded between them. (`h`: a buffer of the
        launch's own, which no atomic updates.)"""
        if h is not None:
            raise SimError(f"kernel {self.kname}: an atomic update of {h.scope} buffer "
                           f"'{name}' (atomics update global tensors only)")
        flat = np.broadcast_to(np.asarray(off, np.int64), (self.L,))
        vals = np.broadcast_to(vals, (self.L,))
        if mask is not None:
            lanes = np.flatnonzero(mask)
            flat, vals = flat[lanes], vals[lanes]
        data = self.flat_globals[name]
        if op in ("max", "min") and data.dtype.kind == "f":
            f = minmax.of(op)
        elif data.dtype.kind == "f" or op == "+":
            f = {"+": np.add, "max": np.maximum, "min": np.minimum}[op]
        else:
            f = {"max": np.maximum, "min": np.minimum}[op]
        with np.errstate(over="ignore"):
            f.at(data, flat, vals.astype(data.dtype, copy=False))

    def _block_uniform(self, v, mask, s, e):
        """A loop bound: one value per block (a scalar if all blocks agree)."""
        if np.ndim(v) == 0:
            return v
        m = np.ones(self.L, bool) if mask is None else mask
        vals = v[m]
        if not vals.size or (vals == vals[0]).all():
            return vals[0] if vals.size else np.int32(0)
        rows, active = v.reshape(self.nb, self.T), m.reshape(self.nb, self.T)
        first = rows[np.arange(self.nb), np.argmax(active, axis=1)]
        if (active & (rows != first[:, None])).any():
            b = int(np.argmax((active & (rows != first[:, None])).any(axis=1)))
            raise SimError(f"kernel {self.kname}: bounds of loop '{s.var}' differ between "
                           f"threads ({expr_text(e)}) of block "
                           f"{self._block_of(self.first_block + b)}")
        return np.repeat(first, self.T)
