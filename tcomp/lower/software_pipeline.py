"""Pass: software pipelining with asynchronous copies (`pipeline(ax, stages=N)`,
N >= 3).

Pre: thread loops bound; a loop with `stages` N whose body starts with the
copies into rings of N shared buffers allocated around it (`S[k % N, ...] =
G[...]`, built by pipelining.ring_loop) followed by the compute that reads them.
Post:

    copy(0); commit; ... copy(N-2); commit            (each guarded by s < n)
    for k in 0:n:
      cp_async_wait(N-2); barrier                     (tile k landed; tile k-1 read by all)
      if k + N-1 < n: copy(k + N-1)                   (into buffer (k + N-1) % N = (k-1) % N)
      commit
      compute(k)                                      (reads buffer k % N)
    cp_async_wait(0)

A loop whose copies were simplified away (an empty region at these sizes)
runs as it is. A copy becomes `cp_async` where its innermost loop is vectorized and moves 4,
8 or 16 bytes from a global buffer of the same type, contiguous and aligned to
that size on both sides (constant strides); guards around it stay, and a
zero-filled piece (a shared tile that fragments read stores 0 outside the
tensor) reads 0 source bytes where it lies outside. Other
copies stay ordinary stores into the ring: they happen after the barrier that
ends the reads of that buffer, and at least one barrier before the compute
that reads them, so they are correct too.
"""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from . import intrinsics, ir
from .rewriter import Rewriter, substitute, walk_stmts
from .simplify import Linear, kernel_simplifier

I32 = ir.int32


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    if not any(isinstance(x, ir.For) and x.stages >= 3 for x in walk_stmts(k.body)):
        return k
    shapes = {b.name: b.shape for b in program.buffers}
    for x in walk_stmts(k.body):
        if isinstance(x, ir.Alloc):
            shapes[x.buffer.name] = x.buffer.shape
    dtypes = {b.name: b.dtype for b in program.buffers}
    shared = {x.buffer.name for x in walk_stmts(k.body)
              if isinstance(x, ir.Alloc) and x.buffer.scope == "shared"}
    pipe = _Pipeline(shapes, dtypes, kernel_simplifier(k), shared)
    body = pipe.stmt(k.body)
    return dataclasses.replace(k, body=body, remarks=k.remarks + tuple(pipe.remarks))


class _Pipeline(Rewriter):
    def __init__(self, shapes, dtypes, simp, shared):
        self.shapes, self.dtypes, self.simp, self.shared = shapes, dtypes, simp, shared
        self.remarks: list[str] = []  # rings (or parts) filled by ordinary stores, and why

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        s = self.generic_stmt(s)
        if s.stages < 3:
            return s
        n = s.stages
        body = list(s.body.stmts) if isinstance(s.body, ir.Seq) else [s.body]
        inside = {x.buffer.name for x in walk_stmts(s.body) if isinstance(x, ir.Alloc)}
        rings = {b for b in self.shared if b not in inside}
        copies = []
        while body and self._is_copy(body[0], rings):
            copies.append(body.pop(0))
        if not copies:
            why = self._why_not(body, rings)
            if not why:
                # nothing writes a ring: its copies were simplified away (they copy an
                # empty region at these sizes); the loop runs as it is
                return dataclasses.replace(s, stages=0)
            raise LoweringError(f"pipeline on '{s.var}' (stages={n}): no copy into a shared "
                                f"ring at the top of the loop{why}")
        compute = ir.seq(*body)
        async_ = _Async(self, s.var)
        copy = ir.seq(*[async_.stmt(c) for c in copies])
        plain = "; ".join(f"'{b}': {why}" for b, why in dict(async_.plain).items())
        issued = any("async" in getattr(intrinsics.of(x), "effects", ()) for x in walk_stmts(copy))
        if not issued:
            # No copy moves asynchronously: the ring is filled by ordinary stores, stages-1
            # iterations ahead (ordered by the loop's barrier), with no cp.async group to
            # commit or wait for.
            self.remarks.append(f"pipeline: loop '{s.var}' (stages={n}): no copy into the ring "
                                f"is a cp.async, so it is filled by ordinary stores with no "
                                f"asynchronous overlap ({plain or 'nothing to copy'})")
            commit = ir.seq()
            wait = lambda m: ir.seq()  # noqa: E731
        else:
            if plain:
                self.remarks.append(f"pipeline: loop '{s.var}' (stages={n}): some copies are "
                                    f"ordinary stores, not cp.async ({plain})")
            commit = ir.Evaluate(ir.Call("cp_async_commit", (), I32))
            wait = lambda m: ir.Evaluate(ir.Call("cp_async_wait", (ir.const(m),), I32))  # noqa
        var, ext = ir.Var(s.var), s.extent
        prologue = []
        for j in range(n - 1):
            step = substitute(copy, {s.var: ir.const(j)})
            prologue += [ir.If(ir.Bin("<", ir.const(j), ext, ir.bool_), step), commit]
        ahead = ir.Bin("+", var, ir.const(n - 1), I32)
        loop_body = ir.seq(
            wait(n - 2), ir.Barrier(),
            ir.If(ir.Bin("<", ahead, ext, ir.bool_), substitute(copy, {s.var: ahead})),
            commit, compute)
        loop = dataclasses.replace(s, body=loop_body, stages=0)
        return self.simp.stmt(ir.seq(*prologue, loop, wait(0)))

    def _why_not(self, body, rings) -> str:
        """Why the statements before the compute that write a ring are not
        copies the ring can run ahead: what else they write or synchronise."""
        lead = []
        for x in body:
            lead.append(x)
            if any(isinstance(y, ir.Store) and y.buffer in rings for y in walk_stmts(x)):
                break
        else:
            return ""
        other = sorted(b for x in lead for b in _outside_writes(x, rings))
        if other:
            return (f": the copy into the ring also writes '{other[0]}', a buffer that lives "
                    f"outside it (a stage computed inside the copy's loops in global memory); "
                    f"a ring's copy writes its ring and registers only: keep that stage in "
                    f"registers ('local'), compute it elsewhere, or use stages=2")
        return (": the copy into the ring synchronises (a barrier or an intrinsic inside it); "
                "compute what needs it elsewhere, or use stages=2")

    def _is_copy(self, s, rings) -> bool:
        """Whether `s` is a copy into a ring: it stores into rings, and
        elsewhere only into registers it allocates itself (a register cache
        computed inside the copy's loops), with no barrier or intrinsic."""
        return any(isinstance(x, ir.Store) and x.buffer in rings for x in walk_stmts(s)) and \
            not _outside_writes(s, rings) and \
            not any(isinstance(x, (ir.Barrier, ir.Evaluate)) for x in walk_stmts(s))


