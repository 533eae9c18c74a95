"""Pass: tensor cores. Loops marked `tensorize` become warp intrinsics, and
fragment buffers (scope "fragment") become per-lane registers laid out as the
intrinsic defines (warp_layouts.py).

Pre: thread loops bound, simplified; fragment buffers allocated with their
logical shape (a warp's tile, e.g. C_fragment[32, 32]), accessed with one
subscript per dimension. Post: no `tensorize` loop; every fragment buffer is
a 1-d array of the registers one lane holds, accessed only

* by intrinsics, through `Ref`s at constant register offsets
  (`mma_m16n8k16(&C[4], &A[0], &B[8], &C[4])`, `ldmatrix_x4(&A[8], &S[...])`);
* by loops over the lane's own elements: a nest over the fragment's tile,
  `for i in 0:16p: for j in 0:8q: ... F[i + r, j + s] ...`, becomes
  `for ti in 0:p: for tj in 0:q: for e in 0:4: ... F[reg] ...` with
  `i = 16 ti + row(lane, e)` and `j = 8 tj + col(lane, e)` (lane =
  threadIdx.x): each lane visits the elements it holds, and the other
  subscripts of the body (the global C, a bias) follow. With the column
  loop split by 2 and its inner loop vectorized (`for i: for jo: for jv in
  0:2 @vectorize` over F[i, 2 jo + jv], F the accumulator), the lane's
  elements come in pairs of adjacent columns: `for ti: for tj: for h in 0:2:
  for jv in 0:2 @vectorize`, registers 2 h + jv of the tile; the vectorize
  pass may then store each pair as one vector (bf16x2, float2).

A copy from a shared buffer into an A or B fragment whose rows are 16-byte
aligned runs as `ldmatrix` (x4 for A; x4.trans for two B tiles side by side,
x2.trans for one); other copies stay per-element loads (correct, slower). Loops whose variables reach a register
offset are unrolled, so the registers are named by constants.

A kernel with fragments needs blockDim.x == 32 (the lanes of a warp) with
warps along threadIdx.y/z. Anything the pass cannot place is a LoweringError
naming the buffer and the loop.
"""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from . import ir
from . import tensor_core_operands as operands
from .printer import expr as expr_text
from .rewriter import Rewriter, substitute, walk_stmts
from .simplify import Linear, kernel_simplifier
from .warp_layouts import IR_OPS, MMA_C_PAIRS  # noqa: F401
from .tensor_core_layouts import I32, LANE, LAYOUTS, Layout, _b  # noqa: F401
from .tensor_core_registers import _multiple, _Registers, _UnrollRegisters  # noqa: F401

def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    frags = {x.buffer.name: x.buffer for x in walk_stmts(k.body)
             if isinstance(x, ir.Alloc) and x.buffer.scope == "fragment"}
    marked = [x for x in walk_stmts(k.body) if isinstance(x, ir.For) and x.kind == "tensorize"]
    if not frags and not marked:
        return k
    if not (isinstance(k.block[0], ir.Imm) and k.block[0].value == 32):
        raise LoweringError(f"kernel {k.name}: tensor-core fragments need blockDim.x == 32 (the "
                            f"lanes of a warp), but it is {expr_text(k.block[0])}; bind a loop of 32 "
                            f"iterations of the shared-memory copies to threadIdx.x and the "
                            f"warps to threadIdx.y/z")
    simp = kernel_simplifier(k)
    body = operands.squeeze(k.body, frags, simp)  # batch dimensions of extent 1
    frags = operands.fragments(body)
    roles: dict[str, str] = {}
    transposed: dict[str, bool] = {}  # operand fragment -> read as A[k, m] or B[n, k]
    body = _Tensorize(frags, roles, simp, transposed).stmt(body)
    body = operands.transpose(body, frags, sorted(n for n, t in transposed.items() if t))
    frags = operands.fragments(body)
    for name in frags:
        if name not in roles:
            raise LoweringError(f"kernel {k.name}: fragment '{name}' is not an operand of a "
                                f"tensorized loop (fragments hold tensor-core operands: "
                                f"tensorize the stage that reads or accumulates it)")
    shapes, slots = {}, {}
    for name, b in frags.items():
        shape = tuple(int(d.value) for d in b.shape)
        if len(shape) == 3:  # a ring of fragments (`pipeline` on the loop that loads them)
            slots[name], shape = shape[0], shape[1:]
        elif len(shape) != 2:
            raise LoweringError(f"fragment '{name}' has {len(shape)} dimensions; fragments are "
                                f"2-d tiles")
        LAYOUTS[roles[name]].check(name, shape)
        shapes[name] = shape
    shared = {x.buffer.name: x.buffer for x in walk_stmts(k.body)
              if isinstance(x, ir.Alloc) and x.buffer.scope == "shared"}
    dist = _Distribute(frags, roles, shapes, simp, shared)
    body = dist.stmt(body)
    body = _Registers(frags, roles, shapes, slots, simp, dist.element_loops).stmt(body)
    body = _UnrollRegisters(frags).stmt(body)
    _check_registers(body, frags, shapes)
    return dataclasses.replace(k, body=body)


