"""Loop-nest construction: op + schedule -> Kernel IR (one kernel per root stage).

For each stage: the extents of its axes follow from its domain through the
split/fuse relations; every original index is rebuilt from the leaf loop
variables (split: parent = outer * inner_extent + inner; fuse: outer =
fused / inner_extent, inner = fused % inner_extent); imperfect splits get
guards. Stages computed at a consumer's loop are built inside that loop over
the region the consumer reads there (bound inference, Halide style), and
shared/local buffers are indexed relative to that region.

Reductions: when every reduction loop is inside every spatial loop, the value
accumulates in a per-thread register (`<T>_acc`) and is stored once;
otherwise it accumulates in the tensor itself, which must then have the
accumulation type (use cache_write to get one).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import LoweringError
from ..lang.ast import Read, walk
from ..schedule.stage import SplitRel
from . import ir
from .accesses import accesses
from .bounds import region
from .launch import launch_dims
from .printer import expr as show
from .rewriter import Rewriter, substitute
from .simplify import simplify_expr
from .translate import Translator, cast, combine, identity, size_expr


@dataclass
class _StageLoops:
    """One stage's loop variables, extents, domain and index values in a kernel."""
    loopvar: dict
    ext: dict
    domain: dict
    index: dict
    ctx: "KernelCtx"


@dataclass
class View:
    buffer: str
    offsets: list  # per dimension, subtracted from absolute indices
    prefix: tuple = ()  # leading subscripts (the buffer half of a double-buffered copy)
    perm: tuple | None = None  # storage_order: buffer dimension j holds logical dimension perm[j]

    def subscripts(self, args) -> tuple:
        args = tuple(simplify_expr(_sub(a, o)) for a, o in zip(args, self.offsets))
        if self.perm is not None:
            args = tuple(args[j] for j in self.perm)
        return self.prefix + args


class KernelCtx:
    def __init__(self):
        self.names: set[str] = set()
        self.views: dict[str, View] = {}
        self.thread_loops: list[tuple[str, ir.Expr, str]] = []  # enclosing threadIdx loops

    def fresh(self, base: str, prefix: str) -> str:
        name = base if base not in self.names else f"{prefix}_{base}"
        i = 1
        while name in self.names:
            name, i = f"{prefix}_{base}{i}", i + 1
        self.names.add(name)
        return name


def _ident(stage: str) -> str:
    return stage.replace(".", "_")


def _add(a, b):
    return ir.Bin("+", a, b, ir.int32)


def _sub(a, b):
    return ir.Bin("-", a, b, ir.int32)


def _mul(a, b):
    return ir.Bin("*", a, b, ir.int32)


def _ceildiv(a, f: int):
    return ir.Bin("/", _add(a, ir.const(f - 1)), ir.const(f), ir.int32)


