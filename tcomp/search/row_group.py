"""The stages the row rules (`row`, `row_regs` in rules/rows.py) schedule at a row
stage's row loop, read from the stage graph (graph.py).

A *row stage* O(n.., d) is elementwise over rows of its last axis. Its
*statistics* are the reductions over the row it reads: directly, or through
elementwise temporaries the plan inlines (softmax's `e(n, d) = exp(x - mx(n))`
and `rs(n) = 1 / sm(n)`, layernorm's `mu(n) = sx(n) / D` and
`rstd(n) = rsqrt(var + eps)`), each feeding only the row stage, other
statistics, or temporaries inlined into those. `row_regs` also takes:

  temporaries  the inlinable elementwise temporaries between the group's
               stages, per-row scalars (rstd(n)) or row-shaped (e(n, d)), that
               only the group reads: `row_regs` keeps them as stages in
               registers instead of inlining them (Rule.keeps);
  siblings     other row-shaped outputs the stage's statistics do not feed,
               computed from what the row holds (fused add + layernorm's sum
               S(n, d)): stored from the same registers at the row loop;
  heads        row-shaped elementwise outputs computed from inputs that the
               statistics and the stage read (add + RMSNorm written with the
               residual sum as an output: H = X + R, ss(n) += H * H,
               Y = H * rsqrt(..)): computed and stored at the row loop, then
               read back once into registers (each thread its own pieces)
               for the group's stages.

A row-shaped tensor held in registers is sliced over the threads the same
way in every stage (templates.row_slices), so each of its readers in the
group must read it at the reader's own row indices (`aligned`): no thread
reads an element another thread holds.
"""
from __future__ import annotations

import networkx as nx

from ..lang.symbolic import eval_int
from . import graph as G


def lead_extents(ctx, stage) -> list[int]:
    n = ctx.node(stage)
    return [ctx.extents[stage][v] for v in n["spatial"][:-1]]


def row_extents(ctx, stage) -> list[int]:
    return [ctx.extents[stage][v] for v in ctx.node(stage)["spatial"]]


def upstream(ctx, stage) -> tuple[list[str], list[str]]:
    """(the stages `stage` reads that the plan does not inline, reached
    directly or through inlined elementwise temporaries; the inlined
    elementwise temporaries passed on the way), each in statement order.
    Other inlined stages (injective, gathers) end the walk."""
    g = ctx.graph
    seen, found, passed, todo = set(), [], [], list(G.producers(g, stage))
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if p not in ctx.inlined:
            found.append(p)
        elif g.nodes[p]["kind"] == "elementwise":
            passed.append(p)
            todo.extend(G.producers(g, p))
    key = lambda s: g.nodes[s]["order"]  # noqa: E731
    return sorted(found, key=key), sorted(passed, key=key)


def statistics(ctx, stage) -> list[str]:
    """The reductions `row` computes at `stage`'s row loop: single-writer,
    one reduction axis, spatial axes the same extents as `stage`'s leading
    ones, reached from `stage` directly or through inlined elementwise
    temporaries (`upstream`), and feeding only `stage`, one another, or
    inlined stages that feed only those."""
    g, n = ctx.graph, ctx.node(stage)
    if n["kind"] not in ("elementwise", "injective") or len(n["spatial"]) < 2:
        return []
    lead = lead_extents(ctx, stage)
    out = [p for p in upstream(ctx, stage)[0]
           if g.nodes[p]["reduce"] and len(g.nodes[p]["reduce"]) == 1
           and g.nodes[p]["writers"] == 1 and g.nodes[p]["origin"] == "statement"
           and [ctx.extents[p][v] for v in g.nodes[p]["spatial"]] == lead]
    # Each must feed only `stage`, stages inlined into it, or another of them
    # (layernorm's var reads mean): drop offenders until none is left.
    while True:
        keep = [p for p in out if all(_only_feeds(ctx, c, stage, out) for c in G.consumers(g, p))]
        if keep == out:
            return out
        out = keep


