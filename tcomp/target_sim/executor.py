"""The "sim" target: execute Kernel IR on the CPU with GPU semantics.

The blocks of a launch run together, in batches: a batch of `nb` blocks of
`T` threads is `nb * T` lanes of NumPy vectors executed in lock-step (lane
`l` is thread `l % T` of the batch's block `l // T`). A batch holds at most
MAX_LANES lanes and about MAX_BATCH_BYTES of shared and local memory; a
large grid runs as several batches, one after another. `if` on a lane-
dependent condition masks lanes; `for` bounds must be the same for every
active thread of a block (blocks may differ: a block whose loop has ended
sits out the remaining iterations). Shared memory is per block, local memory
per thread; both start unwritten.

The executor raises `SimError` for what a GPU would get wrong:
  * an access outside a buffer: a flat offset (the final IR, after storage
    flattening) against the buffer's element count, per-dimension subscripts
    (the IR before flattening) each against its own dimension; naming the
    block and thread;
  * a read of shared/local memory nobody wrote;
  * within a block, since its last barrier, on shared and global memory: a
    thread reading an element another thread wrote (RAW), overwriting one
    another thread read (WAR), or writing a different value
    than another thread wrote (WAW; identical values are no race);
  * between the blocks of one launch, on global memory (blocks run in any
    order and never wait for each other): a block reading an element another
    block wrote, or overwriting with a different value one another block
    read or wrote (races.py; a store of the value an element already holds is
    no race: blocks recomputing the same halo element);
  * a barrier or cross-thread reduction that only some threads of a block reach.
Ternaries, `&&` and `||` are lazy, as in the language. Blocks run together
meet errors in another order than blocks run one after another; a batched
launch that fails is run again from its start (the buffers it writes
restored), one block at a time, so the error reported is the first in launch
order, whatever the batch size.

A `Specialize` runs each warpgroup of its roles as a cooperative task (tasks.py).
The statements and expressions of a kernel are compiled once into
closures (expressions.py), cached while the kernel object lives; memory
accesses and their checks are in memory.py, global race tables in races.py.
`tcomp.build(..., target="sim")` runs the final Kernel IR, the one the CUDA
printer prints (flat offsets, every layout decision applied), and on an error
runs the IR before flattening to name the subscript and dimension at fault
(tcomp/build.py).
"""
from __future__ import annotations

import gc
import itertools
import math
import weakref

import numpy as np

from ..errors import SimError
from ..lang import npfuncs
from ..arch import threads
from ..lower import ir
from ..lower.launch import launch_problem
from ..lower.printer import expr as expr_text
from ..lower import intrinsics
from ..lower.accesses import accesses
from ..lower.rewriter import walk_stmts
from .coverage import Coverage
from .expressions import Expressions
from .intrinsics import RULES
from .mbarriers import Barriers
from .memory import Local, Memory, Shared
from .races import GlobalRaces
from .data_dependent import ScatterOps, per_thread_bounds
from .tasks import compile_specialize
from .tma import ProxyState, async_buffers, finish_block, uses_sm90

MAX_LANES = 1 << 15          # lanes (threads) of one batch of blocks
MAX_BATCH_BYTES = 256 << 20  # shared + local memory (with its tracking) of one batch
# ir.SM_COUNT in a sim run (a persistent grid of that many blocks): small, so that
# a persistent loop visits several tiles per block at small sizes
SIM_SM_COUNT = 3


def run_program(prog: ir.Program, env: dict, sizes: dict) -> None:
    """Run every kernel of `prog` on the global arrays in `env` (in place).
    Buffers are addressed flat: an array that is not C-contiguous is run on a
    contiguous copy, copied back when the program ends (or fails)."""
    sizes = {ir.SM_COUNT: SIM_SM_COUNT, **sizes}
    work = {n: np.ascontiguousarray(a) if isinstance(a, np.ndarray) and
            not a.flags.c_contiguous else a for n, a in env.items()}
    try:
        with np.errstate(all="ignore"):
            for k in prog.kernels:
                _compiled(k).run(work, sizes)
    finally:
        for n, a in work.items():
            if a is not env[n]:
                np.copyto(env[n], a)


