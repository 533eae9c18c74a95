"""The Hopper rules (the list in rules/__init__.py): `hopper_tile` on a
product stage and `hopper_epilogue` on an elementwise stage over one
product's temporary, each the schedule of docs/schedules.md's "Hopper"
section (tcomp.kernels.gemm_sm90.hopper_schedule), for targets with wgmma
(`Limits.arch` sm_90a).

A product is `C(m, n) +=! A . B` with A read at (m, k) or (k, m), B at
(k, n) or (n, k) (schedule/primitives_hopper.py contraction_roles), B an
input, A an input or a convolution's im2col matrix (a temporary kept as a
stage, `keeps`: the Hopper convolution of kernels/conv_sm90.py), both
bfloat16 or both float16 (or fp8, e4m3 or e5m2 each, both inputs read
K-major: the m64nNk32 wgmma), accumulated in float32, into a 16- or 32-bit float
output; the TMA engine needs every operand's and the output's rows to be a
multiple of 16 bytes at the tuning sizes.

Parameters: bn (the wgmma N: 128 or 256), consumers (1 or 2: block rows
64 x consumers), pingpong (two consumers taking whole tiles of bm = 64 or
128 rows in turn instead), bm, stages (2..5, within shared memory), group_m (the grouped
tile order), persistent (a grid of one block per SM, or one block per
tile), consumer_regs (the consumers' registers: 232 with two consumers,
232 or 240 with one).
"""
from __future__ import annotations

from ...lang.symbolic import eval_int
from .base import pick
from .fused import products

SHARED = 227 * 1024
HOPPER_ARCHS = ("sm_90a",)


def _product(ctx, stage):
    """The (A, B) tensors of a product stage the Hopper path takes, or None."""
    from ...schedule.primitives_hopper import contraction_roles
    key = ("hopper product", stage)
    if key in ctx.memo:
        return ctx.memo[key]
    got = None
    n = ctx.node(stage)
    if getattr(ctx.limits, "arch", "") in HOPPER_ARCHS and n["writers"] == 1 and \
            n["origin"] == "statement" and stage not in ctx.inlined:
        d = _definition(ctx, stage)
        roles = contraction_roles(d) if d is not None else "no definition"
        if not isinstance(roles, str) and (d.acc_dtype is not None and
                                           d.acc_dtype.name == "float32"):
            a, b = ctx.op.tensors[roles[0]], ctx.op.tensors[roles[2]]
            half = a.dtype == b.dtype and a.dtype.name in ("bfloat16", "float16")
            if (half or _fp8_ok(ctx, d, roles, a, b)) and \
                    all(_rows_ok(ctx, t) for t in (a, b)) and _operands_ok(ctx, d, roles):
                got = (roles[0], roles[2])
    ctx.memo[key] = got
    return got


def _definition(ctx, stage):
    from ...schedule import Schedule
    s = ctx.memo.get("hopper schedule")
    if s is None:
        s = ctx.memo["hopper schedule"] = Schedule(ctx.op)
    st = s.states.get(stage)
    return st.definition if st is not None else None


def _fp8_ok(ctx, prod, roles, a, b) -> bool:
    """fp8 inputs (e4m3 or e5m2 each, wgmma m64nNk32): both operands inputs read
    K-major, A(m, k) and B(n, k) (the 8-bit wgmma has no transposed operands)."""
    inputs = {t.name for t in ctx.op.inputs}
    _, a_sub, _, b_sub = roles
    k = prod.reduce[0]
    return (a.dtype.is_fp8 and b.dtype.is_fp8 and a.name in inputs and b.name in inputs
            and a_sub[-1] == k and b_sub[-1] == k)


def _operands_ok(ctx, prod, roles) -> bool:
    """Inputs, or (A only) a temporary that is a convolution's im2col matrix
    read at (m, k), its channels a multiple of 64 at the tuning sizes: kept
    as a stage in shared memory, filled by TMA im2col copies (docs/hopper.md,
    "Convolution")."""
    from ...schedule.primitives_hopper import looks_like_window
    inputs = {t.name for t in ctx.op.inputs}
    a, a_sub, b, _ = roles
    if b not in inputs:
        return False
    if a in inputs:
        return True
    d = _definition(ctx, a)
    if d is None or tuple(a_sub) != (prod.spatial[-2], prod.reduce[0]) or \
            not looks_like_window(ctx.op, d):
        return False
    x = ctx.op.tensors[d.rhs.a.tensor]
    try:
        channels = eval_int(x.shape[-1], ctx.sizes)
    except Exception:  # noqa: BLE001 - channels the tuning sizes do not fix
        return False
    return channels % 64 == 0


