"""The walk of one kernel body that features.py reads its counts from: per
thread, every node weighted by the trip counts of the loops around it, with
the coalescing of each global access (two neighbouring lanes' addresses),
the vector accesses `vectorize` would make, and the guards that unrolling
decides (features.py's docstring says what is counted and why)."""
from __future__ import annotations

import dataclasses
import itertools
import math

from ..arch.hierarchy import THREAD_INDEX, Uniformity
from ..arch.threads import TAGS as INDEX_REGISTERS
from ..arch.instructions import TENSOR_CORE
from ..lower import intrinsics, ir, vectorize
from .feature_eval import (_RowMajor, _bytes, _bytes_of, _conjuncts, _constant,  # noqa: F401
                           _eval, _lane_var)

SCOPES = ("global", "shared", "local", "fragment")
_SUMMED = (["flops", "special", "mma_flops", "wgmma_flops", "int_ops"]
           + [f"{s}_{d}_bytes" for s in SCOPES for d in ("load", "store")]
           + ["global_sector_bytes", "global_vector_bytes", "unique_global_bytes",
              "mma", "ldmatrix", "cp_async", "cp_async_bytes", "barriers", "allreduce",
              "stores", "mem_instructions", "inflight_bytes"])

_FLOAT_OPS = frozenset({"+", "-", "*", "/", "min", "max"})


