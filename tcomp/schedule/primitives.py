"""The user-facing `Stage` and its loop primitives.

Loop nests in the docstrings are shown before -> after each primitive.
"""
from __future__ import annotations

from ..errors import ScheduleError
from . import directives as D
from .args import as_int, too_large
from .snapshot import check_placement, epilogue_refusal
from . import threads, tuple_stages
from .stage import THREAD_TAGS, Axis, FuseRel, SplitRel


class Stage:
    """A handle to one stage of a Schedule (`s["C"]`)."""

    def __init__(self, schedule, name: str):
        self._sched = schedule
        self.name = name

    @property
    def _s(self):
        return self._sched.states[self.name]

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Stage) and other._sched is self._sched and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    # ------------------------------------------------------------- axes
    @property
    def axes(self) -> tuple[Axis, ...]:
        """The spatial axes of the original loop nest, named after the index variables."""
        return tuple(Axis(self.name, v, "spatial") for v in self._s.definition.spatial)

    @property
    def reduce_axes(self) -> tuple[Axis, ...]:
        return tuple(Axis(self.name, v, "reduce") for v in self._s.definition.reduce)

    @property
    def leaf_axes(self) -> tuple[Axis, ...]:
        """The current loops, outermost first."""
        s = self._s
        return tuple(Axis(self.name, v, s.kinds[v]) for v in s.leaves)

    @property
    def tensor(self) -> str:
        return self._s.tensor

    def _axis_by_name(self, name: str, primitive: str) -> Axis:
        s = self._s
        if name not in s.kinds:
            raise ScheduleError(f"{primitive}: stage '{self.name}' has no axis '{name}'")
        return Axis(self.name, name, s.kinds[name])

    def _leaf(self, ax, primitive: str, arg: str = "axis") -> str:
        if not isinstance(ax, Axis):
            raise ScheduleError(f"{primitive}: {arg} must be an Axis of stage '{self.name}', got "
                                f"{ax!r}")
        if ax.stage != self.name:
            raise ScheduleError(f"{primitive}: {arg} {ax!r} belongs to stage '{ax.stage}', not "
                                f"'{self.name}'")
        s = self._s
        if ax.name not in s.kinds:
            raise ScheduleError(f"{primitive}: stage '{self.name}' has no axis '{ax.name}'")
        if ax.name not in s.leaves:
            raise ScheduleError(f"{primitive}: {arg} {ax!r} no longer exists as a loop (it was "
                                f"split or fused); use the axes that replaced it")
        return ax.name

    def _attached_at(self, axis: str) -> list[str]:
        return [n for n, st in self._sched.states.items()
                if st.attach == ("at", self.name, axis)]

    def _move_attached(self, old: str, new: str):
        for n in self._attached_at(old):
            self._sched.states[n].attach = ("at", self.name, new)

    def _not_inline(self, primitive: str):
        if self._s.attach == ("inline",):
            raise ScheduleError(f"{primitive}: stage '{self.name}' is inlined and has no loops")

    # ------------------------------------------------------------- loops
    def split(self, ax: Axis, factor: int | None = None, nparts: int | None = None):
        """Split a loop in two.

        for m in 0:M            ->  for m_o in 0:ceil(M/64)
                                      for m_i in 0:64
                                        if m_o*64 + m_i < M: ... m = m_o*64 + m_i ...
        With `nparts=4` the outer loop has 4 iterations instead. Factors that do
        not divide the extent are allowed: the tail is guarded.
        """
        p = "split"
        self._not_inline(p)
        name = self._leaf(ax, p)
        self._not_bound(name, p)
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"{p}: give exactly one of factor= and nparts= (axis {ax!r})")
        n = factor if factor is not None else nparts
        if as_int(n) is None or as_int(n) < 1:
            what = "factor" if factor is not None else "nparts"
            raise ScheduleError(f"{p}: {what} must be a positive int, got {n!r}")
        if msg := too_large(as_int(n), p, "factor" if factor is not None else "nparts"):
            raise ScheduleError(msg)
        factor, nparts = (as_int(factor), None) if factor is not None else (None, as_int(nparts))
        s = self._s
        outer, inner = s.fresh(f"{name}_o"), s.fresh(f"{name}_i")
        self._sched.directives.append(D.Split(self.name, name, factor, nparts))
        s.relations.append(SplitRel(name, outer, inner, factor, nparts))
        kind = s.kinds[name]
        s.kinds[outer] = s.kinds[inner] = kind
        i = s.leaves.index(name)
        s.leaves[i:i + 1] = [outer, inner]
        # Stages computed at the split loop move to its inner half: one iteration of
        # (outer, inner) is one iteration of the old loop.
        self._move_attached(name, inner)
        return Axis(self.name, outer, kind), Axis(self.name, inner, kind)

    def _not_bound(self, name: str, p: str) -> None:
        """A bound loop is not split: the bind stayed on the loop that split removed, so
        the stage's loops ran unbound in every thread of a block that other stages'
        binds made, racing (long fuzz run of issue 22, seed 1 pair 1028)."""
        tag = self._s.bind.get(name)
        if tag is not None:
            raise ScheduleError(f"{p}: axis '{name}' is bound to {tag}; split it before "
                                f"binding, and bind one of its parts")

    def tile(self, x: Axis, y: Axis, x_factor: int, y_factor: int):
        """Split two loops and reorder them into tiles.

        for m, n      ->  for m_o, n_o, m_i, n_i   (m_i in 0:x_factor, n_i in 0:y_factor)
        Returns (m_o, n_o, m_i, n_i).
        """
        p = "tile"
        self._not_inline(p)
        xn, yn = self._leaf(x, p, "x"), self._leaf(y, p, "y")
        if xn == yn:
            raise ScheduleError(f"{p}: x and y are the same axis {x!r}")
        self._not_bound(xn, p)
        self._not_bound(yn, p)
        for f, arg in ((x_factor, "x_factor"), (y_factor, "y_factor")):
            if as_int(f) is None or as_int(f) < 1:
                raise ScheduleError(f"{p}: {arg} must be a positive int, got {f!r}")
            if msg := too_large(as_int(f), p, arg):
                raise ScheduleError(msg)
        x_factor, y_factor = as_int(x_factor), as_int(y_factor)
        n_dir = len(self._sched.directives)
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        s = self._s
        pos = sorted(s.leaves.index(a.name) for a in (xo, xi, yo, yi))
        for i, a in zip(pos, (xo, yo, xi, yi)):
            s.leaves[i] = a.name
        del self._sched.directives[n_dir:]
        self._sched.directives.append(D.Tile(self.name, xn, yn, x_factor, y_factor))
        return xo, yo, xi, yi

    def reorder(self, *axes: Axis):
        """Put the given loops in this order, in the positions they occupy.

        for m, n, k  --reorder(k, m)-->  for k, n, m
        """
        p = "reorder"
        self._not_inline(p)
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        names = [self._leaf(a, p) for a in axes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ScheduleError(f"{p}: axis '{dup}' is given twice")
        s = self._s
        pos = sorted(s.leaves.index(n) for n in names)
        self._sched.directives.append(D.Reorder(self.name, tuple(names)))
        for i, n in zip(pos, names):
            s.leaves[i] = n

    def fuse(self, outer: Axis, inner: Axis, *more: Axis) -> Axis:
        """Fuse adjacent loops into one.

        for m_o in 0:A            ->  for f in 0:A*B
          for n_o in 0:B                m_o = f / B, n_o = f % B

        `fuse(a, b, c)` fuses three (or more) loops, each directly outside the
        next: it is `fuse(fuse(a, b), c)`, and is recorded so.
        """
        p = "fuse"
        self._not_inline(p)
        axes = (outer, inner, *more)
        if more:
            self._check_fuse_chain(axes)
            fused = self.fuse(outer, inner)
            for ax in more:
                fused = self.fuse(fused, ax)
            return fused
        o, i = self._leaf(outer, p, "outer"), self._leaf(inner, p, "inner")
        s = self._s
        hosted = self._attached_at(o)
        if hosted:
            raise ScheduleError(f"{p}: stage '{hosted[0]}' is computed at '{self.name}.{o}', "
                                f"which fusing would remove; compute it at '{i}' or after the "
                                f"fuse")
        if s.leaves.index(i) != s.leaves.index(o) + 1:
            raise ScheduleError(f"{p}: {outer!r} must be the loop directly outside {inner!r}")
        if s.kinds[o] != s.kinds[i]:
            raise ScheduleError(f"{p}: cannot fuse a spatial and a reduction axis ({outer!r}, "
                                f"{inner!r})")
        for a in (o, i):
            if a in s.bind or a in s.unroll or a in s.vectorize:
                raise ScheduleError(f"{p}: axis '{a}' is already bound/unrolled/vectorized")
        fused = s.fresh(f"{o}_{i}_f")
        self._sched.directives.append(D.Fuse(self.name, o, i))
        s.relations.append(FuseRel(o, i, fused))
        s.kinds[fused] = s.kinds[o]
        k = s.leaves.index(o)
        s.leaves[k:k + 2] = [fused]
        self._move_attached(i, fused)
        return Axis(self.name, fused, s.kinds[o])

    def _check_fuse_chain(self, axes) -> None:
        """The errors `fuse(*axes)` of three or more axes would meet, before any is fused
        (a failed call leaves the schedule as it was)."""
        p, s = "fuse", self._s
        names = [self._leaf(a, p) for a in axes]
        for (a, na), (b, nb) in zip(zip(axes, names), zip(axes[1:], names[1:])):
            if s.leaves.index(nb) != s.leaves.index(na) + 1:
                raise ScheduleError(f"{p}: {a!r} must be the loop directly outside {b!r}")
            if s.kinds[na] != s.kinds[nb]:
                raise ScheduleError(f"{p}: cannot fuse a spatial and a reduction axis ({a!r}, "
                                    f"{b!r})")
        for n in names:
            if n in s.bind or n in s.unroll or n in s.vectorize:
                raise ScheduleError(f"{p}: axis '{n}' is already bound/unrolled/vectorized")
        for n in names[:-1]:
            if hosted := self._attached_at(n):
                raise ScheduleError(f"{p}: stage '{hosted[0]}' is computed at "
                                    f"'{self.name}.{n}', which fusing would remove; compute it "
                                    f"at '{names[-1]}' or after the fuse")

    def bind(self, ax: Axis, tag: str):
        """Spread a loop over GPU blocks or threads.

        for m_o in 0:64  --bind(m_o, "blockIdx.x")-->  m_o = blockIdx.x  (one block each)

        The loop's extent may depend on the sizes (`h` in 0:H - KH + 1 bound to
        threadIdx.y): the grid or block is then sized at launch, and a launch
        beyond the device's limits (1024 threads per block; block dimensions
        1024, 1024, 64; grid y and z 65535) raises an error naming the sizes.
        """
        p = "bind"
        self._not_inline(p)
        name = self._leaf(ax, p)
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"{p}: unknown thread tag '{tag}' (use one of "
                                f"{', '.join(THREAD_TAGS)})")
        s = self._s
        if name in s.bind:
            raise ScheduleError(f"{p}: axis {ax!r} is already bound to {s.bind[name]}")
        if s.kinds[name] == "reduce":
            tuple_stages.refuse(s, p)
            if not threads.is_thread(tag):
                raise ScheduleError(f"{p}: axis {ax!r} is a reduction axis; it can be bound to "
                                    f"threads (a cross-thread reduction) but not to {tag} (use "
                                    f"rfactor for a reduction across blocks)")
            if d_bound := [a for a in s.bind if s.kinds[a] == "reduce"]:
                raise ScheduleError(f"{p}: stage '{self.name}' already reduces across threads "
                                    f"over '{d_bound[0]}'; only one reduction axis can be bound")
        if name in s.bind:
            raise ScheduleError(f"{p}: axis {ax!r} is already bound to {s.bind[name]}")
        if name in s.unroll or name in s.vectorize:
            raise ScheduleError(f"{p}: axis {ax!r} is unrolled/vectorized and cannot be bound")
        for other, t in s.bind.items():
            if t == tag:
                raise ScheduleError(f"{p}: {tag} is already bound to axis '{other}' of stage "
                                    f"'{self.name}'")
        if threads.is_block(tag) and s.attach != ("root",):
            raise ScheduleError(f"{p}: stage '{self.name}' is computed inside another stage; "
                                f"only root stages can bind {tag}")
        self._sched.directives.append(D.Bind(self.name, name, tag))
        s.bind[name] = tag

    def rasterize(self, rows: Axis, cols: Axis, group: int, tag: str = "blockIdx.x") -> Axis:
        """Bind a 2-D grid of blocks to one block index, numbered `group` rows at
        a time, column by column (grid rasterization: blocks that run together
        share rows of one input and columns of the other in the L2 cache).

        for m_o in 0:R                ->  for b in 0:ceil(R/group)*C*group  (bound to `tag`)
          for n_o in 0:C                    m_o = b / (C*group) * group + b % group
                                            n_o = b / group % C
        Recorded as the primitives it stands for: split(rows, group),
        reorder(rows_o, cols, rows_i), two fuses, bind; returns the fused axis.
        """
        p = "rasterize"
        self._not_inline(p)
        r, c = self._leaf(rows, p, "rows"), self._leaf(cols, p, "cols")
        s = self._s
        if as_int(group) is None or as_int(group) < 1:
            raise ScheduleError(f"{p}: group must be a positive int, got {group!r}")
        if msg := too_large(as_int(group), p, "group"):
            raise ScheduleError(msg)
        group = as_int(group)
        if not threads.is_block(tag):
            raise ScheduleError(f"{p}: tag must be one of "
                                f"{', '.join(a.name for a in threads.BLOCK)}, got '{tag}'")
        if s.leaves.index(c) != s.leaves.index(r) + 1:
            raise ScheduleError(f"{p}: {rows!r} must be the loop directly outside {cols!r}")
        for a, arg in ((r, rows), (c, cols)):
            if s.kinds[a] != "spatial":
                raise ScheduleError(f"{p}: {arg!r} is a reduction axis; blocks are spatial")
            if a in s.bind or a in s.unroll or a in s.vectorize:
                raise ScheduleError(f"{p}: axis {arg!r} is already bound/unrolled/vectorized")
            if hosted := self._attached_at(a):
                raise ScheduleError(f"{p}: stage '{hosted[0]}' is computed at "
                                    f"'{self.name}.{a}', which rasterizing would remove; "
                                    f"compute it at a loop inside the blocks")
        if s.attach != ("root",):
            raise ScheduleError(f"{p}: stage '{self.name}' is computed inside another stage; "
                                f"only root stages bind blocks")
        for other, t in s.bind.items():
            if t == tag:
                raise ScheduleError(f"{p}: {tag} is already bound to axis '{other}' of stage "
                                    f"'{self.name}'")
        ro, ri = self.split(rows, group)
        self.reorder(ro, cols, ri)
        f = self.fuse(self.fuse(ro, cols), ri)
        self.bind(f, tag)
        return f

    def unroll(self, ax: Axis, factor: int | None = None):
        """Unroll a loop: a constant extent (at most 128 iterations) is expanded into
        copies of the body; an extent known only at run time stays a loop with an
        unroll hint (`#pragma unroll` in CUDA).

        for j in 0:4: B(j)  --unroll(j)-->  B(0); B(1); B(2); B(3)
        for j in 0:N: B(j)  --unroll(j)-->  #pragma unroll / for j in 0:N: B(j)

        With `factor`, the loop stays a loop and the CUDA compiler is asked to unroll
        it by that factor (`#pragma unroll factor`); `factor=1` keeps it rolled, which
        the CUDA compiler otherwise decides for itself (it unrolls short constant loops
        and may then hoist every iteration's loads, holding them all in registers). The
        sim runs the loop as it is; results never change. A loop whose variable picks
        tensor-core fragment registers (inside a tensorized nest, or a fragment
        pipeline's) is expanded whatever its factor: registers are named by constants.

        for j in 0:8: B(j)  --unroll(j, factor=2)-->  #pragma unroll 2 / for j in 0:8: B(j)
        """
        p = "unroll"
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        if factor is not None:
            if as_int(factor) is None or as_int(factor) < 1:
                raise ScheduleError(f"{p}: factor must be a positive int (1: keep the loop "
                                    f"rolled), got {factor!r}")
            if msg := too_large(as_int(factor), p, "factor"):
                raise ScheduleError(msg)
            factor = as_int(factor)  # a NumPy integer too, recorded as a plain int (JSON)
        if name in s.bind or name in s.vectorize:
            raise ScheduleError(f"{p}: axis {ax!r} is already bound or vectorized")
        if name in s.unroll:
            raise ScheduleError(f"{p}: axis {ax!r} is already unrolled (an axis takes one "
                                f"unroll: leave out the second call, or give the first the "
                                f"factor you want)")
        if factor is None:
            self._sched.directives.append(D.Unroll(self.name, name))
        else:
            self._sched.directives.append(D.UnrollBy(self.name, name, factor))
            s.unroll_by[name] = factor
        s.unroll.add(name)

    def vectorize(self, ax: Axis):
        """Vectorize the innermost loop (constant extent; 16-byte accesses in CUDA)."""
        p = "vectorize"
        tuple_stages.refuse(self._s, p)
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        if s.leaves[-1] != name:
            raise ScheduleError(f"{p}: axis {ax!r} is not the innermost loop (innermost is "
                                f"'{s.leaves[-1]}')")
        if s.kinds[name] == "reduce":
            raise ScheduleError(f"{p}: axis {ax!r} is a reduction axis and cannot be vectorized")
        if self._attached_at(name):
            raise ScheduleError(f"{p}: stage '{self._attached_at(name)[0]}' is computed inside "
                                f"loop {ax!r}, which therefore cannot be vectorized")
        if name in s.bind or name in s.unroll:
            raise ScheduleError(f"{p}: axis {ax!r} is already bound or unrolled")
        from .extents import constant_extent
        ext = constant_extent(s, name)
        if ext is None:
            raise ScheduleError(f"{p}: axis {ax!r} has a non-constant extent; split it by a "
                                f"constant factor first")
        self._sched.directives.append(D.Vectorize(self.name, name))
        s.vectorize.add(name)

    def set_scope(self, scope: str):
        """Keep a temporary (a tensor the def writes but does not return) in
        shared memory or registers instead of global memory. With `compute_at`,
        only the region a consumer reads there is stored:

        mx(n) max=! X(n, d); O(n, d) = ... mx(n) ...   with mx computed at O's n
        and set_scope("local"): every thread keeps mx[n] in a register.
        """
        p = "set_scope"
        tuple_stages.refuse(self._s, p)
        from .stage import SCOPES
        s = self._s
        if scope not in SCOPES:
            raise ScheduleError(f"{p}: scope must be one of {', '.join(SCOPES)}, got '{scope}'")
        op = self._sched.op
        if s.tensor in {t.name for t in op.outputs + op.inputs}:
            raise ScheduleError(f"{p}: '{s.tensor}' is an output of '{op.name}' and stays in "
                                f"global memory; only temporaries can change scope")
        if len(self._sched.writers(s.tensor)) != 1:
            raise ScheduleError(f"{p}: '{s.tensor}' is written by several statements")
        if s.snapshot is not None and scope != "global":
            src, reader = s.snapshot
            raise ScheduleError(f"{p}: stage '{self.name}' is the snapshot of '{src}' that "
                                f"'{reader}' reads (it updates '{src}' in place); it must be "
                                f"complete before '{reader}' starts, so it stays in global "
                                f"memory (cache_read '{s.tensor}' into {scope} memory for "
                                f"'{reader}' instead)")
        if s.swizzle is not None and scope != "shared":
            raise ScheduleError(f"{p}: stage '{self.name}' is swizzled (swizzle({s.swizzle})), a "
                                f"layout of shared memory; it cannot move to {scope} memory")
        dtype, shape, _ = self._sched.tensors[s.tensor]
        self._sched.directives.append(D.SetScope(self.name, scope))
        self._sched.tensors[s.tensor] = (dtype, shape, scope)
        s.scope = scope

    def storage_align(self, ax: Axis, factor: int, offset: int):
        """Pad this stage's buffer so the dimension of `ax` has a row stride
        that is `offset` modulo `factor` elements (avoids shared-memory bank
        conflicts)."""
        p = "storage_align"
        if not isinstance(ax, Axis) or ax.stage != self.name:
            raise ScheduleError(f"{p}: axis must be an Axis of stage '{self.name}', got {ax!r}")
        name = ax.name
        s = self._s
        if name not in s.definition.spatial:
            raise ScheduleError(f"{p}: axis {ax!r} must be an original spatial axis of the stage")
        f, o = as_int(factor), as_int(offset)
        if f is None or o is None or not (f > 0 and 0 <= o < f):
            raise ScheduleError(f"{p}: need factor > 0 and 0 <= offset < factor, got "
                                f"{factor!r}, {offset!r}")
        if msg := too_large(f, p, "factor"):
            raise ScheduleError(msg)
        factor, offset = f, o
        if s.swizzle is not None:
            raise ScheduleError(f"{p}: stage '{self.name}' is swizzled (swizzle({s.swizzle})), "
                                f"which already spreads its rows over the banks; padding rows "
                                f"would break the swizzle's 16-byte chunks: use one or the "
                                f"other")
        self._sched.directives.append(D.StorageAlign(self.name, name, factor, offset))
        s.align[name] = (factor, offset)

    def storage_order(self, *axes: Axis):
        """Lay this stage's shared or local buffer out with its dimensions in
        the order of `axes` (outermost first; the last one is contiguous),
        without changing how it is indexed. `axes` are the stage's original
        spatial axes, each once.

        A_shared = cache_read(A, "shared", ...): axes (ax0, ax1), buffer [ax0][ax1]
        A_shared.storage_order(ax1, ax0):                buffer [ax1][ax0]
        (a GEMM's A tile stored k-major, so a thread's column of m values is
        contiguous and loads as 16-byte vectors).
        """
        p = "storage_order"
        s = self._s
        names = []
        for ax in axes:
            if not isinstance(ax, Axis) or ax.stage != self.name:
                raise ScheduleError(f"{p}: axes must be Axes of stage '{self.name}', got {ax!r}")
            if ax.name not in s.definition.spatial:
                raise ScheduleError(f"{p}: axis {ax!r} must be an original spatial axis of the "
                                    f"stage")
            names.append(ax.name)
        if sorted(names) != sorted(s.definition.spatial) or len(set(names)) != len(names):
            want = ", ".join(s.definition.spatial)
            raise ScheduleError(f"{p}: give each of the stage's original spatial axes ({want}) "
                                f"exactly once, got ({', '.join(names)})")
        if s.scope == "global":
            raise ScheduleError(f"{p}: '{s.tensor}' is in global memory, whose layout is fixed; "
                                f"storage_order lays out shared and local buffers")
        self._sched.directives.append(D.StorageOrder(self.name, tuple(names)))
        s.storage = tuple(names)

    def swizzle(self, span: int = 128):
        """Lay this shared stage's buffer out with an XOR swizzle of its
        16-byte chunks, without changing its shape or how it is indexed: chunk
        c of row r (a row: the innermost storage dimension, R bytes; the
        outer dimensions, a pipeline ring's stages included, count rows) is
        stored at chunk c ^ ((r / g) % n) of the same row, with n = min(R,
        span) / 16 and g = max(1, 128 / R) (ir.Swizzle). Any 8 consecutive
        rows' chunks at one column then sit in 8 distinct groups of 4 banks,
        so the 8 row addresses of each ldmatrix phase, and a quarter warp's
        16-byte stores along a row, are free of bank conflicts, with no
        padding (storage_align costs shared memory and address arithmetic).

        A_shared[128, 64] bfloat16 (rows of 128 bytes), swizzle(128):
            element (r, j) lives at r*64 + ((j / 8) ^ (r % 8)) * 8 + j % 8
        the Hopper 128-byte swizzle (chunk c of row r at c ^ (r & 7)); span
        64 or 32 with rows of that many bytes is TMA's 64- or 32-byte one.

        `span`: 32, 64 or 128 bytes. Rows must be 32 or 64 bytes, or a
        multiple of the span (checked when the tile's shape is known, at
        lowering); the stage must be in shared memory and not padded with
        storage_align.
        """
        p = "swizzle"
        s = self._s
        n = as_int(span)
        if isinstance(span, bool) or n not in (32, 64, 128):
            raise ScheduleError(f"{p}: span must be 32, 64 or 128 (bytes), got {span!r}")
        if s.scope != "shared":
            raise ScheduleError(f"{p}: '{s.tensor}' is in {s.scope} memory; a swizzle lays out "
                                f"a shared-memory tile (cache_read(..., 'shared') or "
                                f"set_scope('shared') first)")
        if s.attach == ("inline",):
            raise ScheduleError(f"{p}: stage '{self.name}' is inlined and has no buffer to lay "
                                f"out")
        if s.align:
            dim = next(iter(s.align))
            raise ScheduleError(f"{p}: stage '{self.name}' pads its rows with storage_align (axis "
                                f"'{dim}'); a swizzle replaces that padding (its XOR moves whole "
                                f"16-byte chunks of unpadded rows): drop the storage_align")
        if s.swizzle is not None:
            raise ScheduleError(f"{p}: stage '{self.name}' is already swizzled "
                                f"(swizzle({s.swizzle}))")
        self._sched.directives.append(D.Swizzle(self.name, n))
        s.swizzle = n

    # ------------------------------------------------------------- placement
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
        tuple_stages.refuse(self._s, p)
        if not isinstance(target, Stage) or target._sched is not self._sched:
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
        tuple_stages.refuse(self._s, p)
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
        return Stage(self._sched, new_name)

    def tensorize(self, ax: Axis, intrin: str):
        """Compute the loops from `ax` inward with a tensor-core intrinsic
        (`tcomp.intrinsics()` lists them). They must be exactly the intrinsic's
        tile: for "mma_m16n8k16", `C[m, n] += A[m, k] * B[k, n]` over loops of
        16 (m), 8 (n) and 16 (k) in any order, the stage a `fragment`
        accumulator (cache_write(C, "fragment")) of float32, A and B bfloat16
        or float16 (read through `fragment` caches when lowered).

        for m_i in 0:16: for n_i in 0:8: for k_i in 0:16: CF[m, n] += AF[m, k] * BF[k, n]
        --tensorize(m_i, "mma_m16n8k16")-->  mma_m16n8k16(&CF[m0, n0], &AF[m0, k0], &BF[k0, n0])
        """
        from .tensor_intrinsics import TENSORIZE
        p = "tensorize"
        tuple_stages.refuse(self._s, p)
        self._not_inline(p)
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
        if d.reduce_op != "+" or len(d.spatial) != 2 or len(d.reduce) != 1:
            raise ScheduleError(f"{p}: stage '{self.name}' does not compute C[m, n] += "
                                f"A[m, k] * B[k, n] ({intrin} computes that)")
        roles = _matmul_roles(d)
        if roles is None:
            raise ScheduleError(f"{p}: stage '{self.name}': its value is not a product "
                                f"A[m, k] * B[k, n] of two tensors indexed by the loop "
                                f"variables ({intrin} computes C[m, n] += A[m, k] * B[k, n])")
        a, b = roles
        dts = {self._sched.tensors[t][0].name for t in (a, b)}
        if len(dts) != 1 or not dts <= set(spec.inputs):
            raise ScheduleError(f"{p}: {intrin} takes {' or '.join(spec.inputs)} inputs (both "
                                f"the same), but '{a}' and '{b}' are "
                                f"{' and '.join(self._sched.tensors[t][0].name for t in (a, b))}")
        if (d.acc_dtype.name if d.acc_dtype else "") != spec.accumulator:
            raise ScheduleError(f"{p}: {intrin} accumulates in {spec.accumulator}, stage "
                                f"'{self.name}' in {d.acc_dtype}")
        inner = s.leaves[s.leaves.index(name):]
        want = {d.spatial[0]: spec.m, d.spatial[1]: spec.n, d.reduce[0]: spec.k}
        seen = {}
        for leaf in inner:
            if leaf in s.bind or leaf in s.vectorize or leaf in s.tensorize:
                raise ScheduleError(f"{p}: loop '{leaf}' inside {ax!r} is bound, vectorized or "
                                    f"tensorized already")
            root, extent = _root_and_extent(s, leaf)
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