def _outside_writes(s, rings) -> set:
    """The buffers `s` stores into other than the rings and the registers it
    allocates itself."""
    own = {x.buffer.name for x in walk_stmts(s)
           if isinstance(x, ir.Alloc) and x.buffer.scope == "local"}
    return {x.buffer for x in walk_stmts(s) if isinstance(x, ir.Store)
            and x.buffer not in rings and x.buffer not in own}


class _Async(Rewriter):
    """Vectorized copy loops of 4/8/16 aligned bytes -> cp_async. Guards around
    them stay guards (a piece they exclude is not copied)."""

    def __init__(self, owner: _Pipeline, var: str):
        self.o, self.var = owner, var
        self.plain: list[tuple[str, str]] = []  # (ring, why its copy is not a cp.async)
        self.why = ""

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        if s.buffer in self.o.shared:  # a copy not in a vectorized loop
            self.plain.append((s.buffer, "its copy loop is not vectorized (vectorize the "
                                         "innermost copy axis: 4, 8 or 16 bytes)"))
        return s

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        if s.kind != "vectorize" or not isinstance(s.body, ir.Store):
            return self.generic_stmt(s)
        self.why = ""
        made = self._cp_async(s)
        if made is None:
            self.plain.append((s.body.buffer, self.why or "not a plain copy"))
        return made if made is not None else s

    def no(self, why: str):
        self.why = why

    def _cp_async(self, s: ir.For):
        st = s.body
        got = _zero_filled_load(st.value, self.o.dtypes)
        if got is None:
            return self.no("it stores a computed value, not a global load")
        inside, src = got
        dt = self.o.dtypes[src.buffer]
        if not isinstance(s.extent, ir.Imm) or not (isinstance(s.lo, ir.Imm) and s.lo.value == 0):
            return self.no("its vector loop has no constant extent from 0")
        nbytes = int(s.extent.value) * dt.numpy.itemsize
        if nbytes not in (4, 8, 16) or src.dtype != dt:
            return self.no(f"it moves {nbytes} bytes a lane group (cp.async moves 4, 8 or 16)")
        v = ir.Var(s.var)
        width = nbytes // dt.numpy.itemsize
        at0 = {s.var: ir.const(0)}
        dst_idx = tuple(self.o.simp.expr(substitute(i, at0)) for i in st.indices)
        src_idx = tuple(self.o.simp.expr(substitute(i, at0)) for i in src.indices)
        for buf, idx, full in ((st.buffer, st.indices, dst_idx), (src.buffer, src.indices, src_idx)):
            flat = self._flat(buf, idx)
            if flat is None or flat.terms.get(v) != 1 or any(
                    s.var in ir.free_vars(a) for a in flat.terms if a != v):
                return self.no(f"'{buf}' is not contiguous along the vector loop, or its row "
                               f"length is not a constant (symbolic sizes)")
            base = self._flat(buf, full)
            if base is None or not _multiple(base, width):
                return self.no(f"'{buf}' is not aligned to {nbytes} bytes at these sizes")
        src_bytes = ir.const(nbytes)
        if inside is not None:
            cond = self._per_piece(inside, v, width)
            if cond is None:
                return self.no("its bound check differs between the lanes of one piece "
                               "(a tensor edge that is not a multiple of the vector)")
            src_bytes = ir.Select(cond, ir.const(nbytes), ir.const(0), I32)
        return ir.Evaluate(ir.Call("cp_async", (ir.Ref(st.buffer, dst_idx),
                                                ir.Ref(src.buffer, src_idx),
                                                ir.const(nbytes), src_bytes), I32))

    def _per_piece(self, cond, v, width):
        """`cond` for the whole vector piece (the same for its `width` lanes),
        or None: terms without `v` stay; `e + v < c` and `e + v >= c`, with e and
        c multiples of `width`, hold for every lane when they hold for v = 0."""
        if isinstance(cond, ir.Bin) and cond.op == "&&":
            a = self._per_piece(cond.a, v, width)
            b = self._per_piece(cond.b, v, width)
            return None if a is None or b is None else ir.Bin("&&", a, b, ir.bool_)
        if v.name not in ir.free_vars(cond):
            return cond
        if isinstance(cond, ir.Bin) and cond.op in ("<", ">=") and \
                v.name not in ir.free_vars(cond.b):
            lin = self.o.simp.linear(cond.a)
            rest = Linear({a: c for a, c in lin.terms.items() if a != v}, lin.const)
            bound = self.o.simp.linear(cond.b)
            if lin.terms.get(v) == 1 and not any(v.name in ir.free_vars(a) for a in rest.terms) \
                    and _multiple(rest, width) and _multiple(bound, width):
                return ir.Bin(cond.op, rest.to_expr(), cond.b, ir.bool_)
        return None

    def _flat(self, buf, idx) -> Linear | None:
        shape = self.o.shapes.get(buf)
        if shape is None or len(shape) != len(idx):
            return None
        if not all(isinstance(d, ir.Imm) for d in shape[1:]):
            return None  # a runtime row length: alignment not known here
        flat, stride = Linear(), 1
        for i, d in zip(reversed(idx), reversed(shape)):
            flat = flat.add(self.o.simp.linear(i).scale(stride))
            stride *= int(d.value) if isinstance(d, ir.Imm) else 0
        return flat