class Builder:
    def __init__(self, sched, sizes: dict[str, int]):
        self.sched, self.op, self.sizes = sched, sched.op, dict(sizes)
        self.children: dict[tuple[str, str], list[str]] = {}
        for n, st in sched.states.items():
            if st.attach[0] == "at":
                self.children.setdefault((st.attach[1], st.attach[2]), []).append(n)

    def size(self, name: str) -> ir.Expr:
        if name in self.sizes:
            return ir.const(self.sizes[name])
        return ir.Var(name)

    def lsize(self, e) -> ir.Expr:
        return simplify_expr(size_expr(e, self.size))

    # ------------------------------------------------------------ program
    def program(self) -> ir.Program:
        op = self.op
        bufs = []
        roles = {t.name: "input" for t in op.inputs}
        roles.update({t.name: "output" for t in op.outputs})
        for name, (dtype, shape, scope) in self.sched.tensors.items():
            if scope == "global":
                bufs.append(ir.Buffer(name, dtype, tuple(self.lsize(d) for d in shape), "global",
                                      roles.get(name, "temp")))
        self.check_readers()
        kernels = []
        for n, st in self.sched.states.items():
            inline_output = st.attach == ("inline",) and st.tensor in roles
            if st.attach == ("root",) or inline_output:
                kernels.append(self.kernel(n))
        free = tuple(v for v in op.size_vars if v not in self.sizes)
        return ir.Program(op.name, tuple(bufs), tuple(kernels), tuple(t.name for t in op.inputs),
                          tuple(t.name for t in op.outputs), free, dict(self.sizes))

    def check_readers(self):
        """A stage computed at another exists only inside that stage's loops:
        every stage reading it must be computed there too (after it), be the
        host itself or one of the host's hosts, or — for a global tensor the
        host computes whole — run in a later kernel."""
        states = self.sched.states
        order = list(states)
        outputs = {t.name for t in self.op.outputs}

        def hosts(n):
            out = []
            while states[n].attach[0] == "at":
                n = states[n].attach[1]
                out.append(n)
            return out

        def position(n):
            """Where n is built: (host-chain root first) list of (stage, leaf index, order)."""
            path = []
            while states[n].attach[0] == "at":
                _, h, leaf = states[n].attach
                path.append((h, states[h].leaves.index(leaf) if leaf in states[h].leaves
                             else -1, order.index(n)))
                n = h
            return list(reversed(path))

        for p, st in states.items():
            if st.attach[0] != "at":
                continue
            host = st.attach[1]
            pp = position(p)
            for q, qs in states.items():
                if q == p or st.tensor not in self._effective_reads(q):
                    continue
                if q in hosts(p) or (qs.attach == ("inline",) and qs.tensor not in outputs):
                    continue  # (an inlined stage reads inside its readers, checked themselves)
                qp = position(q)
                # q must be built inside the same host loops as p, and after it ...
                ok = len(qp) >= len(pp) and qp[:len(pp) - 1] == pp[:-1] and \
                    qp[len(pp) - 1][0] == pp[-1][0] and \
                    (qp[len(pp) - 1][1], qp[len(pp) - 1][2]) > (pp[-1][1], pp[-1][2])
                # ... or, for a tensor in global memory written whole, run in a later kernel.
                root = lambda n: (hosts(n) or [n])[-1]  # noqa: E731
                if not ok and st.scope == "global" and order.index(root(q)) > order.index(root(p)):
                    self._check_cover(p, set())
                    ok = True
                if not ok:
                    raise LoweringError(
                        f"stage '{q}' reads '{st.tensor}', which is computed inside '{host}' "
                        f"(compute_at); compute '{q}' inside '{host}' too, after it, or compute "
                        f"'{p}' at root")

    def kernel(self, stage: str) -> ir.Kernel:
        ctx = KernelCtx()
        st = self.sched.states[stage]
        if st.scope in ("shared", "local", "fragment"):
            raise LoweringError(f"stage '{stage}' writes a {st.scope} buffer but is computed at "
                                f"root; use compute_at to place it inside a loop of a stage "
                                f"that reads it")
        _global_storage_order(stage, st)
        domain = {v: (self.lsize(lo), self.lsize(_lang_sub(hi, lo)))
                  for v, (lo, hi) in st.definition.ranges.items()}
        body = self.nest(stage, domain, ctx, store_offsets=None)
        grid, block = launch_dims(body, stage)
        acc = accesses(body)
        used = set(acc.buffers | acc.free_vars)
        gbufs = tuple(b for b in self.sched.tensors if self.sched.tensors[b][2] == "global"
                      and b in used)
        # Flattening indexes with the buffers' shapes: their size variables are needed too.
        for b in gbufs:
            for d in self.sched.tensors[b][1]:
                used |= {x.name for x in walk(d) if hasattr(x, "name") and type(x).__name__ == "Size"}
        sizes = tuple(v for v in self.op.size_vars if v not in self.sizes and v in used)
        return ir.Kernel(f"{self.op.name}_{_ident(stage)}", gbufs, sizes, grid, block, body)

    # ------------------------------------------------------------ one stage
    def nest(self, stage: str, domain: dict, ctx: KernelCtx, store_offsets) -> ir.Stmt:
        st = self.sched.states[stage]
        d = st.definition
        prefix = _ident(stage)
        ext: dict[str, ir.Expr] = {v: domain[v][1] for v in d.spatial + d.reduce}
        for r in st.relations:
            if isinstance(r, SplitRel):
                e = ext[r.parent]
                if r.factor is not None:
                    ext[r.outer], ext[r.inner] = simplify_expr(_ceildiv(e, r.factor)), ir.const(r.factor)
                else:
                    ext[r.outer], ext[r.inner] = ir.const(r.nparts), simplify_expr(_ceildiv(e, r.nparts))
            else:
                ext[r.fused] = simplify_expr(_mul(ext[r.outer], ext[r.inner]))
        loopvar = {leaf: ctx.fresh(leaf, prefix) for leaf in st.leaves}
        val: dict[str, ir.Expr] = {leaf: ir.Var(loopvar[leaf]) for leaf in st.leaves}
        guards = []  # (kind, condition)
        for r in reversed(st.relations):
            if isinstance(r, SplitRel):
                val[r.parent] = _add(_mul(val[r.outer], ext[r.inner]), val[r.inner])
                guards.append((st.kinds[r.parent], ir.Bin("<", val[r.parent], ext[r.parent],
                                                         ir.bool_)))
            else:
                val[r.outer] = ir.Bin("/", val[r.fused], ext[r.inner], ir.int32)
                val[r.inner] = ir.Bin("%", val[r.fused], ext[r.inner], ir.int32)
        index = {v: simplify_expr(_add(domain[v][0], val[v])) for v in d.spatial + d.reduce}
        # Clamp to the stage's own ranges when its domain is a region (computed at a consumer).
        for v in d.spatial:
            lo, hi = d.ranges[v]
            lo_ir, hi_ir = self.lsize(lo), self.lsize(hi)
            guards.append(("spatial", ir.Bin(">=", index[v], lo_ir, ir.bool_)))
            guards.append(("spatial", ir.Bin("<", index[v], hi_ir, ir.bool_)))

        d_loc = self._loc(stage)
        tr = Translator(index, d.lets, self.size, lambda t, a, dt: self.read(t, a, dt, ctx))
        out_dtype = self.sched.tensors[d.tensor][0]
        store_idx = [index[v] for v in d.spatial]
        if store_offsets is not None:
            store_idx = [_sub(i, o) for i, o in zip(store_idx, store_offsets)]
        store_idx = tuple(simplify_expr(i) for i in store_idx)
        view = ctx.views.get(d.tensor)
        if store_offsets is not None and view is not None and view.perm is not None:
            store_idx = tuple(store_idx[j] for j in view.perm)
        target = view.buffer if view is not None else d.tensor

        # Threads along an axis this stage is not spread over (by its own loops or the
        # loops around it) would all repeat its stores: only thread 0 of that axis
        # stores. (Read-modify-write accumulation would otherwise race.)
        # (Not for local buffers: every thread needs its own copy.)
        # A shared stage's region covers every enclosing thread (it was relaxed over
        # them), so only its own thread loops spread it.
        enclosing = set() if st.scope == "shared" else {t for *_, t in ctx.thread_loops}
        bound = enclosing | set(st.bind.values())
        if any(self.sched.tensors[t][2] == "fragment" for t in self._effective_reads(stage)):
            # reading a fragment is warp-wide: the lanes (threadIdx.x) share out its
            # elements by the fragment's layout (tensor_cores.py)
            bound.add("threadIdx.x")
        for axis in "xyz":
            tag = f"threadIdx.{axis}"
            if tag not in bound and st.scope not in ("local", "fragment"):
                guards.append(("spatial", ir.Bin("==", ir.Var(tag), ir.const(0), ir.bool_)))
        sg = _conj([c for k, c in guards if k == "spatial"])
        allg = _conj([c for _, c in guards])
        reduce_leaves = [l for l in st.leaves if st.kinds[l] == "reduce"]
        # A `!` reduction with nothing to reduce (e.g. an rfactor stage) is an assignment.
        reducing = d.reduce_op is not None and bool(d.reduce or not d.init)
        acc_dt = d.acc_dtype if reducing else None

        def guarded(cond, s):
            return s if cond is None else ir.If(cond, s)

        def store(value):
            return ir.Store(target, store_idx, cast(value, out_dtype), loc=d_loc)

        def current():
            return cast(ir.Load(target, store_idx, out_dtype), acc_dt)

        first_red = st.leaves.index(reduce_leaves[0]) if reduce_leaves else len(st.leaves)
        registers = reducing and all(st.kinds[l] == "reduce" for l in st.leaves[first_red:])
        if reducing and not registers and out_dtype != acc_dt:
            raise LoweringError(f"stage '{stage}': spatial loops inside its reduction loops "
                                f"accumulate in '{d.tensor}' ({out_dtype}), but the reduction "
                                f"needs {acc_dt}; use cache_write(..., 'local') to accumulate "
                                f"in {acc_dt}")

        def value():
            if reducing:
                return cast(tr(d.rhs), acc_dt)
            return cast(tr(d.rhs), d.acc_dtype) if d.reduce_op is not None else tr(d.rhs)

        acc_name = ctx.fresh(f"{_ident(d.tensor)}_acc", prefix) if registers else None
        info = _StageLoops(loopvar, ext, domain, index, ctx)

        cross = [l for l in reduce_leaves if l in st.bind]
        if cross and not registers:
            raise LoweringError(f"stage '{stage}': its reduction across threads (axis "
                                f"'{cross[0]}') needs every reduction loop inside every spatial "
                                f"loop; reorder the reduction axes innermost")

        def leaf_loop(i: int) -> ir.Stmt:
            if registers and i == first_red:
                acc = ir.Buffer(acc_name, acc_dt, (ir.const(1),), "local")
                a0 = (ir.const(0),)
                load_acc = ir.Load(acc_name, a0, acc_dt)
                # The update is translated inside the loops, after the stages computed
                # at them have registered their buffers (views).
                inner = reduction_loops(i, lambda: guarded(allg, ir.Store(
                    acc_name, a0, combine(d.reduce_op, load_acc, value(), acc_dt))))
                if not cross:
                    init = identity(d.reduce_op, acc_dt) if d.init else current()
                    return ir.Alloc(acc, ir.seq(guarded(sg, ir.Store(acc_name, a0, init)), inner,
                                                guarded(sg, store(load_acc))))
                # Every thread starts from the identity and takes part in the
                # all-reduce; the threads of a group then store the same value.
                # The block keeps at least one thread along the reduction's axis even
                # when the axis is empty (a runtime extent of 0): the threads past the
                # extent hold the identity (their updates are predicated off), so
                # the result is the identity, and the launch still stores it.
                leaf = cross[0]
                n = simplify_expr(ir.Bin("max", info.ext[leaf], ir.const(1), ir.int32))
                red = ir.AllReduce(d.reduce_op, acc_name, acc_dt, st.bind[leaf], n)
                if d.init:
                    final, fg = load_acc, sg
                else:
                    # Continuing adds to the tensor's value: a read-modify-write that
                    # one thread of the group does (all of them would race on it).
                    final = combine(d.reduce_op, current(), load_acc, acc_dt)
                    fg = _conj([c for k, c in guards if k == "spatial"] + [ir.Bin(
                        "==", ir.Var(st.bind[leaf]), ir.const(0), ir.bool_)])
                return ir.Alloc(acc, ir.seq(ir.Store(acc_name, a0, identity(d.reduce_op, acc_dt)),
                                            inner, red, guarded(fg, store(final))))
            if i == len(st.leaves):
                if reducing:
                    return guarded(allg, store(combine(d.reduce_op, current(), value(), acc_dt)))
                return guarded(allg, store(value()))
            leaf = st.leaves[i]
            pre = None
            if reducing and not registers and d.init and i == first_red:
                pre = init_nest(i)
            return self.loop(stage, st, i, info, lambda: leaf_loop(i + 1), pre)

        def reduction_loops(i, inner_stmt):
            if i == len(st.leaves):
                return inner_stmt()
            return self.loop(stage, st, i, info, lambda: reduction_loops(i + 1, inner_stmt))

        def init_nest(i):
            # Memory accumulation: initialise the points of the spatial loops inside the
            # outermost reduction loop, just before it.
            inner_sp = [l for l in st.leaves[i:] if st.kinds[l] == "spatial"]
            s = guarded(sg, store(identity(d.reduce_op, acc_dt)))
            for leaf in reversed(inner_sp):
                s = _for(st, leaf, loopvar[leaf], ext[leaf], s)
            return s

        return leaf_loop(0)

    def loop(self, stage, st, i, info, inner, pre=None):
        """The loop of leaf i, with the stages computed at it placed first in its body."""
        leaf = st.leaves[i]
        attached = self.children.get((stage, leaf), [])
        # Regions in reverse order: a producer's region depends on what the stages
        # after it (its consumers at this loop) need.
        domains: dict[str, dict] = {}
        for p in reversed(attached):
            domains[p] = self.region(p, stage, st, i, info, [(q, domains[q]) for q in attached
                                                             if q in domains])
        var, ext = info.loopvar[leaf], info.ext[leaf]
        tag = st.bind.get(leaf, "")
        if tag.startswith("threadIdx"):
            info.ctx.thread_loops.append((var, ext, tag))
        if leaf in st.pipeline:
            return self.pipelined_loop(stage, st, i, info, inner, pre, attached, domains)
        try:
            allocs, producers = [], []
            for p in attached:
                a, prod = self.attach(p, stage, st, i, domains[p], info.ctx, consumer=info)
                allocs += a
                if self.sched.states[p].scope == "global":
                    # Other threads of the block may read what this producer wrote (and
                    # may still be reading the previous iteration's values).
                    prod = ir.seq(ir.Barrier(), prod, ir.Barrier())
                producers.append(prod)
            body = ir.seq(*producers, inner())
        finally:
            if tag.startswith("threadIdx"):
                info.ctx.thread_loops.pop()
        for a in reversed(allocs):
            body = ir.Alloc(a, body)
        loop = _for(st, leaf, var, ext, body)
        return ir.seq(pre, loop) if pre is not None else loop

    def pipelined_loop(self, stage, st, i, info, inner, pre, attached, domains):
        """Software pipelining (double buffering) of the shared copies at leaf i:

            <load copy(0) into registers; store it to half 0>; barrier
            for k: if k+1 < n: load copy(k+1) into registers
                   body(k), reading half k % 2
                   if k+1 < n: store the registers to half (k+1) % 2
                   barrier
        """
        leaf = st.leaves[i]
        var, ext = info.loopvar[leaf], info.ext[leaf]
        shared = [p for p in attached if self.sched.states[p].scope == "shared"]
        if not shared:
            raise LoweringError(f"stage '{stage}': pipeline on '{leaf}', but no shared-memory "
                                f"copy is computed at that loop")
        if len(shared) != len(attached):
            others = [p for p in attached if p not in shared]
            raise LoweringError(f"stage '{stage}': pipeline on '{leaf}' double-buffers shared "
                                f"copies only, but '{others[0]}' is also computed there")
        allocs, loads, stores = [], [], []
        for p in shared:
            a, prod = self.attach(p, stage, st, i, domains[p], info.ctx, double=var,
                                  consumer=info)
            allocs += a
            regs = info.ctx.fresh(f"{_ident(self.sched.states[p].tensor)}_prefetch",
                                  _ident(stage))
            load, store, n = _split_copy(_unroll_serial(prod, p), a[0].name, regs)
            allocs.append(ir.Buffer(regs, a[0].dtype, (ir.const(n),), "local"))
            loads.append(load)
            stores.append(store)
        nxt = {var: ir.Bin("+", ir.Var(var), ir.const(1), ir.int32)}
        half = lambda k: ir.Bin("%", k, ir.const(2), ir.int32)  # noqa: E731
        first = {var: ir.const(0)}
        prologue = ir.seq(*[substitute(l, first) for l in loads],
                          *[substitute(s_(ir.const(0)), first) for s_ in stores])
        more = ir.Bin("<", ir.Bin("+", ir.Var(var), ir.const(1), ir.int32), ext, ir.bool_)
        body = ir.seq(
            ir.If(more, ir.seq(*[substitute(l, nxt) for l in loads])),
            inner(),
            # half(k) becomes half(k + 1) with the substitution k -> k + 1.
            ir.If(more, ir.seq(*[substitute(s_(half(ir.Var(var))), nxt) for s_ in stores])),
            ir.Barrier())
        out = ir.seq(prologue, ir.Barrier(), _for(st, leaf, var, ext, body))
        for a in reversed(allocs):
            out = ir.Alloc(a, out)
        return ir.seq(pre, out) if pre is not None else out

    # ------------------------------------------------------------ compute_at
    def region(self, pname, cname, cst, level, info, siblings) -> dict:
        """Domain {index: (base, extent)} of stage `pname` computed at leaf
        `level` of `cname`: the region read there by the consumer and by the
        stages computed after it at the same loop (bound inference)."""
        pst = self.sched.states[pname]
        pd = pst.definition
        reads = []

        def collect(t, args, dt):
            if t == pd.tensor:
                reads.append(args)
            inlined = self._inlined(t)
            if inlined is not None:  # its reads happen here too
                Translator(dict(zip(inlined.spatial, args)), inlined.lets, self.size,
                           collect)(inlined.rhs)
            return ir.Load(t, args, dt)
        Translator(info.index, cst.definition.lets, self.size, collect)(cst.definition.rhs)
        # Loops inside the attach point vary; for shared buffers, so do thread loops.
        vary = {}
        for j, leaf in enumerate(cst.leaves):
            relax = pst.scope == "shared" and cst.bind.get(leaf, "").startswith("threadIdx")
            if j > level or relax:
                vary[info.loopvar[leaf]] = (ir.const(0),
                                            simplify_expr(_sub(info.ext[leaf], ir.const(1))))
        if pst.scope == "shared":
            for var, ext, _ in info.ctx.thread_loops:
                vary[var] = (ir.const(0), simplify_expr(_sub(ext, ir.const(1))))
        # Stages computed at deeper loops of the consumer read through their own
        # regions, which move with the consumer's inner loop variables.
        deeper = []
        for j in range(level + 1, len(cst.leaves)):
            for q in self.children.get((cname, cst.leaves[j]), []):
                if pd.tensor in self.sched.states[q].definition.reads():
                    deeper.append((q, self.region(q, cname, cst, j, info, [])))
        for q, qdom in list(siblings) + deeper:
            qd = self.sched.states[q].definition
            if pd.tensor not in qd.reads():
                continue
            index = {}
            for v in qd.spatial + qd.reduce:
                tmp = f"{_ident(q)}.{v}"
                index[v] = _add(qdom[v][0], ir.Var(tmp))
                vary[tmp] = (ir.const(0), simplify_expr(_sub(qdom[v][1], ir.const(1))))
            Translator(index, qd.lets, self.size, collect)(qd.rhs)
        reg = region(reads, vary) if reads else None
        domain = {}
        for v in pd.reduce:
            lo, hi = pd.ranges[v]
            domain[v] = (self.lsize(lo), self.lsize(_lang_sub(hi, lo)))
        for k, v in enumerate(pd.spatial):
            lo, hi = pd.ranges[v]
            if reg is not None:
                base = reg[k][0]
                width = simplify_expr(_add(_sub(reg[k][1], reg[k][0]), ir.const(1)))
            else:
                base, width = self.lsize(lo), self.lsize(_lang_sub(hi, lo))
            domain[v] = (base, width)
        return domain

    def attach(self, pname, cname, cst, level, domain, ctx, double=None, consumer=None):
        """Build stage `pname` at leaf `level` of `cname` over `domain`. With
        `double` (the loop variable), a shared buffer gets two halves and the
        consumer reads half `double % 2`. `consumer`: the consumer's loops (for
        messages)."""
        pst = self.sched.states[pname]
        pd = pst.definition
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
            shape = _align(shape, [pst.align.get(pd.spatial[j]) for j in
                                   (perm or range(len(pd.spatial)))])
            prefix = ()
            if double is not None:
                shape = [2] + shape
                prefix = (ir.Bin("%", ir.Var(double), ir.const(2), ir.int32),)
            buf = ir.Buffer(pd.tensor, self.sched.tensors[pd.tensor][0],
                            tuple(ir.const(n) for n in shape), pst.scope)
            allocs.append(buf)
            ctx.views[pd.tensor] = View(pd.tensor, offsets, prefix, perm)
            store_offsets = offsets
        else:
            _global_storage_order(pname, pst)
            if pd.tensor in {t.name for t in self.op.outputs}:
                self._check_cover(pname, set())
        prod = self.nest(pname, domain, ctx, store_offsets)
        return allocs, prod

    def _check_cover(self, pname, seen):
        """An output computed inside another stage must still be written
        everywhere: every stage reading it must read it at plain indices over
        the output's whole ranges, and be complete itself."""
        from ..lang.ast import Index
        st = self.sched.states[pname]
        if st.attach[0] != "at" or pname in seen:  # (an inlined output is written at root too)
            return
        seen.add(pname)
        pd = st.definition
        readers = [q for q, s in self.sched.states.items() if pd.tensor in s.definition.reads()]
        for q in readers:
            qd = self.sched.states[q].definition
            for e in [qd.rhs, *qd.lets.values()]:
                for r in walk(e):
                    if not (isinstance(r, Read) and r.tensor == pd.tensor):
                        continue
                    ok = len(r.args) == len(pd.spatial) and all(
                        isinstance(a, Index) and _same(qd.ranges.get(a.name), pd.ranges[v])
                        for a, v in zip(r.args, pd.spatial))
                    if not ok:
                        what = "output" if pd.tensor in {t.name for t in self.op.outputs} \
                            else "global tensor"
                        raise LoweringError(
                            f"stage '{pname}' writes {what} '{pd.tensor}' but is computed inside "
                            f"'{st.attach[1]}', and '{q}' does not read all of it: part of the "
                            f"{what} could stay unwritten (compute it at root instead)")
            self._check_cover(q, seen)

    # ------------------------------------------------------------ reads
    def _loc(self, stage: str):
        """Source location of the statement a stage computes (caches: their reader's)."""
        st = self.sched.states[stage]
        tensor = st.tensor
        for s in self.op.statements:
            if s.tensor == tensor:
                return s.stmt.loc
        return None

    def _effective_reads(self, stage: str) -> set[str]:
        """Tensors a stage reads, directly or through stages inlined into it."""
        out, todo = set(), [stage]
        while todo:
            for t in self.sched.states[todo.pop()].definition.reads():
                if t in out:
                    continue
                out.add(t)
                writers = [n for n, s in self.sched.states.items() if s.tensor == t]
                if len(writers) == 1 and self.sched.states[writers[0]].attach == ("inline",):
                    todo.append(writers[0])
        return out

    def _inlined(self, tensor: str):
        """The definition of `tensor` when its only writer is inlined, else None."""
        writers = [s for s in self.sched.states.values() if s.tensor == tensor]
        if len(writers) == 1 and writers[0].attach == ("inline",):
            return writers[0].definition
        return None

    def read(self, tensor: str, args, dtype, ctx: KernelCtx) -> ir.Expr:
        states = self.sched.states
        writers = [n for n, s in states.items() if s.tensor == tensor]
        if len(writers) == 1 and states[writers[0]].attach == ("inline",):
            p = states[writers[0]].definition
            index = dict(zip(p.spatial, args))
            tr = Translator(index, p.lets, self.size, lambda t, a, dt: self.read(t, a, dt, ctx))
            return tr(p.rhs)
        if tensor in ctx.views:
            v = ctx.views[tensor]
            return ir.Load(v.buffer, v.subscripts(args), dtype)
        return ir.Load(tensor, args, dtype)