def _only_feeds(ctx, c, stage, group) -> bool:
    if c == stage or c in group:
        return True
    return c in ctx.inlined and all(_only_feeds(ctx, x, stage, group)
                                    for x in G.consumers(ctx.graph, c))


def reads(ctx, stage, inlined) -> set:
    """The tensors `stage` reads once the stages in `inlined` are substituted."""
    out = set(ctx.node(stage)["reads"])
    for p in G.producers(ctx.graph, stage):
        if p in inlined:
            out |= reads(ctx, p, inlined)
    return out


def siblings(ctx, stage, stats) -> list[str]:
    """Row-shaped elementwise outputs (one writer, read by no stage) that
    come before `stage`, whose stages upstream are statistics of `stage` and
    whose direct producers `stage` reads too (so the sibling is computed
    before `stage` in every order), and that read a row-shaped input `stage`
    reads (a row both compute from)."""
    g, n = ctx.graph, ctx.node(stage)
    shape = row_extents(ctx, stage)
    rows = {t.name for t in ctx.op.inputs if _shape(ctx, t) == shape}
    mine = reads(ctx, stage, ctx.inlined) & rows
    if not mine:
        return []
    before = None
    out = []
    for c in g.nodes:
        a = g.nodes[c]
        if (c == stage or not a["output"] or a["kind"] != "elementwise" or a["writers"] != 1
                or a["origin"] != "statement" or a["order"] > n["order"] or g.out_degree(c)
                or row_extents(ctx, c) != shape):
            continue
        if before is None:
            before = nx.ancestors(g, stage)
        found, _ = upstream(ctx, c)
        if (all(p in stats for p in found) and set(G.producers(g, c)) <= before
                and reads(ctx, c, ctx.inlined) & mine):
            out.append(c)
    return out


def heads(ctx, stage, stats) -> list[str]:
    """The group's heads (see the module docstring): stages the plan does not
    inline that `stage` or its statistics read (directly or through inlined
    elementwise temporaries), elementwise, outputs of the row's extents, one
    writer, computing from inputs only (nothing upstream but inlined
    stages), read by two or more of the group's stages and only by the
    group (or inlined stages serving it), each reader at its own row
    indices."""
    g = ctx.graph
    group = [stage, *stats]
    shape, lead = row_extents(ctx, stage), len(lead_extents(ctx, stage))
    cands = set()
    for m in group:
        cands |= set(upstream(ctx, m)[0])
    out = []
    for h in sorted(cands - set(group), key=lambda s: g.nodes[s]["order"]):
        a = g.nodes[h]
        if (a["kind"] != "elementwise" or not a["output"] or a["writers"] != 1
                or a["origin"] != "statement" or row_extents(ctx, h) != shape
                or upstream(ctx, h)[0]):
            continue
        t = a["tensor"]
        readers = [m for m in group if t in reads(ctx, m, ctx.inlined)]
        if (len(readers) >= 2
                and all(serves(ctx, c, set(group), ctx.inlined) for c in G.consumers(g, h))
                and all(aligned(ctx, m, t, len(shape), lead, ctx.inlined) for m in readers)
                and cacheable(ctx, t, set(group), ctx.inlined)):
            out.append(h)
    return out


def _shape(ctx, t) -> list[int]:
    return [eval_int(e, ctx.sizes) for e in t.shape]


def _row_vars(node, lead: int, rank: int):
    """A reader's own indices for a tensor of `rank` dimensions (`lead` row
    indices, then the row's element for rank lead + 1): a row-shaped
    reader's spatial indices, a statistic's spatial indices and its
    reduction index; None for other readers."""
    sp = tuple(node["spatial"])
    if len(sp) == lead + 1:
        idx = sp
    elif len(sp) == lead and len(node["reduce"]) == 1:
        idx = sp + tuple(node["reduce"])
    else:
        return None
    return idx[:rank]


