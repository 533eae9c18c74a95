"""compute_at: the region a consumer's loop needs of a producer (bound
inference, Halide style), and the producer built over it inside that loop —
into a shared or local buffer indexed relative to the region (with
storage_order, storage_align and the two halves of a double-buffered copy),
or into its global tensor."""
from __future__ import annotations

import math

from ..errors import LoweringError, ScheduleError
from ..arch import threads
from ..schedule.primitives import consumes
from . import ir
from .bounds import region as bounding_box
from .construct import add, conj, ident, lang_sub, sub
from .ir_walk import free_vars
from .context import View
from .legality import check_cover, check_global_storage_order
from .printer import expr as show
from .rewriter import Rewriter
from .simplify import simplify_expr
from .stages import inlined_definition
from .translate import Translator


def region(b, pname, cname, cst, level, info, siblings) -> dict:
    """Domain {index: (base, extent)} of stage `pname` computed at leaf
    `level` of `cname`: the region read there by the consumer and by the
    stages computed after it at the same loop (bound inference). `b`: the
    Builder."""
    pst = b.sched.states[pname]
    pd = pst.definition
    reads = []

    def collect(t, args, dt):
        if t == pd.tensor:
            reads.append(args)
        inlined = inlined_definition(b.sched, t)
        if inlined is not None:  # its reads happen here too, and its value is read
            # (not a load of a tensor that has no buffer: seed 3 pair 608 crashed on one)
            return Translator(dict(zip(inlined.spatial, args)), inlined.lets, b.size,
                              collect)(inlined.rhs)
        return ir.Load(t, args, dt)
    Translator(info.index, cst.definition.lets, b.size, collect)(cst.definition.rhs)
    if not consumes(b.sched, cname, pd.tensor):
        # a sibling (compute_at): the part with the consumer's own indices
        reads.append(tuple(info.index[v] for v in cst.definition.spatial))
    # Loops inside the attach point vary; for shared buffers, so do thread loops.
    vary = {}
    for j, leaf in enumerate(cst.leaves):
        relax = pst.scope == "shared" and threads.is_thread(cst.bind.get(leaf))
        if j > level or relax:
            vary[info.loopvar[leaf]] = (ir.const(0),
                                        simplify_expr(sub(info.ext[leaf], ir.const(1))))
    if pst.scope == "shared":
        for var, ext, _ in info.ctx.thread_loops:
            vary[var] = (ir.const(0), simplify_expr(sub(ext, ir.const(1))))
    # Stages computed at deeper loops of the consumer read through their own
    # regions, which move with the consumer's inner loop variables.
    deeper = []
    for j in range(level + 1, len(cst.leaves)):
        for q in b.children.get((cname, cst.leaves[j]), []):
            if pd.tensor in b.reads(q):
                deeper.append((q, b.region(q, cname, cst, j, info, [])))
    for q, qdom in list(siblings) + deeper:
        qd = b.sched.states[q].definition
        if pd.tensor not in b.reads(q):  # (through inlined stages too)
            continue
        index = {}
        for v in qd.spatial + qd.reduce:
            tmp = f"{ident(q)}.{v}"
            index[v] = add(qdom[v][0], ir.Var(tmp))
            vary[tmp] = (ir.const(0), simplify_expr(sub(qdom[v][1], ir.const(1))))
        Translator(index, qd.lets, b.size, collect)(qd.rhs)
    reg = bounding_box(reads, vary) if reads else None
    if (reg is not None and pst.scope == "global"
            and any(threads.is_thread(t) for t in pst.bind.values())):
        reg = _fixed_width(reg, reads, vary, pname, cname, cst, level, info, b)
    if any(pd.tensor in b.reads(r) for q, _ in list(siblings) + deeper for r in b.nested(q)):
        # a stage computed inside one of them (a cache at its loops) reads it over
        # a region not known here: the whole tensor, computed each time (correct;
        # compute the reader's cache elsewhere to make it smaller)
        reg = None
    if pst.scope == "global" and cst.definition.tensor == pd.tensor:
        _check_in_place(reg, cst, pname, cname, level, info)
    domain = {}
    for v in pd.reduce:
        lo, hi = pd.ranges[v]
        domain[v] = (b.lsize(lo), b.lsize(lang_sub(hi, lo)))
    deeper = {info.loopvar[leaf] for leaf in cst.leaves[level + 1:]}
    conds = [c for c in info.in_range if not free_vars(c) & deeper]
    for k, v in enumerate(pd.spatial):
        lo, hi = pd.ranges[v]
        if reg is not None:
            base = reg[k][0]
            width = simplify_expr(add(sub(reg[k][1], reg[k][0]), ir.const(1)))
            # Only the consumer's ranges over the indices the region reads at guard
            # it: a condition on other loops (`k_i < K` for a row `G(j)`) would make
            # the region of a shared copy differ between the threads of `k_i`, one
            # region a thread (seed 4 pair 7378, seed 6 pair 4541).
            used = free_vars(base) | free_vars(width)
            in_range = conj([c for c in conds if free_vars(c) & used])
            if in_range is not None and _loads(base, width):
                # A data-dependent region (a gather `O(X(i))`) read where the consumer's
                # indices are out of range (an imperfect split's tail) would load out of
                # bounds: the producer computes element `lo` there (seed 1 pair 4220).
                base = ir.Select(in_range, base, b.lsize(lo), ir.int32)
                if _loads(width):
                    width = ir.Select(in_range, width, ir.const(0), ir.int32)
        else:
            base, width = b.lsize(lo), b.lsize(lang_sub(hi, lo))
        domain[v] = (base, width)
    return domain


