"""The tiling rules of reductions over two or more spatial axes: `reg_tile`,
`simt_tile`, `shared_tile` and the tensor-core `tc_tile` (the list in
rules/__init__.py)."""
from __future__ import annotations

import math

from ...lang.symbolic import eval_int
from ...schedule import templates, tiling
from .base import _fuse_all, pick, pow2_upto


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
    """A product on tensor cores: the exact 2-D matmul, or any product
    `tensorize` takes (batched: bmm, attention's per-head scores; either
    operand transposed), with half inputs."""
    n = ctx.node(stage)
    if n["writers"] != 1:
        return False
    if n["kind"] == "matmul":
        return n["tensor_core"] and n["operands"][0] != n["operands"][1]
    return n.get("tc_product") is not None


def _tc_operands(n):
    """(A, B) of a tc_tile stage (graph node `n`)."""
    shape = n.get("tc_product")
    return (shape.a, shape.b) if n["kind"] != "matmul" and shape is not None else n["operands"]


def _tc_sample(ctx, stage, rng):
    n = ctx.node(stage)
    e = ctx.extents[stage]
    shape = n.get("tc_product")
    if n["kind"] == "matmul" or shape is None:
        m, nn = n["spatial"]
        (k,) = n["reduce"]
    else:  # batched / transposed: the batch axes go to blockIdx.z (templates.tc_tiles)
        m, nn, k = shape.m, shape.n, shape.k
    for _ in range(100):
        p = {"bm": pick(rng, pow2_upto(e[m], 16, 256)), "bn": pick(rng, pow2_upto(e[nn], 16, 256)),
             "wm": pick(rng, [16, 32, 64]), "wn": pick(rng, [16, 32, 64]),
             "bk": pick(rng, pow2_upto(e[k], 16, 64)), "pad": bool(rng.integers(4) > 0),
             "vector": True, "pipeline": pick(rng, [0, 2, 3, 3, 4, 5]),
             "unroll_k": bool(rng.integers(2)), "swizzle": bool(rng.integers(2)),
             # paired stores: +5% at 4096^3, +40% at 8192x8192x512 (H200, bench/tc_gemm.py);
             # the shared-memory epilogue: best at 8192x8192x512 with bk=32, 4 stages
             "pair_stores": bool(rng.integers(4) > 0), "smem_epilogue": bool(rng.integers(4) == 0),
             # the A/B fragments of the next k16 step loaded during this one's mma (a
             # second fragment set; bench/tc_gemm.py's fused GEMM + bias + GELU variants)
             "fragment_pipeline": pick(rng, [0, 0, 0, 2])}
        if p["fragment_pipeline"]:  # it unrolls the k16 loop itself
            p["unroll_k"] = False
        for key, operand in zip(("a_stage", "b_stage"), _tc_operands(n)):
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
    shape = ctx.node(stage).get("tc_product")
    # each shared tile as stored: A (bm x bk, or bk x bm transposed), B (bk x bn, or bn x bk)
    a_tile = bk * (bm + pad) if shape is not None and shape.a_trans else bm * (bk + pad)
    b_tile = bn * (bk + pad) if shape is not None and shape.b_trans else bk * (bn + pad)
    shared = copies * (a_tile + b_tile) * 2
    if p.get("smem_epilogue"):  # the output tile staged in shared memory (C's type, <= 4 bytes)
        shared += bm * (bn + pad) * ctx.op.tensors[stage].dtype.numpy.itemsize
    fragments = (wm // 16) * 4 + (wn // 8) * 2  # the A and B fragments of one k16 step
    fpipe = p.get("fragment_pipeline", 0)
    regs = wm * wn // 32 + fragments * max(1, fpipe) + 40  # accumulators + fragment sets
    # a second fragment set may take the margin up to the hard limit (bench/tc_gemm.py's
    # 64 x 64 warps with fragment_pipeline=2: 232 by this count, built and timed on the H200)
    budget = ctx.limits.registers if fpipe else 220
    return (32 * warps <= ctx.limits.threads and shared <= ctx.limits.shared_bytes
            and regs <= budget and p["pipeline"] in (0, 2, 3, 4, 5) and fpipe in (0, 2, 3, 4, 5)
            and not (fpipe and p["unroll_k"]))


def _tc_keeps(ctx, stage, p) -> set:
    """The operands `p` keeps as stages of their own (not inlined)."""
    a_name, b_name = _tc_operands(ctx.node(stage))
    return {name for key, name in (("a_stage", a_name), ("b_stage", b_name)) if p.get(key)}


def _tc_apply(s, ctx, stage, p, out=None):
    """bench/schedules.py `tc_gemm` (the shared template, lanes=32). With
    `out`, an elementwise output reading the product (GEMM + bias + GELU):
    `out` takes the output tiles and the product stage itself is the fragment
    accumulator, so the epilogue is computed from the accumulators (tc_gemm on
    a two-statement op; rules/fused.py `tc_epilogue`). An operand
    that is a temporary is either inlined and its expression copied into
    shared memory (cache_read of the inlined stage), or, with `a_stage` /
    `b_stage`, kept as its own stage and placed in shared memory at the
    K-tile loop (schedules.tc_conv2d's im2col: whole 16-byte pieces of its
    rows, copied by cp.async with zero-fill where it has a guard)."""
    a_name, b_name = _tc_operands(ctx.node(stage))
    if out is None:
        C = s[stage]
        CF = s.cache_write(C, "fragment")
    else:
        C, CF = s[out], s[stage]
        CF.set_scope("fragment")

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
                       smem_epilogue=p.get("smem_epilogue", False),
                       fragment_pipeline=p.get("fragment_pipeline", 0))
