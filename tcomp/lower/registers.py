"""Pass: registers — local arrays that each thread indexes at its own offset
plus constants become compact arrays indexed by constants (registers).

A local buffer is private to each thread. A stage computed at a block-level
loop (a row) but split over the threads (`t` bound to threadIdx.x) writes
only its own slice of it: thread t touches `X_local[4 t + 0..3]`,
`X_local[4 t + 1024 + 0..3]`, ... of a row-sized array. Indexed by thread,
the array would live in local memory (off-chip); but since every access is
`g + c` with the same thread-invariant offset `g` (threads, blocks, size
parameters) and a constant `c` (unrolled loops), each thread can store just
the elements it touches: element `g + c` moves to slot `slot(c)`, which is
injective over the constants used, so every thread keeps what it wrote and
reads it back from a register. Lanes of a vectorized loop (`c + a * u`, u
the loop variable) keep their spacing: the spans of the accesses are kept
whole, only the gaps between them are removed (rounded down to 16 bytes, so
constants keep their residue modulo a 16-byte vector).

Pre: unrolled loops expanded and simplified; subscripts unflattened.
Post: each compacted local buffer is one-dimensional, of the size of the
elements its thread touches, accessed at constants (plus vector lanes).
Buffers accessed at other subscripts (a serial loop's variable, a data-
dependent index, an intrinsic's reference) are left as they are.

Ownership check (a LoweringError instead of a wrong answer): when a thread
writes a local buffer at a thread-dependent offset (its stage was split over
threads), every access must use that same offset and read only elements the
thread writes somewhere; a reader split differently over the threads would
read elements other threads hold.
"""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from ..arch import threads
from . import ir
from .printer import expr as show
from .rewriter import Rewriter, substitute
from .simplify import Linear, Simplifier

VECTOR_BYTES = 16


@dataclasses.dataclass
class _Access:
    kind: str  # "read" | "write"
    indices: tuple
    offset: Linear | None  # g: the thread-invariant part (None: not analysable)
    lo: int = 0  # the constant part's smallest and largest value over the vector lanes
    hi: int = 0
    base: int = 0  # the constant part with every lane variable at 0
    lanes: tuple = ()  # (variable, coefficient, extent)
    copies: tuple = ()  # (variable, coefficient, lo, extent): unrolled loops still to expand


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    scan = _Scan(set(k.sizes))
    scan.stmt(k.body, {}, {})
    plans = _plans(scan)
    if not plans:
        return k
    return dataclasses.replace(k, body=_Compact(plans, scan).stmt(k.body))


def kept(k: ir.Kernel) -> dict[str, int]:
    """{local buffer: elements each thread keeps} for the buffers this pass
    will compact in `k`, predicted before `unroll` has expanded the unrolled
    loops (their copies enumerated; see the module docstring); buffers not
    listed keep their declared size. Exact where `simplify` after `unroll`
    removes no access; otherwise an upper bound (the pass sees fewer
    accesses). A buffer whose accesses the ownership check refuses is not
    listed: the full lowering reports the error."""
    scan = _Scan(set(k.sizes), expand=True)
    scan.stmt(k.body, {}, {})
    return {name: plan["size"] for name, plan in _plans(scan, strict=False).items()}


def _plans(scan, strict=True) -> dict:
    """{buffer: slot map} of the local buffers to compact; `strict`: raise
    the ownership check's error (otherwise leave that buffer out)."""
    plans = {}
    for name, buf in scan.local.items():
        if name in scan.twice:
            continue
        try:
            plan = _plan(name, buf, scan.accesses.get(name, []))
        except LoweringError:
            if strict:
                raise
            continue
        if plan is not None:
            plans[name] = plan
    return plans


def _is_invariant(name: str, sizes: set) -> bool:
    """Fixed for a thread's whole run: its thread and block indices, sizes."""
    return name in sizes or name in threads.INDEX_VARS