def _runtime_threads(scope, cst, level, ctx, consumer) -> str:
    """A message's note on the thread loops of runtime extent that a buffer
    computed at `level` of `cst` must cover: every thread loop of the block for
    a shared buffer, the consumer's loops inside the attach point for a local one."""
    loops = []
    if consumer is not None:
        for j, leaf in enumerate(cst.leaves):
            tag = cst.bind.get(leaf, "")
            if tag.startswith("threadIdx") and (j > level or scope == "shared"):
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


def _same(a, b) -> bool:
    if a is None or b is None:
        return False
    from ..lang.symbolic import NotSymbolic, to_sympy
    try:
        return all((to_sympy(x) - to_sympy(y)).simplify() == 0 for x, y in zip(a, b))
    except NotSymbolic:
        return a == b


def _lang_sub(hi, lo):
    from ..lang import dtypes
    from ..lang.ast import Binary, Const
    if isinstance(lo, Const) and lo.value == 0:
        return hi
    return Binary("-", hi, lo, dtypes.int32)


def _conj(conds):
    out = None
    for c in conds:
        if isinstance(c, ir.Imm) and c.value:
            continue
        out = c if out is None else ir.Bin("&&", out, c, ir.bool_)
    return out


def _for(st, leaf, var, extent, body) -> ir.For:
    if leaf in st.tensorize:
        return ir.For(var, ir.const(0), extent, "tensorize", body, intrin=st.tensorize[leaf])
    if leaf in st.bind:
        return ir.For(var, ir.const(0), extent, "thread", body, st.bind[leaf])
    kind = "unroll" if leaf in st.unroll else ("vectorize" if leaf in st.vectorize else "serial")
    return ir.For(var, ir.const(0), extent, kind, body)


