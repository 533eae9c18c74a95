"""Sketch rules: each reads a stage's place in the dataflow graph (graph.py)
and, given parameters, applies schedule primitives to it.

A rule is four functions over a `Context` (the op, its graph, the stages'
loop extents at the tuning sizes, the device limits):
  applies(ctx, stage) -> bool          whether the rule fits the stage
  sample(ctx, stage, rng) -> dict      random parameters within device limits
  feasible(ctx, stage, params) -> bool the cheap resource checks (threads,
                                       shared memory, registers) before lowering
  apply(s, ctx, stage, params)         the primitives, on Schedule `s`
Parameters are plain JSON values, so a candidate's parameters can be stored
in a record and mutated later (space.py). The rules:

  simt_tile    a matmul stage: block tile bm x bn, thread tile tm x tn in
               registers (cache_write local), A and B tiles of bk in shared
               memory, per-k register fragments, optional double buffering,
               16-byte vectors, warp lane grid, padding, block rasterization
               (the parameters of bench/schedules.py `gemm`; its schedules
               are points of this rule)
  tc_tile      a matmul stage with half inputs: block/warp tiles, K tiles of
               bk in shared memory (padded rows), fragment caches, mma_m16n8k16,
               pipeline depth 2..5 (bench/schedules.py `tc_gemm`)
  shared_tile  a reduction with two or more spatial axes and affine reads,
               other than the exact matmul (batched and transposed products,
               contractions, convolution windows): tiling.shared_tiles, the
               multi-level tiling of simt_tile derived from the subscripts:
               block tiles of the last two spatial axes (others on blockIdx.z),
               register tiles, every read tensor in shared memory at the
               reduce-tile loop (layout and copy vectors from its subscripts),
               fragments, pipelining
  reg_tile     any reduction with two or more spatial axes (convolutions,
               batched and transposed products): block and thread tiles of the
               last two spatial axes, a register accumulator, the outer
               reduction axis split by bk, outer spatial axes on blockIdx.z
  row          an elementwise stage whose row statistics (reductions over the
               row, read directly or through inlined elementwise temporaries:
               row_group.py) are computed at its row loop as cross-thread
               reductions, kept in registers, the row optionally read once
               into shared memory (bench/schedules.py softmax / layernorm)
  row_regs     the stages of `row`, with the row held in registers across the
               block (templates.row_in_registers; bench/row_schedules.py):
               the row inputs read once into local caches in 16-byte pieces,
               each thread owning the same pieces in every stage, the
               statistics as cross-thread reductions over them; the per-row
               scalar temporaries (rstd) kept as stages in registers, the
               row-shaped ones (softmax's e) too with `keep_rows`; other
               row-shaped outputs (add + layernorm's S) stored at the row;
               optionally 1-D weights of the row's length in shared memory
  row_stream   the stages of `row` with the row streamed (templates.row_streamed;
               bench/row_schedules.py layernorm_streamed): each statistic a
               pass over the row reading the row inputs it reads itself in
               16-byte pieces through per-piece register caches, the output a
               last pass, the per-row scalars kept in registers, the piece
               loops unrolled by 1-8 (unroll factor): few registers a thread,
               several rows per SM, the row re-read from L2
  cross_thread a reduction: its outputs over blocks (rows per block on
               threadIdx.y), its reduction axes fused and spread over
               threadIdx.x, reduced across threads
  rfactor      a reduction: the reduction split by `factor`, the partial
               results over (factor x outputs) in parallel, then reduced across
               threads
  flat         anything: the spatial axes fused, `vec`-wide vectors, `threads`
               threads per block; a reduction runs serially in each thread
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..lang.symbolic import eval_int
from ..schedule import templates, tiling
from . import graph as G
from . import row_group as RG


@dataclass(frozen=True)
class Limits:
    """What one thread block may use (an H200 by default: sm_90)."""
    threads: int = 1024
    block_dims: tuple[int, int, int] = (1024, 1024, 64)
    grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    shared_bytes: int = 227 * 1024
    registers: int = 255  # per thread; the estimate in space.py is rough, so rules stay below
    block_registers: int = 65536  # 32-bit registers of one block (a thread: this / threads)


@dataclass
class Context:
    """What the rules read: the op, its stage graph, every stage's loop
    extents at the tuning sizes, the limits, and the stages the plan inlines."""
    op: object
    graph: object
    sizes: dict
    extents: dict  # stage -> {var: int}
    limits: Limits = field(default_factory=Limits)
    inlined: frozenset = frozenset()
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # rules' graph readings

    def node(self, stage):
        return self.graph.nodes[stage]


def extents_of(schedule, sizes) -> dict:
    out = {}
    for name, st in schedule.states.items():
        out[name] = {v: max(0, eval_int(hi, sizes) - eval_int(lo, sizes))
                     for v, (lo, hi) in st.definition.ranges.items()}
    return out


def pow2_upto(n: int, lo: int = 1, hi: int = 1 << 30) -> list[int]:
    """Powers of two from lo to min(hi, the smallest power of two >= n)."""
    top, out, p = max(lo, min(hi, 1 << max(0, int(n - 1).bit_length()))), [], lo
    while p <= top:
        out.append(p)
        p *= 2
    return out


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


# ------------------------------------------------------------------ flat
def _flat_applies(ctx, stage):
    return True


def _flat_sample(ctx, stage, rng):
    n = ctx.node(stage)
    total = 1
    for v in n["spatial"]:
        total *= ctx.extents[stage][v]
    vec = pick(rng, [1, 2, 4]) if n["kind"] == "elementwise" and n["spatial"] else 1
    threads = pick(rng, pow2_upto(max(1, total // vec), 32, ctx.limits.threads))
    unroll = pick(rng, [1, 2, 4, 8]) if n["reduce"] else 1
    return {"threads": threads, "vec": vec, "unroll": unroll}


def _flat_feasible(ctx, stage, p):
    return p["threads"] <= ctx.limits.threads


def _fuse_all(st, axes):
    f = axes[0]
    for a in axes[1:]:
        f = st.fuse(f, a)
    return f


def _flat_apply(s, ctx, stage, p):
    st = s[stage]
    if not st.axes:
        return
    f = _fuse_all(st, list(st.axes))
    if p["vec"] > 1:
        f, fv = st.split(f, p["vec"])
    fo, fi = st.split(f, p["threads"])
    st.bind(fo, "blockIdx.x")
    st.bind(fi, "threadIdx.x")
    if p["vec"] > 1 and not st.reduce_axes:
        st.vectorize(fv)
    if p["unroll"] > 1 and st.reduce_axes:
        ko, ki = st.split(st.reduce_axes[-1], p["unroll"])
        st.unroll(ki)


# ---------------------------------------------------------- cross_thread
def _reduction(ctx, stage):
    n = ctx.node(stage)
    return bool(n["reduce"])


def _ct_sample(ctx, stage, rng):
    n = ctx.node(stage)
    red = 1
    for v in n["reduce"]:
        red *= ctx.extents[stage][v]
    threads = pick(rng, pow2_upto(red, 32, ctx.limits.threads))
    rows = pick(rng, [1, 1, 2, 4, 8]) if n["spatial"] and threads <= 256 else 1
    return {"threads": threads, "rows": rows, "unroll": pick(rng, [1, 2, 4, 8])}


def _ct_feasible(ctx, stage, p):
    return p["threads"] * p["rows"] <= ctx.limits.threads


def _ct_apply(s, ctx, stage, p):
    """bench/schedules.py `rowsum` for any reduction: each thread reduces a
    strided slice of the (fused) reduction, `unroll` loads at a time."""
    st = s[stage]
    reduce_ax = _fuse_all(st, list(st.reduce_axes))
    ro, ri = st.split(reduce_ax, p["threads"])
    inner = [ro]
    if p["unroll"] > 1:
        inner = list(st.split(ro, p["unroll"]))
    outer = []
    if st.axes:
        f = _fuse_all(st, list(st.axes))
        outer = [f]
        if p["rows"] > 1:
            outer = list(st.split(f, p["rows"]))
    st.reorder(*outer, ri, *inner)
    if outer:
        st.bind(outer[0], "blockIdx.x")
    st.bind(ri, "threadIdx.x")
    if len(outer) > 1:
        st.bind(outer[1], "threadIdx.y")
    if p["unroll"] > 1:
        st.unroll(inner[1])


# --------------------------------------------------------------- rfactor
def _rf_applies(ctx, stage):
    n = ctx.node(stage)
    return (bool(n["reduce"]) and n["reduce_op"] in ("+", "*", "max", "min")
            and n["writers"] == 1)


def _rf_sample(ctx, stage, rng):
    n = ctx.node(stage)
    k = ctx.extents[stage][n["reduce"][0]]
    return {"factor": pick(rng, pow2_upto(k, 32, ctx.limits.threads)),
            "threads": pick(rng, [32, 64, 128, 256])}


def _rf_feasible(ctx, stage, p):
    return p["factor"] <= ctx.limits.threads and p["threads"] <= ctx.limits.threads


def _rf_apply(s, ctx, stage, p):
    st = s[stage]
    ko, ki = st.split(st.reduce_axes[0], p["factor"])
    rf = st.rfactor(ki)
    # the partial reductions: every (k_i, outputs) point in parallel, one thread each
    f = _fuse_all(rf, list(rf.axes))
    fo, fi = rf.split(f, p["threads"])
    rf.bind(fo, "blockIdx.x")
    rf.bind(fi, "threadIdx.x")
    (k,) = st.reduce_axes
    if st.axes:
        st.bind(_fuse_all(st, list(st.axes)), "blockIdx.x")
    st.bind(k, "threadIdx.x")


# -------------------------------------------------------------- reg_tile
def _rt_applies(ctx, stage):
    n = ctx.node(stage)
    return bool(n["reduce"]) and len(n["spatial"]) >= 2 and n["writers"] == 1


def _rt_sample(ctx, stage, rng):
    n = ctx.node(stage)
    e = ctx.extents[stage]
    ym, yn = n["spatial"][-2:]
    for _ in range(50):
        p = {"bm": pick(rng, pow2_upto(e[ym], 1, 128)), "bn": pick(rng, pow2_upto(e[yn], 1, 128)),
             "tm": pick(rng, [1, 2, 4, 8]), "tn": pick(rng, [1, 2, 4, 8]),
             "bk": pick(rng, pow2_upto(e[n["reduce"][0]], 1, 32))}
        p["tm"], p["tn"] = min(p["tm"], p["bm"]), min(p["tn"], p["bn"])
        if _rt_feasible(ctx, stage, p):
            return p
    return {"bm": 1, "bn": 32, "tm": 1, "tn": 1, "bk": 1}


def _rt_feasible(ctx, stage, p):
    threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return (p["bm"] % p["tm"] == 0 and p["bn"] % p["tn"] == 0 and threads <= ctx.limits.threads
            and p["tm"] * p["tn"] <= 64)


def _rt_apply(s, ctx, stage, p):
    C = s[stage]
    CL = s.cache_write(C, "local")
    *outer, m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, p["bm"], p["bn"])
    mio, mii = C.split(mi, p["tm"])
    nio, nii = C.split(ni, p["tn"])
    C.reorder(mo, no, mio, nio, mii, nii)
    if outer:
        C.bind(_fuse_all(C, outer), "blockIdx.z")
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    C.unroll(mii)
    C.unroll(nii)
    CL.compute_at(C, nio)
    *_, lm, ln = CL.axes
    k0, *krest = CL.reduce_axes
    ko, ki = CL.split(k0, p["bk"])
    CL.reorder(ko, ki, *krest, lm, ln)
    CL.unroll(lm)
    CL.unroll(ln)


# ------------------------------------------------------------- simt_tile
def _st_applies(ctx, stage):
    n = ctx.node(stage)
    return (n["kind"] == "matmul" and n["writers"] == 1 and n["operands"][0] != n["operands"][1]
            and not n["output"] is False)


LANES = [None, (4, 8), (8, 4), (2, 16), (16, 2)]


def _st_sample(ctx, stage, rng):
    n = ctx.node(stage)
    e = ctx.extents[stage]
    m, nn = n["spatial"]
    (k,) = n["reduce"]
    for _ in range(100):
        p = {"bm": pick(rng, pow2_upto(e[m], 8, 256)), "bn": pick(rng, pow2_upto(e[nn], 8, 256)),
             "bk": pick(rng, pow2_upto(e[k], 4, 32)), "tm": pick(rng, [1, 2, 4, 8]),
             "tn": pick(rng, [1, 2, 4, 8]), "fragments": bool(rng.integers(2)),
             "pipeline": bool(rng.integers(2)), "vector": bool(rng.integers(4) > 0),
             "lanes": pick(rng, LANES), "group": pick(rng, [None, None, 4, 8, 16]),
             "pad": bool(rng.integers(2))}
        p["tm"], p["tn"] = min(p["tm"], p["bm"]), min(p["tn"], p["bn"])
        if _st_feasible(ctx, stage, p):
            return p
    return None


def _threads_fit(ctx, tx, ty, lanes) -> bool:
    """A tx x ty block of register-tile threads within the device's limit,
    whose warps can be ln x lm lane grids when `lanes` = (ln, lm) is given."""
    threads = tx * ty
    return threads <= ctx.limits.threads and not (
        lanes and (threads % 32 or ty % lanes[1] or tx % lanes[0]))


def _st_feasible(ctx, stage, p):
    bm, bn, bk, tm, tn = p["bm"], p["bn"], p["bk"], p["tm"], p["tn"]
    if bm % tm or bn % tn:
        return False
    if not _threads_fit(ctx, bn // tn, bm // tm, p["lanes"]):
        return False
    if p["pad"] and not p["vector"]:
        return False
    item = 4
    shared = (bm * (bk + 4 * p["pad"]) + bk * bn) * item * (2 if p["pipeline"] else 1)
    regs = tm * tn + (tm + tn) * (2 if p["fragments"] else 0) + 24
    return shared <= ctx.limits.shared_bytes and regs <= 200


def _st_apply(s, ctx, stage, p):
    """bench/schedules.py `gemm` (the shared template), with the op's names."""
    a_name, b_name = ctx.node(stage)["operands"]
    templates.simt_gemm(s, stage, a_name, b_name, p["bm"], p["bn"], p["bk"], p["tm"], p["tn"],
                        fragments=p["fragments"], pipeline=p["pipeline"], vector=p["vector"],
                        lanes=p["lanes"], group=p["group"], pad=p["pad"])


