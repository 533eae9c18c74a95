"""Features of a lowered candidate: one fixed-length float vector read from
its Kernel IR, what the cost model (model.py) learns from.

Kernel IR is per-thread code (one body run by every thread of every block),
so each kernel is walked once with a *weight*: the product of the trip
counts of the loops around a node (extents evaluated at the tuning sizes,
which are fixed; an extent that depends on an outer loop variable is taken
at that variable's first value; a persistent grid's tile loop at the H200's
SM count, SMS). The body of a warp-specialised `Role` counts at its share of
the block's threads (128 per warpgroup), its index at 0. Both branches of an
`if` count in full:
the counts are upper bounds, and guards in tiled code are nearly always
true, except a branch that picks one thread (`threadIdx.x == c`,
`threadIdx.x % K == c`), which counts for that thread. Global and shared
loads count as the CUDA compiler issues them: once per address within a
straight-line region, and once for the unrolled copies that load the same
address (feature_walk.py `_repeats`). A persistent tile loop runs the
blocks' mean trips; each warpgroup of a role is walked at its own index.
Per-thread counts times threads times blocks are the kernel's totals.

Per kernel:
- arithmetic: float operations (`+ - * / min max`, casts not counted) and
  special functions (`exp`, `log`, `sqrt`, ... any math call) per thread;
  tensor-core flops (`mma_m16n8k16`: 4096 per warp);
- memory per scope (global, shared, local, fragment): bytes loaded and
  stored per thread; `cp_async` counts as a global load and a shared store,
  `ldmatrix` as a shared load, a TMA copy as its tensor map's box;
- global coalescing: for each global access, the distance in bytes between
  what neighbouring lanes touch (the index evaluated for lane 0 and lane 1 of
  the block's innermost thread dimension); a *sector* estimate of the bytes a
  warp moves (32-byte sectors), hence an efficiency in [0, 1];
- vector width: the widest vector access (bytes), the share of global
  bytes moved by vector accesses, memory instructions (global and shared
  accesses, a vector access one; integer operations inside a vector loop
  count once per vector, as the vectorize pass computes one address);
- launch: threads per block, blocks, waves on the device, estimated
  occupancy (resident warps per SM / 64) limited by threads, shared memory
  and the registers of validate.Resources;
- bytes in flight: a thread's global loads in one trip of the serial loops
  around them (independent of each other; a pipelined loop of depth s keeps
  s trips in flight; a broadcast counts its share of a sector), times the
  threads resident on an SM, and the memory efficiency that sustains
  (Little's law against MEMORY_LATENCY_S);
- tensor cores and pipelines: mma, ldmatrix and cp.async counts, the
  deepest software-pipeline ring (`For.stages`, or n + 2 for a
  `cp_async_wait(n)` once software pipelining has made the ring explicit),
  barriers, cross-thread reductions;
- unrolling: the product of unrolled extents around the deepest statement;
- reuse: float operations per global byte and per shared byte.

A program with several kernels sums the totals and takes the per-kernel
shape features (threads, occupancy, vector width, ...) from the kernel with
the largest estimated time (`analytic_ms`); `kernels` counts them.

`analytic_ms(features)` turns the vector into a time, per kernel: compute
(arithmetic over the H200's compute ceilings, instructions over its issue
rate, over the latency hiding of the resident warps, times the last wave's
tail) against memory (DRAM and L2 traffic over the ceilings of
shared/DESIGN.md at the efficiency the bytes in flight sustain, and shared
memory), each bound the largest of its terms plus a tenth of the others
(`_bound`), over the share of SMs the launch keeps busy; plus the latency of
barriers and cross-thread reductions per wave, a cost per block launched and
one per kernel. It is a proxy, not a prediction of the GPU: the sim measures
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

import math

import numpy as np

from ..lower import ir
from ..lower.pipeline import PASSES
from .feature_walk import _SUMMED, _Walk, _bytes_of, _eval, _lane_var

# H200 ceilings (shared/DESIGN.md, measured; per SM limits from the datasheet).
SMS = 132
DRAM_BYTES_S = 4.28e12       # device copy, read + write
L2_BYTES_S = 10e12           # issued global traffic that hits in cache
SHARED_BYTES_S = 33e12       # 128 B/clock/SM at 1.98 GHz
FP32_FLOPS_S = 60e12         # CUDA cores (cuBLAS fp32 no-TF32 reaches 50.9)
MMA_FLOPS_S = 660e12         # mma.sync on Hopper: about two thirds of the wgmma peak
WGMMA_FLOPS_S = 800e12       # wgmma: cuBLAS's 790-800 of the 989 dense peak (bf16 8192^3)
SPECIAL_OPS_S = 8e12         # SFU: 16 per clock per SM
LAUNCH_MS = 0.003            # per kernel
ISSUE_OPS_S = 33.5e12        # lane instructions: 132 SMs x 128 lanes x 1.98 GHz
MEMORY_LATENCY_S = 400e-9    # DRAM latency: what it takes in flight to stream at full rate
BARRIER_S = 40e-9            # one __syncthreads of a block
SHUFFLE_S = 15e-9            # one warp-shuffle step of a cross-thread reduction
OVERLAP = 0.1                # of the times a larger one overlaps, not hidden (_bound)
BLOCK_S = 2e-9               # an SM's block scheduler, per block launched on it
WARPS_PER_SM, THREADS_PER_SM, BLOCKS_PER_SM = 64, 2048, 32
SHARED_PER_SM, REGS_PER_SM = 228 * 1024, 65536

_SHAPE = ["threads", "blocks", "waves", "occupancy", "blocks_per_sm", "shared_bytes",
          "registers", "coalescing", "vector_bytes", "vector_share", "stages", "unroll",
          "flops_per_global_byte", "flops_per_shared_byte", "per_thread_flops",
          "inflight_per_sm", "memory_efficiency", "log_kernel_ms"]
NAMES = tuple(_SUMMED + _SHAPE + ["kernels", "log_analytic_ms"])
INDEX = {n: i for i, n in enumerate(NAMES)}


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



def _kernel(k: ir.Kernel, res, scopes: dict, sizes: dict, flat: bool = True) -> dict:
    # a persistent grid's loops run over the tiles per SM: its SM count is the device's
    walk = _Walk(scopes, {ir.SM_COUNT: SMS, **sizes}, _lane_var(res), flat, res.threads,
                 {m.name: m for m in k.tensor_maps}, res.grid[0])
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
    # the kernel's __launch_bounds__ make ptxas fit one block in the register file: at most
    # REGS_PER_SM / (its threads) registers a thread, in eights (the rest spill, not modelled)
    regs = min(res.registers, max(16, REGS_PER_SM // (warps * 32) // 8 * 8))
    by_regs = REGS_PER_SM // max(1, regs * warps * 32)
    per_sm = max(0, min(BLOCKS_PER_SM, by_threads, by_shared, by_regs))
    f["blocks_per_sm"] = per_sm
    f["occupancy"] = min(1.0, per_sm * warps / WARPS_PER_SM)
    # the share of the register file the resident blocks hold: a thread with many registers
    # has many values in flight (a register tile of accumulators), which hides latency as
    # more warps would
    f["register_use"] = min(1.0, per_sm * warps * 32 * regs / REGS_PER_SM)
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
    # global bytes a thread has in flight (its loads in one trip of the serial loops
    # around them), times the threads resident on an SM, against what the DRAM
    # latency takes to keep the SM's share of the bandwidth busy (Little's law)
    f["inflight_per_sm"] = walk.c["inflight_bytes"] * threads * max(1, per_sm)
    f["memory_efficiency"] = min(1.0, f["inflight_per_sm"] / (DRAM_BYTES_S / SMS
                                                               * MEMORY_LATENCY_S))
    f["kernel_ms"] = _kernel_ms(f)
    return f


def _kernel_ms(f: dict) -> float:
    """The analytic time of one kernel (see the module docstring)."""
    # How much of the device the launch keeps busy: SMs with a block, and warps
    # enough per SM to hide arithmetic latency (a quarter of the maximum here).
    sms_busy = min(1.0, f["blocks"] / SMS)
    latency = min(1.0, max(f["occupancy"], f["register_use"] / 2, 1 / WARPS_PER_SM) / 0.25)
    # a warp issues for all its 32 lanes: a block of 8 threads pays for 32
    lanes = f["threads"] / (32 * math.ceil(max(1, f["threads"]) / 32))
    tail = math.ceil(f["waves"]) / f["waves"] if f["waves"] >= 1 else 1.0
    # issue slots: a fused multiply-add is two flops in one instruction; a vector
    # access is one instruction. (Integer index arithmetic is left out: counted before
    # unrolling and before the CUDA compiler's common-subexpression elimination, it is
    # not what runs.)
    issue = (f["flops"] / 2 + f["special"] + f["mem_instructions"]) / ISSUE_OPS_S
    # (wgmma is asynchronous: a TMA ring and the accumulators in flight hide its latency,
    # not resident warps)
    compute = _bound((f["flops"] / FP32_FLOPS_S + f["special"] / SPECIAL_OPS_S) / latency,
                     (f["mma_flops"] - f["wgmma_flops"]) / MMA_FLOPS_S / latency,
                     f["wgmma_flops"] / WGMMA_FLOPS_S, issue / latency) / lanes
    # global traffic at the share of the bandwidth its bytes in flight sustain
    memory = _bound(_bound(f["unique_global_bytes"] / DRAM_BYTES_S,
                           f["global_sector_bytes"] / L2_BYTES_S)
                    / max(f["memory_efficiency"], 1 / 64),
                    (f["shared_load_bytes"] + f["shared_store_bytes"]) / SHARED_BYTES_S / latency
                    / lanes)
    # the last, partial wave leaves SMs idle for arithmetic; a stream of memory
    # requests goes on at the rate the bytes in flight allow
    body = _bound(compute * tail, memory)
    # barriers and cross-thread reductions (log2(threads) shuffle steps and a barrier)
    # are latency each resident block waits for, wave after wave
    n = max(1, f["threads"] * f["blocks"])
    steps = (f["barriers"] / n * BARRIER_S + f["allreduce"] / n
             * (BARRIER_S + math.log2(max(2, f["threads"])) * SHUFFLE_S))
    sync = steps * max(1, math.ceil(f["waves"]))
    blocks = f["blocks"] / SMS * BLOCK_S  # many small blocks cost their launches
    return LAUNCH_MS + 1e3 * (body / sms_busy + sync + blocks)


def _bound(*times: float) -> float:
    """Times of work that overlaps: the largest, plus OVERLAP of the others
    (overlap is never perfect, and a limit that is not the binding one still
    reaches the estimate)."""
    top = max(times)
    return top + OVERLAP * (sum(times) - top)


def _size(buf, sizes: dict) -> int:
    n = _bytes_of(buf)
    for d in buf.shape:
        v = _eval(d, sizes)
        n *= v if v is not None else 1
    return n
