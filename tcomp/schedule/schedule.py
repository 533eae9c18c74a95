"""`Schedule`: how an op runs. Stages per statement; primitives that validate
their arguments, then record a directive and update the stage state.

Every primitive raises `ScheduleError` naming itself, the argument and the
reason before anything is recorded, so a failed call leaves the schedule as
it was.
"""
from __future__ import annotations

import dataclasses

from ..errors import ScheduleError
from ..lang.ast import Index, Read
from ..lang.op import Op
from . import directives as D, ordered, tuple_stages
from .snapshot import add_snapshots, read_through_snapshot, snapshot_of
from .specialize import specialize, specializations_from_json, specializations_to_json
from .stage import SCOPES, StageDef, StageState


def _stage_def(st) -> StageDef:
    ranges = {r.var: (r.lo, r.hi) for r in st.ranges}
    return StageDef(st.tensor, st.spatial, st.reduce, ranges, st.rhs, st.reduce_op,
                    not st.continues, st.acc_dtype, st.lets, st.stmt.tensors, st.monoid,
                    st.component_accs, st.ordered, st.independent, st.scatter,
                    tuple(st.ragged))


class Schedule:
    """The default schedule: every stage at root, loops serial in statement
    order — correct and unoptimised.

    A statement that updates its tensor in place and reads other elements of
    it (or reduces while reading it) reads a copy made just before it: a
    snapshot stage named after it ("O.1.snap", buffer "O_snap"), created here
    (see `snapshot.py`) and schedulable like any stage, but kept at root.
    """

    def __init__(self, op: Op):
        if not isinstance(op, Op):
            raise ScheduleError(f"Schedule: needs an Op (from tcomp.op), got {type(op).__name__}")
        self.op = op
        self.directives: list = []
        # Shape specialisation (specialize.py): (SizeCondition, variant Schedule), in the
        # order they are tried at a call; and, on a variant, the schedule it specialises.
        self.specializations: list = []
        self.specialized_from = None
        self.states: dict[str, StageState] = {}
        self.tensors: dict[str, tuple] = {}  # name -> (dtype, shape exprs, scope)
        for t in op.inputs + op.outputs + op.temporaries:
            self.tensors[t.name] = (t.dtype, t.shape, "global")
        for st in op.statements:
            name, i = st.tensor, 1
            while name in self.states:
                name, i = f"{st.tensor}.{i}", i + 1
            self.states[name] = StageState(name, _stage_def(st))
        add_snapshots(self)

    # ------------------------------------------------------------ access
    def __getitem__(self, name) -> "Stage":
        if isinstance(name, Stage):
            name = name.name
        if not isinstance(name, str):
            raise ScheduleError(f"schedule: stages are named by str, got {name!r}")
        if name not in self.states:
            known = ", ".join(self.states)
            raise ScheduleError(f"schedule: no stage named '{name}' (stages: {known})")
        return Stage(self, name)

    @property
    def stages(self) -> list["Stage"]:
        return [Stage(self, n) for n in self.states]

    def writers(self, tensor: str) -> list[str]:
        return [n for n, s in self.states.items() if tensor in s.definition.tensors]

    def readers(self, tensor: str) -> list[str]:
        return [n for n, s in self.states.items() if tensor in s.definition.reads()]

    def _state(self, stage, primitive: str) -> StageState:
        name = stage.name if isinstance(stage, Stage) else stage
        if not isinstance(name, str):
            raise ScheduleError(f"{primitive}: expected a Stage or a stage name, got {stage!r}")
        if name not in self.states:
            raise ScheduleError(f"{primitive}: no stage named '{name}'")
        return self.states[name]

    # ------------------------------------------------------------ json
    def to_json(self) -> str:
        return D.to_json(self.directives, specializations_to_json(self))

    @classmethod
    def from_json(cls, op: Op, text: str) -> "Schedule":
        s = cls(op)
        data = D.parsed(text)
        for i, d in enumerate(D.directives_of(data["directives"])):
            try:
                s.apply(d)
            except (TypeError, AttributeError, KeyError, ValueError) as e:
                raise ScheduleError(f"from_json: directive {i} ({type(d).__name__}) is malformed "
                                    f"({type(e).__name__}: {e})") from None
        if "specialize" in data:
            specializations_from_json(s, data["specialize"])
        return s

    # ------------------------------------------------------------ variants
    def specialize(self, condition: str) -> "Schedule":
        """A variant of this schedule for sizes where `condition` holds
        ("D % 4 == 0", "N >= 1024 and K % 8 == 0", "K == 4096"): a copy of the
        directives so far, scheduled further on its own. Building this
        schedule builds each variant and itself; a call runs the first
        variant whose condition holds, else this one (specialize.py).

        Before:  s                      (one kernel for every D)
        After:   fast = s.specialize("D % 4 == 0"); fast["O"].vectorize(di)
                 -> when D % 4 == 0: fast's kernel; otherwise: s's"""
        return specialize(self, condition)

    def apply(self, d):
        """Replay one directive through its primitive."""
        if isinstance(d, D.CacheRead):
            self.cache_read(d.tensor, d.scope, list(d.readers))
            return
        if isinstance(d, D.CacheWrite):
            self.cache_write(d.stage, d.scope)
            return
        if isinstance(d, D.OnlineSoftmax):
            self.online_softmax(d.max, d.sum, list(d.weighted))
            return
        st = self[d.stage]
        ax = lambda name: st._axis_by_name(name, type(d).__name__.lower())  # noqa: E731
        if isinstance(d, D.Split):
            st.split(ax(d.axis), d.factor, nparts=d.nparts)
        elif isinstance(d, D.Tile):
            st.tile(ax(d.x), ax(d.y), d.x_factor, d.y_factor)
        elif isinstance(d, D.Reorder):
            st.reorder(*[ax(a) for a in d.axes])
        elif isinstance(d, D.Fuse):
            st.fuse(ax(d.outer), ax(d.inner))
        elif isinstance(d, D.Bind):
            st.bind(ax(d.axis), d.tag)
        elif isinstance(d, D.Unroll):
            st.unroll(ax(d.axis))
        elif isinstance(d, D.UnrollBy):
            st.unroll(ax(d.axis), d.factor)
        elif isinstance(d, D.Vectorize):
            st.vectorize(ax(d.axis))
        elif isinstance(d, D.ComputeAt):
            target = self[d.target]
            st.compute_at(target, target._axis_by_name(d.axis, "compute_at"))
        elif isinstance(d, D.ComputeInline):
            st.compute_inline()
        elif isinstance(d, D.ComputeRoot):
            st.compute_root()
        elif isinstance(d, D.Rfactor):
            st.rfactor(ax(d.axis))
        elif isinstance(d, D.Pipeline):
            st.pipeline(ax(d.axis), d.stages)
        elif isinstance(d, D.Tensorize):
            st.tensorize(ax(d.axis), d.intrin)
        elif isinstance(d, D.Epilogue):
            st.epilogue(self[d.epilogue])
        elif isinstance(d, D.Tma):
            st.tma(d.swizzle)
        elif isinstance(d, D.Persistent):
            st.persistent(ax(d.outer), ax(d.inner), d.group_m)
        elif isinstance(d, D.WarpSpecialize):
            st.warp_specialize(ax(d.axis), d.producer_regs, d.consumer_regs, d.pingpong)
        elif isinstance(d, D.SetScope):
            st.set_scope(d.scope)
        elif isinstance(d, D.StorageOrder):
            st.storage_order(*[ax(a) for a in d.axes])
        elif isinstance(d, D.StorageAlign):
            st.storage_align(ax(d.axis), d.factor, d.offset)
        elif isinstance(d, D.Swizzle):
            st.swizzle(d.span)
        elif isinstance(d, D.Scan):
            st.scan(ax(d.axis), d.threads, items=d.items, lookback=d.lookback)
        else:
            raise ScheduleError(f"apply: unknown directive {d!r}")

    # ------------------------------------------------------------ rewrites
    def online_softmax(self, max, sum, weighted=()) -> list:
        """Rewrite the chain `M max=! x; L +=! exp(x - M); W +=! exp(x - M) * v [/ L]`
        over one axis into one pass with a running max and rescaled sums (the
        tuple reduction `expsum`): softmax, log-sum-exp, cross-entropy,
        attention. Returns the new stages (online_softmax.py; docs/schedules.md).

        Before: mx: for n, d: mx[n] = max(mx[n], X[n, d])
                sm: for n, d: sm[n] += exp(X[n, d] - mx[n])
        After:  mx: for n: m = -inf; l = 0
                        for d: m' = max(m, X[n, d]); l = l * exp(m - m') + exp(X[n, d] - m')
                        mx[n] = m; sm[n] = l
        """
        from .online_softmax import online_softmax
        return online_softmax(self, max, sum, weighted)

    # ------------------------------------------------------------ caches
    def cache_read(self, tensor: str, scope: str, readers) -> "Stage":
        """Read `tensor` through a copy in `scope` for the given reader stages.

        Before:  for m, n: C[m, n] = ... A[m, k] ...
        After:   A.shared: for ax0, ax1: A_shared[ax0, ax1] = A[ax0, ax1]
                 for m, n: C[m, n] = ... A_shared[m, k] ...
        The copy is computed at root until `compute_at` places it inside a
        reader's loops; bound inference then shrinks it to the tile read there.
        """
        p = "cache_read"
        if isinstance(tensor, Stage):
            tensor = tensor._s.tensor
        if not isinstance(tensor, str):
            raise ScheduleError(f"{p}: tensor must be a tensor name (str), got {tensor!r}")
        if tensor not in self.tensors:
            raise ScheduleError(f"{p}: unknown tensor '{tensor}'")
        if scope not in SCOPES:
            raise ScheduleError(f"{p}: scope must be one of {', '.join(SCOPES)}, got '{scope}'")
        if isinstance(readers, (Stage, str)):
            readers = [readers]
        if not isinstance(readers, (list, tuple)):
            raise ScheduleError(f"{p}: readers must be a list of stages, got {readers!r}")
        names = []
        for r in readers:
            st = self._state(r, p)
            if tensor not in st.definition.reads():
                snap = snapshot_of(self, st.name, tensor)
                if snap is not None:
                    buf = self.states[snap].tensor
                    raise ScheduleError(f"{p}: stage '{st.name}' updates '{tensor}' in place and "
                                        f"reads its old values from the snapshot '{buf}' (stage "
                                        f"'{snap}'); cache_read '{buf}' instead")
                raise ScheduleError(f"{p}: stage '{st.name}' does not read '{tensor}'")
            if tensor in st.definition.tensors:
                ordered.refuse_stage(st, p)
            names.append(st.name)
        if not names:
            raise ScheduleError(f"{p}: needs at least one reader stage")
        order = list(self.states)
        at = sorted(order.index(n) for n in names)
        # A writer from the first reader (a reader that updates the tensor: O(i) =
        # O(i) * 2) up to the last one: the later readers want its values.
        between = [w for w in self.writers(tensor) if at[0] <= order.index(w) < at[-1]]
        if between:
            before = [n for n in names if order.index(n) <= order.index(between[0])]
            after = [n for n in names if order.index(n) > order.index(between[0])]
            raise ScheduleError(f"{p}: '{before[0]}' reads '{tensor}' before '{between[0]}' "
                                f"updates it and '{after[0]}' after: one copy cannot serve "
                                f"both (the later reader would see the old values); cache "
                                f"'{tensor}' for each of them separately")
        dtype, shape, _ = self.tensors[tensor]
        buf = f"{tensor}_{scope}"
        base, i = buf, 1
        while buf in self.tensors:
            buf, i = f"{base}{i}", i + 1
        vars_ = tuple(f"ax{d}" for d in range(len(shape)))
        from ..lang import dtypes
        from ..lang.ast import Const
        ranges = {v: (Const(0, dtypes.int32), dim) for v, dim in zip(vars_, shape)}
        ranges = _written_part(self, tensor, vars_) or ranges
        rhs = Read(tensor, tuple(Index(v, dtypes.int32) for v in vars_), dtype)
        definition = StageDef(buf, vars_, (), ranges, rhs, None, True, dtype.compute)
        name = f"{tensor}.{buf[len(tensor) + 1:]}"
        self.directives.append(D.CacheRead(tensor, scope, tuple(names)))
        self.tensors[buf] = (dtype, shape, scope)
        new = StageState(name, definition, scope, "cache_read")
        # Insert the copy just before its first reader (statement order = dependence order).
        items = list(self.states.items())
        first = min(i for i, (n, _) in enumerate(items) if n in names)
        items.insert(first, (name, new))
        self.states = dict(items)
        for n in names:
            st = self.states[n]
            st.definition = _rename_reads(st.definition, tensor, buf)
        return Stage(self, name)

    def cache_write(self, stage, scope: str) -> "Stage":
        """Compute `stage` into a buffer in `scope`, then copy it out.

        Before:  C: for m, n, k: C[m, n] += A[m, k] * B[k, n]
        After:   C.local: for m, n, k: C_local[m, n] += A[m, k] * B[k, n]
                 C:       for m, n:    C[m, n] = C_local[m, n]
        The new stage accumulates in the reduction's type (float32 for half
        inputs). Call it before transforming the stage's loops.
        """
        p = "cache_write"
        st = self._state(stage, p)
        tuple_stages.refuse(st, p)
        ordered.refuse_stage(st, p)
        if scope not in SCOPES:
            raise ScheduleError(f"{p}: scope must be one of {', '.join(SCOPES)}, got '{scope}'")
        if st.transformed() or st.attach != ("root",):
            raise ScheduleError(f"{p}: stage '{st.name}' already has loop transformations; call "
                                f"cache_write before scheduling it")
        if not st.definition.init:
            raise ScheduleError(f"{p}: stage '{st.name}' continues an earlier definition of "
                                f"'{st.tensor}' and cannot be cached")
        d = st.definition
        dtype = d.acc_dtype if d.reduce_op is not None else self.tensors[d.tensor][0]
        buf = f"{d.tensor}_{scope}"
        base, i = buf, 1
        while buf in self.tensors:
            buf, i = f"{base}{i}", i + 1
        from ..lang import dtypes
        shape = tuple(d.ranges[v][1] for v in d.spatial)
        self.directives.append(D.CacheWrite(st.name, scope))
        self.tensors[buf] = (dtype, shape, scope)
        name = f"{st.name}.{buf[len(d.tensor) + 1:]}"
        compute = StageState(name, dataclasses.replace(d, tensor=buf), scope, "cache_write")
        rhs = Read(buf, tuple(Index(v, dtypes.int32) for v in d.spatial), dtype)
        ranges = {v: d.ranges[v] for v in d.spatial}
        st.definition = StageDef(d.tensor, d.spatial, (), ranges, rhs, None, True,
                                 dtype.compute)
        st.kinds = {v: "spatial" for v in d.spatial}
        st.leaves = list(d.spatial)
        items = list(self.states.items())
        idx = [n for n, _ in items].index(st.name)
        items.insert(idx, (name, compute))
        self.states = dict(items)
        if d.tensor in compute.definition.reads():
            # An in-place statement that read only the elements it writes did so in the
            # same step; now one stage reads them and another writes them: the reading
            # stage reads a snapshot, made before it (see snapshot.py).
            snap = read_through_snapshot(self, st.name, name)
            items.insert(idx, (snap.name, snap))
            self.states = dict(items)
        # The new stage is what reads the inputs now: stages computed at the old stage's
        # loops move to the same loops of the new one.
        for other in self.states.values():
            if other.attach[:2] == ("at", st.name):
                other.attach = ("at", name, other.attach[2])
        return Stage(self, name)