# ----------------------------------------------------------- shared_tile
def _sh_applies(ctx, stage):
    """A reduction over 2+ spatial axes that simt_tile does not already cover,
    reading tensors that are computed (not inlined into it) at affine
    subscripts: tiling.shared_tiles caches each of them in shared memory."""
    n = ctx.node(stage)
    return (bool(n["reduce"]) and len(n["spatial"]) >= 2 and n["writers"] == 1
            and n["kind"] != "matmul" and n["subscripts"] is not None and bool(n["reads"])
            and not any(t in ctx.inlined or t == n["tensor"] for t in _read_stages(ctx, n)))


def _read_stages(ctx, n):
    """The tensors `n` reads and the stages writing them."""
    return set(n["reads"]) | {s for s in ctx.graph.nodes if ctx.node(s)["tensor"] in n["reads"]}


def _sh_sizes(extent, lo, hi):
    """Tile sizes from `lo` (or the extent's power of two when smaller: tiny
    tiles of a large axis starve the shared tiles of reuse) to `hi`."""
    return pow2_upto(extent, min(lo, pow2_upto(extent)[-1]), hi)


def _sh_reduce_options(extent):
    """Split factors of a reduce axis after the first; None keeps it whole."""
    return [f for f in pow2_upto(extent, 1, 32) if f < extent] + [None]


