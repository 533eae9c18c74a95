"""Features of a lowered candidate: one fixed-length float vector read from
its Kernel IR, what the cost model (model.py) learns from.

Kernel IR is per-thread code (one body run by every thread of every block),
so each kernel is walked once with a *weight*: the product of the trip
counts of the loops around a node (extents evaluated at the tuning sizes,
which are fixed; an extent that depends on an outer loop variable is taken
at that variable's first value). Both branches of an `if` count in full:
the counts are upper bounds, and guards in tiled code are nearly always
true. Per-thread counts times threads times blocks are the kernel's totals.

Per kernel:
- arithmetic: float operations (`+ - * / min max`, casts not counted) and
  special functions (`exp`, `log`, `sqrt`, ... any math call) per thread;
  tensor-core flops (`mma_m16n8k16`: 4096 per warp);
- memory per scope (global, shared, local, fragment): bytes loaded and
  stored per thread; `cp_async` counts as a global load and a shared store,
  `ldmatrix` as a shared load;
- global coalescing: for each global access, the distance in bytes between
  what neighbouring lanes touch (the index evaluated for lane 0 and lane 1 of
  the block's innermost thread dimension); a *sector* estimate of the bytes a
  warp moves (32-byte sectors), hence an efficiency in [0, 1];
- vector width: the widest vector access (bytes) and the share of global
  bytes moved by vector accesses;
- launch: threads per block, blocks, waves on the device, estimated
  occupancy (resident warps per SM / 64) limited by threads, shared memory
  and the registers of validate.Resources;
- tensor cores and pipelines: mma, ldmatrix and cp.async counts, the
  deepest software-pipeline ring (`For.stages`, or n + 2 for a
  `cp_async_wait(n)` once software pipelining has made the ring explicit),
  barriers, cross-thread reductions;
- unrolling: the product of unrolled extents around the deepest statement;
- reuse: float operations per global byte and per shared byte.

A program with several kernels sums the totals and takes the per-kernel
shape features (threads, occupancy, vector width, ...) from the kernel with
the largest estimated time (`analytic_ms`); `kernels` counts them.

`analytic_ms(features)` turns the vector into a time: the largest of
arithmetic over the H200's compute ceilings and traffic over its memory
ceilings (shared/DESIGN.md), divided by how much of the device the launch
can keep busy. It is a proxy, not a prediction of the GPU: the sim measures
no time, so a search on the sim ranks by it (tuner.py), and the learned model
gets its logarithm as one more feature.

`extract(valid, sizes)` takes the `Valid` a candidate lowered to
(`Space.lowered[schedule]`): no second lowering. It costs a few ms.

The search lowers candidates only up to the `unroll` pass (validate.py), so
the IR read here usually still has its unrolled loops, multi-dimensional
subscripts and no vector accesses. The counts are the same as on the whole
pipeline's IR: an unrolled loop weighs its body by its trip count as the
copies would, and the `unroll` feature is the product of the unrolled
extents (which expansion would erase). Coalescing takes the distance
between lanes in row-major order of the buffer's shape (what
`flatten_storage` makes of the subscripts), and a vectorized loop gets the
vector accesses the `vectorize` pass would give it, decided by that pass's
own rule on the loop with its subscripts flattened the same way.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ..lower import intrinsics, ir, vectorize
from ..lower.pipeline import PASSES
from ..lower.rewriter import Rewriter

# H200 ceilings (shared/DESIGN.md, measured; per SM limits from the datasheet).
SMS = 132
DRAM_BYTES_S = 4.28e12       # device copy, read + write
L2_BYTES_S = 10e12           # issued global traffic that hits in cache
SHARED_BYTES_S = 33e12       # 128 B/clock/SM at 1.98 GHz
FP32_FLOPS_S = 60e12         # CUDA cores (cuBLAS fp32 no-TF32 reaches 50.9)
MMA_FLOPS_S = 660e12         # mma.sync on Hopper: about two thirds of the wgmma peak
SPECIAL_OPS_S = 8e12         # SFU: 16 per clock per SM
LAUNCH_MS = 0.003            # per kernel
WARPS_PER_SM, THREADS_PER_SM, BLOCKS_PER_SM = 64, 2048, 32
SHARED_PER_SM, REGS_PER_SM = 228 * 1024, 65536

SCOPES = ("global", "shared", "local", "fragment")
_SUMMED = (["flops", "special", "mma_flops", "int_ops"]
           + [f"{s}_{d}_bytes" for s in SCOPES for d in ("load", "store")]
           + ["global_sector_bytes", "global_vector_bytes", "unique_global_bytes",
              "mma", "ldmatrix", "cp_async", "cp_async_bytes", "barriers", "allreduce",
              "stores"])
_SHAPE = ["threads", "blocks", "waves", "occupancy", "blocks_per_sm", "shared_bytes",
          "registers", "coalescing", "vector_bytes", "vector_share", "stages", "unroll",
          "flops_per_global_byte", "flops_per_shared_byte", "per_thread_flops",
          "log_kernel_ms"]
NAMES = tuple(_SUMMED + _SHAPE + ["kernels", "log_analytic_ms"])
INDEX = {n: i for i, n in enumerate(NAMES)}

_FLOAT_OPS = frozenset({"+", "-", "*", "/", "min", "max"})
_MMA_FLOPS = {"mma_m16n8k16": 2 * 16 * 8 * 16}


def extract(valid, sizes: dict) -> np.ndarray:
    """The feature vector (float64, len(NAMES)) of a `Valid` lowered at
    `sizes` (see the module docstring)."""
    prog, kernels = valid.program, []
    scopes = {b.name: (b.scope, b) for b in prog.buffers}
    flat = _flattened(getattr(valid, "until", None))
    for k, res in zip(prog.kernels, valid.resources):
        kernels.append(_kernel(k, res, scopes, sizes, flat))
    out = np.zeros(len(NAMES))
    if not kernels:
        return out
    for f in kernels:
        for n in _SUMMED:
            out[INDEX[n]] += f[n]
    top = max(kernels, key=lambda f: f["kernel_ms"])
    for n in _SHAPE[:-1]:
        out[INDEX[n]] = top[n]
    out[INDEX["log_kernel_ms"]] = math.log(top["kernel_ms"])
    out[INDEX["kernels"]] = len(kernels)
    out[INDEX["log_analytic_ms"]] = math.log(sum(f["kernel_ms"] for f in kernels))
    return out


def analytic_ms(features: np.ndarray) -> float:
    """The analytic time proxy of a feature vector (see the module docstring)."""
    return float(math.exp(features[INDEX["log_analytic_ms"]]))


def as_dict(features: np.ndarray) -> dict:
    """name -> value, for reading a vector."""
    return {n: float(v) for n, v in zip(NAMES, features)}


def _flattened(until: str | None) -> bool:
    """Whether IR lowered up to (not including) pass `until` has flat subscripts."""
    names = [n for n, _ in PASSES]
    return until is None or names.index(until) > names.index("flatten_storage")


# ------------------------------------------------------------------ one kernel
class _Walk:
    """Per-thread counts of one kernel body (weights: enclosing trip counts).
    `flat`: whether subscripts are flat (else vector accesses are predicted)."""

    def __init__(self, scopes: dict, sizes: dict, lane_var: str | None, flat: bool = True):
        self.flat = flat
        self.scopes = dict(scopes)
        self.c = {n: 0.0 for n in _SUMMED}
        self.sector_bytes = 0.0
        self.vector_bytes = 0
        self.stages = 0
        self.unroll = 1
        self.unrolled: dict[str, range] = {}  # unrolled loops around: var -> its values
        self.unroll_lets: dict[str, ir.Expr] = {}  # lets over those (and sizes) only
        self.size_names = set(sizes)
        self.touched = set()
        self.lane_var = lane_var
        self.vector_lanes = 1  # lanes of the vector loops around: one thread's contiguous piece
        # two evaluation environments: lane 0 and its neighbour along the lane axis
        self.env0 = {k: int(v) for k, v in sizes.items()}
        self.env1 = dict(self.env0)
        for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y",
                  "blockIdx.z"):
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
            lanes = self.vector_lanes
            if vector is not None:
                self.vector_lanes = lanes * max(1, n)
            self.stmt(s.body, w * n, u)
            self.vector_lanes = lanes
            if copies:
                del self.unrolled[s.var]
        elif isinstance(s, ir.Let):
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
            taken, decided = self._guard(s.cond)
            self.stmt(s.then, w * taken, unroll)
            if s.else_ is not None:
                self.stmt(s.else_, w * (1 - taken if decided else 1), unroll)
        elif isinstance(s, ir.Store):
            self.c["stores"] += w
            self._access(s.buffer, s.indices, _bytes(self._dtype(s.buffer, s.value.dtype)), w,
                         "store")
            for e in s.indices:
                self.expr(e, w)
            self.expr(s.value, w)
        elif isinstance(s, ir.Barrier):
            self.c["barriers"] += w
        elif isinstance(s, ir.AllReduce):
            self.c["allreduce"] += w
        elif isinstance(s, ir.Evaluate):
            self._intrinsic(s.call, w)
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
                    self.c["int_ops"] += w
            elif isinstance(x, ir.Call):
                if x.fn not in intrinsics.REGISTRY:
                    self.c["special"] += w
            elif isinstance(x, ir.Load):
                self._access(x.buffer, x.indices, _bytes(x.dtype), w, "load")
            stack.extend(ir.children(x))

    def _intrinsic(self, call: ir.Call, w: float) -> None:
        fn = call.fn
        if fn in _MMA_FLOPS:
            self.c["mma"] += w
            self.c["mma_flops"] += w * _MMA_FLOPS[fn] / 32  # per thread: the warp's share
        elif fn.startswith("ldmatrix_x"):
            count = int(fn[len("ldmatrix_x")])
            self.c["ldmatrix"] += w
            self.c["shared_load_bytes"] += w * count * 128 / 32  # count 8x8 16-bit tiles
            self.c["fragment_store_bytes"] += w * count * 128 / 32
        elif fn == "cp_async":
            src, nbytes = call.args[1], _eval(call.args[2], self.env0) or 16
            self.c["cp_async"] += w
            self.c["cp_async_bytes"] += w * nbytes
            self.c["shared_store_bytes"] += w * nbytes
            self._access(src.buffer, src.indices, nbytes, w, "load")
            self.c["global_vector_bytes"] += w * nbytes if nbytes >= 8 else 0
            self.vector_bytes = max(self.vector_bytes, nbytes)
        elif fn == "cp_async_wait":
            # waiting for all but the n newest groups: a ring of n + 2 stages
            n = _eval(call.args[0], self.env0)
            self.stages = max(self.stages, (n or 0) + 2)
        for a in call.args:
            if not isinstance(a, ir.Ref):
                self.expr(a, w)

    def _decidable(self) -> set:
        return set(self.unrolled) | set(self.unroll_lets) | self.size_names

    def _guard(self, cond) -> tuple[float, bool]:
        """(share of the unrolled copies in which `cond` can hold, whether
        it is decided in every copy). The conjuncts over unrolled loop
        variables and constants only are what simplification after unrolling
        folds: copies where one is false lose the then-branch. Others are
        assumed true (guards in tiled code nearly always are)."""
        if not self.unrolled:
            return 1.0, False
        known, parts = self._decidable(), _conjuncts(cond)
        mine = [c for c in parts if ir.free_vars(c) <= known and
                ir.free_vars(c) & (set(self.unrolled) | set(self.unroll_lets))]
        if not mine:
            return 1.0, False
        names = sorted(set().union(*(ir.free_vars(c) for c in mine)) & set(self.unrolled)
                       | {v for c in mine for x in ir.free_vars(c) if x in self.unroll_lets
                          for v in ir.free_vars(self.unroll_lets[x]) if v in self.unrolled})
        combos = math.prod(len(self.unrolled[v]) for v in names)
        if combos > 4096:
            return 1.0, False
        true = 0
        for values in itertools.product(*(self.unrolled[v] for v in names)):
            env = {**self.env0, **dict(zip(names, values))}
            for var, e in self.unroll_lets.items():
                env[var] = _eval(e, env)
            if all(_eval(c, env) for c in mine):
                true += 1
        return true / combos, len(mine) == len(parts)

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

    def _access(self, buf: str, indices, nbytes: int, w: float, kind: str) -> None:
        scope = self.scopes.get(buf, ("global", None))[0]
        scope = scope if scope in SCOPES else "local"
        self.c[f"{scope}_{kind}_bytes"] += w * nbytes
        if scope != "global":
            return
        self.touched.add(buf)
        # bytes between what neighbouring lanes touch -> sectors a warp moves per access
        stride = None
        entry = self.scopes.get(buf)
        strides = [1] if len(indices) == 1 else self._strides(buf)
        if entry is not None and strides is not None:
            a = b = 0
            for i, st in zip(indices, strides):
                x, y = _eval(i, self.env0), _eval(i, self.env1)
                if x is None or y is None:
                    a = None
                    break
                a, b = a + x * st, b + y * st
            if a is not None:
                stride = abs(b - a) * _bytes_of(entry[1])
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


def _constant(e, known: set) -> bool:
    """Whether integer expression `e` reads only constants and variables in `known`."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var):
            if x.name not in known:
                return False
        elif not isinstance(x, (ir.Imm, ir.Bin, ir.Un, ir.Cast, ir.Select)):
            return False
        stack.extend(ir.children(x))
    return True


