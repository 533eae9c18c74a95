"""Loop-nest construction: op + schedule -> Kernel IR (one kernel per root stage).

`Builder` orchestrates; each concern lives in its own module:

    legality.py      placement checks before anything is built (check_readers, check_cover)
    stage_nest.py    one stage's loops, index reconstruction, tail guards, its stores
    reduction.py     accumulation in registers, across threads, or in memory
    loops.py         one leaf loop with the stages computed at it
    attach.py        compute_at: the region a consumer needs (bound inference), the
                     producer built over it in a shared/local buffer or its tensor
    pipelining.py    software pipelining of shared copies through registers
    launch.py        grid and block from the thread-bound loops
    kernel_params.py the buffers and sizes a kernel takes
    interface.py     what a target needs besides the kernels (size sources, zero-fill, ...)
    hopper_plan.py   a stage tensorized with wgmma: its plan read off the schedule, and
    hopper_gemm.py   the warp-specialised TMA + wgmma kernel built from that plan
    hopper_attention_plan.py  an online softmax's weighted sum tensorized with wgmma_rs:
                     the plan of hopper_attention.py's FlashAttention kernel, read off it

The Builder holds the schedule, the sizes fixed at compile time, the target
(arch/target.py: what the plans' checks read, e.g. the shared memory a block
may have) and which stages are computed at which loop; its methods `nest`, `loop`, `region` and
`attach` are the points where those modules call one another.
"""
from __future__ import annotations

from ..arch.target import resolve
from ..errors import LoweringError
from . import (hopper_attention, hopper_attention_plan, hopper_gemm, hopper_plan, interface, ir,
               ragged_loops)
from .attach import attach, region
from .construct import ident, lang_sub
from .context import KernelCtx
from .kernel_params import kernel_params
from .launch import launch_dims
from .legality import check_global_storage_order, check_producers, check_readers
from .loops import leaf_loop
from .simplify import simplify_expr
from .stage_nest import StageNest
from .stages import effective_reads
from .translate import Translator, size_expr


