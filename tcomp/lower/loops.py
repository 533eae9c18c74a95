"""One leaf loop of a stage: the stages computed at it (compute_at) placed
first in its body, their buffers allocated around it, and the loop's kind
(thread-bound, unrolled, vectorized or serial) from the schedule."""
from __future__ import annotations

from ..arch import threads
from ..errors import LoweringError
from . import ir
from .block_regions import check_block_regions, check_thread_regions


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
    check_block_regions(b, stage, st, i, info, attached, domains, info.ctx.views)
    check_thread_regions(b, stage, st, i, info, attached, domains, info.ctx.views)
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
            producers.append(placed(b, p, prod, info))
        body = ir.seq(*producers, inner())
    finally:
        if threads.is_thread(tag):
            info.ctx.thread_loops.pop()
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    loop = for_loop(st, leaf, var, ext, body)
    return ir.seq(pre, loop) if pre is not None else loop


def placed(b, p, prod: ir.Stmt, info) -> ir.Stmt:
    """Producer `p`'s nest `prod` as a loop's body runs it: a global producer
    inside thread loops it does not use is computed by one thread where it
    accumulates in memory (`one_thread`), and one that other stages read is
    fenced by barriers (other threads of the block may read what it wrote,
    and may still be reading the previous iteration's values, or update it; an
    output no stage reads or writes again, a sibling of its target, needs none)."""
    st = b.sched.states[p]
    if st.scope != "global":
        return prod
    prod = one_thread(prod, info.ctx.thread_loops, p)
    # (another statement writing the tensor is a reader too: `O(i, j) += 1` continues
    # what the producer wrote, in other threads; seed 2 pair 6848 raced there)
    if b.sched.readers(st.tensor) or len(b.sched.writers(st.tensor)) > 1:
        prod = ir.seq(ir.Barrier(), prod, ir.Barrier())
    return prod


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


def one_thread(prod: ir.Stmt, thread_loops, name: str = "") -> ir.Stmt:
    """A global producer computed inside thread-bound loops whose variables it
    does not use computes the same elements in every thread of those loops.
    Where it accumulates in memory (it reads a buffer it writes: a reduction
    whose loop is outside its own spatial loops), the threads' updates of one
    element race: only thread 0 of those loops computes it (the barrier
    after a producer that others read makes its result visible). Left as it
    is: a producer that synchronises (a barrier or a collective inside it, or
    a shared buffer, which gets barriers later) or binds a loop to the same
    thread index itself (a cooperative nest). A producer that accumulates in
    memory and synchronises cannot be narrowed, and every thread would update
    the same elements: a LoweringError (fuzz seed 9 pair 7700)."""
    nodes = list(ir.walk(prod))
    own = {x.buffer.name: x.buffer.scope for x in nodes if isinstance(x, ir.Alloc)}
    written = {x.buffer for x in nodes if isinstance(x, ir.Store) and x.buffer not in own}
    if not written & {x.buffer for x in nodes if isinstance(x, ir.Load)}:
        return prod
    syncs = "shared" in own.values() or any(
        isinstance(x, (ir.Barrier, ir.AllReduce, ir.Evaluate)) for x in nodes)
    own_tags = {str(x.tag) for x in nodes if isinstance(x, ir.For) and x.kind == "thread"}
    used = {x.name for x in nodes if isinstance(x, ir.Var)}
    # a tag the producer reads through another loop bound to it (a compute_at chain that
    # re-enters threadIdx.x): its threads compute different elements (fuzz seed 7 pair 50377)
    used_tags = {str(tag) for var, _, tag in thread_loops if var in used}
    alike = [(var, tag) for var, _, tag in thread_loops
             if var not in used and str(tag) not in own_tags | used_tags
             and threads.is_thread(tag)]
    if not alike:
        return prod
    if syncs:  # (shared buffers inside get barriers later: all threads must run it)
        loops = ", ".join(f"'{var}' ({tag})" for var, tag in alike)
        raise LoweringError(
            f"stage '{name}' (global scope) accumulates in memory inside the thread loop(s) "
            f"{loops}, which its region does not use, so every thread of them would update "
            f"the same elements while the others read them (a race between threads); it "
            f"cannot run in one thread of them, because it synchronises the block (a shared "
            f"copy or a barrier inside it). Compute it at root or outside those loops, "
            f"reorder its reduction loops inside its spatial loops (it accumulates in "
            f"registers then), or give it local scope")
    conds = [ir.Bin("==", ir.Var(var), ir.const(0), ir.bool_) for var, _ in alike]
    cond = conds[0]
    for c in conds[1:]:
        cond = ir.Bin("&&", cond, c, ir.bool_)
    return ir.If(cond, prod)