class _ViewLoads(Rewriter):
    def __init__(self, views, skip, sched):
        self.views, self.skip, self.sched = views, skip, sched

    def expr_Load(self, e):
        e = self.generic(e)
        if e.buffer == self.skip:  # the copy's own region, read before it is written:
            src = _copied_from(self.sched, e.buffer, any_scope=True)  # its source
            return e if src is None else ir.Load(src, e.indices, e.dtype)
        v = self.views.get(e.buffer)
        if v is not None:
            return ir.Load(v.buffer, v.subscripts(e.indices), e.dtype)
        src = _copied_from(self.sched, e.buffer)
        if src is not None:  # a copy not computed yet at this loop: its source
            return self.expr_Load(ir.Load(src, e.indices, e.dtype))
        return e


def _copied_from(sched, tensor: str, any_scope: bool = False) -> str | None:
    """The tensor a shared or local (or with `any_scope`, global) cache_read copy
    `tensor` copies, else None."""
    from ..lang.ast import Index, Read
    writers = [st for st in sched.states.values() if st.tensor == tensor]
    if len(writers) != 1 or writers[0].origin != "cache_read" or \
            (writers[0].scope == "global" and not any_scope):
        return None
    d = writers[0].definition
    r = d.rhs
    if isinstance(r, Read) and tuple(a.name for a in r.args if isinstance(a, Index)) == d.spatial:
        return r.tensor
    return None


def _through_views(domain: dict, views: dict, skip: str, sched=None) -> dict:
    """A region's bounds may load a tensor (a gather's subscript, `V(G(j))`) at its
    absolute indices; where that tensor is read through a buffer computed at an
    enclosing loop or earlier at this one (a shared copy of G), the load goes through
    its view, as the consumer's own read of it does. Before: `G_shared[j]` of a
    one-element copy, read out of bounds (issue 22's long fuzz run, seed 2 pair 7167).
    A copy computed later at this loop is not written yet: the load reads its source
    (seed 3 pairs 4427, 7709, 7780: shared memory no thread wrote). The copy's own
    region, `B_global` of `B(B(k))`, reads the copy's source: the copy is written only
    after its region is known (seed 4 pairs 1791, 24650: the global copy read itself
    before any write; a race between the threads that wrote and read it)."""
    if not any(_loads(*d) for d in domain.values()):
        return domain
    r = _ViewLoads(views, skip, sched)
    return {v: (simplify_expr(r.expr(lo)), simplify_expr(r.expr(n)))
            for v, (lo, n) in domain.items()}


