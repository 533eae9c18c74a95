"""The fusion rules of GEMMs whose results are temporaries: `simt_epilogue`
and `tc_epilogue` (the list in rules/__init__.py).

An *epilogue* stage O(m, n) is elementwise over the outputs of one or two
GEMMs P(m, n) += A(m, k) * B(k, n) that are temporaries (GEMM + bias +
activation: D = gelu(C + bias); SwiGLU: O = silu(G) * U with G = X W1 and
U = X W3), read directly or through inlined elementwise temporaries, each
at O's own indices. The rules tile O as simt_tile / tc_tile tile a GEMM's
output and compute each product inside O's tile, in registers (SIMT: the
product is the thread's register tile, set_scope local) or tensor-core
fragments (the product is the fragment accumulator): the epilogue is
computed from the accumulators in the same kernel and only O is stored.
The products are claimed (Rule.claims): they get no rule of their own.

  simt_epilogue  the parameters of simt_tile (bm bn bk tm tn fragments
                 pipeline vector lanes group pad); one or two products,
                 each with its own K loop and shared tiles inside the thread
                 tile (SwiGLU's X tile is read once per product), the
                 accumulators of both live at once
  tc_epilogue    the parameters of tc_tile, one tensor-core product
                 (bench/schedules.py tc_gemm on TC_GEMM_GELU)

An *in-place epilogue* updates the product's own tensor element by element
(P(i, j) +=! A(i, k) * B(k, j); P(i, j) = P(i, j) * s): the update's stage
is tiled, P's register tile is a cache_write of P, and P (now the copy of
that tile into P) is computed at the thread loop just before the update
reads it (compute_at of the first writer at the next one: see
schedule/snapshot.py epilogue_refusal). `simt_epilogue` only: the fragment
layout of tc_tile's accumulators has no such copy.
"""
from __future__ import annotations

from ...schedule import templates
from .. import graph as G
from .. import row_group as RG
from .tiles import _st_feasible, _st_sample, _tc_apply, _tc_feasible, _tc_keeps, _tc_sample

MAX_PRODUCTS = 2  # accumulators live at once in one thread tile (SwiGLU's G and U)


def products(ctx, stage) -> list[str]:
    """The GEMM stages `stage` is an epilogue of (see the module docstring),
    in statement order; [] when it is not one: `stage` an elementwise
    2-D stage with one writer that the plan does not inline; every stage it
    reads that the plan does not inline a `matmul` temporary (one writer,
    distinct operands) of the same extents, one or MAX_PRODUCTS of them;
    every inlined stage on the way elementwise (an injective one, a
    transpose of P, would read other threads' accumulators); each product
    read only by `stage` or by inlined stages that feed only it. Or, for an
    in-place epilogue (`stage` the second of two statements writing its
    tensor), [the first] (`_in_place_product`)."""
    key = ("epilogue products", stage)
    if key not in ctx.memo:
        ctx.memo[key] = _products(ctx, stage)
    return ctx.memo[key]


def in_place(ctx, stage) -> bool:
    """Whether `stage`'s product is an earlier statement writing the same
    tensor (an in-place epilogue: P(i, j) +=! ...; P(i, j) = P(i, j) * s)."""
    prods = products(ctx, stage)
    return bool(prods) and ctx.node(prods[0])["tensor"] == ctx.node(stage)["tensor"]


def _in_place_product(ctx, stage) -> list[str]:
    """[P] when `stage` is the second of two statements writing its tensor,
    P the first, a matmul of the same extents, read (as far as the graph
    shows) by nothing else before `stage`; otherwise []. compute_at checks
    the rest (schedule/snapshot.py epilogue_refusal)."""
    g, n = ctx.graph, ctx.node(stage)
    earlier = [w for w in g.nodes if g.nodes[w]["tensor"] == n["tensor"] and w != stage]
    if len(earlier) != 1:
        return []
    (p,) = earlier
    a = g.nodes[p]
    found, _ = RG.upstream(ctx, stage)
    if (found != [p] or a["kind"] != "matmul" or a["origin"] != "statement"
            or a["order"] > n["order"] or a["operands"][0] == a["operands"][1]
            or RG.row_extents(ctx, p) != RG.row_extents(ctx, stage)):
        return []
    if any(g.nodes[c]["order"] < n["order"] for c in G.consumers(g, p) if c != stage):
        return []
    return [p]


