"""The user-facing `Stage` and its loop primitives.

Loop nests in the docstrings are shown before -> after each primitive.
"""
from __future__ import annotations

from ..errors import ScheduleError
from . import directives as D
from .args import as_int, too_large
from . import ordered, threads, tuple_stages
from .stage import THREAD_TAGS, Axis, FuseRel, SplitRel
from .primitives_compute import (ComputePrimitives, _matmul_roles, _ranges_text,  # noqa: F401
                                 _root_and_extent, _siblings, consumes)
from .primitives_hopper import HopperPrimitives
from .primitives_storage import StoragePrimitives


class Stage(ComputePrimitives, StoragePrimitives, HopperPrimitives):
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
        ordered.refuse_axis(self._s, p, name)
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

    def _not_pipelined(self, name: str, ax, p: str) -> None:
        """A pipelined loop is not bound: its iterations take turns in the ring of
        shared buffers. Bound to threads, each thread indexed the ring by its own
        index while one thread filled it, and read what no thread wrote (long fuzz
        run of issue 22, seed 1 pair 4617); `pipeline` already refused the other
        order. (Unrolled by a factor, a pipelined loop stays a loop: allowed.)"""
        stages = self._s.pipeline.get(name)
        if stages is not None:
            raise ScheduleError(f"{p}: axis {ax!r} is pipelined ({stages} stages) and must "
                                f"stay a loop; {p} another loop, or pipeline a loop that is "
                                f"not bound")

    def tile(self, x: Axis, y: Axis, x_factor: int, y_factor: int):
        """Split two loops and reorder them into tiles.

        for m, n      ->  for m_o, n_o, m_i, n_i   (m_i in 0:x_factor, n_i in 0:y_factor)
        Returns (m_o, n_o, m_i, n_i).
        """
        p = "tile"
        self._not_inline(p)
        xn, yn = self._leaf(x, p, "x"), self._leaf(y, p, "y")
        ordered.refuse_axis(self._s, p, xn)
        ordered.refuse_axis(self._s, p, yn)
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
        new = list(s.leaves)
        for i, n in zip(pos, names):
            new[i] = n
        ordered.check_reorder(s, new)
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
        ordered.refuse_axis(s, p, o)
        ordered.refuse_axis(s, p, i)
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
        for n in names:
            ordered.refuse_axis(s, p, n)
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
        ordered.refuse_axis(self._s, p, name)
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
        self._not_pipelined(name, ax, p)
        for other, t in s.bind.items():
            if t == tag:
                raise ScheduleError(f"{p}: {tag} is already bound to axis '{other}' of stage "
                                    f"'{self.name}'")
        if threads.is_block(tag) and s.attach != ("root",):
            raise ScheduleError(f"{p}: stage '{self.name}' is computed inside another stage; "
                                f"only root stages can bind {tag}")
        if s.scan is not None and threads.is_thread(tag):
            raise ScheduleError(f"{p}: stage '{self.name}' is scanned over {s.scan[2]} threads "
                                f"along threadIdx.x, its whole block; bind {ax!r} to blocks")
        self._sched.directives.append(D.Bind(self.name, name, tag))
        s.bind[name] = tag

    def scan(self, ax: Axis, threads: int = 256, items: int = 1, lookback: bool = False):
        """Compute an ordered recurrence over `ax` as a parallel scan by the
        `threads` threads of a block (schedule/scan.py: which recurrences).

        for t in 1:T: O[t] = O[t - 1] + X[t]
        --scan(t, threads=256)-->  t_i = threadIdx.x; carry = O[0]
            for t_o: v = X[1 + t_o * 256 + t_i]; scan_add(v, carry, 256); O[...] = v
        --scan(t, threads=256, items=4, lookback=True)-->  t_o = blockIdx.x (one tile
            of 1024 a block), t_i = threadIdx.x, t_k: a thread's 4 elements; the
            tiles chained by a decoupled look-back (lower/scan_lookback.py)
        Returns the (tile, lane) axes; bind the stage's other axes to blocks
        (with lookback: to blockIdx.y or z, or leave them serial).
        """
        from .scan import scan
        return scan(self, ax, threads, items, lookback)

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
        ordered.refuse_axis(s, p, r)
        ordered.refuse_axis(s, p, c)
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
        ordered.refuse_axis(s, p, name)
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
