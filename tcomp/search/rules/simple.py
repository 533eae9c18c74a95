"""The rules for any stage: `flat` (the spatial axes fused over blocks and
threads), the reduction rules `cross_thread` and `rfactor`, and `scan` for
ordered recurrences (the list in rules/__init__.py)."""
from __future__ import annotations

from .base import _fuse_all, pick, pow2_upto


# ------------------------------------------------------------------ flat
def _flat_applies(ctx, stage):
    return True


def _flat_sample(ctx, stage, rng):
    n = ctx.node(stage)
    total = 1
    parallel = _parallel_axes(ctx, stage, n["spatial"])
    for v in parallel:
        total *= ctx.extents[stage][v]
    ordered = len(parallel) != len(n["spatial"])
    vec = pick(rng, [1, 2, 4]) if n["kind"] == "elementwise" and parallel and not ordered \
        else 1
    threads = pick(rng, pow2_upto(max(1, total // vec), 32, ctx.limits.threads))
    unroll = pick(rng, [1, 2, 4, 8]) if n["reduce"] and not ordered else 1
    return {"threads": threads, "vec": vec, "unroll": unroll}


def _parallel_axes(ctx, stage, spatial):
    """The spatial axes `flat` spreads over threads: all, except in the stage of
    an ordered statement (schedule/ordered.py), whose independent ones only."""
    d = _ordered(ctx).get(stage)
    return list(d.independent) if d is not None else list(spatial)


def _ordered(ctx) -> dict:
    """The ordered stages' definitions (schedule/ordered.py), once per context."""
    key = ("ordered stages",)
    if key not in ctx.memo:
        from ...schedule import Schedule
        ctx.memo[key] = {n: st.definition for n, st in Schedule(ctx.op).states.items()
                         if st.definition.ordered}
    return ctx.memo[key]


# ------------------------------------------------------------------ scan
def _scan_applies(ctx, stage):
    from ...schedule.scan import scan_form
    d = _ordered(ctx).get(stage)
    if d is None or len(d.ordered) != 1:
        return False
    dtype = next(t.dtype for t in ctx.op.outputs + ctx.op.temporaries if t.name == d.tensor)
    return not isinstance(scan_form(d, d.ordered[0], dtype), str)


def _scan_sample(ctx, stage, rng):
    return {"threads": pick(rng, [n for n in (128, 256, 512, 1024) if n <= ctx.limits.threads]
                        or [32])}


def _scan_feasible(ctx, stage, p):
    return 32 <= p["threads"] <= ctx.limits.threads


def _scan_apply(s, ctx, stage, p):
    """Stage.scan over the ordered axis; the independent axes fused over blocks."""
    st = s[stage]
    d = s.states[stage].definition
    st.scan(next(a for a in st.axes if a.name == d.ordered[0]), threads=p["threads"])
    axes = [a for a in st.axes if a.name in d.independent]
    if axes:
        st.bind(_fuse_all(st, axes), "blockIdx.x")


def _flat_feasible(ctx, stage, p):
    return p["threads"] <= ctx.limits.threads



def _flat_apply(s, ctx, stage, p):
    st = s[stage]
    d = s.states[stage].definition
    axes = [a for a in st.axes if a.name in d.independent] if d.ordered else list(st.axes)
    if not axes:
        return
    f = _fuse_all(st, axes)
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
    """A reduction cross_thread can spread over threads: not a tuple reduction
    (argmax, welford, expsum: reduced across threads nowhere yet; `flat` and
    the row rules take them)."""
    from ...lang.monoids import MONOIDS
    n = ctx.node(stage)
    return bool(n["reduce"]) and n["reduce_op"] not in MONOIDS


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