def _rename_reads(d: StageDef, old: str, new: str) -> StageDef:
    from ..lang.ast import Expr
    import dataclasses as dc

    def ren(e: Expr) -> Expr:
        if isinstance(e, Read):
            args = tuple(ren(a) for a in e.args)
            return dc.replace(e, tensor=new if e.tensor == old else e.tensor, args=args)
        kids = {}
        for f in dc.fields(e):
            v = getattr(e, f.name)
            if isinstance(v, Expr):
                kids[f.name] = ren(v)
            elif isinstance(v, tuple) and v and isinstance(v[0], Expr):
                kids[f.name] = tuple(ren(x) for x in v)
        return dc.replace(e, **kids) if kids else e
    return dataclasses.replace(d, rhs=ren(d.rhs), lets={k: ren(v) for k, v in d.lets.items()})


from .primitives import Stage  # noqa: E402  (Stage needs Schedule's helpers above)


def _written_part(sched, tensor: str, vars_) -> dict | None:
    """The ranges a copy of a local or shared tensor covers: what its one writer
    writes (a cache_write buffer of a statement `where t in 1:N`). The rest of it
    holds nothing, and copying all of it read registers no thread wrote (issue 22's
    long fuzz run, seed 2 pair 5097). None: the whole shape."""
    from ..lang.ast import Index, walk
    writers = sched.writers(tensor)
    if sched.tensors[tensor][2] == "global" or len(writers) != 1:
        return None
    wd = sched.states[writers[0]].definition
    if len(wd.spatial) != len(vars_):
        return None
    ranges = [wd.ranges[v] for v in wd.spatial]
    if any(isinstance(x, Index) for r in ranges for e in r for x in walk(e)):
        return None
    return dict(zip(vars_, ranges))