def _zero_filled_load(e: ir.Expr, dtypes) -> tuple[ir.Expr | None, ir.Load] | None:
    """(condition, load) when `e` is a global load that is 0 where the
    condition fails, `Select(c, x, 0)`, also nested (a shared tile that
    fragments read stores 0 outside the tensor, around a gather that is 0 in
    its padding: the conditions joined by &&), and through casts that keep the
    loaded value (a float16 widened to float32 for the select, then narrowed
    back). (None, load) for a plain copy; None for anything else (a value
    computed from the load)."""
    conds, casts = [], []
    while True:
        if isinstance(e, ir.Cast):
            casts.append(e.dtype)
            e = e.x
        elif isinstance(e, ir.Select) and _is_zero(e.b):
            conds.append(e.cond)
            e = e.a
        else:
            break
    if not isinstance(e, ir.Load) or e.buffer not in dtypes or e.dtype != dtypes[e.buffer]:
        return None
    d = e.dtype
    # each cast holds every value of the load's type exactly, and the outermost is that
    # type again: the chain changes no value
    if casts and (casts[0] != d or not all(
            t == d or (t.is_float and d.is_float and t.bits > d.bits) for t in casts)):
        return None
    cond = None
    for c in conds:
        cond = c if cond is None else ir.Bin("&&", cond, c, ir.bool_)
    return cond, e


def _is_zero(e: ir.Expr) -> bool:
    while isinstance(e, ir.Cast):
        e = e.x
    return isinstance(e, ir.Imm) and e.value == 0


def _multiple(lin: Linear, t: int) -> bool:
    return lin.const % t == 0 and all(c % t == 0 for c in lin.terms.values())
