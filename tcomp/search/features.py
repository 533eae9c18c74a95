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
"""
from __future__ import annotations

import math

import numpy as np

from ..lower import intrinsics, ir

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
    for k, res in zip(prog.kernels, valid.resources):
        kernels.append(_kernel(k, res, scopes, sizes))
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


# ------------------------------------------------------------------ one kernel
class _Walk:
    """Per-thread counts of one kernel body (weights: enclosing trip counts)."""

    def __init__(self, scopes: dict, sizes: dict, lane_var: str | None):
        self.scopes = dict(scopes)
        self.c = {n: 0.0 for n in _SUMMED}
        self.sector_bytes = 0.0
        self.vector_bytes = 0
        self.stages = 0
        self.unroll = 1
        self.touched = set()
        self.lane_var = lane_var
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
            if s.vector is not None:
                self.vector_bytes = max(self.vector_bytes, s.vector.bytes)
                vec = s.vector.bytes * (len(s.vector.loads) + (s.vector.store_base is not None))
                if self._scope_of_vector(s.vector) == "global":
                    self.c["global_vector_bytes"] += w * vec
            self.stmt(s.body, w * n, u)
        elif isinstance(s, ir.Let):
            self.env0[s.var] = _eval(s.value, self.env0)
            self.env1[s.var] = _eval(s.value, self.env1)
            self.expr(s.value, w)
            self.stmt(s.body, w, unroll)
        elif isinstance(s, ir.Alloc):
            self.scopes[s.buffer.name] = (s.buffer.scope, s.buffer)
            self.stmt(s.body, w, unroll)
        elif isinstance(s, ir.If):
            self.expr(s.cond, w)
            self.stmt(s.then, w, unroll)
            if s.else_ is not None:
                self.stmt(s.else_, w, unroll)
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
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, ir.Bin):
                if x.dtype.is_float and x.op in _FLOAT_OPS:
                    self.c["flops"] += w
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
        if len(indices) == 1:
            a, b = _eval(indices[0], self.env0), _eval(indices[0], self.env1)
            entry = self.scopes.get(buf)
            if a is not None and b is not None and entry is not None:
                stride = abs(b - a) * _bytes_of(entry[1])
        if stride is None or self.lane_var is None:
            per_thread = nbytes  # unknown: count as coalesced
        elif stride == 0:
            per_thread = max(nbytes, 32) / 32  # a broadcast: one sector for the warp
        elif stride <= nbytes:
            per_thread = nbytes
        else:
            per_thread = min(max(nbytes, 32), stride)  # lanes in different sectors
        self.sector_bytes += w * per_thread


def _bytes(dt) -> int:
    return max(1, dt.bits // 8)


def _bytes_of(buf) -> int:
    return _bytes(buf.dtype)


def _lane_var(res) -> str | None:
    for axis, d in zip("xyz", res.block):
        if d > 1:
            return f"threadIdx.{axis}"
    return None


def _kernel(k: ir.Kernel, res, scopes: dict, sizes: dict) -> dict:
    walk = _Walk(scopes, sizes, _lane_var(res))
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