def _global_storage_order(name, st):
    if st.storage is not None:
        raise LoweringError(f"stage '{name}': storage_order lays out shared and local buffers "
                            f"only, but '{st.tensor}' is in {st.scope} memory")


def _align(shape, aligns):
    """storage_align: pad the row after an aligned dimension so that the
    dimension's stride is offset mod factor."""
    shape = list(shape)
    for k, a in enumerate(aligns):
        if a is None or k + 1 >= len(shape):
            continue
        factor, offset = a
        inner = 1
        for n in shape[k + 2:]:
            inner *= n
        while (shape[k + 1] * inner) % factor != offset:
            shape[k + 1] += 1
    return shape


def _unroll_serial(s: ir.Stmt, stage: str) -> ir.Stmt:
    """Expand the serial loops of a copy nest (thread loops stay, and vectorized
    loops, whose body is one store), so that every store is a separate statement
    with its own register slot (or a vector of consecutive slots)."""
    if isinstance(s, ir.Seq):
        return ir.seq(*[_unroll_serial(x, stage) for x in s.stmts])
    if isinstance(s, ir.For):
        if s.kind == "thread":
            return dataclasses.replace(s, body=_unroll_serial(s.body, stage))
        ext = simplify_expr(s.extent)
        if not isinstance(ext, ir.Imm):
            raise LoweringError(f"pipeline: the copy '{stage}' has a loop '{s.var}' of "
                                f"non-constant extent {show(ext)}")
        if s.kind == "vectorize" and _vector_store(s) is not None:
            return dataclasses.replace(s, extent=ext)
        return ir.seq(*[_unroll_serial(substitute(s.body, {s.var: ir.Bin(
            "+", s.lo, ir.const(k), ir.int32)}), stage) for k in range(int(ext.value))])
    if isinstance(s, (ir.If,)):
        return dataclasses.replace(s, then=_unroll_serial(s.then, stage))
    if isinstance(s, (ir.Let, ir.Alloc)):
        return dataclasses.replace(s, body=_unroll_serial(s.body, stage))
    return s


