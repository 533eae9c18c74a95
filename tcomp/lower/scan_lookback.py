"""The loop of a stage scanned across blocks (Stage.scan(..., lookback=True),
schedule/scan.py): one tile of `threads * K` elements a block, its carry found
by a decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan
with Decoupled Look-back", 2016) through the global buffers of
schedule/scan.Lookback.

Pre: the stage's leaves are t_i (bound to threadIdx.x), t_o (blockIdx.x), its
independent axes, then t_k (K > 1); the body below is built inside all of them
but t_k, which it loops over itself; its statement is a recurrence of
scan_form. Post (t = lo + t_o * threads * K +
t_i * K + t_k; `slot` = the row's index (its independent indices, row-major)
* tiles + t_o):

    alloc carry; carry = identity
    if (t_o == 0 && extent > 0) carry = O[..., lo - 1, ...]   (the first tile's start)
    alloc items[K] [, coefs[K]]
    for t_k in 0:K (unrolled): items[t_k] = identity; if (guards) items[t_k] = f
    for k in 1:K (unrolled):   items[k] = items[k - 1] o items[k]      (in the thread)
    alloc v [, a]; v = items[K - 1]                          (the thread's total)
    scan_lookback_<op>([&a,] &v, &carry, &status[slot * words], t_o, threads)
                                         (v: the state before the thread's elements)
    for t_k in 0:K (unrolled): if (guards) O[..., t, ...] = v o items[t_k]

With K > 1 a thread's K consecutive elements would make every load and store
instruction of a warp touch 32 sectors, 4 bytes of each (8 instructions a
sector at K = 8; measured at 0.12-0.2x a copy on the H200). The tile goes
through shared memory instead (CUB's BLOCK_LOAD_TRANSPOSE): element
e = j * threads + t_i of the tile (j in 0:K, unrolled: a warp's loads are 32
consecutive elements) is computed into stage[e + e / 32] (one padding word a
32: the reads at t_i * K + t_k, for K a power of two, hit 32 banks), the
items are read back from stage[t_i * K + t_k + ...] after a barrier; the
results go back the same way (a barrier after the scan: its reads of stage
are done) and are stored from stage[e + e / 32] at e, again 32 consecutive
elements a warp's instruction:

    alloc stage[threads K + threads K / 32] (shared) [, stage_coef]
    for j in 0:K (unrolled): e = j threads + t_i
        stage[e + e/32] = identity; if (guards at e) stage[e + e/32] = f(t at e)
    barrier;  for t_k: items[t_k] = stage[pad(t_i K + t_k)]   ...scan...
    barrier;  for t_k: stage[pad(t_i K + t_k)] = v o items[t_k]
    barrier;  for j: if (guards at e) O[..., t at e, ...] = stage[e + e/32];  barrier

The linear recurrence's elements are pairs (coefs, items); `v o (a, b)` is the
state a v + b. The status words start at 0, "not published" (the program's
temporaries are zero-filled before each call); tiles of one row are chained
only through them, so rows (independent indices, serial or on blockIdx.y/z)
scan alike.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lang import dtypes
from ..schedule.scan import scan_form
from . import ir
from .construct import add, mul, sub
from .intrinsics import LOOKBACK_OPS
from .rewriter import substitute
from .ir_walk import identity
from .simplify import simplify_expr
from .translate import Translator, cast, combine


def _then(op: str, state: ir.Expr, elem: ir.Expr, coef: ir.Expr | None, dt) -> ir.Expr:
    """The state `state` followed by an element (a linear pair: coef, elem)."""
    if op == "linear":
        return ir.Bin("+", ir.Bin("*", coef, state, dt), elem, dt)
    return combine(op, state, elem, dt)


def lookback_body(n) -> ir.Stmt:
    """The block's tile in StageNest `n`, with its look-back."""
    st, d, b = n.st, n.d, n.b
    outer, inner, threads = st.scan
    lb = st.lookback
    if lb.items is not None and st.leaves[-1] != lb.items:
        raise LoweringError(f"stage '{n.stage}': a thread's elements '{lb.items}' must be its "
                            f"innermost loop; reorder the independent axes outside it")
    axis = d.ordered[0]
    dt = n.out_dtype
    form = scan_form(d, axis, dt)
    assert not isinstance(form, str), form  # (Stage.scan checked it)
    op, linear = form.op, form.op == "linear"
    ctx, prefix, K = n.info.ctx, n.prefix, lb.count
    carry = ctx.fresh(f"{prefix}_carry", prefix)
    value = ctx.fresh(f"{prefix}_scan", prefix)
    coef = ctx.fresh(f"{prefix}_coef", prefix) if linear else None
    items = ctx.fresh(f"{prefix}_items", prefix)
    coefs = ctx.fresh(f"{prefix}_coefs", prefix) if linear else None
    a0 = (ir.const(0),)
    kvar = n.info.loopvar[lb.items] if lb.items is not None else None
    kidx = (ir.Var(kvar),) if kvar is not None else a0
    tile = ir.Var(n.info.loopvar[outer])
    ident = identity("+" if linear else op, dt)
    one = identity("*", dt)

    def per_item(body: ir.Stmt) -> ir.Stmt:
        return body if kvar is None else n.for_loop(lb.items, body)

    # the first tile starts from the tensor's value before the range
    lo, extent = n.info.domain[axis]
    start = dict(n.info.index)
    start[axis] = lo
    tr0 = Translator(start, d.lets, b.size, n.tr.read_fn)
    first = ir.Bin("&&", ir.Bin("==", tile, ir.const(0), dtypes.bool_),
                   ir.Bin(">", extent, ir.const(0), dtypes.bool_), dtypes.bool_)
    init = ir.seq(ir.Store(carry, a0, ident),
                  ir.If(first, ir.Store(carry, a0, cast(tr0(form.prior), dt))))
    # a thread's elements, identities past the end
    sets = [ir.Store(items, kidx, cast(n.tr(form.element), dt))]
    starts = [ir.Store(items, kidx, ident)]
    if linear:
        sets.append(ir.Store(coefs, kidx, cast(n.tr(form.coef), dt)))
        starts.append(ir.Store(coefs, kidx, one))
    staged = K > 1 and kvar is not None
    if staged:  # (the module docstring: the tile through shared memory)
        st_names = [ctx.fresh(f"{prefix}_stage", prefix)]
        if linear:
            st_names.append(ctx.fresh(f"{prefix}_stage_coef", prefix))
        tivar = n.info.loopvar[inner]
        j = ctx.fresh(f"{prefix}_j", prefix)
        e = add(mul(ir.Var(j), ir.const(threads)), ir.Var(tivar))
        at_e = {tivar: ir.Bin("/", e, ir.const(K), dtypes.int32),
                kvar: ir.Bin("%", e, ir.const(K), dtypes.int32)}

        def at(x):
            return None if x is None else simplify_expr(substitute(x, at_e))

        def pad(x):
            return (simplify_expr(add(x, ir.Bin("/", x, ir.const(32), dtypes.int32))),)

        mine = pad(add(mul(ir.Var(tivar), ir.const(K)), ir.Var(kvar)))
        striped = ir.For(j, ir.const(0), ir.const(K), "unroll", ir.seq(
            *[ir.Store(nm, pad(e), x.value) for nm, x in zip(st_names, starts)],
            n.guarded(at(n.allg), ir.seq(*[ir.Store(nm, pad(e), at(x.value))
                                           for nm, x in zip(st_names, sets)]))))
        load = ir.seq(striped, ir.Barrier(), per_item(ir.seq(
            *[ir.Store(x.buffer, x.indices, ir.Load(nm, mine, dt))
              for nm, x in zip(st_names, sets)])))
    else:
        load = per_item(ir.seq(*starts, n.guarded(n.allg, ir.seq(*sets))))
    # the thread's inclusive scan of them, in order
    local = None
    if K > 1:
        k = ctx.fresh(f"{prefix}_k", prefix)
        kk, km = (ir.Var(k),), (ir.Bin("-", ir.Var(k), ir.const(1), dtypes.int32),)
        el = ir.Load(items, kk, dt)
        prev = ir.Load(items, km, dt)
        if linear:
            step = ir.seq(ir.Store(items, kk, _then(op, prev, el, ir.Load(coefs, kk, dt), dt)),
                          ir.Store(coefs, kk, ir.Bin("*", ir.Load(coefs, km, dt),
                                                      ir.Load(coefs, kk, dt), dt)))
        else:
            step = ir.Store(items, kk, combine(op, prev, el, dt))
        local = ir.For(k, ir.const(1), ir.const(K - 1), "unroll", step)
    lastk = (ir.const(K - 1),)
    total = [ir.Store(value, a0, ir.Load(items, lastk, dt))]
    if linear:
        total.append(ir.Store(coef, a0, ir.Load(coefs, lastk, dt)))
    # the tile's slot: the row (its independent indices, row-major) then the tile
    row = ir.const(0)
    for v in d.spatial:
        if v != axis:
            base, ext = n.info.domain[v]
            row = add(mul(row, ext), sub(n.info.index[v], base))
    slot = (simplify_expr(add(mul(row, n.info.ext[outer]), tile)),)
    first_word = (simplify_expr(mul(slot[0], ir.const(lb.words))),)
    refs = [ir.Ref(value, a0, dt), ir.Ref(carry, a0, dt),
            ir.Ref(lb.status, first_word, dtypes.uint64)]
    if linear:
        refs.insert(0, ir.Ref(coef, a0, dt))
    fn = LOOKBACK_OPS[op]
    call = ir.Evaluate(ir.Call(fn, tuple(refs) + (tile, ir.const(threads)), dtypes.int32))
    result = _then(op, ir.Load(value, a0, dt), ir.Load(items, kidx, dt),
                   ir.Load(coefs, kidx, dt) if linear else None, dt)
    if staged:
        out = n.store(ir.Load(st_names[0], pad(e), dt))
        stores = ir.seq(
            ir.Barrier(), per_item(ir.Store(st_names[0], mine, result)), ir.Barrier(),
            ir.For(j, ir.const(0), ir.const(K), "unroll", n.guarded(at(n.allg), ir.Store(
                out.buffer, tuple(at(i) for i in out.indices), out.value, loc=out.loc))))
    else:
        stores = per_item(n.guarded(n.allg, n.store(result)))
    body = ir.seq(init, load, local, *total, call, stores)
    allocs = [ir.Buffer(carry, dt, (ir.const(1),), "local"),
              ir.Buffer(value, dt, (ir.const(1),), "local")]
    if linear:
        allocs.append(ir.Buffer(coef, dt, (ir.const(1),), "local"))
    allocs.append(ir.Buffer(items, dt, (ir.const(K),), "local"))
    if linear:
        allocs.append(ir.Buffer(coefs, dt, (ir.const(K),), "local"))
    if staged:
        words = threads * K + (threads * K - 1) // 32 + 1
        allocs += [ir.Buffer(nm, dt, (ir.const(words),), "shared") for nm in st_names]
    for buf in allocs:
        body = ir.Alloc(buf, body)
    return body
