"""The loop nest of one stage.

The extents of its axes follow from its domain through the split/fuse
relations; every original index is rebuilt from the leaf loop variables
(split: parent = outer * inner_extent + inner; fuse: outer = fused /
inner_extent, inner = fused % inner_extent); imperfect splits get guards. A
stage computed at a consumer's loop is built over the region the consumer
reads there, clamped to its own ranges, and stores relative to that region
when its buffer is shared or local. How a reduction accumulates is
reduction.py's part.
"""
from __future__ import annotations

from ..errors import LoweringError, ScheduleError
from ..arch import threads
from ..schedule.stage import SplitRel
from . import ir, ragged_loops
from .construct import add, conj, ident, mul, sub
from .context import StageLoops
from .loops import for_loop
from .reduction import init_nest, needs_start, register_accumulation
from .ir_walk import free_vars
from .rewriter import substitute
from .scan import scan_loop
from .scan_lookback import lookback_body
from .scatter_store import scatter_store
from .tuple_nest import tuple_accumulation
from .simplify import simplify_expr
from .stages import effective_reads, stage_loc
from .translate import Translator, cast, combine


# A split factor (or part count) above this is no loop's meaning (no thread, vector,
# tensor-core or unrolled loop is that long): split_extents clamps it to the extent.
LARGE_SPLIT = 1 << 16