def _vector_store(s: ir.For):
    """The one store of a vectorized loop's body (also under a guard), else None."""
    body = s.body.then if isinstance(s.body, ir.If) and s.body.else_ is None else s.body
    return body if isinstance(body, ir.Store) else None


def _split_copy(nest: ir.Stmt, buf: str, regs: str):
    """(load nest, half -> store nest, number of slots): the copy's stores to
    `buf` become stores to register slots, and stores of those slots to the
    given half of `buf`. A vectorized loop of stores keeps its loop over
    consecutive slots."""
    slots = [0]

    def slot(s: ir.For | None):
        """Index of the next slot (plus the loop variable in a vectorized loop)."""
        base = ir.const(slots[0])
        if s is None:
            slots[0] += 1
            return base
        slots[0] += int(s.extent.value)
        return ir.Bin("+", base, ir.Var(s.var), ir.int32)

    class Copy(Rewriter):
        def __init__(self, make):
            self.make, self.loop = make, None

        def stmt_For(self, s):
            if s.kind == "vectorize" and _vector_store(s) is not None:
                self.loop = s
                out = self.generic_stmt(s)
                self.loop = None
                return out
            return self.generic_stmt(s)

        def stmt_Store(self, s):
            if s.buffer != buf:
                return s
            return self.make(s, slot(self.loop))

    load = Copy(lambda s, k: ir.Store(regs, (k,), s.value)).stmt(nest)
    n = slots[0]

    def store(half):
        slots[0] = 0
        return Copy(lambda s, k: ir.Store(buf, (half,) + s.indices,
                                          ir.Load(regs, (k,), s.value.dtype))).stmt(nest)
    return load, store, n

