"""The "sim" target: execute Kernel IR on the CPU with GPU semantics.

Blocks run one after another; the threads of a block run in lock-step as
NumPy vectors (one lane per thread). `if` on a thread-dependent condition
masks lanes; `for` bounds must be the same for every active thread.
Shared memory is per block, local memory per thread; both start unwritten.
The executor raises `SimError` for what a GPU would get wrong: an access
outside a buffer dimension, a read of shared/local memory nobody wrote, a
thread reading shared memory another thread wrote since the last barrier (or
two threads writing different values there), and a barrier that not every
thread reaches. Global memory gets the same checks inside a block and, across
the blocks of a launch, the checks that no block order can change the result
(`races.py`).
Ternaries, `&&` and `||` are lazy, as in the language.

It runs the pipeline up to, not including, storage flattening, so that each
subscript is checked against its own dimension.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import SimError
from ..lang import npfuncs
from ..lower import ir
from ..lower.launch import launch_problem
from ..lower.printer import expr as expr_text
from ..lower.rewriter import walk_stmts
from .races import GlobalRaces


def _stored(body: ir.Stmt) -> set[str]:
    """Buffers a kernel body stores to."""
    return {s.buffer for s in walk_stmts(body) if isinstance(s, ir.Store)}


class _Shared:
    def __init__(self, buf: ir.Buffer, shape):
        self.data = np.zeros(shape, buf.dtype.numpy)
        self.written = np.zeros(shape, bool)
        self.writer = np.full(shape, -1, np.int64)  # -1 nobody, -2 several (same value)
        self.reader = np.full(shape, -1, np.int64)  # -1 nobody, -2 several threads
        self.buf = buf


class _Local:
    def __init__(self, buf: ir.Buffer, shape, nthreads):
        self.data = np.zeros((nthreads,) + shape, buf.dtype.numpy)
        self.written = np.zeros((nthreads,) + shape, bool)
        self.buf = buf


def run_program(prog: ir.Program, env: dict, sizes: dict) -> None:
    """Run every kernel of `prog` on the global arrays in `env` (in place)."""
    with np.errstate(all="ignore"):
        for k in prog.kernels:
            _Kernel(k, env, sizes).run()


class _Kernel:
    def __init__(self, k: ir.Kernel, env: dict, sizes: dict):
        self.k, self.globals, self.sizes = k, env, sizes

    def run(self):
        k = self.k
        scope = {n: np.int64(v) for n, v in self.sizes.items()}
        grid = [int(self.eval(g, scope, None)) for g in k.grid]
        self.block = [int(self.eval(b, scope, None)) for b in k.block]
        if min(grid) <= 0 or min(self.block) <= 0:
            return  # an empty launch runs nothing, as on the GPU
        # The limits every CUDA device has, so that what runs here launches there.
        problem = launch_problem(k.name, grid, self.block,
                                 block_exprs=[expr_text(b) for b in k.block])
        if problem is not None:
            raise SimError(problem)
        bx, by, bz = self.block
        t = bx * by * bz
        self.nthreads = t
        tid = np.arange(t)
        self.tid = tid
        threads = {"threadIdx.x": (tid % bx).astype(np.int32),
                   "threadIdx.y": ((tid // bx) % by).astype(np.int32),
                   "threadIdx.z": (tid // (bx * by)).astype(np.int32)}
        full = np.ones(t, bool)
        self.races = GlobalRaces(self, self.globals, _stored(k.body), grid)
        for gz, gy, gx in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
            self.races.start_block(gx, gy, gz)
            env = dict(scope)
            env.update(threads)
            env.update({"blockIdx.x": np.int32(gx), "blockIdx.y": np.int32(gy),
                        "blockIdx.z": np.int32(gz)})
            self.block_id = (gx, gy, gz)
            self.mem: dict = {}
            self.stmt(k.body, env, full)

    # ------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt, env: dict, mask):
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, env, mask)
        elif isinstance(s, ir.Store):
            self.store(s, env, mask)
        elif isinstance(s, ir.For):
            lo = self.uniform(s.lo, env, mask, s.var)
            ext = self.uniform(s.extent, env, mask, s.var)
            for i in range(lo, lo + max(ext, 0)):
                env[s.var] = np.int32(i)
                self.stmt(s.body, env, mask)
            env.pop(s.var, None)
        elif isinstance(s, ir.If):
            c = self.eval(s.cond, env, mask)
            if np.ndim(c) == 0:
                if c:
                    self.stmt(s.then, env, mask)
                elif s.else_ is not None:
                    self.stmt(s.else_, env, mask)
            else:
                m1 = mask & c
                if m1.any():
                    self.stmt(s.then, env, m1)
                if s.else_ is not None:
                    m2 = mask & ~c
                    if m2.any():
                        self.stmt(s.else_, env, m2)
        elif isinstance(s, ir.Let):
            env[s.var] = self.eval(s.value, env, mask)
            self.stmt(s.body, env, mask)
            env.pop(s.var, None)
        elif isinstance(s, ir.Alloc):
            # Like CUDA's static shared arrays, an allocation lives for the whole block:
            # entering it again (in a loop) keeps its race-tracking state, so races
            # between loop iterations are seen; its contents count as unwritten again,
            # so reading a value left over from an earlier iteration is caught too.
            b = s.buffer
            shape = tuple(int(self.eval(d, env, None)) for d in b.shape)
            if b.name in self.mem:
                self.mem[b.name].written[...] = False
            else:
                if b.scope == "shared":
                    self.mem[b.name] = _Shared(b, shape)
                elif b.scope == "local":
                    self.mem[b.name] = _Local(b, shape, self.nthreads)
                else:
                    raise SimError(f"kernel {self.k.name}: cannot allocate {b.scope} buffer "
                                   f"'{b.name}'")
            self.stmt(s.body, env, mask)
        elif isinstance(s, ir.Barrier):
            if not mask.all():
                idle = int((~mask).sum())
                raise SimError(f"kernel {self.k.name}: barrier reached by only some threads of "
                               f"block {self.block_id} ({idle} threads skip it)")
            for m in self.mem.values():
                if isinstance(m, _Shared):
                    m.writer[...] = -1
                    m.reader[...] = -1
            self.races.barrier()
        elif isinstance(s, ir.AllReduce):
            if not mask.all():
                raise SimError(f"kernel {self.k.name}: cross-thread reduction reached by only "
                               f"some threads of block {self.block_id}")
            loc = self.mem[s.buffer]
            if not loc.written[:, 0].all():
                raise SimError(f"kernel {self.k.name}: cross-thread reduction of {s.buffer} "
                               f"before every thread wrote it")
            bx, by, bz = self.block
            vals = loc.data[:, 0].reshape(bz, by, bx)
            axis = {"x": 2, "y": 1, "z": 0}[s.tag[-1]]
            extent = int(self.eval(s.extent, env, None))
            if vals.shape[axis] != extent:
                raise SimError(f"kernel {self.k.name}: reduction over {extent} threads along "
                               f"{s.tag}, but the block has {vals.shape[axis]}")
            if s.op == "+":
                r = vals.sum(axis=axis, keepdims=True, dtype=vals.dtype)
            elif s.op == "*":
                r = vals.prod(axis=axis, keepdims=True, dtype=vals.dtype)
            else:
                f = {"max": np.fmax, "min": np.fmin} if vals.dtype.kind == "f" else \
                    {"max": np.maximum, "min": np.minimum}
                r = f[s.op].reduce(vals, axis=axis, keepdims=True)
            loc.data[:, 0] = np.broadcast_to(r, vals.shape).reshape(-1)
        elif isinstance(s, ir.Evaluate):
            raise SimError(f"kernel {self.k.name}: the sim target has no meaning for intrinsic "
                           f"'{s.call.fn}'")
        else:
            raise SimError(f"kernel {self.k.name}: cannot execute {type(s).__name__}")

    def _read_race(self, what, writers, safe, m):
        """Raise when a lane reads an element another thread wrote since the last barrier."""
        race = m & (writers >= 0) & (writers != self.tid)
        if race.any():
            lane = int(np.argmax(race))
            raise SimError(f"kernel {self.k.name}: thread {self._thread(lane)} reads {what}"
                           f"{[int(i[lane]) for i in safe]} written by thread "
                           f"{self._thread(int(writers[lane]))} since the last barrier (missing "
                           f"barrier) in block {self.block_id}")

    def uniform(self, e, env, mask, var) -> int:
        v = self.eval(e, env, mask)
        if np.ndim(v):
            vals = v[mask]
            if vals.size and not (vals == vals[0]).all():
                raise SimError(f"kernel {self.k.name}: bounds of loop '{var}' differ between "
                               f"threads ({expr_text(e)})")
            v = vals[0] if vals.size else 0
        return int(v)

    # ------------------------------------------------------------ memory
    def _lanes(self, idx, mask):
        """Per-lane integer subscripts (T,) for each dimension."""
        t = self.nthreads
        return [np.broadcast_to(np.asarray(i, np.int64), (t,)) for i in idx]

    def _check(self, name, idx, shape, mask, what):
        for d, (i, n) in enumerate(zip(idx, shape)):
            bad = mask & ((i < 0) | (i >= n))
            if bad.any():
                lane = int(np.argmax(bad))
                sub = tuple(int(x[lane]) for x in idx)
                raise SimError(f"kernel {self.k.name}: {what} {name}{list(sub)} out of bounds "
                               f"(shape {tuple(shape)}, dimension {d}) in block {self.block_id}, "
                               f"thread {self._thread(lane)}")

    def _thread(self, lane):
        bx, by, _ = self.block
        return (lane % bx, (lane // bx) % by, lane // (bx * by))

    def _where(self, name):
        if name in self.mem:
            return self.mem[name]
        if name in self.globals:
            return self.globals[name]
        raise SimError(f"kernel {self.k.name}: unknown buffer '{name}'")

    def load(self, e: ir.Load, env, mask):
        store = self._where(e.buffer)
        idx = self._lanes([self.eval(i, env, mask) for i in e.indices], mask)
        m = mask if mask is not None else np.ones(self.nthreads, bool)
        if isinstance(store, _Local):
            shape = store.data.shape[1:]
        elif isinstance(store, _Shared):
            shape = store.data.shape
        else:
            shape = store.shape
        if len(idx) != len(shape):
            raise SimError(f"kernel {self.k.name}: {e.buffer} has {len(shape)} dimensions, "
                           f"indexed with {len(idx)}")
        self._check(e.buffer, idx, shape, m, "read of")
        safe = tuple(np.where(m, i, 0) for i in idx)
        if isinstance(store, _Local):
            key = (self.tid,) + safe
            unwritten = m & ~store.written[key]
            if unwritten.any():
                raise SimError(f"kernel {self.k.name}: read of local {e.buffer} before any write "
                               f"(thread {self._thread(int(np.argmax(unwritten)))})")
            return store.data[key]
        if isinstance(store, _Shared):
            unwritten = m & ~store.written[safe]
            if unwritten.any():
                lane = int(np.argmax(unwritten))
                raise SimError(f"kernel {self.k.name}: read of shared {e.buffer}"
                               f"{[int(i[lane]) for i in safe]} that no thread wrote (block "
                               f"{self.block_id}, thread {self._thread(lane)})")
            self._read_race(f"shared {e.buffer}", store.writer[safe], safe, m)
            r = store.reader[safe]
            store.reader[safe] = np.where(m, np.where((r == -1) | (r == self.tid), self.tid, -2),
                                          r)
            return store.data[safe]
        self.races.read(e.buffer, store, safe, m)
        return store[safe]

    def store(self, s: ir.Store, env, mask):
        dest = self._where(s.buffer)
        idx = self._lanes([self.eval(i, env, mask) for i in s.indices], mask)
        value = self.eval(s.value, env, mask)
        shape = dest.data.shape[1:] if isinstance(dest, _Local) else (
            dest.data.shape if isinstance(dest, _Shared) else dest.shape)
        if len(idx) != len(shape):
            raise SimError(f"kernel {self.k.name}: {s.buffer} has {len(shape)} dimensions, "
                           f"indexed with {len(idx)}")
        try:
            self._check(s.buffer, idx, shape, mask, "write to")
        except SimError as err:
            if s.loc is not None:
                raise SimError(f"{err} (computing the statement at {s.loc})") from None
            raise
        lanes = np.nonzero(mask)[0]
        sub = tuple(i[lanes] for i in idx)
        data = dest.data if isinstance(dest, (_Local, _Shared)) else dest
        vals = np.broadcast_to(np.asarray(value), (self.nthreads,))[lanes].astype(data.dtype)
        if not idx and not isinstance(dest, _Local):
            # A 0-d buffer: every active thread writes the one element.
            if vals.size and not (vals == vals[0]).all():
                raise SimError(f"kernel {self.k.name}: threads write different values to "
                               f"{s.buffer} in the same step")
            sub = ()
            vals = vals[0] if vals.size else data[()]
            lanes = lanes[:1]
        if isinstance(dest, _Local):
            key = (lanes,) + sub
            dest.data[key] = vals
            dest.written[key] = True
            return
        if isinstance(dest, _Shared):
            self._shared_race(s.buffer, dest, sub, lanes, vals)
            dest.written[sub] = True
        else:
            self.races.write(s.buffer, data, sub, lanes, vals)
        data[sub] = vals

    def _shared_race(self, name, dest, sub, lanes, vals):
        flat = np.ravel_multi_index(sub, dest.data.shape)
        order = np.argsort(flat, kind="stable")
        f, v, ln = flat[order], vals[order], lanes[order]
        dup = f[1:] == f[:-1]
        if dup.any():
            differ = dup & (v[1:] != v[:-1]) & ~(np.isnan(v[1:].astype(float)) &
                                                  np.isnan(v[:-1].astype(float)))
            if differ.any():
                j = int(np.argmax(differ))
                raise SimError(f"kernel {self.k.name}: threads {self._thread(int(ln[j]))} and "
                               f"{self._thread(int(ln[j + 1]))} write different values to shared "
                               f"{name} at offset {int(f[j])} in the same step")
        r = dest.reader.reshape(-1)[flat]
        war = (r == -2) | ((r >= 0) & (r != lanes))
        if war.any():
            j = int(np.argmax(war))
            who = "several threads" if r[j] == -2 else f"thread {self._thread(int(r[j]))}"
            raise SimError(f"kernel {self.k.name}: thread {self._thread(int(lanes[j]))} overwrites "
                           f"shared {name} at offset {int(flat[j])} that {who} read since the "
                           f"last barrier (missing barrier)")
        w = dest.writer.reshape(-1)
        d = dest.data.reshape(-1)
        written = dest.written.reshape(-1)
        prior = w[flat]
        other = (prior >= 0) & (prior != lanes) | (prior == -2)
        if other.any():
            same = written[flat] & (d[flat] == vals)
            bad = other & ~same
            if bad.any():
                j = int(np.argmax(bad))
                raise SimError(f"kernel {self.k.name}: thread {self._thread(int(lanes[j]))} "
                               f"overwrites shared {name} at offset {int(flat[j])}, written by "
                               f"another thread since the last barrier (missing barrier)")
        w[flat] = np.where(other, -2, lanes)
        if dup.any():
            w[f[1:][dup]] = -2

    # ------------------------------------------------------------ expressions
    def eval(self, e: ir.Expr, env: dict, mask):
        if isinstance(e, ir.Imm):
            return e.dtype.numpy.type(e.value)
        if isinstance(e, ir.Var):
            try:
                return env[e.name]
            except KeyError:
                raise SimError(f"kernel {self.k.name}: variable '{e.name}' is not bound") from None
        if isinstance(e, ir.Load):
            return self.load(e, env, mask)
        if isinstance(e, ir.Cast):
            x = self.eval(e.x, env, mask)
            if e.dtype.is_bool:
                return np.asarray(x) != 0
            return np.asarray(x).astype(e.dtype.numpy)
        if isinstance(e, ir.Un):
            x = self.eval(e.x, env, mask)
            if e.op == "!":
                return np.logical_not(x)
            return np.negative(x)
        if isinstance(e, ir.Select):
            c = self.eval(e.cond, env, mask)
            if np.ndim(c) == 0:
                return self.eval(e.a if c else e.b, env, mask)
            m = mask if mask is not None else np.ones(self.nthreads, bool)
            a = self.eval(e.a, env, m & c) if (m & c).any() else np.zeros((), e.dtype.numpy)
            b = self.eval(e.b, env, m & ~c) if (m & ~c).any() else np.zeros((), e.dtype.numpy)
            return np.where(c, a, b).astype(e.dtype.numpy)
        if isinstance(e, ir.Bin):
            return self.binary(e, env, mask)
        if isinstance(e, ir.Call):
            args = [np.asarray(self.eval(a, env, mask)).astype(e.dtype.numpy) for a in e.args]
            return npfuncs.apply(e.fn, args, True)
        raise SimError(f"kernel {self.k.name}: cannot evaluate {type(e).__name__}")

    def binary(self, e: ir.Bin, env, mask):
        if e.op in ("&&", "||"):
            a = self.eval(e.a, env, mask)
            if np.ndim(a) == 0:
                if (e.op == "&&") != bool(a):
                    return np.bool_(a)
                return self.eval(e.b, env, mask)
            m = mask if mask is not None else np.ones(self.nthreads, bool)
            sub = m & (a if e.op == "&&" else ~a)
            b = self.eval(e.b, env, sub) if sub.any() else np.bool_(False)
            return (a & b) if e.op == "&&" else (a | b)
        a, b = self.eval(e.a, env, mask), self.eval(e.b, env, mask)
        op = e.op
        if op in ("<", "<=", ">", ">=", "==", "!="):
            f = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                 "==": np.equal, "!=": np.not_equal}[op]
            return f(a, b)
        dt = e.dtype.numpy
        a, b = np.asarray(a).astype(dt, copy=False), np.asarray(b).astype(dt, copy=False)
        if op == "+":
            return np.add(a, b)
        if op == "-":
            return np.subtract(a, b)
        if op == "*":
            return np.multiply(a, b)
        if op in ("min", "max"):
            if dt.kind == "f":
                return (np.fmin if op == "min" else np.fmax)(a, b)
            return (np.minimum if op == "min" else np.maximum)(a, b)
        if dt.kind == "f":
            return np.divide(a, b) if op == "/" else np.fmod(a, b)
        zero = b == 0
        if np.any(zero):
            live = zero if np.ndim(zero) else np.full(self.nthreads, bool(zero))
            if mask is not None:
                live = live & mask
            if np.any(live):
                raise SimError(f"kernel {self.k.name}: integer division by zero in "
                               f"{expr_text(e)}")
            b = np.where(zero, np.ones((), dt), b)
        return np.floor_divide(a, b) if op == "/" else np.mod(a, b)