def aligned(ctx, reader, tensor, rank, lead, inlined) -> bool:
    """Whether `reader` reads `tensor` (of `rank` dimensions) at its own row
    indices (`_row_vars`), directly and through every stage in `inlined`
    that it substitutes (which must read it so as well)."""
    node = ctx.node(reader)
    idx = _row_vars(node, lead, rank)
    subs = node["subscripts"]
    if idx is None or subs is None:
        return False
    want = tuple((((v, 1),), True) for v in idx)
    if tensor in subs and subs[tensor] != want:
        return False
    for p in G.producers(ctx.graph, reader):
        if p in inlined and tensor in reads(ctx, p, inlined):
            pr = len(ctx.node(p)["spatial"])
            pidx = _row_vars(node, lead, pr)
            if pidx is None or subs.get(ctx.node(p)["tensor"]) != tuple(
                    (((v, 1),), True) for v in pidx):
                return False
            if not aligned(ctx, p, tensor, rank, lead, inlined):
                return False
    return True


def temporaries(ctx, stage, group) -> tuple[list[str], list[str]]:
    """(per-row scalars, row-shaped temporaries) `row_regs` may keep as
    stages in registers: the inlined elementwise temporaries on the way from
    the `group`'s stages (`upstream`) of the row's leading extents (one
    value per row) or of the row's extents, read only by the group or other
    such temporaries, each reader reading it at its own row indices."""
    lead, shape = lead_extents(ctx, stage), row_extents(ctx, stage)
    cands = set()
    for m in group:
        cands |= set(upstream(ctx, m)[1])
    cands = {t for t in cands
             if row_extents(ctx, t) in (lead, shape) and ctx.node(t)["spatial"]}
    g, members = ctx.graph, set(group)
    while True:
        keep = {t for t in cands
                if all(c in members or c in cands for c in G.consumers(g, t))
                and all(aligned(ctx, c, ctx.node(t)["tensor"], len(ctx.node(t)["spatial"]),
                                len(lead), ()) for c in G.consumers(g, t))}
        if keep == cands:
            break
        cands = keep
    order = sorted(cands, key=lambda s: g.nodes[s]["order"])
    return ([t for t in order if len(ctx.node(t)["spatial"]) == len(lead)],
            [t for t in order if len(ctx.node(t)["spatial"]) == len(lead) + 1])


def serves(ctx, name, group, inlined) -> bool:
    """Whether stage `name` computes only for `group`: a member, or a stage
    in `inlined` substituted only into members (directly or through other
    such stages): what templates.readers_for lets read a cache."""
    if name in group:
        return True
    users = G.consumers(ctx.graph, name)
    return name in inlined and bool(users) and all(serves(ctx, c, group, inlined) for c in users)


def cacheable(ctx, tensor, group, inlined) -> bool:
    """Whether a cache of `tensor` serves every read of it by `group`: each
    stage reading it that is substituted into a member (through `inlined`)
    is substituted only into members (a temporary also inlined into a stage
    outside the group would read the cache from outside the row loop)."""
    g = ctx.graph
    for r in g.nodes:
        if tensor in g.nodes[r]["reads"] and not serves(ctx, r, group, inlined) and \
                r in inlined and nx.descendants(g, r) & set(group):
            return False
    return True


def cached_inputs(ctx, stage, group, inlined) -> list[str]:
    """The row-shaped inputs `row_regs` reads once into registers: read, with
    `inlined` substituted, by two or more of the group's stages, every one of
    them reading it at its own row indices, and `cacheable`."""
    shape, lead = row_extents(ctx, stage), len(lead_extents(ctx, stage))
    out = []
    for t in ctx.op.inputs:
        if _shape(ctx, t) != shape:
            continue
        readers = [m for m in group if t.name in reads(ctx, m, inlined)]
        if (len(readers) >= 2 and all(aligned(ctx, m, t.name, len(shape), lead, inlined)
                                      for m in readers)
                and cacheable(ctx, t.name, set(group), inlined)):
            out.append(t.name)
    return out