def _products(ctx, stage) -> list[str]:
    g, n = ctx.graph, ctx.node(stage)
    if (n["kind"] != "elementwise" or len(n["spatial"]) != 2 or n["writers"] > 2
            or n["origin"] != "statement" or stage in ctx.inlined):
        return []
    if n["writers"] == 2:
        return _in_place_product(ctx, stage) if _elementwise_inlines(ctx, stage, set()) else []
    if not _elementwise_inlines(ctx, stage, set()):
        return []
    found, _ = RG.upstream(ctx, stage)
    shape = RG.row_extents(ctx, stage)
    if not 1 <= len(found) <= MAX_PRODUCTS:
        return []
    for p in found:
        a = g.nodes[p]
        if (a["kind"] != "matmul" or a["output"] or a["writers"] != 1
                or a["origin"] != "statement" or a["operands"][0] == a["operands"][1]
                or RG.row_extents(ctx, p) != shape):
            return []
        if not all(RG._only_feeds(ctx, c, stage, []) for c in G.consumers(g, p)):
            return []
    return found


def _elementwise_inlines(ctx, stage, seen) -> bool:
    """Whether every inlined stage `stage` reads (transitively through
    inlined stages) is elementwise."""
    for p in G.producers(ctx.graph, stage):
        if p in ctx.inlined and p not in seen:
            seen.add(p)
            if ctx.node(p)["kind"] != "elementwise" or not _elementwise_inlines(ctx, p, seen):
                return False
    return True


# --------------------------------------------------------- simt_epilogue
def _se_applies(ctx, stage):
    return bool(products(ctx, stage))


def _se_feasible(ctx, stage, p):
    """simt_tile's checks, with every product's shared tiles and local
    buffers counted (each product has its own, all allocated in the one
    kernel): per product the tm x tn accumulators, the fragments, and with
    `pipeline` the next K tiles' share of one thread, as validate counts
    registers (the local buffers plus REGISTER_OVERHEAD)."""
    from ..validate import REGISTER_OVERHEAD
    prods = products(ctx, stage)
    if not _st_feasible(ctx, prods[0], p):
        return False
    k = len(prods)
    bm, bn, bk, tm, tn = p["bm"], p["bn"], p["bk"], p["tm"], p["tn"]
    tile = bm * (bk + 4 * p["pad"]) + bk * bn
    shared = k * tile * 4 * (2 if p["pipeline"] else 1)
    threads = (bm // tm) * (bn // tn)
    tn4 = -(-tn // 4) * 4  # the output's columns are split by 4 (vectors): tiles of whole 4s
    per_product = (tm * tn4 + (tm + tn4 if p["fragments"] else 0)
                   + (-(-(bm * bk) // threads) - (-(bk * bn) // threads) + 8 if p["pipeline"]
                      else 0))  # (+ a vector each of the copies' region rounding)
    regs = k * per_product + REGISTER_OVERHEAD
    return shared <= ctx.limits.shared_bytes and regs <= ctx.limits.registers - 16


def _se_sample(ctx, stage, rng):
    prods = products(ctx, stage)
    for _ in range(20):
        p = _st_sample(ctx, prods[0], rng)
        if p is None or _se_feasible(ctx, stage, p):
            return p
    return None


def _se_apply(s, ctx, stage, p):
    """templates.simt_output_tiles on the epilogue, then each product as its
    register tile at the thread loop (templates.simt_accumulate): with one
    product, templates.simt_gemm(..., out=stage)."""
    prods = products(ctx, stage)
    copy = None
    if in_place(ctx, stage):  # P's register tile, copied into P before the update reads it
        (copy,) = prods
        accs = [s.cache_write(s[copy], "local")]
    else:
        accs = [s[q] for q in prods]
        for acc in accs:
            acc.set_scope("local")
    O = s[stage]
    at, tx, ty = templates.simt_output_tiles(O, p["bm"], p["bn"], p["tm"], p["tn"], p["lanes"],
                                             p["group"])
    if copy is not None:
        s[copy].compute_at(O, at)
    for q, acc in zip(prods, accs):
        a_name, b_name = ctx.node(q)["operands"]
        templates.simt_accumulate(s, acc, O, at, tx, ty, a_name, b_name, p["bn"], p["bk"],
                                  p["tm"], p["tn"], p["fragments"], p["pipeline"], p["vector"],
                                  p["pad"])


# ----------------------------------------------------------- tc_epilogue
def _te_applies(ctx, stage):
    prods = products(ctx, stage)
    return len(prods) == 1 and ctx.node(prods[0])["tensor_core"] and not in_place(ctx, stage)


def _te_sample(ctx, stage, rng):
    return _tc_sample(ctx, products(ctx, stage)[0], rng)


def _te_feasible(ctx, stage, p):
    return _tc_feasible(ctx, products(ctx, stage)[0], p)


def _te_keeps(ctx, stage, p) -> set:
    return _tc_keeps(ctx, products(ctx, stage)[0], p)


def _te_apply(s, ctx, stage, p):
    """tc_tile's schedule with the epilogue as the output and the product
    as the fragment accumulator (bench/schedules.py tc_gemm on a GEMM then
    an elementwise output of it)."""
    _tc_apply(s, ctx, products(ctx, stage)[0], p, out=stage)