def _check_in_place(reg, cst, pname, cname, level, info) -> None:
    """A stage computed at a loop of a statement that updates its tensor in place
    (`O(j, k) = f(O(j, k))`, the tensor's next writer) is computed again in every
    iteration of that loop: its region there must be known (what the statement
    updates there), or an iteration recomputes (and so undoes) what an earlier one
    updated (issue 22's long fuzz run, seed 4 pair 65201: the region of `O` at `j` after a
    split by `nparts` was not known, `O_1_k_o * ((j_i + 1) / 2)`, so the whole tensor
    was computed at each `j`, over the rows updated before: wrong answers)."""
    at = f"'{cname}.{cst.leaves[level]}'"
    if reg is None:
        raise LoweringError(
            f"stage '{pname}' is computed at {at}, where '{cname}' updates "
            f"'{cst.definition.tensor}' in place, but the region of '{pname}' there is "
            f"not known (it would be the whole tensor, computed again in every iteration, "
            f"over the elements earlier iterations updated): compute '{pname}' at root, "
            f"or split the loops of '{cname}' by constant factors (`factor=`) so that "
            f"its region is known")
    # A known region is the bounding box of what the statement updates at the loop
    # (compute_at refuses a statement that updates an element from others,
    # primitives_compute.py); where the loops inside stride over the tensor, the box
    # holds elements other iterations update, which computing it again would undo
    # (seed 8 pair 22374: O.1's m split by 3 and m_o moved inside, O computed at m_i
    # over m_i .. m_i + 3 while O.1 updates m_i and m_i + 3 there: O[3], updated at
    # m_i = 0, recomputed at m_i = 1). So each dimension's width must be at most the
    # number of points the loops inside give its index (constant widths; known
    # exactly or refused).
    inner = {info.loopvar[leaf]: info.ext[leaf] for leaf in cst.leaves[level + 1:]}
    # An imperfect inner split inside the attach point (`j_i` split by 2 where j_i
    # has 3 points): the box spans its tail, points that the next iteration of the
    # split's outer loop updates (seed 8 pairs 2273, 22894). A tail at or outside
    # the attach point skips the whole region instead (`attach`, `in_place_guard`).
    for c in info.tails:
        if free_vars(c) & set(inner):
            raise LoweringError(
                f"stage '{pname}' is computed at {at}, where '{cname}' updates "
                f"'{cst.definition.tensor}' in place, but a loop inside it is the tail of an "
                f"imperfect split (guard {show(c)}): its region there would include "
                f"elements that another iteration updates, and computing it again would "
                f"undo them; split by a factor that divides the extent, compute "
                f"'{pname}' at a loop inside the split, or at root")
    for k, v in enumerate(cst.definition.spatial):
        width = simplify_expr(add(sub(reg[k][1], reg[k][0]), ir.const(1)))
        count = ir.const(1)
        for var in sorted(free_vars(info.index[v]) & set(inner)):
            count = ir.Bin("*", count, inner[var], ir.int32)
        over = simplify_expr(sub(width, count))
        if isinstance(over, ir.Imm) and over.value <= 0:
            continue
        raise LoweringError(
            f"stage '{pname}' is computed at {at}, where '{cname}' updates "
            f"'{cst.definition.tensor}' in place, but its region there along dimension {k} "
            f"({show(width)} elements) is wider than what '{cname}' updates in one "
            f"iteration of {at} (the loops inside it stride over the tensor): computing it "
            f"again would undo what other iterations updated; compute '{pname}' at root, "
            f"or at a loop whose inner loops cover a contiguous block")


def _loads(*exprs) -> bool:
    return any(ir.loaded(e) for e in exprs)


def _fixed_width(reg, reads, vary, pname, cname, cst, level, info, b):
    """A producer that binds a loop to a thread needs a region whose extent
    does not change from one iteration of the consumer's enclosing loops to
    the next: a thread loop's extent is the block's, fixed at launch. Where
    the region's width moves with a serial loop of the consumer at or
    outside the attach point (`O(0) + O(m)` read under a split of `m`: width
    `2 * m_o + 2`), the region is widened over that loop's whole range (the
    same elements, computed again); a width that moves with a block or thread
    loop, or with a loop outside the consumer, is refused. Before: a block
    extent naming a loop variable (issue 22's fuzzer, seed 1 pair 3854)."""
    sizes = set(b.op.size_vars)
    widths = [simplify_expr(sub(hi, lo)) for lo, hi in reg]
    moving = set().union(*(free_vars(w) for w in widths)) - sizes - set(vary)
    if not moving:
        return reg
    serial = {info.loopvar[leaf]: leaf for j, leaf in enumerate(cst.leaves[:level + 1])
              if leaf not in cst.bind}
    fixed = sorted(moving - set(serial))
    if fixed:
        tags = {info.loopvar[leaf]: cst.bind[leaf] for leaf in cst.leaves if leaf in cst.bind}
        why = f", bound to {tags[fixed[0]]}" if fixed[0] in tags else ""
        extent = " x ".join(show(simplify_expr(add(w, ir.const(1)))) for w in widths)
        raise LoweringError(f"stage '{pname}' binds a loop to a thread and is computed at "
                            f"'{cname}.{cst.leaves[level]}', where the region it must compute "
                            f"changes size with loop variable '{fixed[0]}'{why} (extent "
                            f"{extent}); a thread loop's extent is fixed at launch: compute "
                            f"'{pname}' at a loop where its region has a fixed size, or do not "
                            f"bind its loops")
    vary = dict(vary)
    for var in moving:
        vary[var] = (ir.const(0), simplify_expr(sub(info.ext[serial[var]], ir.const(1))))
    return bounding_box(reads, vary)