def split_extents(st, r: SplitRel, e: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    """(outer, inner) extents of split `r` of a loop of extent `e`.

    A factor (or part count) larger than the extent splits it as the extent
    itself would: the extra iterations of the inner (outer) loop are all guarded
    off. Above LARGE_SPLIT such a factor is clamped to the extent: to the
    constant where the extent is one, else to min(factor, extent) (at least 1),
    unless a loop of the split has a meaning of its own (bound to threads,
    vectorized, pipelined, tensorized: its extent is a block size or a width).
    So extent 8 split by 10^6 runs 8 iterations, not 10^6, and `extent +
    factor - 1` (the outer extent's numerator; the guard's largest index is
    below it) stays below 2 * extent instead of overflowing int32 for factors
    near 2^31 (the kernel computed nothing). Factors up to LARGE_SPLIT keep
    their loops as written (the IR shows the factor given)."""
    n = r.factor if r.factor is not None else r.nparts
    if n <= LARGE_SPLIT or _fixed_extent(st, r):
        fixed = ir.const(n)
    elif isinstance(e, ir.Imm):
        fixed = ir.const(max(min(n, int(e.value)), 1))
    else:
        fixed = simplify_expr(ir.Bin("max", ir.Bin("min", ir.const(n), e, ir.int32),
                                     ir.const(1), ir.int32))
    other = simplify_expr(ir.Bin("/", add(e, sub(fixed, ir.const(1))), fixed, ir.int32))
    return (other, fixed) if r.factor is not None else (fixed, other)


def _fixed_extent(st, r: SplitRel) -> bool:
    """Whether a loop derived from split `r` needs the extent the split gives it."""
    derived = {r.outer, r.inner}
    for rel in st.relations[st.relations.index(r) + 1:]:
        parents = {rel.parent} if isinstance(rel, SplitRel) else {rel.outer, rel.inner}
        if parents & derived:
            derived |= {rel.outer, rel.inner} if isinstance(rel, SplitRel) else {rel.fused}
    leaves = derived & set(st.leaves)
    thread_tags = {a.name for a in threads.THREAD}
    threads_bound = {a for a, tag in st.bind.items() if tag in thread_tags}
    return bool(st.scope == "fragment" or st.tensorize or
                leaves & (threads_bound | st.vectorize | set(st.pipeline)))


class StageNest:
    """Builds stage `stage` over `domain` ({index: (base, extent)}) in the
    kernel context `ctx`; `store_offsets`: the region's base per dimension
    when the stage stores into a shared/local buffer of the region's shape.
    `b`: the Builder. `build()` returns the nest."""

    def __init__(self, b, stage: str, domain: dict, ctx, store_offsets):
        self.b, self.stage = b, stage
        self.st = st = b.sched.states[stage]
        self.d = d = st.definition
        self.prefix = prefix = ident(stage)
        ext: dict[str, ir.Expr] = {v: domain[v][1] for v in d.spatial + d.reduce}
        for r in st.relations:
            if isinstance(r, SplitRel):
                ext[r.outer], ext[r.inner] = split_extents(st, r, ext[r.parent])
            else:
                ext[r.fused] = simplify_expr(mul(ext[r.outer], ext[r.inner]))
        loopvar = {leaf: ctx.fresh(leaf, prefix) for leaf in st.leaves}
        _check_rebinds(stage, st, ctx, loopvar, b, domain)
        val: dict[str, ir.Expr] = {leaf: ir.Var(loopvar[leaf]) for leaf in st.leaves}
        guards = []  # (kind, condition)
        aliasing = _aliasing(st.relations)
        tails = []  # the guards past which an index aliases another iteration's point
        for r in reversed(st.relations):
            if isinstance(r, SplitRel):
                val[r.parent] = add(mul(val[r.outer], ext[r.inner]), val[r.inner])
                guards.append((st.kinds[r.parent], ir.Bin("<", val[r.parent], ext[r.parent],
                                                         ir.bool_)))
                exact = simplify_expr(sub(mul(ext[r.outer], ext[r.inner]), ext[r.parent]))
                if (r.parent in aliasing and st.kinds[r.parent] != "reduce"
                        and exact != ir.const(0)):
                    tails.append(guards[-1][1])
            else:
                val[r.outer] = ir.Bin("/", val[r.fused], ext[r.inner], ir.int32)
                val[r.inner] = ir.Bin("%", val[r.fused], ext[r.inner], ir.int32)
        index = {v: simplify_expr(add(domain[v][0], val[v])) for v in d.spatial + d.reduce}
        # Clamp to the stage's own ranges when its domain is a region (computed at a consumer).
        # Over its own whole range an index needs none: its loops cover exactly that range
        # (fuse divides exactly; an imperfect split has its guard above), and a clamp on a
        # fused index (`f / N < M`) is one the simplifier cannot drop with symbolic sizes.
        clamps = []
        for v in d.spatial:
            lo, hi = d.ranges[v]
            lo_ir, hi_ir = b.lsize(lo), b.lsize(hi)
            base, extent = domain[v]
            if simplify_expr(base) == simplify_expr(lo_ir) and \
                    simplify_expr(extent) == simplify_expr(sub(hi_ir, lo_ir)):
                continue
            clamps.append(ir.Bin(">=", index[v], lo_ir, ir.bool_))
            clamps.append(ir.Bin("<", index[v], hi_ir, ir.bool_))
        # Tensor-core tiles are whole: a fragment stage computes its full tile (the
        # edges of the tensors are zeros in the shared tiles it reads, so its extra
        # elements are zeros or never stored), and a shared copy that fragments read
        # stores zero outside the tensor instead of skipping those elements.
        self.zero_outside = None
        if st.scope == "fragment":
            guards = [(k, c) for k, c in guards if k != "reduce"]
        elif st.scope == "shared" and any(
                o.scope == "fragment" and d.tensor in o.definition.reads()
                for o in b.sched.states.values()):
            self.zero_outside = conj(clamps)
        else:
            guards += [("spatial", c) for c in clamps]

        in_range = tuple(c for _, c in guards)
        self.loc = stage_loc(b.sched, stage)
        self.tr = Translator(index, d.lets, b.size, lambda t, a, dt: b.read(t, a, dt, ctx))
        self.out_dtype = out_dtype = b.sched.tensors[d.tensor][0]
        store_idx = [index[v] for v in d.spatial]
        if store_offsets is not None:
            store_idx = [sub(i, o) for i, o in zip(store_idx, store_offsets)]
        store_idx = tuple(simplify_expr(i) for i in store_idx)
        view = ctx.views.get(d.tensor)
        if store_offsets is not None and view is not None and view.perm is not None:
            store_idx = tuple(store_idx[j] for j in view.perm)
        self.store_idx = store_idx
        self.target = view.buffer if view is not None else d.tensor

        # Threads along an axis this stage is not spread over (by its own loops or the
        # loops around it) would all repeat its stores: only thread 0 of that axis
        # stores. (Read-modify-write accumulation would otherwise race.)
        # (Not for local buffers: every thread needs its own copy.)
        # A shared stage's region covers every enclosing thread (it was relaxed over
        # them), so only its own thread loops spread it.
        enclosing = set() if st.scope == "shared" else {t for *_, t in ctx.thread_loops}
        bound = enclosing | set(st.bind.values())
        if any(b.sched.tensors[t][2] == "fragment" for t in effective_reads(b.sched, stage)):
            # reading a fragment is warp-wide: the lanes (threadIdx.x) share out its
            # elements by the fragment's layout (tensor_cores.py)
            bound.add(threads.THREAD[0].name)
        for tag in (a.name for a in threads.THREAD):
            if tag not in bound and st.scope not in ("local", "fragment"):
                guards.append(("spatial", ir.Bin("==", ir.Var(tag), ir.const(0), ir.bool_)))
        self.guards = guards
        self.sg = conj([c for k, c in guards if k == "spatial"])
        self.allg = conj([c for _, c in guards])
        self.reduce_leaves = reduce_leaves = [l for l in st.leaves if st.kinds[l] == "reduce"]
        # A `!` reduction with nothing to reduce (e.g. an rfactor stage) is an assignment.
        self.reducing = reducing = d.reduce_op is not None and bool(d.reduce or not d.init)
        self.acc_dt = acc_dt = d.acc_dtype if reducing else None

        self.first_red = (st.leaves.index(reduce_leaves[0]) if reduce_leaves
                          else len(st.leaves))
        self.registers = registers = reducing and all(
            st.kinds[l] == "reduce" for l in st.leaves[self.first_red:])
        if reducing and not registers and out_dtype != acc_dt:
            raise LoweringError(f"stage '{stage}': spatial loops inside its reduction loops "
                                f"accumulate in '{d.tensor}' ({out_dtype}), but the reduction "
                                f"needs {acc_dt}; use cache_write(..., 'local') to accumulate "
                                f"in {acc_dt}")

        self.acc_name = ctx.fresh(f"{ident(d.tensor)}_acc", prefix) if registers else None
        self.info = StageLoops(loopvar, ext, domain, index, ctx, in_range,
                               tuple(simplify_expr(c) for c in tails))

        self.cross = cross = [l for l in reduce_leaves if l in st.bind]
        if cross and not registers:
            raise LoweringError(f"stage '{stage}': its reduction across threads (axis "
                                f"'{cross[0]}') needs every reduction loop inside every spatial "
                                f"loop; reorder the reduction axes innermost")

    # ------------------------------------------------------------ pieces
    @staticmethod
    def guarded(cond, s):
        return s if cond is None else ir.If(cond, s)

    def store(self, value):
        return ir.Store(self.target, self.store_idx, cast(value, self.out_dtype), loc=self.loc)

    def current(self):
        return cast(ir.Load(self.target, self.store_idx, self.out_dtype), self.acc_dt)

    def value(self):
        d = self.d
        if self.zero_outside is not None:
            v = cast(self.tr(d.rhs), self.out_dtype)  # (a copy: no change of value)
            return ir.Select(self.zero_outside, v, ir.Imm(0, v.dtype) if not v.dtype.is_float
                             else ir.Imm(0.0, v.dtype), v.dtype)
        if self.reducing:
            return cast(self.tr(d.rhs), self.acc_dt)
        return cast(self.tr(d.rhs), d.acc_dtype) if d.reduce_op is not None else self.tr(d.rhs)

    # ------------------------------------------------------------ loops
    def build(self) -> ir.Stmt:
        if self.d.ragged:  # the placeholders of ragged bounds, read at the point
            return substitute(self.leaf_loop(0), ragged_loops.bounds(self.d, self.tr, self.sg))
        return self.leaf_loop(0)

    def leaf_loop(self, i: int) -> ir.Stmt:
        st, d = self.st, self.d
        if d.scatter and i == len(st.leaves):  # a plain or atomic update (scatter_store.py)
            return scatter_store(self)
        if d.monoid is not None and i == self.first_red:
            if not self.registers:
                raise LoweringError(f"stage '{self.stage}' computes a tuple reduction "
                                    f"('{d.monoid}=!'): its reduction loops must be inside "
                                    f"every spatial loop; reorder the reduction axes innermost")
            return tuple_accumulation(self, i)
        if self.registers and i == self.first_red:
            return register_accumulation(self, i)
        if st.lookback is not None and i == len(st.leaves) - (st.lookback.items is not None):
            return lookback_body(self)  # (inside every loop but a thread's elements)
        if st.scan is not None and st.lookback is None and i < len(st.leaves) and \
                st.leaves[i] == st.scan[0]:
            return scan_loop(self, i)
        if i == len(st.leaves):
            if self.reducing:
                return self.guarded(self.allg, self.store(
                    combine(d.reduce_op, self.current(), self.value(), self.acc_dt)))
            return self.guarded(self.allg, self.store(self.value()))
        pre = None
        if (self.reducing and not self.registers and i == self.first_red
                and needs_start(d, self.acc_dt)):
            pre = init_nest(self, i)
        return self.b.loop(self.stage, st, i, self.info, lambda: self.leaf_loop(i + 1), pre)

    def reduction_loops(self, i, inner_stmt):
        if i == len(self.st.leaves):
            return inner_stmt()
        return self.b.loop(self.stage, self.st, i, self.info,
                           lambda: self.reduction_loops(i + 1, inner_stmt))

    def for_loop(self, leaf, body) -> ir.For:
        return for_loop(self.st, leaf, self.info.loopvar[leaf], self.info.ext[leaf], body)


def _check_rebinds(stage: str, st, ctx, loopvar: dict, b, domain: dict) -> None:
    """A thread axis is bound at most once on any path from the kernel to a statement:
    a stage computed inside a loop bound to threadIdx.T that binds a loop of its own to
    threadIdx.T again would be computed only where the two indices coincide (each thread
    runs one value of both). The exception is a shared stage whose region is the same
    for every enclosing thread (attach.py relaxes it over them): its own threads share
    out the whole region cooperatively. A region that still reads an enclosing thread
    loop (a gathered index, `X(G(j), k)` read at a split of k bound to threads, is
    guarded by k's range, so its row depends on the thread) differs between threads:
    the same rule holds (issue 22's long fuzz run, seed 4 pair 7378, seed 6 pair 4541)."""
    if st.scope == "shared":
        _check_shared_region(stage, st, ctx, loopvar, domain)
        return
    if st.scope == "local" and st.attach[0] == "at":
        _check_local_binds(stage, st, loopvar, b)
    outer = {tag: var for var, _, tag in ctx.thread_loops}
    for leaf, tag in st.bind.items():
        if tag in outer:
            raise ScheduleError(
                f"stage '{stage}' binds its loop '{loopvar.get(leaf, leaf)}' ({leaf}) to "
                f"{tag}, but it is computed inside loop '{outer[tag]}', already bound to {tag}: "
                f"each thread would compute only the elements where the two indices coincide. "
                f"Bind '{leaf}' to another thread axis, compute '{stage}' at a loop outside "
                f"'{outer[tag]}' (or at root), or give it shared scope (a cooperative stage "
                f"covering every thread)")


def _check_shared_region(stage: str, st, ctx, loopvar: dict, domain: dict) -> None:
    """See _check_rebinds: a shared stage binding threadIdx.T, computed inside a loop
    bound to threadIdx.T, must have a region that does not depend on that loop."""
    region_vars = set()
    for base, extent in domain.values():
        region_vars |= free_vars(base) | free_vars(extent)
    outer = {tag: var for var, _, tag in ctx.thread_loops}
    for leaf, tag in st.bind.items():
        if tag in outer and outer[tag] in region_vars:
            raise ScheduleError(
                f"stage '{stage}' (shared scope) binds its loop '{loopvar.get(leaf, leaf)}' "
                f"({leaf}) to {tag}, but it is computed inside loop '{outer[tag]}', already "
                f"bound to {tag}, and the region it computes there depends on "
                f"'{outer[tag]}' (differs between the threads of {tag}): each thread would "
                f"compute only the elements where the two indices coincide. Compute "
                f"'{stage}' at a loop outside '{outer[tag]}' (or at root), where its "
                f"region is one for the whole block")


def _check_local_binds(stage: str, st, loopvar: dict, b) -> None:
    """Registers are per thread: a loop of a local stage bound to threadIdx.T leaves
    each thread one part of the buffer, which only readers that bind threadIdx.T too
    read in the same thread (a bound reduction loop is a cross-thread reduction, whose
    value every thread gets). A reader that reads the whole region in each thread
    read registers no thread wrote (the sim refused it; the GPU read garbage: the long
    fuzz run of issue 22, seed 1 pairs 228 and 875). `b`: the Builder."""
    states = b.sched.states
    readers = [q for q in states if q != stage and states[q].attach != ("inline",)
               and st.tensor in b.reads(q)]  # (an inlined stage reads inside its readers)
    for leaf, tag in st.bind.items():
        if st.kinds[leaf] == "reduce":
            continue
        for q in readers:
            if tag in states[q].bind.values():
                _check_same_dimension(stage, st, leaf, tag, q, states[q], loopvar)
                continue
            raise ScheduleError(
                f"stage '{stage}' (local scope: registers of one thread) binds its loop "
                f"'{loopvar.get(leaf, leaf)}' ({leaf}) to {tag}, but its reader '{q}' does "
                f"not bind {tag}: each of its threads would read registers no thread wrote. "
                f"Leave the loops of '{stage}' serial (unroll them), bind a loop of '{q}' to "
                f"{tag} too, or give '{stage}' shared scope (a cooperative stage covering "
                f"every thread)")


def _origins(st, name: str) -> set[str]:
    """The index variables of stage state `st` that loop `name` derives from."""
    for r in reversed(st.relations):
        if isinstance(r, SplitRel) and name in (r.outer, r.inner):
            return _origins(st, r.parent)
        if not isinstance(r, SplitRel) and name == r.fused:
            return _origins(st, r.outer) | _origins(st, r.inner)
    return {name}


def _check_same_dimension(stage, st, leaf, tag, q, qs, loopvar) -> None:
    """A local stage's loop bound to threadIdx.T leaves thread T the part of the buffer
    along the dimensions that loop derives from; its reader must bind threadIdx.T to a
    loop of an index it reads those dimensions at. Other indices only (a local copy
    of A bound along A's columns, read as A(k, i) by a reader binding k) read registers
    no thread wrote (issue 22's long fuzz run, seed 2 pair 5388)."""
    from ..lang.ast import Index, Read, walk
    dims = [st.definition.spatial.index(v) for v in _origins(st, leaf)
            if v in st.definition.spatial]
    (qleaf,) = [x for x, t in qs.bind.items() if t == tag]
    qd = qs.definition
    for e in [qd.rhs, *qd.lets.values()]:
        for r in walk(e):
            if not (isinstance(r, Read) and r.tensor == st.tensor):
                continue
            for k in dims:
                used = {x.name for x in walk(r.args[k]) if isinstance(x, Index)} \
                    if k < len(r.args) else set()
                if used & _origins(qs, qleaf):
                    continue  # (registers.py checks the offsets: `X(n, d + 1)`)
                raise ScheduleError(
                    f"stage '{stage}' (local scope: registers of one thread) binds its loop "
                    f"'{loopvar.get(leaf, leaf)}' ({leaf}) to {tag}, along dimension {k} of "
                    f"'{st.tensor}', but its reader '{q}' binds {tag} to '{qleaf}', not to the "
                    f"index it reads that dimension at: each of its threads would read "
                    f"registers no thread wrote. Bind the loops of '{stage}' and '{q}' along "
                    f"the same dimension, leave the loops of '{stage}' serial, or give it "
                    f"shared scope")


def _aliasing(relations) -> set:
    """The axes whose values past their extent name points of another iteration
    inside the stage's range (not past its end): the inner part of a split (`j_i`
    past its extent is the next `j_o`'s), an outer part or a fusion's loops
    whose parent (fused: outer) axis is one. A guard on a root axis, or on axes
    derived from roots only through outer parts and fusions, cuts off points past
    the range's end."""
    parent = {}
    for r in relations:
        if isinstance(r, SplitRel):
            parent[r.inner] = ("inner", r.parent)
            parent[r.outer] = ("outer", r.parent)
        else:
            parent[r.fused] = ("fused", r.outer)
    out = set()

    def alias(axis):
        kind, p = parent.get(axis, (None, None))
        if kind is None:
            return False
        return kind == "inner" or alias(p)
    for axis in parent:
        if alias(axis):
            out.add(axis)
    return out
