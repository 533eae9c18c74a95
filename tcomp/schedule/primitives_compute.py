"""Stage primitives that place a stage's computation or hand it to
hardware: compute_at, compute_inline, compute_root, rfactor, tensorize,
pipeline (a mixin of primitives.Stage), and their helpers."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from . import directives as D, ordered
from .args import as_int
from .snapshot import check_placement, epilogue_refusal
from . import threads, tuple_stages
from .stage import Axis, FuseRel, SplitRel

if TYPE_CHECKING:
    from .primitives import Stage


def _not_an_epilogue(stage, p) -> None:
    """A stage a Hopper kernel computes from its registers (`epilogue`, or the
    statistics an epilogue reads) cannot be placed again: nothing else would
    compute what the placement moves (a statistics stage moved to root was
    read there unwritten, found in review)."""
    at = stage._s.attach
    if at[0] == "epilogue":
        raise ScheduleError(f"{p}: stage '{stage.name}' is computed by the kernel of "
                            f"'{at[1]}' from its registers (epilogue); place it before calling "
                            f"epilogue, or do not make it an epilogue")


class ComputePrimitives:
    def compute_at(self, target: "Stage", ax: Axis):
        """Compute this stage inside `target`'s loop `ax`, only the region of
        it that one iteration of `ax` reads.

        P: for i: P[i] = ...          ->  C: for m_o:
        C: for m_o, m_i: ... P[..]           P: for i in region(m_o): P[i] = ...
                                             for m_i: ... P[..]

        A sibling — a stage that `target` does not read, over the same index
        ranges (e.g. a second output of a fused kernel) — is computed there
        over the part with the same indices as the part of `target` that one
        iteration computes (plus what later stages at that loop read of it):

        S: S[n, d] = f(H[n, d])       ->  Y: for n:
        Y: for n, d: Y[n, d] = ..H..          H: ...; S: for d: S[n, d] = f(H[n, d])
                                              for d: Y[n, d] = ..H..
        """
        p = "compute_at"
        ordered.refuse_stage(self._s, p)
        tuple_stages.refuse(self._s, p)
        _not_an_epilogue(self, p)
        if not isinstance(target, type(self)) or target._sched is not self._sched:
            raise ScheduleError(f"{p}: target must be a Stage of the same schedule, got "
                                f"{target!r}")
        if target.name == self.name:
            raise ScheduleError(f"{p}: stage '{self.name}' cannot be computed at itself")
        sched = self._sched
        me = self._s
        if not consumes(sched, target.name, me.tensor):
            why = (f"'{self.name}' reads '{target._s.tensor}' itself"
                   if consumes(sched, self.name, target._s.tensor) else
                   None if _siblings(me, target._s) else
                   f"a stage that it does not read must range over the same indices, as a "
                   f"sibling: {_ranges_text(me)} vs {_ranges_text(target._s)}")
            if why is not None:
                raise ScheduleError(f"{p}: stage '{target.name}' does not read '{me.tensor}' "
                                    f"(directly or through other stages), so '{self.name}' "
                                    f"cannot be computed at its loops ({why})")
        writers = sched.writers(me.tensor)
        if len(writers) != 1 and target.name not in writers:
            raise ScheduleError(f"{p}: '{me.tensor}' is written by several statements "
                                f"({', '.join(writers)}); only a tensor with "
                                f"one writer can be computed at a consumer (or at the next "
                                f"statement writing it, when that one updates it in place)")
        why = epilogue_refusal(sched, self.name, target.name) if len(writers) != 1 else None
        if why is not None:
            raise ScheduleError(f"{p}: '{me.tensor}' is written by several statements "
                                f"({', '.join(writers)}); '{self.name}' can be computed only "
                                f"at the loops of the next statement writing it, when that one "
                                f"updates each element in place from that element alone: {why}")
        name = target._leaf(ax, p)
        t = target._s
        if name in t.vectorize:
            raise ScheduleError(f"{p}: loop {ax!r} is vectorized; a stage cannot be computed "
                                f"inside a vectorized loop")
        # No cycles: the target must not (transitively) be computed inside this stage.
        cur = t
        while cur.attach[0] == "at":
            if cur.attach[1] == self.name:
                raise ScheduleError(f"{p}: stage '{target.name}' is computed inside "
                                    f"'{self.name}'; that would be a cycle")
            cur = sched.states[cur.attach[1]]
        if t.attach == ("inline",):
            raise ScheduleError(f"{p}: target stage '{target.name}' is inlined")
        for tag in me.bind.values():
            if threads.is_block(tag):
                raise ScheduleError(f"{p}: stage '{self.name}' binds {tag}; a stage computed "
                                    f"inside another cannot bind blocks")
        check_placement(sched, p, {self.name: ("at", target.name, name)})
        sched.directives.append(D.ComputeAt(self.name, target.name, name))
        me.attach = ("at", target.name, name)

    def compute_inline(self):
        """Substitute this stage's expression into every reader.

        P: P[i] = exp(A[i])  ;  C: C[i] = P[i] + 1   ->  C: C[i] = exp(A[i]) + 1
        Inlining an output of the op recomputes it in the readers; the output
        itself is still written by its own stage at root.
        """
        p = "compute_inline"
        ordered.refuse_stage(self._s, p)
        tuple_stages.refuse(self._s, p)
        _not_an_epilogue(self, p)
        s = self._s
        if s.definition.reduce or s.definition.reduce_op is not None:
            raise ScheduleError(f"{p}: stage '{self.name}' is a reduction and cannot be inlined")
        if len(self._sched.writers(s.tensor)) != 1:
            raise ScheduleError(f"{p}: '{s.tensor}' is written by several statements and "
                                f"cannot be inlined")
        if s.scope != "global" and s.origin == "cache_write":
            raise ScheduleError(f"{p}: stage '{self.name}' is a cache_write stage")
        if s.swizzle is not None:
            raise ScheduleError(f"{p}: stage '{self.name}' is swizzled (swizzle({s.swizzle})), a "
                                f"layout of its shared buffer, which inlining would remove")
        for n, st in self._sched.states.items():
            if st.attach[0] == "at" and st.attach[1] == self.name:
                raise ScheduleError(f"{p}: stage '{n}' is computed at '{self.name}'; move it "
                                    f"first")
        check_placement(self._sched, p, {self.name: ("inline",)})
        self._sched.directives.append(D.ComputeInline(self.name))
        s.attach = ("inline",)

    def compute_root(self):
        """Compute this stage in its own loop nest (the default)."""
        _not_an_epilogue(self, "compute_root")
        self._sched.directives.append(D.ComputeRoot(self.name))
        self._s.attach = ("root",)

    # ------------------------------------------------------------- not yet lowered
    def rfactor(self, ax: Axis) -> "Stage":
        """Factor the reduction over `ax` out into a new stage where `ax` is spatial.

        C: for m: for k: C[m] += A[m, k]        (after k_o, k_i = split(k, 4))
        -> C.rf: for k_i, m: for k_o: C_rf[k_i, m] += A[m, k_o*4 + k_i]   (tail guarded)
           C:    for m: for k_i:      C[m] += C_rf[k_i, m]
        `ax` is a reduction axis of the stage, or one half of a split of one;
        call rfactor before other loop transformations of the stage. Returns
        the new stage (named "C.rf", buffer C_rf, computed at root).
        """
        p = "rfactor"
        ordered.refuse_stage(self._s, p)
        tuple_stages.refuse(self._s, p)
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        d = s.definition
        if s.kinds[name] != "reduce":
            raise ScheduleError(f"{p}: axis {ax!r} is not a reduction axis")
        if d.reduce_op is None or d.acc_dtype is None:
            raise ScheduleError(f"{p}: stage '{self.name}' is not a reduction")
        if d.reduce_op not in ("+", "*", "max", "min"):
            raise ScheduleError(f"{p}: reduction '{d.reduce_op}' cannot be factored")
        if s.bind or s.unroll or s.vectorize or s.attach != ("root",) or any(
                not isinstance(r, SplitRel) or r.parent not in d.reduce for r in s.relations):
            raise ScheduleError(f"{p}: stage '{self.name}' already has loop transformations other "
                                f"than splits of its reduction axes; call rfactor first")
        rel = next((r for r in s.relations if name in (r.outer, r.inner)), None)
        if rel is None and name not in d.reduce:
            raise ScheduleError(f"{p}: axis {ax!r} must be a reduction axis of the statement or "
                                f"one half of a split of one")
        for r in s.relations:
            if rel is not None and r is not rel and r.parent == rel.parent:
                raise ScheduleError(f"{p}: axis {ax!r} comes from a split that was split again")
        for other in self._sched.states.values():
            # A stage computed beside this one (it does not read it) computes the
            # region of this stage's own indices there, matched by position; the
            # factored stage puts the factored axis first, so it would compute the
            # elements of the wrong indices (issue 22's long fuzz run, seed 9 pair
            # 45410: i_o_i computed at index 0 only)
            if (other.attach[:2] == ("at", self.name)
                    and not consumes(self._sched, self.name, other.definition.tensor)):
                raise ScheduleError(
                    f"{p}: stage '{other.name}' is computed at loop '{other.attach[2]}' of "
                    f"'{self.name}' beside it (it is not one of its inputs), by this stage's own "
                    f"indices, which the factored stage does not keep; call rfactor before "
                    f"that compute_at")
        from .rfactor import factor
        new_name, rf_def, main_def = factor(self._sched, s, name, rel)
        self._sched.directives.append(D.Rfactor(self.name, name))
        from .stage import StageState
        rf = StageState(new_name, rf_def)
        items = list(self._sched.states.items())
        idx = [n for n, _ in items].index(self.name)
        items.insert(idx, (new_name, rf))
        self._sched.states = dict(items)
        # The factored stage now reads what this stage read: stages computed at this
        # stage's loops move to the factored stage's loops of the same names.
        # (Every current leaf of this stage is a loop of the factored stage too.)
        for other in self._sched.states.values():
            if other.attach[:2] == ("at", self.name):
                other.attach = ("at", new_name, other.attach[2])
        s.definition = main_def
        s.kinds = {v: "spatial" for v in main_def.spatial}
        s.kinds.update({v: "reduce" for v in main_def.reduce})
        s.leaves = list(main_def.spatial) + list(main_def.reduce)
        s.relations = []
        return type(self)(self._sched, new_name)

    def tensorize(self, ax: Axis, intrin: str):
        """Compute the loops from `ax` inward with a tensor-core intrinsic
        (`tcomp.intrinsics()` lists them). They must be exactly the intrinsic's
        tile: for "mma_m16n8k16", `C[m, n] += A[m, k] * B[k, n]` over loops of
        16 (m), 8 (n) and 16 (k) in any order, the stage a `fragment`
        accumulator (cache_write(C, "fragment")) of float32, A and B bfloat16
        or float16 (read through `fragment` caches when lowered).

        Batched products and transposed operands too (schedule/matmul_shape.py):
        `C[b, m, n] += A[b, m, k] * B[b, k, n]` with the batch loops outside
        `ax`, and A read as A[k, m] or B as B[n, k] (NN, NT, TN, TT); the
        lowering loads those fragments with ldmatrix's other form (.trans for
        A, plain for B).

        for m_i in 0:16: for n_i in 0:8: for k_i in 0:16: CF[m, n] += AF[m, k] * BF[k, n]
        --tensorize(m_i, "mma_m16n8k16")-->  mma_m16n8k16(&CF[m0, n0], &AF[m0, k0], &BF[k0, n0])
        """
        from .matmul_shape import FORM, matmul_shape
        from .tensor_intrinsics import TENSORIZE
        p = "tensorize"
        ordered.refuse_stage(self._s, p)
        if isinstance(intrin, str) and intrin.startswith("wgmma_rs_"):
            return self._tensorize_wgmma_rs(ax, intrin)  # online softmax's P . V (Hopper)
        tuple_stages.refuse(self._s, p)
        self._not_inline(p)
        if isinstance(intrin, str) and intrin.startswith("wgmma_"):
            return self._tensorize_wgmma(ax, intrin)  # the Hopper path (primitives_hopper.py)
        name = self._leaf(ax, p)
        s = self._s
        if not isinstance(intrin, str) or intrin not in TENSORIZE:
            raise ScheduleError(f"{p}: unknown intrinsic {intrin!r}; tcomp.intrinsics() lists "
                                f"{', '.join(TENSORIZE)}")
        spec = TENSORIZE[intrin]
        d = s.definition
        if s.scope != "fragment":
            raise ScheduleError(f"{p}: stage '{self.name}' writes a {s.scope} buffer; "
                                f"{intrin} accumulates in registers: tensorize the stage made "
                                f"by cache_write(..., 'fragment')")
        shape = matmul_shape(d)
        if isinstance(shape, str):
            raise ScheduleError(f"{p}: stage '{self.name}' is not a product {intrin} can "
                                f"compute: {shape} ({intrin} computes {FORM}: batch "
                                f"variables first, either operand in either major order)")
        a, b = shape.a, shape.b
        dts = {self._sched.tensors[t][0].name for t in (a, b)}
        if len(dts) != 1 or not dts <= set(spec.inputs):
            raise ScheduleError(f"{p}: {intrin} takes {' or '.join(spec.inputs)} inputs (both "
                                f"the same), but '{a}' and '{b}' are "
                                f"{' and '.join(self._sched.tensors[t][0].name for t in (a, b))}")
        if (d.acc_dtype.name if d.acc_dtype else "") != spec.accumulator:
            raise ScheduleError(f"{p}: {intrin} accumulates in {spec.accumulator}, stage "
                                f"'{self.name}' in {d.acc_dtype}")
        inner = s.leaves[s.leaves.index(name):]
        want = {shape.m: spec.m, shape.n: spec.n, shape.k: spec.k}
        seen = {}
        for leaf in inner:
            if leaf in s.bind or leaf in s.vectorize or leaf in s.tensorize:
                raise ScheduleError(f"{p}: loop '{leaf}' inside {ax!r} is bound, vectorized or "
                                    f"tensorized already")
            root, extent = _root_and_extent(s, leaf)
            if root in shape.batch:
                raise ScheduleError(f"{p}: loop '{leaf}' inside {ax!r} runs over the batch "
                                    f"variable '{root}'; {intrin} takes the m, n and k loops "
                                    f"of one product: reorder the loops of '{root}' outside "
                                    f"{ax!r} (bind them to blockIdx.z, or fuse them into a "
                                    f"block index)")
            if root is None or root in seen:
                raise ScheduleError(f"{p}: the loops from {ax!r} inward must be one loop of each "
                                    f"of {', '.join(want)}; '{leaf}' is "
                                    + ("a fused loop" if root is None else
                                       f"a second loop of '{root}'"))
            if extent is not None and extent != want[root]:
                raise ScheduleError(f"{p}: loop '{leaf}' (of '{root}') has {extent} iterations; "
                                    f"{intrin} needs {want[root]} (split '{root}' by "
                                    f"{want[root]})")
            seen[root] = leaf
        missing = [r for r in want if r not in seen]
        if missing:
            raise ScheduleError(f"{p}: no loop of '{missing[0]}' from {ax!r} inward; {intrin} "
                                f"needs the m, n and k loops of its tile there (reorder them "
                                f"innermost)")
        self._sched.directives.append(D.Tensorize(self.name, name, intrin))
        s.tensorize[name] = intrin

    def pipeline(self, ax: Axis, stages: int = 2):
        """Run the shared-memory copies computed at loop `ax` ahead of the
        compute that reads them.

        stages=2: double buffering through registers: while iteration k
        computes from one buffer, the copy for k+1 is loaded into registers and
        stored into the other buffer (one barrier per iteration).

        for k_o: [barrier; A_shared = A(k_o); barrier; compute]
        -> A_shared[0] = A(0); barrier
           for k_o: regs = A(k_o+1); compute(A_shared[k_o % 2]);
                    A_shared[(k_o+1) % 2] = regs; barrier

        stages=3..5: a ring of `stages` buffers filled asynchronously
        (software_pipeline.py): the copies of the next stages-1 iterations are
        in flight while iteration k computes; 16-, 8- and 4-byte copies from
        global memory become `cp.async` (out-of-range pieces zero-filled), the
        rest stay ordinary stores into the ring.

        -> copy(0); commit; ...; copy(stages-2); commit
           for k_o: wait(all but stages-2 groups); barrier
                    copy(k_o + stages-1) into A_shared[(k_o + stages-1) % stages]; commit
                    compute(A_shared[k_o % stages])
        """
        p = "pipeline"
        ordered.refuse_stage(self._s, p)
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        n = as_int(stages)
        if isinstance(stages, bool) or n is None or not 2 <= n <= 5:
            raise ScheduleError(f"{p}: stages must be an int from 2 to 5, got {stages!r}")
        stages = n
        if name in s.bind or name in s.unroll or name in s.vectorize:
            raise ScheduleError(f"{p}: axis {ax!r} must be a serial loop (it is bound, unrolled "
                                f"or vectorized)")
        self._sched.directives.append(D.Pipeline(self.name, name, stages))
        s.pipeline[name] = stages


def _matmul_roles(d):
    """(A, B) tensor names when `d`'s value is A[m, k] * B[k, n] (casts allowed)
    with m, n its spatial and k its reduction variable, else None."""
    from ..lang.ast import Binary, Cast, Index, Read
    m, n = d.spatial
    (k,) = d.reduce
    e = d.rhs
    while isinstance(e, Cast):
        e = e.x
    if not (isinstance(e, Binary) and e.op == "*"):
        return None

    def read(x):
        while isinstance(x, Cast):
            x = x.x
        if isinstance(x, Read) and all(isinstance(i, Index) for i in x.args):
            return x.tensor, tuple(i.name for i in x.args)
        return None
    ra, rb = read(e.a), read(e.b)
    if ra is None or rb is None:
        return None
    for (ta, ia), (tb, ib) in ((ra, rb), (rb, ra)):
        if ia == (m, k) and ib == (k, n):
            return ta, tb
    return None


def _root_and_extent(s, leaf: str):
    """(the original variable `leaf` derives from or None for a fused loop, its
    extent when a split factor fixes it, else None)."""
    extent = None
    for r in reversed(s.relations):
        if isinstance(r, FuseRel) and r.fused == leaf:
            return None, None
        if isinstance(r, SplitRel) and leaf in (r.outer, r.inner):
            if extent is None:
                extent = r.factor if leaf == r.inner else r.nparts
            leaf = r.parent
    return leaf, extent


def _siblings(a, b) -> bool:
    """Whether stages a and b (StageStates) range over the same spatial
    indices: as many, with the same ranges (compared symbolically)."""
    from ..lang.symbolic import NotSymbolic, to_sympy
    ra = [a.definition.ranges[v] for v in a.definition.spatial]
    rb = [b.definition.ranges[v] for v in b.definition.spatial]
    if len(ra) != len(rb) or not ra:
        return False
    try:
        return all((to_sympy(x) - to_sympy(y)).simplify() == 0
                   for p, q in zip(ra, rb) for x, y in zip(p, q))
    except NotSymbolic:
        return ra == rb


def _ranges_text(st) -> str:
    from ..lang.printer import expr_to_text
    d = st.definition
    return "(" + ", ".join(f"{v} in {expr_to_text(d.ranges[v][0])}:{expr_to_text(d.ranges[v][1])}"
                           for v in d.spatial) + ")"


def consumes(sched, stage: str, tensor: str) -> bool:
    """Whether `stage` reads `tensor`, directly or through the stages it reads.
    A stage reads what the stages before it wrote (stages are in dependence
    order): a later writer of a tensor it reads (an in-place update) is not
    one of its producers."""
    order = {n: i for i, n in enumerate(sched.states)}
    seen, todo = set(), [stage]
    while todo:
        cur = todo.pop()
        reads = sched.states[cur].definition.reads()
        if tensor in reads:
            return True
        for t in reads:
            for w in sched.writers(t):
                if w not in seen and order[w] < order[cur]:
                    seen.add(w)
                    todo.append(w)
    return False