# Compiled kernels by id(kernel), while the kernel lives: a kernel built once
# and called many times (SimKernel, the tests) compiles once.
_CACHE: dict = {}


def _compiled(k: ir.Kernel) -> "_Launch":
    hit = _CACHE.get(id(k))
    if hit is not None and hit[0]() is k and not hit[1].running:
        return hit[1]
    # Compiling allocates many small, long-lived objects (closures): with the
    # cyclic GC on, they trigger full collections of the whole heap (in a test
    # process, 30-150 ms each) that find nothing to free.
    enabled = gc.isenabled()
    gc.disable()
    try:
        launch = _Launch(k)
    finally:
        if enabled:
            gc.enable()
    if hit is None or hit[0]() is not k:
        _CACHE[id(k)] = (weakref.ref(k), launch)
        weakref.finalize(k, _CACHE.pop, id(k), None)
    return launch


class _Launch(Memory, ScatterOps, Expressions):
    """A kernel compiled to closures (holding no reference to the kernel, so
    that the cache entry dies with it), and the state of the run in progress."""

    def __init__(self, k: ir.Kernel):
        self.kname = k.name
        self.invariant = set(k.sizes) | threads.INDEX_VARS
        self.batch = object()  # the batch running (invariant values are per batch)
        self.running = False
        self.tensor_maps = {m.name: m for m in k.tensor_maps}
        # Hopper mechanisms (mbarriers, TMA, wgmma, Specialize): one block per batch
        self.proxied = async_buffers(k)
        self.sm90 = uses_sm90(k, self.proxied)
        self.sync = None
        self.compiled, self.scope_id, self.scopes = {}, 0, itertools.count(1)
        self.grid_fns = [self.compile_expr(g) for g in k.grid]
        self.block_fns = [self.compile_expr(b) for b in k.block]
        self.block_text = [expr_text(b) for b in k.block]
        self.local_shapes = _local_shapes(k.body)
        self.coverage = Coverage(k.name)  # every stored instance runs in some thread
        self.body = self.compile_stmt(k.body)
        self.stored = set(accesses(k.body).writes)
        self.allocs = [(s.buffer.scope, s.buffer.dtype.numpy.itemsize,
                        [self.compile_expr(d) for d in s.buffer.shape])
                       for s in walk_stmts(k.body) if isinstance(s, ir.Alloc)]
        del self.compiled, self.scopes, self.local_shapes, self.coverage  # compiling only

    def const_offset(self, name, key):
        """The flat offset of constant subscripts `key` into local buffer `name`
        (None: not a local buffer of constant shape, or out of its bounds: the
        access takes the checked path)."""
        shape = self.local_shapes.get(name)
        if shape is None:
            return None
        size = math.prod(shape)  # (a constant shape of Python ints)
        if len(key) == 1 and len(shape) != 1:
            return key[0] if 0 <= key[0] < size else None
        if len(key) != len(shape) or not all(0 <= i < n for i, n in zip(key, shape)):
            return None
        return self.flatten(list(key), shape)

    def run(self, env: dict, sizes: dict):
        self.running = True
        try:
            self._run(env, sizes)
        finally:
            self.running = False
            self.mem, self.globals, self.races, self.flat_globals = {}, {}, None, {}

    def _run(self, env, sizes):
        self.globals = env
        self.scope = {n: np.int64(v) for n, v in sizes.items()}
        # New sizes: no invariant value of the last run (the grid's own, when that
        # run was an empty launch that never started a batch) may be reused.
        self.batch = object()
        grid = [int(g(self.scope, None)) for g in self.grid_fns]
        self.grid = grid
        self.block = tuple(int(b(self.scope, None)) for b in self.block_fns)
        if min(grid) <= 0 or min(self.block) <= 0:
            return  # an empty launch runs nothing, as on the GPU
        # The limits every CUDA device has, so that what runs here launches there.
        problem = launch_problem(self.kname, grid, self.block, block_exprs=self.block_text)
        if problem is not None:
            raise SimError(problem)
        self.T = int(np.prod(self.block))
        nblocks = grid[0] * grid[1] * grid[2]
        arrays = {n: a for n, a in env.items() if isinstance(a, np.ndarray)}
        self.flat_globals = {n: a.reshape(-1) for n, a in arrays.items()}
        per_batch = self._batch_size(nblocks)
        if per_batch == nblocks == 1 or per_batch == 1:
            return self._launch(arrays, nblocks, per_batch)
        # Blocks run together meet an error in another order than blocks one
        # after another would (a race between blocks shows at the other block's
        # access, an error of block 2 may come before one of block 0): on an
        # error, run the launch again from its start, one block at a time, and
        # report the first error in launch order, whatever the batch size.
        saved = {n: arrays[n].copy() for n in self.stored if n in arrays}
        try:
            self._launch(arrays, nblocks, per_batch)
        except SimError as batched:
            for n, a in saved.items():
                np.copyto(arrays[n], a)
            try:
                self._launch(arrays, nblocks, 1)
            except SimError as first:
                raise first from None
            raise batched

    def _launch(self, arrays, nblocks, per_batch):
        self.races = GlobalRaces(self, arrays, self.stored, nblocks)
        for first in range(0, nblocks, per_batch):
            self._run_batch(self.body, first, min(per_batch, nblocks - first))

    def _batch_size(self, nblocks):
        """Blocks per batch: bounded by MAX_LANES and by the memory its
        allocations need (shapes that depend on more than the sizes count as 0)."""
        per_block = 0
        for scope, item, dims in self.allocs:
            try:
                n = int(np.prod([int(d(self.scope, None)) for d in dims]))
            except SimError:
                continue
            per_block += n * (self.T * (item + 1) if scope != "shared" else item + 9)
        by_mem = MAX_BATCH_BYTES // max(per_block, 1)
        if self.sm90:
            return 1
        return max(1, min(nblocks, MAX_LANES // max(self.T, 1), by_mem))

    def _run_batch(self, body, first, nb):
        T = self.T
        bx, by, bz = self.block
        self.first_block, self.nb, self.L = first, nb, nb * T
        self.lane = np.arange(self.L, dtype=np.int64)
        self.tid = (self.lane % T).astype(np.int32)
        self.blk = self.lane // T
        self.gblock = (self.blk + first).astype(np.int32)
        tid = self.tid
        env = dict(self.scope)
        tx, ty, tz = (a.name for a in threads.THREAD)
        env.update({tx: (tid % bx).astype(np.int32),
                    ty: ((tid // bx) % by).astype(np.int32),
                    tz: (tid // (bx * by)).astype(np.int32)})
        gx, gy, _ = self.grid
        ids = np.arange(first, first + nb)
        coords = (ids % gx, (ids // gx) % gy, ids // (gx * gy))
        for a, c in zip(threads.BLOCK, coords):
            env[a.name] = np.int32(c[0]) if nb == 1 else np.repeat(c, T).astype(np.int32)
        self.mem = {}
        self.batch = object()  # invalidates the values of invariant expressions
        self.races.start_batch()
        body(env, None)
        if self.sm90:
            finish_block(self)

    # ------------------------------------------------------------ messages
    def _thread(self, lane):
        bx, by, _ = self.block
        t = int(lane) % self.T
        return (t % bx, (t // bx) % by, t // (bx * by))

    def _block(self, lane):
        return self._block_of(self.first_block + int(lane) // self.T)

    def _block_of(self, gid):
        gx, gy, _ = self.grid
        return (gid % gx, (gid // gx) % gy, gid // (gx * gy))

    # ------------------------------------------------------------ statements
    def compile_stmt(self, s: ir.Stmt):
        method = getattr(self, "_s_" + type(s).__name__, None)
        if method is None:
            kname, what = self.kname, type(s).__name__

            def unknown(env, mask):
                raise SimError(f"kernel {kname}: cannot execute {what}")
            return unknown
        return method(s)

    def _s_Seq(self, s):
        fns = [self.compile_stmt(x) for x in s.stmts]

        def seq(env, mask):
            for f in fns:
                f(env, mask)
        return seq

    def _s_Let(self, s):
        value, inv = self._compile(s.value)
        saved = self.coverage.enter_let(s)
        try:
            body, var = self._scoped(s.var, inv, s.body), s.var
        finally:
            self.coverage.leave_let(saved)

        def let(env, mask):
            v = value(env, mask)
            if isinstance(v, np.ndarray) and v.base is not None:
                v = v.copy()  # a view of memory that later stores would change
            old = env.get(var, _UNSET)
            env[var] = v
            body(env, mask)
            _restore(env, var, old)
        return let

    def _scoped(self, var, invariant, body):
        """Compile `body` where `var` is bound to an invariant value or not."""
        was, outer = var in self.invariant, self.scope_id
        (self.invariant.add if invariant else self.invariant.discard)(var)
        self.scope_id = next(self.scopes)
        try:
            return self.compile_stmt(body)
        finally:
            (self.invariant.add if was else self.invariant.discard)(var)
            self.scope_id = outer

    def _s_For(self, s):
        lo, ext, body, var = (self.compile_expr(s.lo), self.compile_expr(s.extent),
                              self._scoped(s.var, False, s.body), s.var)
        per_thread = per_thread_bounds(s)  # a ragged loop's (data_dependent.py)

        def loop(env, mask):
            if per_thread:
                a, n = lo(env, mask), ext(env, mask)
            else:
                a = self._block_uniform(lo(env, mask), mask, s, s.lo)
                n = self._block_uniform(ext(env, mask), mask, s, s.extent)
            old = env.get(var, _UNSET)
            if np.ndim(a) == 0 and np.ndim(n) == 0:
                for i in range(int(a), int(a) + max(int(n), 0)):
                    env[var] = np.int32(i)
                    body(env, mask)
            else:  # bounds differ between blocks: each block takes its own iterations
                a = np.broadcast_to(np.asarray(a, np.int64), (self.L,))
                end = a + np.maximum(np.broadcast_to(np.asarray(n, np.int64), (self.L,)), 0)
                live = np.ones(self.L, bool) if mask is None else mask
                if live.any():
                    for i in range(int(a[live].min()), int(end[live].max())):
                        m = live & (a <= i) & (i < end)
                        if m.any():
                            env[var] = np.int32(i)
                            body(env, None if m.all() else m)
            _restore(env, var, old)
        return loop

    def _s_If(self, s):
        cond, then = self.compile_expr(s.cond), self.compile_stmt(s.then)
        else_ = self.compile_stmt(s.else_) if s.else_ is not None else None

        def branch(env, mask):
            c = cond(env, mask)
            if np.ndim(c) == 0:
                if c:
                    then(env, mask)
                elif else_ is not None:
                    else_(env, mask)
                return
            m1 = c if mask is None else mask & c
            if m1.any():
                then(env, None if m1.all() else m1)
            if else_ is not None:
                m2 = ~c if mask is None else mask & ~c
                if m2.any():
                    else_(env, None if m2.all() else m2)
        return branch

    def _s_Alloc(self, s):
        # Like CUDA's static shared arrays, an allocation lives for the whole block:
        # entering it again (in a loop) keeps its race-tracking state, so races
        # between loop iterations are seen; its contents count as unwritten again
        # (for the lanes/blocks entering), so reading a value left over from an
        # earlier iteration is caught too.
        b, body = s.buffer, self.compile_stmt(s.body)
        dims = [self.compile_expr(d) for d in b.shape]
        if b.scope not in ("shared", "local", "fragment", "barrier"):
            kname = self.kname

            def bad(env, mask):
                raise SimError(f"kernel {kname}: cannot allocate {b.scope} buffer '{b.name}'")
            return bad

        def alloc(env, mask):
            h = self.mem.get(b.name)
            if h is None:
                shape = tuple(int(d(env, None)) for d in dims)
                h = self.mem[b.name] = (Shared(b, shape, self.nb) if b.scope == "shared"
                                        else Barriers(b, shape) if b.scope == "barrier"
                                        else Local(b, shape, self.L))  # local, fragment
                if b.name in self.proxied and b.scope == "shared":
                    h.proxy = ProxyState(h)
            elif b.scope == "barrier":
                pass  # an mbarrier keeps its state until its next mbarrier_init
            elif mask is None:
                h.written[...] = False
                if b.scope != "shared":
                    h.full.clear()
            elif b.scope != "shared":
                h.written[mask] = False
                h.full.clear()
            else:
                h.written[mask.reshape(self.nb, self.T).any(axis=1)] = False
            body(env, mask)
        return alloc

    def _s_Store(self, s):
        self.coverage.store(s)
        name = s.buffer
        where = f" (computing the statement at {s.loc})" if s.loc is not None else ""
        idx = [self.compile_expr(i) for i in s.indices]
        value = self.compile_expr(s.value)
        key, atomic = None, s.atomic
        if all(isinstance(i, ir.Imm) for i in s.indices) and atomic is None:
            key = self.const_offset(name, tuple(int(i.value) for i in s.indices))

        def store(env, mask):
            v = value(env, mask)
            h = self.mem.get(name)
            if key is not None and type(h) is Local and key in h.full:
                # registers every lane has written (so in bounds): just the values
                if mask is None:
                    h.data[:, key] = v
                else:
                    h.data[:, key][mask] = v if np.ndim(v) == 0 else v[mask]
                return
            vals = [f(env, mask) for f in idx]
            dest = h if h is not None else self.globals.get(name)
            if dest is None or type(dest) is Barriers:
                raise SimError(f"kernel {self.kname}: unknown buffer '{name}'" if dest is None
                               else f"kernel {self.kname}: a store to mbarrier '{name}' (use "
                                    f"the mbarrier intrinsics)")
            scalar, off = self.offsets(name, vals, dest.shape, mask, "write to", where)
            data = dest.data if h is not None else dest
            if v.dtype != data.dtype:
                v = npfuncs.convert(v, data.dtype)
            if atomic is not None:
                self.atomic_global(name, h, off, v, mask, atomic)
            elif type(h) is Local:
                self.store_local(h, off, scalar, v, mask)
            elif h is not None:
                self.store_shared(name, h, off, v, mask)
            else:
                self.store_global(name, dest, off, v, mask)
        return store

    def _whole_blocks(self, mask, message):
        """The blocks taking part (None: all): a block takes part with all its threads or none."""
        if mask is None:
            return None
        count = mask.reshape(self.nb, self.T).sum(axis=1)
        partial = (count > 0) & (count < self.T)
        if partial.any():
            b = int(np.argmax(partial))
            raise SimError(f"kernel {self.kname}: " + message.format(
                block=self._block_of(self.first_block + b), idle=int(self.T - count[b])))
        return count == self.T

    def _intrinsic(self, s):
        """An intrinsic statement: its rule in target_sim/intrinsics.py."""
        entry = intrinsics.of(s)
        rule = RULES.get(entry.name) if entry is not None else None
        if rule is None:
            kname, fn = self.kname, s.call.fn

            def unknown(env, mask):
                raise SimError(f"kernel {kname}: the sim target has no meaning for intrinsic "
                               f"'{fn}'")
            return unknown
        return rule(self, s)

    _s_Barrier = _s_AllReduce = _s_Evaluate = _intrinsic
    _s_Specialize = compile_specialize


_UNSET = object()


def _local_shapes(body) -> dict:
    """Constant shapes of the local buffers a kernel allocates (a name allocated
    with two shapes is left out)."""
    shapes = {}
    for s in walk_stmts(body):
        if isinstance(s, ir.Alloc) and s.buffer.scope in ("local", "fragment"):
            dims = s.buffer.shape
            shape = tuple(int(d.value) for d in dims) if all(
                isinstance(d, ir.Imm) for d in dims) else None
            name = s.buffer.name
            shapes[name] = shape if shapes.get(name, shape) == shape else None
    return {n: sh for n, sh in shapes.items() if sh is not None}


def _restore(env, var, old):
    if old is _UNSET:
        env.pop(var, None)
    else:
        env[var] = old