def _check_registers(body, frags, shapes):
    """Every element access to a fragment is now to one register (one
    subscript): one that still has the tile's subscripts was not placed on
    the lanes (a loop nest the pass does not recognise, e.g. a fused loop
    over the tile), and flattening it as an array would read other
    registers than the lane's elements."""
    for x in ir.walk(body):
        if isinstance(x, (ir.Load, ir.Store)) and x.buffer in frags and len(x.indices) != 1:
            rows, cols = shapes[x.buffer]
            raise LoweringError(
                f"fragment '{x.buffer}': access {x.buffer}[{', '.join(map(expr_text, x.indices))}] "
                f"is not over the lanes' own elements: a stage that reads or writes a fragment "
                f"must loop over its {rows} x {cols} tile with one loop of its rows and one of "
                f"its columns (no fused loop over both), each a whole number of mma tiles")


# ------------------------------------------------------------------ tensorize
class _Tensorize(Rewriter):
    """`tensorize` loops: the mma nest becomes one intrinsic call with Refs at
    the tile's origin (logical subscripts); the accumulator's initialisation
    nest (built with the same loops) becomes plain loops."""

    def __init__(self, frags, roles, simp, transposed):
        self.frags, self.roles, self.simp = frags, roles, simp
        self.transposed = transposed  # operands read as A[k, m] or B[n, k]

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        if s.kind != "tensorize":
            return self.generic_stmt(s)
        loops, inner = _nest(s, 3)
        store = inner if isinstance(inner, ir.Store) else None
        if store is not None and len(loops) == 2 and store.buffer in self.frags and \
                isinstance(store.value, ir.Imm):
            # the accumulator's initial value, over the m and n loops of the tile
            self._role(store.buffer, "c")
            return dataclasses.replace(s, kind="serial", intrin=None)
        if store is None or len(loops) != 3:
            raise LoweringError(f"tensorize {s.intrin}: the loops from '{s.var}' inward are not "
                                f"a perfect nest of three loops around one update (a guard "
                                f"inside them: make the warp tile a multiple of the "
                                f"intrinsic's tile)")
        return self._mma(s, loops, store)

    def _role(self, name, role):
        if name not in self.frags:
            raise LoweringError(f"tensorize: '{name}' is not a fragment buffer; read the "
                                f"operands through cache_read(..., 'fragment') and accumulate "
                                f"in cache_write(..., 'fragment')")
        if self.roles.setdefault(name, role) != role:
            raise LoweringError(f"fragment '{name}' is used as mma operand "
                                f"{self.roles[name].upper()} and {role.upper()}")

    def _mma(self, s, loops, store):
        acc = store.buffer
        v = store.value
        if not (isinstance(v, ir.Bin) and v.op == "+" and isinstance(v.a, ir.Load) and
                v.a.buffer == acc and v.a.indices == store.indices):
            raise LoweringError(f"tensorize {s.intrin}: the update of '{acc}' is not "
                                f"'{acc}[...] = {acc}[...] + A * B'")
        prod = v.b
        while isinstance(prod, ir.Cast):
            prod = prod.x
        if not (isinstance(prod, ir.Bin) and prod.op == "*"):
            raise LoweringError(f"tensorize {s.intrin}: '{acc}' is not updated by a product")
        x, y = _load(prod.a), _load(prod.b)
        if x is None or y is None:
            raise LoweringError(f"tensorize {s.intrin}: the product updating '{acc}' does not "
                                f"read two buffers")
        names = [lp.var for lp in loops]
        ext = {lp.var: lp.extent for lp in loops}
        if len(store.indices) != 2:  # (batch dimensions of extent 1 are squeezed already)
            shape = " x ".join(expr_text(d) for d in self.frags[acc].shape)
            raise LoweringError(f"tensorize {s.intrin}: the accumulator fragment '{acc}' is "
                                f"{shape}: it holds the tiles of several products of the "
                                f"batch; compute it at a loop inside its consumer's batch "
                                f"loops (or bind those to block indices) so that it holds "
                                f"one product's m x n tile")
        m = self._var_of(store.indices[0], names, acc, 0)
        n = self._var_of(store.indices[1], names, acc, 1)
        # A is the operand with m among its tile's two subscripts (the last two: a ring of
        # fragments has its slot first), B the one with n; each in either order
        def tile_vars(ld):
            if len(ld.indices) < 2:
                return None
            return tuple(self._var_of(i, names, ld.buffer, d, strict=False)
                         for d, i in enumerate(ld.indices[-2:]))
        tx, ty = tile_vars(x), tile_vars(y)
        for a, b, ta, tb in ((x, y, tx, ty), (y, x, ty, tx)):
            if ta is not None and tb is not None and m in ta and n in tb:
                break
        else:
            raise LoweringError(f"tensorize {s.intrin}: cannot tell A[m, k] from B[k, n] in the "
                                f"update of '{acc}'")
        k = ta[1 - ta.index(m)]
        if k is None or set(tb) != {k, n} or len({m, n, k}) != 3:
            raise LoweringError(f"tensorize {s.intrin}: A and B do not share the reduction loop")
        for var, want in ((m, 16), (n, 8), (k, 16)):
            e = ext[var]
            if not (isinstance(e, ir.Imm) and e.value == want):
                raise LoweringError(f"tensorize {s.intrin}: loop '{var}' has extent {expr_text(e)}, needs "
                                    f"{want}")
        self._role(acc, "c")
        self._role(a.buffer, "a")
        self._role(b.buffer, "b")
        for buf, trans in ((a.buffer, ta == (k, m)), (b.buffer, tb == (n, k))):
            # (one operand of one stage's product: its orientation is the stage's, and the
            # role check above refuses a fragment read as both A and B)
            assert self.transposed.setdefault(buf, trans) == trans, buf
        zero = {name: ir.const(0) for name in names}

        def ref(buf, idx):
            return ir.Ref(buf, tuple(self.simp.expr(substitute(i, zero)) for i in idx))
        c = ref(acc, store.indices)
        call = ir.Call(s.intrin, (c, ref(a.buffer, a.indices), ref(b.buffer, b.indices), c),
                       I32)
        return ir.Evaluate(call)

    def _var_of(self, idx, names, buf, dim, strict=True):
        lin = self.simp.linear(idx)
        hits = [n for n in names if lin.terms.get(ir.Var(n), 0)]
        if len(hits) == 1 and lin.terms[ir.Var(hits[0])] == 1:
            return hits[0]
        if strict:
            raise LoweringError(f"tensorize: subscript {dim} of '{buf}' is not one of the "
                                f"tensorized loops plus an offset")
        return None