def _check_block_region(pname, cname, cst, level, domain, info) -> None:
    """A global stage computed inside a consumer's loop bound to blockIdx.T computes
    its region there in each block: a region that does not move with that loop is
    the same global elements, written (and, for a reduction, read back) by every
    block in no fixed order, a race between blocks (issue 22's long fuzz run, seed 4
    pair 32738). A block loop inside the attach point counts too: blocks are launch
    dimensions, each block runs every statement outside that loop."""
    if info is None:
        return
    used = set()
    for base, extent in domain.values():
        used |= free_vars(base) | free_vars(extent)
    for leaf in cst.leaves:  # (a block loop inside the attach point too: every block
        tag = cst.bind.get(leaf)  # runs the whole kernel, so computes the region)
        if threads.is_block(tag) and info.loopvar[leaf] not in used:
            raise ScheduleError(
                f"stage '{pname}' (global scope) is computed at a loop of '{cname}' in "
                f"each block of its loop '{info.loopvar[leaf]}' (bound to {tag}), but the "
                f"region it computes there does not move with '{info.loopvar[leaf]}': "
                f"every block would write the same elements of '{pname}' in no fixed "
                f"order (a race between blocks). Compute '{pname}' at root, or give it "
                f"shared or local scope (a copy in each block)")


def attach(b, pname, cname, cst, level, domain, ctx, double=None, consumer=None):
    """Build stage `pname` at leaf `level` of `cname` over `domain`: (buffers
    to allocate around the loop's body, the producer's nest). With `double`
    (the loop variable), a shared buffer gets two halves and the consumer
    reads half `double % 2`. `consumer`: the consumer's loops (for
    messages). `b`: the Builder."""
    pst = b.sched.states[pname]
    pd = pst.definition
    domain = _through_views(domain, ctx.views, pd.tensor, b.sched)
    if pst.scope == "global":
        _check_block_region(pname, cname, cst, level, domain, consumer)
    offsets = [domain[v][0] for v in pd.spatial]
    allocs = []
    store_offsets = None
    if pst.scope in ("shared", "local", "fragment"):
        shape = []
        for k, v in enumerate(pd.spatial):
            w = domain[v][1]
            if not isinstance(w, ir.Imm):
                raise LoweringError(f"stage '{pname}' ({pst.scope}) computed at "
                                    f"'{cname}.{cst.leaves[level]}' needs a region of "
                                    f"non-constant extent {show(w)} in dimension {k}; split "
                                    f"the consumer's loops by constants inside that loop"
                                    f"{_runtime_threads(pst.scope, cst, level, ctx, consumer)}")
            shape.append(int(w.value))
        perm = None
        if pst.storage is not None:
            perm = tuple(pd.spatial.index(v) for v in pst.storage)
            shape = [shape[j] for j in perm]
        order = [pd.spatial[j] for j in (perm or range(len(pd.spatial)))]
        shape = _align(shape, [pst.align.get(v) for v in order], pname, order)
        prefix = ()
        if double is not None:
            var, n = double if isinstance(double, tuple) else (double, 2)
            shape = [n] + shape
            prefix = (ir.Bin("%", ir.Var(var), ir.const(n), ir.int32),)
        dtype = b.sched.tensors[pd.tensor][0]
        buf = ir.Buffer(pd.tensor, dtype, tuple(ir.const(n) for n in shape), pst.scope,
                        layout=_swizzle(pname, pst, dtype, shape))
        allocs.append(buf)
        ctx.views[pd.tensor] = View(pd.tensor, offsets, prefix, perm)
        store_offsets = offsets
    else:
        check_global_storage_order(pname, pst)
        if pd.tensor in {t.name for t in b.op.outputs}:
            check_cover(b.sched, pname, set(), b.sizes)
    prod = b.nest(pname, domain, ctx, store_offsets)
    guard = in_place_guard(pd.tensor, cst, level, consumer)
    if guard is not None:
        prod = ir.If(guard, prod)
    return allocs, prod