# ------------------------------------------------------------------ one kernel
class _Walk:
    """Per-thread counts of one kernel body (weights: enclosing trip counts).
    `flat`: whether subscripts are flat (else vector accesses are predicted)."""

    def __init__(self, scopes: dict, sizes: dict, lane_var: str | None, flat: bool = True,
                 threads: int | None = None, maps: dict | None = None,
                 blocks_x: int | None = None):
        self.flat = flat
        self.blocks_x = blocks_x  # gridDim.x: a persistent loop's trips, over the blocks
        self.maps = dict(maps or {})  # TMA descriptors: name -> ir.TensorMap
        self.threads = threads  # of the block: a Role's share of them runs its body
        self.scopes = dict(scopes)
        self.c = {n: 0.0 for n in _SUMMED}
        self.sector_bytes = 0.0
        self.vector_bytes = 0
        self.stages = 0
        self.unroll = 1
        self.unrolled: dict[str, range] = {}  # unrolled loops around: var -> its values
        # the unrolled loops (var, trips, buffers stored in the body) inside the innermost
        # serial loop around, with no barrier in their bodies: their copies are one
        # straight-line block, where the CUDA compiler loads once what every copy loads at
        # the same address (a load whose subscripts do not read the loop's variable, of a
        # buffer the copies do not store to)
        self.copies: list[tuple[str, int, frozenset]] = []
        self.deps: dict[str, frozenset] = {}  # a let's variable -> the variables it reads
        # the loads of the current straight-line region (the body of the innermost serial
        # loop, up to a barrier), each counted once: (buffer, subscripts); a store to a
        # buffer forgets that buffer's
        self.loaded: set = set()
        self._barriers: dict[int, bool] = {}
        self.guards: list[tuple[frozenset, float]] = []  # decided guards around: (vars, share)
        self._stores: dict[int, frozenset] = {}
        self.unroll_lets: dict[str, ir.Expr] = {}  # lets over those (and sizes) only
        self.size_names = set(sizes)
        self.touched = set()
        self.lane_var = lane_var
        self.vector_lanes = 1  # lanes of the vector loops around: one thread's contiguous piece
        # trips of the serial loops around (over their pipeline depth): a thread's loads in
        # one such trip are independent of each other, so in flight together
        self.serial = 1.0
        # two evaluation environments: lane 0 and its neighbour along the lane axis
        self.env0 = {k: int(v) for k, v in sizes.items()}
        self.env1 = dict(self.env0)
        for t in INDEX_REGISTERS:
            self.env0[t] = self.env1[t] = 0
        if lane_var is not None:
            self.env1[lane_var] = 1

    def stmt(self, s, w: float, unroll: int) -> None:
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, w, unroll)
        elif isinstance(s, ir.For):
            n = _eval(s.extent, self.env0)
            n = max(0, n) if n is not None else 1
            if (s.kind == "serial" and self.blocks_x and self.blocks_x > 1
                    and "blockIdx.x" in ir.free_vars(s.extent)):
                # a persistent grid's tile loop: the blocks' mean trips (block 0 takes
                # the most tiles; with fewer tiles than blocks, some take none)
                env = dict(self.env0)
                trips = []
                for bx in range(min(self.blocks_x, 4096)):
                    env["blockIdx.x"] = bx
                    trips.append(_eval(s.extent, env))
                if None not in trips:
                    n = sum(max(0, t) for t in trips) / len(trips)
            lo0 = _eval(s.lo, self.env0)
            lo1 = _eval(s.lo, self.env1)
            self.env0[s.var] = lo0 if lo0 is not None else 0
            self.env1[s.var] = lo1 if lo1 is not None else self.env0[s.var]
            self.stages = max(self.stages, s.stages)
            if s.kind == "thread":  # iterations are threads, counted by the launch
                n = 1
            u = unroll * n if s.kind == "unroll" else unroll
            self.unroll = max(self.unroll, u)
            vector = s.vector
            if vector is None and s.kind == "vectorize" and not self.flat:
                vector = self._predict_vector(s)
            if vector is not None:
                self.vector_bytes = max(self.vector_bytes, vector.bytes)
                vec = vector.bytes * (len(vector.loads) + (vector.store_base is not None))
                if self._scope_of_vector(vector) == "global":
                    self.c["global_vector_bytes"] += w * vec
            copies = s.kind == "unroll" and lo0 is not None and _eval(s.extent, {}) is not None
            if copies:  # the unroll pass will make a copy per value: guards may decide
                self.unrolled[s.var] = range(lo0, lo0 + n)
            lanes, serial, straight = self.vector_lanes, self.serial, self.copies
            if vector is not None:
                self.vector_lanes = lanes * max(1, n)
            loaded = self.loaded
            if s.kind == "serial":
                self.serial = serial * max(1.0, n / max(1, s.stages))
                self.copies, self.loaded = [], set()
            elif copies and not self._barrier(s.body):
                self.copies = straight + [(s.var, n, self._stored(s.body))]
            self.stmt(s.body, w * n, u)
            self.vector_lanes, self.serial, self.copies = lanes, serial, straight
            self.loaded = loaded if s.kind == "serial" else self.loaded
            if copies:
                del self.unrolled[s.var]
        elif isinstance(s, ir.Let):
            self.deps[s.var] = frozenset().union(
                *(self.deps.get(v, (v,)) for v in ir.free_vars(s.value)))
            self.env0[s.var] = _eval(s.value, self.env0)
            self.env1[s.var] = _eval(s.value, self.env1)
            self.expr(s.value, w)
            known = ir.free_vars(s.value) <= self._decidable()
            if known:
                self.unroll_lets[s.var] = s.value
            self.stmt(s.body, w, unroll)
            if known:
                del self.unroll_lets[s.var]
        elif isinstance(s, ir.Alloc):
            self.scopes[s.buffer.name] = (s.buffer.scope, s.buffer)
            self.stmt(s.body, w, unroll)
        elif isinstance(s, ir.If):
            self.expr(s.cond, w)
            taken, decided, names = self._guard(s.cond)
            self.guards.append((names, taken))
            self.stmt(s.then, w * taken * self._one_of(s.cond), unroll)
            self.guards.pop()
            if s.else_ is not None:
                self.stmt(s.else_, w * (1 - taken if decided else 1), unroll)
        elif isinstance(s, ir.Store):
            self.c["stores"] += w
            self.loaded = {x for x in self.loaded if x[0] != s.buffer}
            self._access(s.buffer, s.indices, _bytes(self._dtype(s.buffer, s.value.dtype)), w,
                         "store")
            for e in s.indices:
                self.expr(e, w)
            self.expr(s.value, w)
        elif isinstance(s, ir.Barrier):
            self.c["barriers"] += w
            self.loaded = set()
        elif isinstance(s, ir.AllReduce):
            self.c["allreduce"] += w
        elif isinstance(s, ir.Evaluate):
            self._intrinsic(s.call, w)
        elif isinstance(s, ir.Role):
            # counts are per thread of the block: a role's body runs on its warpgroups
            # only (a producer's copies are not every thread's); its index at the
            # role's first warpgroup, as lane 0 stands for the threads
            # (each of its warpgroups walked at its own index: ping-pong consumers take
            # alternate tiles)
            share = 128 * s.count / self.threads if self.threads else 1.0
            for i in range(max(1, s.count)):
                self.env0[s.var] = self.env1[s.var] = i
                self.stmt(s.body, w * min(1.0, share) / max(1, s.count), unroll)
        else:  # any other statement: its children
            for c in ir.children(s):
                if isinstance(c, ir.Stmt):
                    self.stmt(c, w, unroll)
                else:
                    self.expr(c, w)

    def expr(self, e, w: float) -> None:
        known = self._decidable() if self.unrolled else None
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, ir.Bin):
                if x.dtype.is_float and x.op in _FLOAT_OPS:
                    self.c["flops"] += w
                elif known is not None and _constant(x, known):
                    continue  # a constant in every unrolled copy: folded, no operation
                else:
                    self.c["int_ops"] += w / self.vector_lanes  # once per vector
            elif isinstance(x, ir.Call):
                if x.fn not in intrinsics.REGISTRY:
                    self.c["special"] += w
            elif isinstance(x, ir.Load):
                key = (x.buffer, x.indices)
                if self.scopes.get(x.buffer, ("global",))[0] not in ("global", "shared"):
                    self._access(x.buffer, x.indices, _bytes(x.dtype), w, "load")  # registers
                elif key not in self.loaded:  # a second load of the same address: CSE'd
                    self.loaded.add(key)
                    self._access(x.buffer, x.indices, _bytes(x.dtype), w / self._repeats(x),
                                 "load")
            stack.extend(ir.children(x))

    def _barrier(self, s) -> bool:
        """Whether statement `s` contains a barrier (memoised per node)."""
        key = id(s)
        if key not in self._barriers:
            self._barriers[key] = isinstance(s, ir.Barrier) or any(
                self._barrier(c) for c in ir.children(s) if isinstance(c, ir.Stmt))
        return self._barriers[key]

    def _stored(self, s) -> frozenset:
        """The buffers statement `s` stores to (memoised per node)."""
        key = id(s)
        if key not in self._stores:
            own = {s.buffer} if isinstance(s, ir.Store) else set()
            self._stores[key] = frozenset(own).union(
                *(self._stored(c) for c in ir.children(s) if isinstance(c, ir.Stmt)))
        return self._stores[key]

    def _repeats(self, load: ir.Load) -> float:
        """How many of the straight-line unrolled copies around (self.copies)
        load what `load` loads: the product of the trips of those whose
        variable its subscripts do not read (directly or through lets)."""
        if not self.copies:
            return 1
        reads = set()
        for e in load.indices:
            for v in ir.free_vars(e):
                reads |= self.deps.get(v, {v})
        same = {var for var, n, stored in self.copies
                if var not in reads and load.buffer not in stored}
        # a guard over those copies only leaves some of them: one load still
        # serves those left (the share it weighs `w` by is given back)
        kept = math.prod(t for names, t in self.guards if names and names <= same and t > 0)
        return math.prod(n for var, n, _ in self.copies if var in same) * kept

    def _intrinsic(self, call: ir.Call, w: float) -> None:
        """Counts of one intrinsic statement, read off its registry entry
        (lower/intrinsics.py): its tensor-core instruction, effects, operands
        and feature, never its name."""
        entry = intrinsics.REGISTRY.get(call.fn)
        ops = {} if entry is None else {o.name: a for o, a in zip(entry.operands, call.args)}
        if entry is None:
            pass
        elif entry.instruction:  # mma.sync (a warp's) or wgmma (a warpgroup's m x n x k)
            ins = TENSOR_CORE[entry.instruction]
            flops = w * 2 * ins.m * ins.n * ins.k / ins.threads  # per thread: its share
            self.c["mma"] += w
            self.c["mma_flops"] += flops
            if ins.issued_by is Uniformity.WARPGROUP:
                self.c["wgmma_flops"] += flops
        elif "async_proxy" in entry.effects and "map" in ops:  # a TMA copy of a map's box
            self._tma(ops["map"], "writes" in entry.effects, w)
        elif entry.lane_bytes:  # ldmatrix: 8x8 16-bit tiles from shared into fragments
            self.c["ldmatrix"] += w
            self.c["shared_load_bytes"] += w * entry.lane_bytes
            self.c["fragment_store_bytes"] += w * entry.lane_bytes
        elif entry.feature == "cp_async" and "src" in ops:  # a cp.async copy of `bytes`
            src, nbytes = ops["src"], _eval(ops["bytes"], self.env0) or 16
            self.c["cp_async"] += w
            self.c["cp_async_bytes"] += w * nbytes
            self.c["shared_store_bytes"] += w * nbytes
            self._access(src.buffer, src.indices, nbytes, w, "load")
            self.c["global_vector_bytes"] += w * nbytes if nbytes >= 8 else 0
            self.vector_bytes = max(self.vector_bytes, nbytes)
        elif entry.feature == "cp_async" and "n" in ops:
            # waiting for all but the n newest cp.async groups: a ring of n + 2 stages
            n = _eval(ops["n"], self.env0)
            self.stages = max(self.stages, (n or 0) + 2)
        for a in call.args:
            if not isinstance(a, ir.Ref):
                self.expr(a, w)

    def _one_of(self, cond) -> float:
        """The share of the threads a branch on `cond` runs on when it picks
        one thread of a group: `threadIdx.x % K == c` (one of K: a
        warpgroup's elected thread) or `threadIdx.x == c` (one of the
        block); 1 for any other condition (assumed true)."""
        if not (isinstance(cond, ir.Bin) and cond.op == "==" and isinstance(cond.b, ir.Imm)):
            return 1.0
        x = cond.a
        if isinstance(x, ir.Var) and x.name == THREAD_INDEX and self.threads:
            return 1.0 / self.threads
        if (isinstance(x, ir.Bin) and x.op == "%" and isinstance(x.a, ir.Var)
                and x.a.name == THREAD_INDEX and isinstance(x.b, ir.Imm) and x.b.value > 0):
            return 1.0 / int(x.b.value)
        return 1.0

    def _tma(self, arg: ir.Expr, load: bool, w: float) -> None:
        """A TMA copy (`load`: global to shared) of tensor map `arg`: the box
        of the map moved between global and shared memory in whole sectors."""
        m = self.maps.get(arg.name) if isinstance(arg, ir.Var) else None
        entry = self.scopes.get(m.buffer) if m is not None else None
        if entry is None:
            return
        nbytes = math.prod(m.box) * _bytes_of(entry[1])
        self.touched.add(m.buffer)
        self.c["global_load_bytes" if load else "global_store_bytes"] += w * nbytes
        self.c["shared_store_bytes" if load else "shared_load_bytes"] += w * nbytes
        self.c["global_vector_bytes"] += w * nbytes
        self.c["mem_instructions"] += w
        self.sector_bytes += w * nbytes
        if load:
            self.c["inflight_bytes"] += w * nbytes / self.serial

    def _decidable(self) -> set:
        return set(self.unrolled) | set(self.unroll_lets) | self.size_names

    def _guard(self, cond) -> tuple[float, bool, frozenset]:
        """(share of the unrolled copies in which `cond` can hold, whether
        it is decided in every copy, the unrolled loop variables that share
        is over). The conjuncts over unrolled loop
        variables and constants only are what simplification after unrolling
        folds: copies where one is false lose the then-branch. Others are
        assumed true (guards in tiled code nearly always are)."""
        if not self.unrolled:
            return 1.0, False, frozenset()
        known, parts = self._decidable(), _conjuncts(cond)
        mine = [c for c in parts if ir.free_vars(c) <= known and
                ir.free_vars(c) & (set(self.unrolled) | set(self.unroll_lets))]
        if not mine:
            return 1.0, False, frozenset()
        names = sorted(set().union(*(ir.free_vars(c) for c in mine)) & set(self.unrolled)
                       | {v for c in mine for x in ir.free_vars(c) if x in self.unroll_lets
                          for v in ir.free_vars(self.unroll_lets[x]) if v in self.unrolled})
        combos = math.prod(len(self.unrolled[v]) for v in names)
        if combos > 4096:
            return 1.0, False, frozenset()
        true = 0
        for values in itertools.product(*(self.unrolled[v] for v in names)):
            env = {**self.env0, **dict(zip(names, values))}
            for var, e in self.unroll_lets.items():
                env[var] = _eval(e, env)
            if all(_eval(c, env) for c in mine):
                true += 1
        return true / combos, len(mine) == len(parts), frozenset(names)

    def _strides(self, buf: str):
        """Row-major element strides of `buf` at the tuning sizes (None if unknown)."""
        entry = self.scopes.get(buf)
        if entry is None:
            return None
        dims = [_eval(d, self.env0) for d in entry[1].shape]
        if any(d is None for d in dims):
            return None
        out, stride = [], 1
        for d in reversed(dims):
            out.append(stride)
            stride *= d
        return out[::-1]

    def _predict_vector(self, loop: ir.For):
        """The VectorAccess `vectorize` would give `loop` once flattened."""
        flat = _RowMajor(self._strides).stmt(loop.body)
        if flat is None or _RowMajor.failed(flat):
            return None
        dtypes = {n: e[1].dtype for n, e in self.scopes.items()}
        local = {n for n, e in self.scopes.items() if e[0] == "local"}
        return vectorize.vector_access(dataclasses.replace(loop, body=flat), dtypes, local)

    def _dtype(self, buf: str, fallback):
        entry = self.scopes.get(buf)
        return entry[1].dtype if entry else fallback

    def _scope_of_vector(self, v: ir.VectorAccess) -> str:
        names = [x.buffer for x in v.loads]
        return "global" if any(self.scopes.get(n, ("global",))[0] == "global" for n in names) \
            else "other"

    def _lane_stride(self, buf: str, indices) -> int | None:
        """Bytes between what neighbouring lanes access in `buf` at `indices`
        (row-major at the tuning sizes), or None when unknown."""
        entry = self.scopes.get(buf)
        strides = [1] if len(indices) == 1 else self._strides(buf)
        if entry is None or strides is None:
            return None
        a = b = 0
        for i, st in zip(indices, strides):
            x, y = _eval(i, self.env0), _eval(i, self.env1)
            if x is None or y is None:
                return None
            a, b = a + x * st, b + y * st
        return abs(b - a) * _bytes_of(entry[1])

    def _access(self, buf: str, indices, nbytes: int, w: float, kind: str) -> None:
        scope = self.scopes.get(buf, ("global", None))[0]
        scope = scope if scope in SCOPES else "local"
        self.c[f"{scope}_{kind}_bytes"] += w * nbytes
        if scope in ("global", "shared"):  # one instruction per vector of `vector_lanes`
            self.c["mem_instructions"] += w / self.vector_lanes
        if scope != "global":
            return

        self.touched.add(buf)
        # bytes between what neighbouring lanes touch -> sectors a warp moves per access
        stride = self._lane_stride(buf, indices)
        if stride is None or self.lane_var is None:
            per_thread = nbytes  # unknown: count as coalesced
        elif stride == 0:
            per_thread = max(nbytes, 32) / 32  # a broadcast: one sector for the warp
        elif stride <= nbytes * self.vector_lanes:
            # neighbouring threads' pieces abut: a vector access of `vector_lanes` elements
            # each moves whole sectors (a float4 per thread at 16-byte strides)
            per_thread = nbytes
        else:
            per_thread = min(max(nbytes, 32), stride)  # lanes in different sectors
        self.sector_bytes += w * per_thread
        if kind == "load":  # what this access has in flight from memory (a broadcast: little)
            self.c["inflight_bytes"] += w * per_thread / self.serial