def _nest(s, depth):
    loops, cur = [], s
    while isinstance(cur, ir.For) and len(loops) < depth:
        loops.append(cur)
        cur = cur.body
    return loops, cur


def _load(e):
    while isinstance(e, ir.Cast):
        e = e.x
    return e if isinstance(e, ir.Load) else None


# ------------------------------------------------------------------ distribute
def _frag_accesses(s, frags):
    """(buffer, tile subscripts) of every element access (Load or Store, not
    an intrinsic's Ref) to a fragment under `s` that still has its logical
    subscripts (a ring slot, then the tile's two)."""
    return [(x.buffer, x.indices[-2:]) for x in ir.walk(s)
            if isinstance(x, (ir.Load, ir.Store)) and x.buffer in frags
            and len(x.indices) == len(frags[x.buffer].shape)]


class _Distribute(Rewriter):
    """Nests over a fragment's tile -> loops over the lane's own elements."""

    def __init__(self, frags, roles, shapes, simp, shared):
        self.frags, self.roles, self.shapes, self.simp = frags, roles, shapes, simp
        self.shared = shared
        self.count = 0
        # element loop variable -> (its fragment, the element of the tile it reaches)
        self.element_loops: dict[str, tuple[str, ir.Expr]] = {}

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        inner = s.body
        if isinstance(inner, ir.For) and isinstance(s.extent, ir.Imm) and \
                isinstance(inner.extent, ir.Imm):
            acc = _frag_accesses(inner.body, self.frags)
            if acc:
                done = self._distribute(s, inner, acc)
                if done is not None:
                    return done
        return self.generic_stmt(s)

    def _distribute(self, outer, inner, accesses):
        names = {b for b, _ in accesses}
        if len(names) != 1:
            return None
        (buf,) = names
        lay = LAYOUTS[self.roles[buf]]
        vec = inner.body
        if isinstance(vec, ir.For) and vec.kind == "vectorize" and any(
                vec.var in ir.free_vars(i) for _, idx in accesses for i in idx):
            return self._distribute_pairs(outer, inner, vec, buf, lay, accesses)
        va, vb = ir.Var(outer.var), ir.Var(inner.var)
        rows_outer = None
        for _, (i0, i1) in accesses:
            l0, l1 = self.simp.linear(i0), self.simp.linear(i1)
            if l0.terms.get(va) == 1 and l1.terms.get(vb) == 1 and vb not in l0.terms and \
                    va not in l1.terms:
                here, rv, cv = True, va, vb
            elif l0.terms.get(vb) == 1 and l1.terms.get(va) == 1 and va not in l0.terms and \
                    vb not in l1.terms:
                here, rv, cv = False, vb, va  # the nest runs over (col, row)
            else:
                return None
            if rows_outer not in (None, here):
                return None
            rows_outer = here
            # the rest of each subscript must start a tile: the lane's elements of the
            # tile at (i0, i1) are then the registers of that tile
            for lin, v, t in ((l0, rv, lay.th), (l1, cv, lay.tw)):
                rest = Linear({a: c for a, c in lin.terms.items() if a != v}, lin.const)
                if not _multiple(rest, t):
                    raise LoweringError(f"fragment '{buf}': element access {buf}"
                                        f"[{expr_text(i0)}, {expr_text(i1)}] does not start "
                                        f"a {lay.th} x {lay.tw} tile at '{v.name}' = 0; loop "
                                        f"over whole tiles of the fragment")
        if rows_outer:
            return self._distribute_as(outer, inner, buf, lay, outer, inner, accesses)
        return self._distribute_as(outer, inner, buf, lay, inner, outer, accesses)

    def _distribute_as(self, outer, inner, buf, lay, row_loop, col_loop, accesses):
        er, ec = int(row_loop.extent.value), int(col_loop.extent.value)
        if er % lay.th or ec % lay.tw:
            raise LoweringError(f"fragment '{buf}': loops '{row_loop.var}' ({er}) and "
                                f"'{col_loop.var}' ({ec}) do not cover whole {lay.th} x {lay.tw} "
                                f"tiles of it")
        self.count += 1
        n = self.count
        ta, tb, e = f"{buf}_ti{n}", f"{buf}_tj{n}", f"{buf}_e{n}"
        if lay.role == "b" and (ec // lay.tw) % 2 == 0:
            # two B tiles side by side (k x 16) in one ldmatrix.x4.trans: their
            # registers are consecutive (tiles are numbered row-major)
            pairs = {row_loop.var: _b("*", ir.Var(ta), lay.th),
                     col_loop.var: _b("*", ir.Var(tb), 2 * lay.tw)}
            out = self._ldmatrix(inner.body, buf, lay, row_loop.var, col_loop.var, pairs,
                                 pair=True)
            if out is not None:
                out = ir.For(tb, ir.const(0), ir.const(ec // (2 * lay.tw)), "unroll", out)
                return ir.For(ta, ir.const(0), ir.const(er // lay.th), "unroll", out)
        origin = {row_loop.var: _b("*", ir.Var(ta), lay.th),
                  col_loop.var: _b("*", ir.Var(tb), lay.tw)}
        out = self._ldmatrix(inner.body, buf, lay, row_loop.var, col_loop.var, origin)
        if out is None:
            row, col = lay.coords(ir.Var(e))
            sub = {v: _b("+", o, rc) for (v, o), rc in zip(origin.items(), (row, col))}
            body = substitute(self.stmt(inner.body), sub)
            out = ir.For(e, ir.const(0), ir.const(lay.per_lane), "unroll", body)
            self.element_loops[e] = (buf, ir.Var(e))
        # (the row loop outside, as the registers are numbered row-major by tile)
        out = ir.For(tb, ir.const(0), ir.const(ec // lay.tw), "unroll", out)
        out = ir.For(ta, ir.const(0), ir.const(er // lay.th), "unroll", out)
        return out

    def _distribute_pairs(self, outer, inner, vec, buf, lay, accesses):
        """`for i: for jo: for jv in 0:2 @vectorize: ... F[i + r, 2 jo + jv + s]`
        (F the accumulator, r a multiple of 16, s of 8): each lane holds its
        elements in pairs of adjacent columns (c0, c1 at row g, c2, c3 at row
        g + 8, columns 2t and 2t + 1), so the nest becomes `for ti: for tj:
        for h in 0:2: for jv in 0:2 @vectorize` with i = 16 ti + g + 8 h and
        jo = 4 tj + t: the vectorized loop keeps its two lanes, which the
        vectorize pass may store as one 32- or 64-bit vector (element
        2 h + jv of the tile's registers)."""
        where = f"fragment '{buf}': vectorized loop '{vec.var}'"
        if lay.role != "c":
            raise LoweringError(f"{where} runs over the elements of an mma operand "
                                f"{lay.role.upper()}; only the accumulator (C) is read in "
                                f"vectors (pairs of columns): do not vectorize loops over "
                                f"'{buf}'")
        if not (isinstance(vec.extent, ir.Imm) and vec.extent.value == 2 and
                isinstance(vec.lo, ir.Imm) and vec.lo.value == 0):
            raise LoweringError(f"{where} has {expr_text(vec.extent)} lanes; each lane of the "
                                f"m16n8k16 accumulator holds pairs of 2 adjacent columns, so "
                                f"a vectorized loop over it needs 2 (split the column loop by "
                                f"2 and vectorize the inner one)")
        va, vb, vv = ir.Var(outer.var), ir.Var(inner.var), ir.Var(vec.var)
        for _, (i0, i1) in accesses:
            l0, l1 = self.simp.linear(i0), self.simp.linear(i1)
            if not (l0.terms.get(va) == 1 and vb not in l0.terms and vv not in l0.terms and
                    l1.terms.get(vb) == 2 and l1.terms.get(vv) == 1 and va not in l1.terms):
                raise LoweringError(f"{where}: access {buf}[{expr_text(i0)}, {expr_text(i1)}] "
                                    f"does not pair the accumulator's columns; vectorize the "
                                    f"inner half of its column loop split by 2, inside the "
                                    f"row loop ({buf}[{outer.var} + r, 2 * {inner.var} + "
                                    f"{vec.var} + s])")
            for lin, drop, t in ((l0, {va}, lay.th), (l1, {vb, vv}, lay.tw)):
                rest = Linear({a: c for a, c in lin.terms.items() if a not in drop}, lin.const)
                if not _multiple(rest, t):
                    raise LoweringError(f"fragment '{buf}': element access {buf}"
                                        f"[{expr_text(i0)}, {expr_text(i1)}] does not start "
                                        f"a {lay.th} x {lay.tw} tile; loop over whole tiles "
                                        f"of the fragment")
        er, ep = outer.extent, inner.extent
        if not (isinstance(er, ir.Imm) and isinstance(ep, ir.Imm)) or er.value % lay.th or \
                (2 * ep.value) % lay.tw:
            raise LoweringError(f"fragment '{buf}': loops '{outer.var}' ({expr_text(er)}) and "
                                f"'{inner.var}' ({expr_text(ep)} pairs) do not cover whole "
                                f"{lay.th} x {lay.tw} tiles of it")
        self.count += 1
        n = self.count
        ta, tb, h = f"{buf}_ti{n}", f"{buf}_tj{n}", f"{buf}_h{n}"
        half = lay.tw // 2  # pairs per tile row: 4, one per t
        row, pair = MMA_C_PAIRS.coords(LANE, ir.Var(h), ops=IR_OPS)  # pair h of this lane
        sub = {outer.var: _b("+", _b("*", ir.Var(ta), lay.th), row),
               inner.var: _b("+", _b("*", ir.Var(tb), half), pair)}
        body = dataclasses.replace(vec, body=substitute(self.stmt(vec.body), sub))
        out = ir.For(h, ir.const(0), ir.const(2), "unroll", body)
        self.element_loops[h] = (buf, _b("+", _b("*", ir.Var(h), 2), vv))
        out = ir.For(tb, ir.const(0), ir.const(2 * int(ep.value) // lay.tw), "unroll", out)
        return ir.For(ta, ir.const(0), ir.const(int(er.value) // lay.th), "unroll", out)

    def _ldmatrix(self, body, buf, lay, rv, cv, origin, pair=False):
        """`F[i0, i1] = S[...]` (F an A or B fragment, S shared of the same type,
        contiguous along F's columns or along its rows, 16-byte aligned rows of
        8 elements): one ldmatrix per tile, else None. Along the columns (A[m,
        k] with k contiguous, B[k, n] with n contiguous): x4 for a 16 x 16 A
        tile, x2.trans for a 16 x 8 B tile, with `pair` x4.trans for two B
        tiles side by side; lane l gives the address of row l % 16 (A: at
        column 8 (l // 16); B: lanes 16-31 repeat lanes 0-15). Along the rows
        (an operand stored in the other major order: A[k, m], B[n, k]): x4.trans
        for A, x2 or (pair) x4 for B, lane l giving the address of column
        l % 8 (+ 8) at row 0 or 8 (tensor_core_operands.LDMATRIX)."""
        if lay.role not in ("a", "b") or not isinstance(body, ir.Store) or body.buffer != buf:
            return None
        src = _load(body.value)
        sb = self.shared.get(src.buffer) if src is not None else None
        if sb is None or sb.dtype != self.frags[buf].dtype or sb.dtype.bits != 16:
            return None
        if not all(isinstance(d, ir.Imm) for d in sb.shape):
            return None
        # contiguous along the fragment's columns (or rows): only the last subscript moves
        # with them, by one element per column (row)
        lins = [self.simp.linear(i) for i in src.indices]

        def along(v):
            v = ir.Var(v)
            return lins[-1].terms.get(v) == 1 and not any(v in x.terms for x in lins[:-1])
        if along(cv):
            major = "col"
        elif along(rv):
            major = "row"
        else:
            return None
        fn, rows = operands.LDMATRIX[lay.role, major, bool(pair and lay.role == "b")]
        lr, lc = rows(LANE, ops=IR_OPS)  # the (row, col) whose address this lane gives
        at = {rv: _b("+", origin[rv], lr), cv: _b("+", origin[cv], lc)}
        sidx = tuple(self.simp.expr(substitute(i, at)) for i in src.indices)
        strides, stride = [], 1
        for d in reversed(sb.shape):
            strides.append(stride)
            stride *= int(d.value)
        strides.reverse()
        flat = Linear()
        for i, st in zip(sidx, strides):
            flat = flat.add(self.simp.linear(i).scale(st))
        if not _multiple(flat, 8):  # 8 16-bit elements: 16 bytes
            return None
        dst = ir.Ref(buf, tuple(self.simp.expr(substitute(i, origin)) for i in body.indices))
        return ir.Evaluate(ir.Call(fn, (dst, ir.Ref(src.buffer, sidx)), I32))