def _sh_sample(ctx, stage, rng):
    n = ctx.node(stage)
    e = ctx.extents[stage]
    m, nn = n["spatial"][-2:]
    k0, *krest = n["reduce"]
    for _ in range(100):
        p = {"bm": pick(rng, _sh_sizes(e[m], 8, 128)), "bn": pick(rng, _sh_sizes(e[nn], 8, 128)),
             "bk": pick(rng, _sh_sizes(e[k0], 4, 32)),
             "rk": [pick(rng, _sh_reduce_options(e[r])) for r in krest],
             "tm": pick(rng, [1, 2, 4, 8]), "tn": pick(rng, [1, 2, 4, 8]),
             "fragments": bool(rng.integers(2)), "pipeline": pick(rng, [0, 0, 2, 2, 3, 4]),
             "vector": bool(rng.integers(4) > 0), "lanes": pick(rng, LANES),
             "pad": bool(rng.integers(2))}
        p["tm"], p["tn"] = min(p["tm"], p["bm"]), min(p["tn"], p["bn"])
        if _sh_feasible(ctx, stage, p):
            return p
    return None


def _sh_tiles(ctx, stage, p, inner=False):
    """{tensor: (elements per dimension, bytes per element)} of the shared
    tiles (or, with `inner`, one thread's register fragments) of a plan."""
    n = ctx.node(stage)
    ext = tiling.tile_extents(n["spatial"], n["reduce"], p["bm"], p["bn"], p["bk"], p["rk"],
                              p["tm"], p["tn"], inner, ctx.extents[stage])
    out = {}
    for t, dims in n["subscripts"].items():
        tensor = ctx.op.tensors[t]
        shape = [eval_int(d, ctx.sizes) for d in tensor.shape]
        out[t] = (tiling.footprint(dims, ext, shape), tensor.dtype.numpy.itemsize)
    return out