def in_place_guard(tensor, cst, level, info):
    """The condition under which a global stage computed at leaf `level` of an
    in-place writer of its tensor (`cst`) is computed there: the writer's
    imperfect-split tails at or outside that loop. In a tail iteration the
    writer updates nothing, and the stage's region would name the elements of
    the next iteration of the split's outer loop, which may have updated them
    already (seed 8 pair 2273: thread `j_o` recomputed `O` at `j_o + 1`). A
    condition and not an empty region, so that buffers computed inside keep
    their constant extents. None when there is no such tail."""
    if info is None or cst.definition.tensor != tensor:
        return None
    inner = {info.loopvar[leaf] for leaf in cst.leaves[level + 1:]}
    return conj([c for c in info.tails if not free_vars(c) & inner])


def _runtime_threads(scope, cst, level, ctx, consumer) -> str:
    """A message's note on the thread loops of runtime extent that a buffer
    computed at `level` of `cst` must cover: every thread loop of the block for
    a shared buffer, the consumer's loops inside the attach point for a local one."""
    loops = []
    if consumer is not None:
        for j, leaf in enumerate(cst.leaves):
            tag = cst.bind.get(leaf, "")
            if threads.is_thread(tag) and (j > level or scope == "shared"):
                loops.append((consumer.loopvar[leaf], consumer.ext[leaf], tag))
    if scope == "shared":
        loops += [t for t in ctx.thread_loops if t[0] not in {v for v, _, _ in loops}]
    runtime = [f"'{v}' bound to {tag} runs {show(e)} threads" for v, e, tag in loops
               if not isinstance(e, ir.Imm)]
    if not runtime:
        return ""
    return (f" ({', '.join(runtime)}, known only at launch, and a {scope} buffer needs a "
            f"constant size for the threads it serves: split that loop by a constant and bind "
            f"the inner part)")


def _swizzle(pname, pst, dtype, shape) -> ir.Swizzle | None:
    """The layout of a swizzled stage's buffer, once its shape is known; rows
    it cannot swizzle are an error naming the stage (schedule time cannot
    know the tile's shape)."""
    if pst.swizzle is None:
        return None
    layout = ir.Swizzle(pst.swizzle)
    row = shape[-1] * dtype.numpy.itemsize
    why = layout.problem(row)
    if why is not None:
        dims = " x ".join(str(n) for n in shape)
        raise ScheduleError(f"swizzle: stage '{pname}' ({pst.tensor}, {dims} {dtype.name}): {why}; "
                            f"change the tile's innermost extent (e.g. 64 16-bit elements make "
                            f"rows of 128 bytes) or do not swizzle it")
    return layout


def _align(shape, aligns, pname="", axes=()):
    """storage_align: pad the row after an aligned dimension so that the
    dimension's stride is offset mod factor. The stride is the padded row times
    the elements of the dimensions inside it (`inner`), so only offsets that
    are multiples of gcd(inner, factor) are reachable: another offset is an
    error naming the stage (before: the padding loop never ended, seed 7 pair
    10924, factor 6, offset 4, inner 3). `axes`: the buffer's dimensions' names."""
    shape = list(shape)
    for k, a in enumerate(aligns):
        if a is None or k + 1 >= len(shape):
            continue
        factor, offset = a
        inner = 1
        for n in shape[k + 2:]:
            inner *= n
        g = math.gcd(inner, factor)
        if offset % g:
            name = f" (axis '{axes[k]}')" if k < len(axes) else ""
            raise LoweringError(
                f"storage_align: stage '{pname}' wants the stride of its buffer's dimension "
                f"{k}{name} to be {offset} modulo {factor} elements, but that stride is the "
                f"length of dimension {k + 1} times {inner} (the elements of the dimensions "
                f"inside that one, {' x '.join(str(n) for n in shape[k + 2:])}), and no "
                f"multiple of {inner} is {offset} modulo {factor}: choose an offset that is a multiple of "
                f"gcd({inner}, {factor}) = {g}, or a factor prime to {inner}")
        while (shape[k + 1] * inner) % factor != offset:  # (ends within factor / g steps)
            shape[k + 1] += 1
    return shape