def _ht_keeps(ctx, stage, p) -> set:
    """A temporary operand (an im2col matrix) stays a stage of its own."""
    inputs = {t.name for t in ctx.op.inputs}
    return {t for t in (_product(ctx, stage) or ()) if t not in inputs}


def _he_keeps(ctx, stage, p) -> set:
    prod = _epilogue_product(ctx, stage)
    return _ht_keeps(ctx, prod, p) if prod else set()


def _rows_ok(ctx, tensor) -> bool:
    """Whether the TMA engine can move `tensor` at the tuning sizes (rows of
    a multiple of 16 bytes)."""
    try:
        inner = eval_int(tensor.shape[-1], ctx.sizes)
    except Exception:  # noqa: BLE001 - a size the tuning sizes do not fix
        return False
    return (inner * tensor.dtype.numpy.itemsize) % 16 == 0


def _output_ok(ctx, tensor) -> bool:
    return tensor.dtype.name in ("bfloat16", "float16", "float32") and _rows_ok(ctx, tensor)


def _ht_applies(ctx, stage):
    n = ctx.node(stage)
    return (_product(ctx, stage) is not None and n["output"]
            and _output_ok(ctx, ctx.op.tensors[n["tensor"]]))


def _sample(rng):
    pingpong = bool(rng.integers(3) == 0)
    consumers = 2 if pingpong else pick(rng, [2, 2, 1])
    bn = pick(rng, [256, 256, 128])
    return {"bn": bn, "consumers": consumers, "pingpong": pingpong,
            "bm": (pick(rng, [64, 128]) if bn == 128 else 64) if pingpong else 64 * consumers,
            "stages": pick(rng, [3, 4, 4, 5]), "group_m": pick(rng, [1, 4, 8, 8, 16]),
            "persistent": bool(rng.integers(4) > 0) or pingpong,
            "consumer_regs": 232 if consumers == 2 else pick(rng, [232, 240])}


def _ht_sample(ctx, stage, rng):
    for _ in range(20):
        p = _sample(rng)
        if _ht_feasible(ctx, stage, p):
            return p
    return None


def _ht_feasible(ctx, stage, p):
    pingpong = p.get("pingpong", False)  # (plans recorded before: cooperative)
    bm = p.get("bm", 64 * p["consumers"])
    if pingpong and (p["consumers"] != 2 or bm not in (64, 128) or bm // 64 * p["bn"] > 256):
        return False
    if not pingpong and bm != 64 * p["consumers"]:
        return False
    ring = p["stages"] * (bm + p["bn"]) * 64 * 2
    regs = 128 * (40 + p["consumers"] * p["consumer_regs"])
    return (p["bn"] in (128, 256) and p["consumers"] in (1, 2) and 2 <= p["stages"] <= 5
            and ring + p["consumers"] * 64 * 128 + 1024 + 2 * p["stages"] * 8 <= SHARED
            and regs <= 65536 and 1 <= p["group_m"] <= 64)


def config(p):
    from ...kernels.gemm_sm90 import GemmConfig
    return GemmConfig(bm=p.get("bm", 64 * p["consumers"]), bn=p["bn"], stages=p["stages"],
                      consumers=p["consumers"], group_m=p["group_m"],
                      consumer_regs=p["consumer_regs"], persistent=p["persistent"],
                      pingpong=p.get("pingpong", False))


def _ht_apply(s, ctx, stage, p):
    from ...kernels.gemm_sm90 import hopper_schedule
    hopper_schedule(s, config(p), stage=stage)


# ------------------------------------------------------------ hopper_epilogue
def _epilogue_product(ctx, stage):
    """The one product `stage` is a Hopper epilogue of (it reads the
    product's temporary directly, at its own indices), or None."""
    prods = products(ctx, stage)
    if len(prods) != 1 or _product(ctx, prods[0]) is None:
        return None
    n = ctx.node(stage)
    if ctx.node(prods[0])["tensor"] not in n["reads"] or not n["output"] or \
            not _output_ok(ctx, ctx.op.tensors[n["tensor"]]):
        return None
    return prods[0]


def _he_applies(ctx, stage):
    return _epilogue_product(ctx, stage) is not None


def _he_claims(ctx, stage):
    p = _epilogue_product(ctx, stage)
    return [p] if p else []


def _he_sample(ctx, stage, rng):
    return _ht_sample(ctx, _epilogue_product(ctx, stage), rng)


def _he_feasible(ctx, stage, p):
    return _ht_feasible(ctx, _epilogue_product(ctx, stage), p)


def _he_apply(s, ctx, stage, p):
    from ...kernels.gemm_sm90 import hopper_schedule
    prod = _epilogue_product(ctx, stage)
    hopper_schedule(s, config(p), stage=prod)
    s[prod].epilogue(s[stage])