def _sh_feasible(ctx, stage, p):
    """Threads per block, grid, shared bytes (padded rows, pipeline copies)
    and a register estimate (accumulators, fragments, prefetched values)."""
    n = ctx.node(stage)
    bm, bn, tm, tn = p["bm"], p["bn"], p["tm"], p["tn"]
    if len(p["rk"]) != len(n["reduce"]) - 1 or bm % tm or bn % tn or p["bk"] < 1:
        return False
    ty, tx = bm // tm, bn // tn
    threads = tx * ty
    if not _threads_fit(ctx, tx, ty, p["lanes"]):
        return False
    e = ctx.extents[stage]
    *outer, m, nn = n["spatial"]
    z = 1
    for v in outer:
        z *= e[v]
    if z > ctx.limits.grid_dims[2] or -(-e[m] // bm) > ctx.limits.grid_dims[1]:
        return False
    copies = max(1, p["pipeline"])
    shared, elements = 0, 0
    for t, (dims, item) in _sh_tiles(ctx, stage, p).items():
        size = math.prod(dims)
        j = tiling.inner_dim(n["subscripts"][t], m, nn)
        if p["pad"] and j is not None and j != len(dims) - 1:
            size = size // dims[j] * tiling.padded(dims[j])  # stored rows along dimension j
        shared += size * item * copies
        elements += size
    frags = sum(math.prod(d) for d, _ in _sh_tiles(ctx, stage, p, inner=True).values())
    regs = (tm * tn + (frags if p["fragments"] else 0)
            + (-(-elements // threads) if p["pipeline"] == 2 else 0) + 24)
    return shared <= ctx.limits.shared_bytes and regs <= 200


def _sh_apply(s, ctx, stage, p):
    """tiling.shared_tiles with the plan's parameters."""
    tiling.shared_tiles(s, stage, p["bm"], p["bn"], p["bk"], p["tm"], p["tn"], rk=p["rk"],
                        fragments=p["fragments"], pipeline=p["pipeline"], vector=p["vector"],
                        lanes=p["lanes"], pad=p["pad"])


# --------------------------------------------------------------- tc_tile
def _tc_applies(ctx, stage):
    n = ctx.node(stage)
    return (n["kind"] == "matmul" and n["tensor_core"] and n["writers"] == 1
            and n["operands"][0] != n["operands"][1])


def _tc_sample(ctx, stage, rng):
    n = ctx.node(stage)
    e = ctx.extents[stage]
    m, nn = n["spatial"]
    (k,) = n["reduce"]
    for _ in range(100):
        p = {"bm": pick(rng, pow2_upto(e[m], 16, 256)), "bn": pick(rng, pow2_upto(e[nn], 16, 256)),
             "wm": pick(rng, [16, 32, 64]), "wn": pick(rng, [16, 32, 64]),
             "bk": pick(rng, pow2_upto(e[k], 16, 64)), "pad": bool(rng.integers(4) > 0),
             "vector": True, "pipeline": pick(rng, [0, 2, 3, 3, 4, 5]),
             "unroll_k": bool(rng.integers(2)), "swizzle": bool(rng.integers(2)),
             # paired stores: +5% at 4096^3, +40% at 8192x8192x512 (H200, bench/tc_gemm.py);
             # the shared-memory epilogue: best at 8192x8192x512 with bk=32, 4 stages
             "pair_stores": bool(rng.integers(4) > 0), "smem_epilogue": bool(rng.integers(4) == 0)}
        for key, operand in zip(("a_stage", "b_stage"), n["operands"]):
            if operand in ctx.inlined:  # a temporary (conv2d's im2col): kept as its own stage?
                p[key] = bool(rng.integers(2))
        p["wm"], p["wn"] = min(p["wm"], p["bm"]), min(p["wn"], p["bn"])
        if p["swizzle"]:  # (H200: 377 TFLOP/s swizzled against 320 padded, 4096^3)
            p["pad"] = False
        if _tc_feasible(ctx, stage, p):
            return p
    return None


def _tc_feasible(ctx, stage, p):
    bm, bn, wm, wn, bk = p["bm"], p["bn"], p["wm"], p["wn"], p["bk"]
    if bm % wm or bn % wn or wm % 16 or wn % 8 or bk % 16:
        return False
    if p.get("swizzle") and p["pad"]:
        return False  # one or the other (Stage.swizzle refuses storage_align padding)
    warps = (bm // wm) * (bn // wn)
    copies = max(2 if p["pipeline"] else 1, p["pipeline"] or 1)
    pad = 8 if p["pad"] else 0
    shared = copies * (bm * (bk + pad) + bk * (bn + pad)) * 2
    if p.get("smem_epilogue"):  # the output tile staged in shared memory (C's type, <= 4 bytes)
        shared += bm * (bn + pad) * ctx.op.tensors[stage].dtype.numpy.itemsize
    regs = wm * wn // 32 + (wm // 16) * 4 + (wn // 8) * 2 + 40  # accumulators + A, B fragments
    return (32 * warps <= ctx.limits.threads and shared <= ctx.limits.shared_bytes
            and regs <= 220 and p["pipeline"] in (0, 2, 3, 4, 5))


def _tc_keeps(ctx, stage, p) -> set:
    """The operands `p` keeps as stages of their own (not inlined)."""
    a_name, b_name = ctx.node(stage)["operands"]
    return {name for key, name in (("a_stage", a_name), ("b_stage", b_name)) if p.get(key)}


def _tc_apply(s, ctx, stage, p):
    """bench/schedules.py `tc_gemm` (the shared template, lanes=32). An operand
    that is a temporary is either inlined and its expression copied into
    shared memory (cache_read of the inlined stage), or, with `a_stage` /
    `b_stage`, kept as its own stage and placed in shared memory at the
    K-tile loop (schedules.tc_conv2d's im2col: whole 16-byte pieces of its
    rows, copied by cp.async with zero-fill where it has a guard)."""
    a_name, b_name = ctx.node(stage)["operands"]
    C = s[stage]
    CF = s.cache_write(C, "fragment")

    def operand(name, key):
        if p.get(key):
            def own():
                s[name].set_scope("shared")
                return s[name]
            return own
        return lambda: s.cache_read(name, "shared", [CF])
    templates.tc_tiles(s, C, CF, operand(a_name, "a_stage"), operand(b_name, "b_stage"),
                       p["bm"], p["bn"], p["wm"],
                       p["wn"], p["bk"], 32, p["vector"], p["pad"], p["pipeline"], p["unroll_k"],
                       swizzle=p.get("swizzle", False),  # (plans recorded before: padded)
                       pair_stores=p.get("pair_stores", False),
                       smem_epilogue=p.get("smem_epilogue", False))


# ------------------------------------------------------------------- row
def row_producers(ctx, stage) -> list[str]:
    """The reductions `row` computes at `stage`'s row loop (its statistics,
    row_group.statistics): single-writer, one reduction axis, spatial axes
    the same extents as `stage`'s leading ones, read by `stage` directly or
    through inlined elementwise temporaries (softmax's e and rs), and feeding
    only `stage`, one another, or stages inlined into those."""
    return RG.statistics(ctx, stage)


def _row_applies(ctx, stage):
    return bool(row_producers(ctx, stage))


def _row_input(ctx, stage):
    """An input read by the stage and by every row producer (the row itself),
    through inlined stages that feed only those (row_group.cacheable)."""
    s_reads = _reads_through_inlined(ctx, stage)
    common = None
    for p in row_producers(ctx, stage):
        r = _reads_through_inlined(ctx, p)
        common = r if common is None else common & r
    inputs = {t.name: t for t in ctx.op.inputs}
    group = {stage, *row_producers(ctx, stage)}
    cands = sorted(t for t in (common or set()) & s_reads
                   if t in inputs and inputs[t].ndim == len(ctx.node(stage)["spatial"])
                   and RG.cacheable(ctx, t, group, ctx.inlined))
    return cands[0] if cands else None


def _reads_through_inlined(ctx, stage) -> set:
    return RG.reads(ctx, stage, ctx.inlined)


def _row_sample(ctx, stage, rng):
    n = ctx.node(stage)
    d = ctx.extents[stage][n["spatial"][-1]]
    vec = pick(rng, [1, 2, 4])
    return {"threads": pick(rng, pow2_upto(max(1, d // vec), 32, ctx.limits.threads)),
            "vec": vec, "shared_row": _row_input(ctx, stage) is not None and bool(rng.integers(2)),
            "local": bool(rng.integers(4) > 0)}


def _row_feasible(ctx, stage, p):
    if p["threads"] > ctx.limits.threads:
        return False
    if p["shared_row"]:
        n = ctx.node(stage)
        d = ctx.extents[stage][n["spatial"][-1]]
        x = _row_input(ctx, stage)
        if x is None:
            return False  # no row to stage (fused add + layernorm: h also feeds S)
        item = 8 if ctx.op.tensors[x].dtype.name == "float64" else 4
        return d * item <= ctx.limits.shared_bytes
    return True


def _row_apply(s, ctx, stage, p):
    """bench/schedules.py `_row_op`: one block per row (the leading spatial
    axes fused), statistics computed at the row as cross-thread reductions."""
    O = s[stage]
    *lead, d = O.axes
    row = _fuse_all(O, lead)
    O.bind(row, "blockIdx.x")
    vec, threads = p["vec"], p["threads"]
    if vec > 1:
        d, dv = O.split(d, vec)
    do, di = O.split(d, threads)
    O.bind(di, "threadIdx.x")
    if vec > 1:
        O.vectorize(dv)
    prods = row_producers(ctx, stage)
    if p["shared_row"]:
        X = _row_input(ctx, stage)
        XS = s.cache_read(X, "shared", [s[t] for t in templates.readers_for(s, X, [*prods, stage])])
        XS.compute_at(O, row)
        *xl, a1 = XS.axes
        a1o, a1v = XS.split(a1, 4)
        a1oo, a1oi = XS.split(a1o, threads)
        XS.bind(a1oi, "threadIdx.x")
        XS.vectorize(a1v)
        if vec > 1:
            XS.unroll(a1oo)
    temps = {t.name for t in ctx.op.temporaries}
    for t in prods:
        st = s[t]
        st.compute_at(O, row)
        (r,) = st.reduce_axes
        if vec > 1 and p["shared_row"]:
            r, rv = st.split(r, vec)
        ro, ri = st.split(r, threads)
        if vec > 1 and p["shared_row"]:
            st.reorder(ri, ro, rv)
            st.unroll(rv)
        else:
            st.reorder(ri, ro)
        st.bind(ri, "threadIdx.x")
        if p["local"] and ctx.node(t)["tensor"] in temps:
            st.set_scope("local")


# -------------------------------------------------------------- row_regs
VECTOR_BYTES = 16  # one access of a row piece (ld.global.v4.b32 and the like)


def _rr_group(ctx, stage) -> tuple:
    """(statistics, sibling outputs, per-row scalar temporaries, row-shaped
    temporaries) of `stage` (row_group.py), computed once per Context."""
    key = ("row_regs group", stage)
    if key not in ctx.memo:
        stats = row_producers(ctx, stage)
        sibs = RG.siblings(ctx, stage, stats)
        scalars, rows = RG.temporaries(ctx, stage, [stage, *stats, *sibs])
        ctx.memo[key] = (stats, sibs, scalars, rows)
    return ctx.memo[key]


def _rr_claims(ctx, stage) -> list[str]:
    """The statistics and the sibling outputs, scheduled at the row loop."""
    stats, sibs, _, _ = _rr_group(ctx, stage)
    return stats + sibs


def _rr_keeps(ctx, stage, p) -> set:
    """The temporaries kept as stages in registers: the per-row scalars
    always (computed once per thread, not once per element), the row-shaped
    ones with `keep_rows` (softmax's e: the exponentials computed once)."""
    _, _, scalars, rows = _rr_group(ctx, stage)
    return set(scalars) | (set(rows) if p.get("keep_rows") else set())


def _rr_cache(ctx, stage, kept) -> list[str]:
    """The inputs read once into registers, given the kept temporaries."""
    key = ("row_regs cache", stage, frozenset(kept))
    if key not in ctx.memo:
        stats, sibs, _, _ = _rr_group(ctx, stage)
        ctx.memo[key] = RG.cached_inputs(ctx, stage, [stage, *stats, *sibs, *sorted(kept)],
                                         ctx.inlined - kept)
    return ctx.memo[key]


def _rr_applies(ctx, stage):
    """`row`'s stages that have a row to hold: with the row-shaped
    temporaries inlined, an input of the row's shape read by two or more of
    the stages at the row loop, each at its own row indices (row_group.py)."""
    return _row_applies(ctx, stage) and bool(_rr_cache(ctx, stage, _rr_keeps(ctx, stage, {})))


def _rr_row(ctx, stage):
    """(row length, bits per element of the widest row input: 16-byte pieces
    of it bound the vector width)."""
    d = ctx.extents[stage][ctx.node(stage)["spatial"][-1]]
    cached = _rr_cache(ctx, stage, _rr_keeps(ctx, stage, {}))
    return d, max(ctx.op.tensors[t].dtype.bits for t in cached)


def _rr_vec(ctx, stage) -> int:
    """Elements of the row input in one 16-byte piece."""
    return max(1, VECTOR_BYTES * 8 // _rr_row(ctx, stage)[1])


def _rr_threads(ctx, stage, vec) -> list[int]:
    """Thread counts (whole warps, within the limit) that give every thread
    the same number of whole pieces of the row; for a row with no such count
    (a length with no divisor a multiple of 32: 257, 1000), the powers of two
    up to one piece per thread, whose last pieces row_slices guards (threads
    past the row's end hold nothing)."""
    d, _ = _rr_row(ctx, stage)
    pieces = -(-d // vec)
    whole = [t for t in range(32, min(ctx.limits.threads, pieces) + 1, 32) if pieces % t == 0]
    return whole or pow2_upto(pieces, 32, ctx.limits.threads)


def _rr_weights(ctx, stage, kept=frozenset()) -> list[str]:
    """Inputs of one dimension, the row's length, that the stage alone reads
    (through the stages inlined, all but `kept`): row_in_registers' `shared`
    (layernorm's gamma and beta)."""
    d, _ = _rr_row(ctx, stage)
    inlined = ctx.inlined - kept
    others = set()
    for n in ctx.graph.nodes:
        if n != stage and n not in inlined:
            others |= RG.reads(ctx, n, inlined)
    mine = RG.reads(ctx, stage, inlined)
    return [t.name for t in ctx.op.inputs
            if t.name in mine and t.name not in others
            and t.ndim == 1 and eval_int(t.shape[0], ctx.sizes) == d]


def _rr_registers(ctx, stage, p) -> tuple[int, int]:
    """(registers of the row's slices live at once per thread, the estimate
    of validate.resources). The estimate counts every local buffer: the
    slices of the cached inputs and of the kept row-shaped temporaries, each
    statistic and its accumulator, each kept per-row scalar, the fixed
    overhead. Live at once are the cached inputs' slices or, when larger,
    the kept temporaries' (computed from the inputs' slices, which are dead
    after them: softmax's X, then e)."""
    from .validate import REGISTER_OVERHEAD
    d, _ = _rr_row(ctx, stage)
    stats, _, scalars, rows = _rr_group(ctx, stage)
    kept = _rr_keeps(ctx, stage, p)
    pieces = -(-d // p["vec"])
    elements = -(-pieces // p["threads"]) * p["vec"]

    def regs(tensors):
        return sum(-(-elements * max(ctx.op.tensors[t].dtype.bits, 8) // 32) for t in tensors)
    inputs = regs(_rr_cache(ctx, stage, kept))
    temps = regs(ctx.node(t)["tensor"] for t in rows if t in kept)
    return max(inputs, temps), inputs + temps + 2 * len(stats) + len(scalars) + REGISTER_OVERHEAD


def _rr_feasible(ctx, stage, p):
    """Whole warps within the block limit; pieces of at most 16 bytes; the
    register estimate within the per-thread limit, and the row's slices live
    at once within half of a thread's share of the block's registers (the kernel's
    __launch_bounds__ caps a thread at block_registers / threads, and what
    does not fit there spills to local memory); the staged weights within
    shared memory."""
    threads, vec = p["threads"], p["vec"]
    d, bits = _rr_row(ctx, stage)
    if threads % 32 or not 32 <= threads <= ctx.limits.threads or not (
            1 <= vec and vec * bits <= VECTOR_BYTES * 8):
        return False
    row, estimate = _rr_registers(ctx, stage, p)
    if estimate > ctx.limits.registers or 2 * row > ctx.limits.block_registers // threads:
        return False
    if p["shared_weights"]:
        weights = _rr_weights(ctx, stage, frozenset(_rr_keeps(ctx, stage, p)))
        staged = -(-d // (vec * threads)) * vec * threads  # the row's pieces, the last padded
        size = sum(staged * ctx.op.tensors[w].dtype.bits // 8 for w in weights)
        return bool(weights) and size <= ctx.limits.shared_bytes
    return True


def _rr_sample(ctx, stage, rng):
    """16-byte pieces; a thread count of _rr_threads within the registers;
    `keep_rows` (drawn only where there are row-shaped temporaries to keep;
    the other value when no thread count fits with the one drawn);
    `shared_weights` where there are weights and they fit."""
    vec = _rr_vec(ctx, stage)
    rows = _rr_group(ctx, stage)[3]
    keeps = [{}]
    if rows:
        first = bool(rng.integers(2))
        keeps = [{"keep_rows": first}, {"keep_rows": not first}]
    for keep in keeps:
        options = [t for t in _rr_threads(ctx, stage, vec) if _rr_feasible(
            ctx, stage, {"threads": t, "vec": vec, "shared_weights": False, **keep})]
        if options:
            break
    else:
        return None  # a row too long for registers at any thread count
    p = {"threads": pick(rng, options), "vec": vec, **keep,
         "shared_weights": bool(_rr_weights(ctx, stage, frozenset(_rr_keeps(ctx, stage, keep))))
         and bool(rng.integers(2))}
    if not _rr_feasible(ctx, stage, p):
        p["shared_weights"] = False
    return p


def _rr_apply(s, ctx, stage, p):
    """templates.row_in_registers with the arguments bench/row_schedules.py
    gives by hand, read from the stage graph: the row inputs cached (those
    two or more stages read), the statistics and the kept temporaries that
    are temporaries in registers (local), those that are outputs and the
    sibling outputs computed at the row (outputs), the weights in shared
    memory with `shared_weights`."""
    stats, sibs, _, _ = _rr_group(ctx, stage)
    kept = frozenset(_rr_keeps(ctx, stage, p))
    members = sorted({*stats, *sibs, *kept}, key=lambda t: ctx.node(t)["order"])
    temps = {t.name for t in ctx.op.temporaries}
    local = tuple(t for t in members if ctx.node(t)["tensor"] in temps)
    templates.row_in_registers(
        s, stage, p["threads"], p["vec"], cache=tuple(_rr_cache(ctx, stage, kept)), local=local,
        outputs=tuple(t for t in members if t not in local),
        shared=tuple(_rr_weights(ctx, stage, kept)) if p["shared_weights"] else ())


# -------------------------------------------------------------- row_stream
def _rs_group(ctx, stage) -> tuple:
    """(statistics, per-row scalar temporaries, {statistic: the row-shaped inputs
    it reads itself}) of `stage`, or None where the row cannot be streamed: a
    sibling output or a row-shaped temporary in the group (softmax's e, read by
    two passes), a statistic that reads no row input itself, or one that is an
    output of the op (the passes hold the statistics in registers)."""
    key = ("row_stream group", stage)
    if key not in ctx.memo:
        stats = row_producers(ctx, stage)
        out = None
        if stats and not RG.siblings(ctx, stage, stats):
            scalars, rows = RG.temporaries(ctx, stage, [stage, *stats])
            shape = RG.row_extents(ctx, stage)
            row_inputs = {t.name for t in ctx.op.inputs if RG._shape(ctx, t) == shape}
            cache = {t: sorted(set(ctx.node(t)["reads"]) & row_inputs) for t in stats}
            direct = all(cache.values()) and not any(
                set(ctx.node(t)["reads"]) & {ctx.node(r)["tensor"] for r in rows}
                for t in stats)
            temps = {t.name for t in ctx.op.temporaries}
            if direct and not rows and all(ctx.node(t)["tensor"] in temps for t in stats):
                out = (stats, scalars, cache)
        ctx.memo[key] = out
    return ctx.memo[key]


def _rs_applies(ctx, stage):
    return _row_applies(ctx, stage) and _rs_group(ctx, stage) is not None


def _rs_vec(ctx, stage) -> int:
    _, _, cache = _rs_group(ctx, stage)
    bits = max(ctx.op.tensors[t].dtype.bits for ts in cache.values() for t in ts)
    return max(1, VECTOR_BYTES * 8 // bits)


def _rs_pieces(ctx, stage, p) -> int:
    """Pieces of the row each thread reads per pass."""
    d = ctx.extents[stage][ctx.node(stage)["spatial"][-1]]
    return -(-(-(-d // p["vec"])) // p["threads"])


def _rs_sample(ctx, stage, rng):
    """16-byte pieces, a power-of-two thread count, the piece loops unrolled by
    1, 2, 4 or 8 (at most the pieces a thread reads)."""
    vec = _rs_vec(ctx, stage)
    d = ctx.extents[stage][ctx.node(stage)["spatial"][-1]]
    threads = pick(rng, pow2_upto(max(32, -(-d // vec)), 32, ctx.limits.threads))
    p = {"threads": threads, "vec": vec, "unroll": 1}
    p["unroll"] = pick(rng, [u for u in (1, 2, 4, 8) if u == 1 or u <= _rs_pieces(ctx, stage, p)])
    return p


def _rs_feasible(ctx, stage, p):
    """Whole warps within the block limit, pieces of at most 16 bytes, an
    unroll factor of at least 1."""
    _, _, cache = _rs_group(ctx, stage)
    bits = max(ctx.op.tensors[t].dtype.bits for ts in cache.values() for t in ts)
    return (p["threads"] % 32 == 0 and 32 <= p["threads"] <= ctx.limits.threads
            and 1 <= p["vec"] and p["vec"] * bits <= VECTOR_BYTES * 8 and p["unroll"] >= 1)


def _rs_keeps(ctx, stage, p) -> set:
    """The per-row scalars (layernorm's mu, rstd), computed once per thread."""
    return set(_rs_group(ctx, stage)[1])


def _rs_claims(ctx, stage) -> list[str]:
    return list(_rs_group(ctx, stage)[0])


def _rs_apply(s, ctx, stage, p):
    """templates.row_streamed: each statistic a pass over the row through
    per-piece register caches of the row inputs it reads, the piece loops
    unrolled by `unroll` (bench/row_schedules.py layernorm_streamed)."""
    stats, scalars, cache = _rs_group(ctx, stage)
    templates.row_streamed(s, stage, p["threads"], p["vec"], p["unroll"], tuple(stats),
                           tuple(scalars), cache={t: tuple(v) for t, v in cache.items()})


@dataclass(frozen=True)
class Rule:
    name: str
    applies: object
    sample: object
    feasible: object
    apply: object
    claims: object = None  # (ctx, stage) -> producers the rule schedules at the stage
    keeps: object = None  # (ctx, stage, params) -> inlinable producers it keeps as stages
    weight: float = 1.0


RULES = {r.name: r for r in (
    Rule("tc_tile", _tc_applies, _tc_sample, _tc_feasible, _tc_apply, keeps=_tc_keeps,
         weight=4.0),
    Rule("simt_tile", _st_applies, _st_sample, _st_feasible, _st_apply, weight=3.0),
    Rule("shared_tile", _sh_applies, _sh_sample, _sh_feasible, _sh_apply, weight=3.0),
    Rule("reg_tile", _rt_applies, _rt_sample, _rt_feasible, _rt_apply, weight=2.0),
    Rule("row", _row_applies, _row_sample, _row_feasible, _row_apply, claims=row_producers,
         weight=3.0),
    Rule("row_regs", _rr_applies, _rr_sample, _rr_feasible, _rr_apply, claims=_rr_claims,
         keeps=_rr_keeps, weight=2.0),
    Rule("row_stream", _rs_applies, _rs_sample, _rs_feasible, _rs_apply, claims=_rs_claims,
         keeps=_rs_keeps, weight=1.0),
    Rule("cross_thread", _reduction, _ct_sample, _ct_feasible, _ct_apply, weight=2.0),
    Rule("rfactor", _rf_applies, _rf_sample, _rf_feasible, _rf_apply, weight=1.0),
    Rule("flat", _flat_applies, _flat_sample, _flat_feasible, _flat_apply, weight=1.0),
)}
