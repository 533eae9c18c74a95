"""Stage primitives that choose where a stage's data lives: set_scope,
storage_align, storage_order, swizzle (a mixin of primitives.Stage)."""
from __future__ import annotations

from ..errors import ScheduleError
from . import directives as D
from .args import as_int, too_large
from . import ordered, tuple_stages
from .stage import Axis


class StoragePrimitives:
    def set_scope(self, scope: str):
        """Keep a temporary (a tensor the def writes but does not return) in
        shared memory or registers instead of global memory. With `compute_at`,
        only the region a consumer reads there is stored:

        mx(n) max=! X(n, d); O(n, d) = ... mx(n) ...   with mx computed at O's n
        and set_scope("local"): every thread keeps mx[n] in a register.
        """
        p = "set_scope"
        tuple_stages.refuse(self._s, p)
        if scope != "global":
            ordered.refuse_stage(self._s, p)
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
