"""The row rules: `row`, `row_regs` and `row_stream`, one block per row of a
row stage with its statistics computed at the row loop (row_group.py reads
the groups; the list in rules/__init__.py)."""
from __future__ import annotations

from ...lang.symbolic import eval_int
from ...schedule import templates
from .. import row_group as RG
from .base import _fuse_all, pick, pow2_upto


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
    """(statistics, sibling outputs and heads, per-row scalar temporaries,
    row-shaped temporaries) of `stage` (row_group.py), computed once per
    Context; the heads alone under ("row_regs heads", stage) in ctx.memo."""
    key = ("row_regs group", stage)
    if key not in ctx.memo:
        stats = row_producers(ctx, stage)
        heads = RG.heads(ctx, stage, stats) if stats else []
        sibs = RG.siblings(ctx, stage, stats) + heads
        scalars, rows = RG.temporaries(ctx, stage, [stage, *stats, *sibs])
        ctx.memo[key] = (stats, sibs, scalars, rows)
        ctx.memo[("row_regs heads", stage)] = heads
    return ctx.memo[key]


def _rr_heads(ctx, stage) -> list[str]:
    _rr_group(ctx, stage)
    return ctx.memo[("row_regs heads", stage)]


def _rr_claims(ctx, stage) -> list[str]:
    """The statistics, the sibling outputs and the heads, scheduled at the
    row loop."""
    stats, sibs, _, _ = _rr_group(ctx, stage)
    return stats + sibs


def _rr_keeps(ctx, stage, p) -> set:
    """The temporaries kept as stages in registers: the per-row scalars
    always (computed once per thread, not once per element), the row-shaped
    ones with `keep_rows` (softmax's e: the exponentials computed once)."""
    _, _, scalars, rows = _rr_group(ctx, stage)
    return set(scalars) | (set(rows) if p.get("keep_rows") else set())


def _rr_cache(ctx, stage, kept) -> list[str]:
    """The inputs read once into registers, given the kept temporaries, then
    the heads (stored at the row loop, read back once)."""
    key = ("row_regs cache", stage, frozenset(kept))
    if key not in ctx.memo:
        stats, sibs, _, _ = _rr_group(ctx, stage)
        ctx.memo[key] = RG.cached_inputs(ctx, stage, [stage, *stats, *sibs, *sorted(kept)],
                                         ctx.inlined - kept) + _rr_heads(ctx, stage)
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
    from ..validate import REGISTER_OVERHEAD
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
