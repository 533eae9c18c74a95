"""One leaf loop of a stage: the stages computed at it (compute_at) placed
first in its body, their buffers allocated around it, and the loop's kind
(thread-bound, unrolled, vectorized or serial) from the schedule."""
from __future__ import annotations

from ..schedule import threads
from . import ir


def leaf_loop(b, stage, st, i, info, inner, pre=None):
    """The loop of leaf i, with the stages computed at it placed first in its body.
    `inner()` builds the body after them; `pre` goes before the loop. `b`: the Builder."""
    leaf = st.leaves[i]
    attached = b.children.get((stage, leaf), [])
    # Regions in reverse order: a producer's region depends on what the stages
    # after it (its consumers at this loop) need.
    domains: dict[str, dict] = {}
    for p in reversed(attached):
        domains[p] = b.region(p, stage, st, i, info, [(q, domains[q]) for q in attached
                                                      if q in domains])
    var, ext = info.loopvar[leaf], info.ext[leaf]
    tag = st.bind.get(leaf, "")
    if threads.is_thread(tag):
        info.ctx.thread_loops.append((var, ext, tag))
    if leaf in st.pipeline:
        from .pipelining import pipelined_loop
        return pipelined_loop(b, stage, st, i, info, inner, pre, attached, domains)
    try:
        allocs, producers = [], []
        for p in attached:
            a, prod = b.attach(p, stage, st, i, domains[p], info.ctx, consumer=info)
            allocs += a
            if b.sched.states[p].scope == "global" and b.sched.readers(b.sched.states[p].tensor):
                # Other threads of the block may read what this producer wrote (and
                # may still be reading the previous iteration's values). (An output
                # no stage reads, a sibling of its target, needs no barrier.)
                prod = ir.seq(ir.Barrier(), prod, ir.Barrier())
            producers.append(prod)
        body = ir.seq(*producers, inner())
    finally:
        if threads.is_thread(tag):
            info.ctx.thread_loops.pop()
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    loop = for_loop(st, leaf, var, ext, body)
    return ir.seq(pre, loop) if pre is not None else loop


def for_loop(st, leaf, var, extent, body) -> ir.For:
    """The `For` of leaf `leaf` of stage state `st`, of the kind its schedule gives."""
    if leaf in st.tensorize:
        return ir.For(var, ir.const(0), extent, "tensorize", body, intrin=st.tensorize[leaf])
    if leaf in st.bind:
        return ir.For(var, ir.const(0), extent, "thread", body, st.bind[leaf])
    if leaf in st.unroll_by:
        return ir.For(var, ir.const(0), extent, "serial", body, unroll_by=st.unroll_by[leaf])
    kind = "unroll" if leaf in st.unroll else ("vectorize" if leaf in st.vectorize else "serial")
    return ir.For(var, ir.const(0), extent, kind, body)