class Builder:
    def __init__(self, sched, sizes: dict[str, int], divisors: dict[str, int] | None = None,
                 target=None):
        self.sched, self.op, self.sizes = sched, sched.op, dict(sizes)
        self.target = resolve(target)  # a Target (None: arch/target.py's DEFAULT, sm_90a)
        # size -> a multiple it is known to be (a specialised variant: schedule/specialize.py)
        self.divisors = {n: m for n, m in (divisors or {}).items() if n not in self.sizes}
        self.children: dict[tuple[str, str], list[str]] = {}
        self._reads: dict[str, set] = {}
        for n, st in sched.states.items():
            if st.attach[0] == "at":
                self.children.setdefault((st.attach[1], st.attach[2]), []).append(n)

    def reads(self, stage: str) -> set:
        """What `stage` reads, directly or through inlined stages (stages.
        effective_reads), once per lowering: bound inference asks it of every
        sibling of every producer."""
        got = self._reads.get(stage)
        if got is None:
            got = self._reads[stage] = effective_reads(self.sched, stage)
        return got

    def nested(self, stage: str):
        """The stages computed at `stage`'s loops, and at theirs, and so on."""
        todo = [stage]
        while todo:
            cur = todo.pop()
            for leaf in self.sched.states[cur].leaves:
                for r in self.children.get((cur, leaf), []):
                    yield r
                    todo.append(r)

    def size(self, name: str) -> ir.Expr:
        if name in self.sizes:
            return ir.const(self.sizes[name])
        if name in self.divisors:  # N / m * m: N where the variant's condition holds
            m = ir.const(self.divisors[name])
            return ir.Bin("*", ir.Bin("/", ir.Var(name), m, ir.int32), m, ir.int32)
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
        check_readers(self.sched, self.sizes)
        check_producers(self.sched)
        kernels = []
        for n, st in self.sched.states.items():
            inline_output = st.attach == ("inline",) and st.tensor in roles
            if st.attach == ("root",) or inline_output:
                kernels.append(self.kernel(n))
        free = tuple(v for v in op.size_vars if v not in self.sizes)
        temps = [b.name for b in bufs if b.role == "temp"]
        return ir.Program(op.name, tuple(bufs), tuple(kernels), tuple(t.name for t in op.inputs),
                          tuple(t.name for t in op.outputs), free, dict(self.sizes),
                          size_sources=interface.size_sources(op),
                          zero_fill=interface.zero_fill(op, temps),
                          declared_shapes=interface.declared_shapes(op, self.lsize),
                          signature=interface.signature(op))

    def kernel(self, stage: str) -> ir.Kernel:
        op = self.sched.op
        ctx = KernelCtx(set(op.size_vars) | {t.name for t in op.inputs + op.outputs +
                                             op.temporaries} | set(self.sched.tensors))
        st = self.sched.states[stage]
        planned = hopper_plan.plan(self, stage)  # tensorized with wgmma: built from its plan
        if planned is not None:
            return hopper_gemm.kernel(planned)
        attention = hopper_attention_plan.plan(self, stage)  # P . V with wgmma_rs: attention
        if attention is not None:
            return hopper_attention.kernel(attention)
        fed = [n for n, s_ in self.sched.states.items() if s_.attach == ("epilogue", stage)]
        if fed:  # only a Hopper plan computes an epilogue: otherwise nothing would compute it
            raise LoweringError(
                f"stage(s) {', '.join(repr(n) for n in fed)} are computed from the registers of "
                f"'{stage}' (epilogue), which only its Hopper kernel does: tensorize '{stage}' "
                f"with wgmma (a product) or wgmma_rs (an online softmax's weighted sum), or do "
                f"not call epilogue")
        if st.scope in ("shared", "local", "fragment"):
            raise LoweringError(f"stage '{stage}' writes a {st.scope} buffer but is computed at "
                                f"root; use compute_at to place it inside a loop of a stage "
                                f"that reads it")
        check_global_storage_order(stage, st)
        if st.definition.ragged:
            ragged_loops.check(stage, st)
        domain = {v: (self.lsize(lo), self.lsize(lang_sub(hi, lo)))
                  if v not in st.definition.ragged else ragged_loops.placeholder(v)
                  for v, (lo, hi) in st.definition.ranges.items()}
        body = self.nest(stage, domain, ctx, store_offsets=None)
        grid, block = launch_dims(body, stage)
        gbufs, sizes = kernel_params(body, self.sched, self.sizes)
        return ir.Kernel(f"{self.op.name}_{ident(stage)}", gbufs, sizes, grid, block, body)

    # ------------------------------------------------------------ the modules' meeting points
    def nest(self, stage: str, domain: dict, ctx: KernelCtx, store_offsets) -> ir.Stmt:
        """Stage `stage` over `domain` (stage_nest.py)."""
        return StageNest(self, stage, domain, ctx, store_offsets).build()

    def loop(self, stage, st, i, info, inner, pre=None):
        """The loop of leaf i with the stages computed at it (loops.py)."""
        return leaf_loop(self, stage, st, i, info, inner, pre)

    def region(self, pname, cname, cst, level, info, siblings) -> dict:
        """The region of `pname` computed at leaf `level` of `cname` (attach.py)."""
        return region(self, pname, cname, cst, level, info, siblings)

    def attach(self, pname, cname, cst, level, domain, ctx, double=None, consumer=None):
        """Allocations and nest of `pname` computed at that leaf (attach.py)."""
        return attach(self, pname, cname, cst, level, domain, ctx, double, consumer)

    # ------------------------------------------------------------ reads
    def read(self, tensor: str, args, dtype, ctx: KernelCtx) -> ir.Expr:
        """A read of `tensor` at `args`: an inlined stage's value, a load through
        the view of a buffer computed at an enclosing loop, or a plain load."""
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