def _conjuncts(c) -> list:
    if isinstance(c, ir.Bin) and c.op == "&&":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _bytes(dt) -> int:
    return max(1, dt.bits // 8)


def _bytes_of(buf) -> int:
    return _bytes(buf.dtype)


def _lane_var(res) -> str | None:
    for axis, d in zip("xyz", res.block):
        if d > 1:
            return f"threadIdx.{axis}"
    return None


class _RowMajor(Rewriter):
    """Subscripts as one row-major offset (what flatten_storage computes);
    a buffer of unknown shape leaves the marker subscript `_UNKNOWN`."""

    def __init__(self, strides):
        self.strides = strides

    def _flat(self, buf, indices):
        if len(indices) == 1:
            return indices
        st = self.strides(buf)
        if st is None:
            return (_UNKNOWN,)
        out = None
        for i, n in zip(indices, st):
            t = i if n == 1 else ir.Bin("*", i, ir.const(n), ir.int32)
            out = t if out is None else ir.Bin("+", out, t, ir.int32)
        return (out if out is not None else ir.const(0),)

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        return ir.Load(e.buffer, self._flat(e.buffer, self.exprs(e.indices)), e.dtype)

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        return ir.Store(s.buffer, self._flat(s.buffer, self.exprs(s.indices)),
                        self.expr(s.value), loc=s.loc)

    @staticmethod
    def failed(s) -> bool:
        return any(x is _UNKNOWN for x in ir.walk(s))


_UNKNOWN = ir.Var("__unknown_shape__")


def _kernel(k: ir.Kernel, res, scopes: dict, sizes: dict, flat: bool = True) -> dict:
    walk = _Walk(scopes, sizes, _lane_var(res), flat)
    walk.stmt(k.body, 1.0, 1)
    threads, blocks = res.threads, max(1, res.grid[0] * res.grid[1] * res.grid[2])
    n = threads * blocks
    f = {key: v * n for key, v in walk.c.items()}
    f["global_sector_bytes"] = walk.sector_bytes * n
    f["unique_global_bytes"] = float(sum(_size(scopes[b][1], sizes) for b in walk.touched
                                         if b in scopes))
    warps = -(-threads // 32)
    by_threads = THREADS_PER_SM // max(1, warps * 32)
    by_shared = SHARED_PER_SM // (res.shared_bytes + 1024) if res.shared_bytes else BLOCKS_PER_SM
    by_regs = REGS_PER_SM // max(1, res.registers * warps * 32)
    per_sm = max(0, min(BLOCKS_PER_SM, by_threads, by_shared, by_regs))
    f["blocks_per_sm"] = per_sm
    f["occupancy"] = min(1.0, per_sm * warps / WARPS_PER_SM)
    f["waves"] = blocks / (SMS * max(1, per_sm))
    f["threads"], f["blocks"] = threads, blocks
    f["shared_bytes"], f["registers"] = res.shared_bytes, res.registers
    g = f["global_load_bytes"] + f["global_store_bytes"]
    f["coalescing"] = g / f["global_sector_bytes"] if f["global_sector_bytes"] else 1.0
    f["vector_bytes"] = walk.vector_bytes
    f["vector_share"] = min(1.0, f["global_vector_bytes"] / g) if g else 0.0
    f["stages"], f["unroll"] = walk.stages, walk.unroll
    flops = f["flops"] + f["mma_flops"]
    f["flops_per_global_byte"] = flops / g if g else 0.0
    sh = f["shared_load_bytes"] + f["shared_store_bytes"]
    f["flops_per_shared_byte"] = flops / sh if sh else 0.0
    f["per_thread_flops"] = flops / n if n else 0.0
    f["kernel_ms"] = _kernel_ms(f)
    return f


def _kernel_ms(f: dict) -> float:
    """The analytic time of one kernel (see the module docstring)."""
    compute = max(f["flops"] / FP32_FLOPS_S + f["special"] / SPECIAL_OPS_S,
                  f["mma_flops"] / MMA_FLOPS_S)
    memory = max(f["unique_global_bytes"] / DRAM_BYTES_S,
                 f["global_sector_bytes"] / L2_BYTES_S,
                 (f["shared_load_bytes"] + f["shared_store_bytes"]) / SHARED_BYTES_S)
    # How much of the device the launch keeps busy: SMs with a block, and warps
    # enough per SM to hide latency (a quarter of the maximum suffices here).
    sms_busy = min(1.0, f["blocks"] / SMS)
    latency = min(1.0, max(f["occupancy"], 1 / WARPS_PER_SM) / 0.25)
    tail = math.ceil(f["waves"]) / f["waves"] if f["waves"] >= 1 else 1.0
    return LAUNCH_MS + 1e3 * max(compute, memory) * tail / (sms_busy * latency)


def _size(buf, sizes: dict) -> int:
    n = _bytes_of(buf)
    for d in buf.shape:
        v = _eval(d, sizes)
        n *= v if v is not None else 1
    return n


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
        "min": min, "max": max, "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
        ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
        "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b))}


def _eval(e, env: dict):
    """An integer expression's value in `env`, or None when it reads memory
    or an unknown variable."""
    if isinstance(e, ir.Imm):
        return int(e.value) if not isinstance(e.value, float) else None
    if isinstance(e, ir.Var):
        return env.get(e.name)
    if isinstance(e, ir.Bin):
        a = _eval(e.a, env)
        if a is None:
            return None
        b = _eval(e.b, env)
        return None if b is None else _OPS[e.op](a, b) if e.op in _OPS else None
    if isinstance(e, ir.Select):
        c = _eval(e.cond, env)
        return None if c is None else _eval(e.a if c else e.b, env)
    if isinstance(e, ir.Cast) and e.dtype.is_int:
        return _eval(e.x, env)
    if isinstance(e, ir.Un) and e.op == "-":
        x = _eval(e.x, env)
        return None if x is None else -x
    return None