class _Scan:
    """Every access to a local buffer with its subscripts split into a
    thread-invariant offset and a constant (plus vector lanes). With
    `expand`, the variables of unrolled loops of constant bounds are kept as
    `copies` of the access (what `unroll` will expand), and a local buffer
    allocated inside such a loop counts as allocated more than once."""

    def __init__(self, sizes: set, expand: bool = False):
        self.sizes = sizes
        self.expand = expand
        self.copies: dict[str, tuple[int, int]] = {}  # unrolled variable -> (lo, extent)
        self.repeated = 0  # enclosing unrolled loops of two or more iterations
        self.simp = Simplifier()
        self.local: dict[str, ir.Buffer] = {}
        self.twice: set[str] = set()
        self.accesses: dict[str, list[_Access]] = {}
        self.opaque: set[str] = set()  # buffers behind an intrinsic's reference
        self._known = (None, {})  # (a `lets` dict, its known values): see known()

    def known(self, lets: dict) -> dict:
        """The let variables of `lets` with a known value -> that value. Kept
        for the last `lets` asked about: every access in a scope asks with the
        same dict (a scope's dict is made once and never changed after), and
        building it again for each made this pass quadratic in the lets of an
        unrolled register tile."""
        if self._known[0] is not lets:
            self._known = (lets, {v: e for v, e in lets.items() if e is not None})
        return self._known[1]

    def stmt(self, s: ir.Stmt, lets: dict, lanes: dict):
        """`lets`: let variable -> its value (thread-invariant variables
        substituted) or None when it varies; `lanes`: vector loop variable ->
        extent."""
        if isinstance(s, ir.Alloc):
            if s.buffer.scope == "local":
                if s.buffer.name in self.local or self.repeated:
                    self.twice.add(s.buffer.name)
                self.local[s.buffer.name] = s.buffer
            self.stmt(s.body, lets, lanes)
            return
        if isinstance(s, ir.Let):
            self.exprs((s.value,), lets, lanes)
            value = substitute(s.value, self.known(lets))
            ok = all(_is_invariant(v, self.sizes) or v in self.copies
                     for v in ir.free_vars(value)) and not ir.loaded(value)
            self.stmt(s.body, {**lets, s.var: value if ok else None}, lanes)
            return
        if isinstance(s, ir.For):
            self.exprs((s.lo, s.extent), lets, lanes)
            inner_lets = {**lets, s.var: None}
            inner_lanes = dict(lanes)
            if (s.kind == "vectorize" and isinstance(s.extent, ir.Imm)
                    and isinstance(s.lo, ir.Imm) and s.lo.value == 0):
                inner_lanes[s.var] = int(s.extent.value)
                inner_lets.pop(s.var)
            elif (self.expand and s.kind == "unroll" and isinstance(s.extent, ir.Imm)
                    and isinstance(s.lo, ir.Imm)):
                n = int(s.extent.value)
                inner_lets.pop(s.var)
                self.copies[s.var] = (int(s.lo.value), n)
                self.repeated += n > 1
                try:
                    self.stmt(s.body, inner_lets, inner_lanes)
                finally:
                    del self.copies[s.var]
                    self.repeated -= n > 1
                return
            self.stmt(s.body, inner_lets, inner_lanes)
            return
        if isinstance(s, ir.Store):
            self.exprs(s.indices + (s.value,), lets, lanes)
            self.access(s.buffer, s.indices, "write", lets, lanes)
            return
        if isinstance(s, ir.AllReduce):
            self.opaque.add(s.buffer)  # (a per-thread scalar: nothing to compact)
        for c in ir.children(s):
            if isinstance(c, ir.Stmt):
                self.stmt(c, lets, lanes)
            else:
                self.exprs((c,), lets, lanes)

    def exprs(self, es, lets, lanes):
        for e in es:
            for x in ir.memory_nodes(e):
                if isinstance(x, ir.Load):
                    self.access(x.buffer, x.indices, "read", lets, lanes)
                elif isinstance(x, ir.Ref):
                    self.opaque.add(x.buffer)

    def access(self, name, indices, kind, lets, lanes):
        self.accesses.setdefault(name, []).append(
            self.split(name, indices, kind, lets, lanes))

    def split(self, name, indices, kind, lets, lanes) -> _Access:
        buf = self.local.get(name)
        if buf is None or name in self.opaque or len(indices) != len(buf.shape):
            return _Access(kind, indices, None)
        if any(v is None for v in (_const(n) for n in buf.shape)):
            return _Access(kind, indices, None)
        flat, stride = Linear(), 1
        known = self.known(lets)
        for i, n in reversed(list(zip(indices, buf.shape))):
            i = substitute(i, known)
            flat = flat.add(self.simp.linear(i).scale(stride))
            stride *= int(n.value)
        offset, lane_terms, copy_terms = Linear(), [], []
        for atom, coef in flat.terms.items():
            names = ir.free_vars(atom)
            if isinstance(atom, ir.Var) and atom.name in lanes:
                lane_terms.append((atom.name, coef, lanes[atom.name]))
            elif isinstance(atom, ir.Var) and atom.name in self.copies:
                copy_terms.append((atom.name, coef, *self.copies[atom.name]))
            elif names and all(_is_invariant(v, self.sizes) for v in names) and not ir.loaded(atom):
                offset = offset.add(Linear({atom: coef}))
            else:  # a serial loop's variable, a varying let, a lane inside a product, ...
                return _Access(kind, indices, None)
        lo = hi = flat.const
        for v, coef, n in lane_terms:
            span = coef * (n - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        return _Access(kind, indices, offset, lo, hi, flat.const, tuple(lane_terms),
                       tuple(copy_terms))


def _const(e):
    return int(e.value) if isinstance(e, ir.Imm) else None


def _same(a: Linear, b: Linear) -> bool:
    return a.terms == b.terms


def _thread_dependent(g: Linear) -> bool:
    return any(threads.is_thread(v) for a in g.terms for v in ir.free_vars(a))


def _plan(name, buf, accs):
    """The slot map of buffer `name` ({'gaps': [(start, removed)...], 'size'}),
    or None when it stays as it is. Raises when a thread reads what others hold."""
    if not accs or any(a.offset is None for a in accs):
        return None
    if not any(a.offset.terms for a in accs):
        return None  # already compact
    accs = [c for a in accs for c in _expanded(a)]
    writes = [a for a in accs if a.kind == "write"]
    owned = [a for a in writes if _thread_dependent(a.offset)]
    if owned:
        g = owned[0].offset
        for a in accs:
            if not _same(a.offset, g):
                w = owned[0]
                raise LoweringError(
                    f"local buffer '{name}' is written at {_show(w)} by threads that each "
                    f"hold their own copy (its stage is split over threads), but it is "
                    f"{'read' if a.kind == 'read' else 'written'} at {_show(a)}, a different "
                    f"thread offset: a thread would read elements other threads hold. Split "
                    f"and bind the readers' loops like the writer's (same factors, same "
                    f"thread axis), or make the buffer shared")
        written = set()
        for a in writes:
            written |= _elements(a)
        for a in accs:
            if a.kind == "read" and not _elements(a) <= written:
                missing = min(_elements(a) - written)
                raise LoweringError(
                    f"local buffer '{name}' is read at {_show(a)}, but its thread never writes "
                    f"element {show(g.to_expr())} + {missing} (its stage is split over threads): "
                    f"split the reading stage's loops like the writing stage's, so that each "
                    f"thread reads the slice it computed")
    g = accs[0].offset
    if not all(_same(a.offset, g) for a in accs):
        return None
    spans = sorted((a.lo, a.hi) for a in accs)
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    align = max(1, VECTOR_BYTES // max(1, buf.dtype.bits // 8))
    start = (merged[0][0] // align) * align
    gaps, removed, prev_hi = [], start, None
    for lo, hi in merged:
        if prev_hi is not None:
            removed += ((lo - prev_hi - 1) // align) * align
        gaps.append((lo, removed))
        prev_hi = hi
    size = merged[-1][1] - removed + 1
    total = 1
    for n in buf.shape:
        total *= int(n.value)
    if not g.terms:
        return None  # already compact
    return {"gaps": gaps, "size": size, "offset": g}


def _expanded(a: _Access) -> list[_Access]:
    """The accesses `a` becomes once its unrolled loops are expanded: one per
    combination of their values, the constant part shifted by each."""
    out = [a]
    for _, coef, lo, n in a.copies:
        out = [dataclasses.replace(x, lo=x.lo + coef * (lo + i), hi=x.hi + coef * (lo + i),
                                   base=x.base + coef * (lo + i), copies=())
               for x in out for i in range(n)]
    return out


def _elements(a: _Access) -> set:
    out = {a.base}
    for _, coef, n in a.lanes:
        out = {x + coef * u for x in out for u in range(n)}
    return out


def _show(a: _Access) -> str:
    return "[" + ", ".join(show(i) for i in a.indices) + "]"


class _Compact(Rewriter):
    def __init__(self, plans, scan):
        self.plans, self.scan = plans, scan
        # the same let/lane context as the scan's, tracked down the tree
        self.lets: dict = {}
        self.lanes: dict = {}

    def expr(self, e: ir.Expr) -> ir.Expr:
        if not ir.loaded(e):
            return e  # no load to compact below (kept on the node: ir.loaded)
        return Rewriter.expr(self, e)

    def slot(self, name, indices):
        """The compact subscript of one access (its lanes kept)."""
        plan = self.plans[name]
        acc = self.scan.split(name, indices, "read", self.lets, self.lanes)
        removed = 0
        for start, r in plan["gaps"]:
            if acc.lo >= start:
                removed = r
        lin = Linear({ir.Var(v): c for v, c, _ in acc.lanes}, acc.base - removed)
        return (lin.to_expr(),)

    def stmt_Let(self, s):
        value = substitute(s.value, {v: e for v, e in self.lets.items() if e is not None})
        ok = all(_is_invariant(v, self.scan.sizes) for v in ir.free_vars(value)) and \
            not ir.loaded(value)
        saved = self.lets
        self.lets = {**saved, s.var: value if ok else None}
        try:
            return self.generic_stmt(s)
        finally:
            self.lets = saved

    def stmt_For(self, s):
        saved_lets, saved_lanes = self.lets, self.lanes
        self.lets = {**saved_lets, s.var: None}
        if (s.kind == "vectorize" and isinstance(s.extent, ir.Imm)
                and isinstance(s.lo, ir.Imm) and s.lo.value == 0):
            self.lanes = {**saved_lanes, s.var: int(s.extent.value)}
            self.lets.pop(s.var)
        try:
            return self.generic_stmt(s)
        finally:
            self.lets, self.lanes = saved_lets, saved_lanes

    def stmt_Alloc(self, s):
        body = self.stmt(s.body)
        plan = self.plans.get(s.buffer.name)
        buf = s.buffer
        if plan is not None and s.buffer.scope == "local":
            buf = dataclasses.replace(buf, shape=(ir.const(plan["size"]),))
        if buf is s.buffer and body is s.body:
            return s
        return ir.Alloc(buf, body)

    def expr_Load(self, e):
        idx = self.exprs(e.indices)
        if e.buffer in self.plans:
            return ir.Load(e.buffer, self.slot(e.buffer, e.indices), e.dtype)
        return e if idx is e.indices else ir.Load(e.buffer, idx, e.dtype)

    def stmt_Store(self, s):
        value = self.expr(s.value)
        idx = self.exprs(s.indices)
        if s.buffer in self.plans:
            idx = self.slot(s.buffer, s.indices)
        elif idx is s.indices and value is s.value:
            return s
        return ir.Store(s.buffer, idx, value, loc=s.loc, atomic=s.atomic)
