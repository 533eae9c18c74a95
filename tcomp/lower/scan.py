"""The loop of a scanned stage (Stage.scan, schedule/scan.py): tiles of the
ordered axis, each scanned across the block by a block scan intrinsic.

Pre: the stage's leaves end with the scan's tile loop (its lane loop is bound
to threadIdx.x, outside); its statement is a recurrence of scan_form. Post:

    alloc carry; carry = identity; if (extent > 0) carry = O[..., lo - 1, ...]
    for t_o:                                   (every thread: the bound is uniform)
        alloc v [, a]; v = identity [; a = 1]
        if (guards) v = f [; a = coef]          (t = lo + t_o * threads + t_i)
        scan_<op>([a,] v, carry, threads)       (reached by every thread)
        if (guards) O[..., t, ...] = v
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lang import dtypes
from ..schedule.scan import scan_form
from . import ir
from .intrinsics import SCAN_OPS
from .ir_walk import identity
from .translate import Translator, cast


def scan_loop(n, i: int) -> ir.Stmt:
    """The scan's tile loop, leaf i of StageNest `n`, with its carry."""
    st, d, b = n.st, n.d, n.b
    outer, inner, threads = st.scan
    if i != len(st.leaves) - 1:
        raise LoweringError(f"stage '{n.stage}': the scan's tile loop '{outer}' must be its "
                            f"innermost loop; reorder the independent axes outside it")
    axis = d.ordered[0]
    dt = n.out_dtype
    form = scan_form(d, axis, dt)
    assert not isinstance(form, str), form  # (Stage.scan checked it)
    ctx = n.info.ctx
    prefix = n.prefix
    carry = ctx.fresh(f"{prefix}_carry", prefix)
    value = ctx.fresh(f"{prefix}_scan", prefix)
    coef = ctx.fresh(f"{prefix}_coef", prefix) if form.op == "linear" else None
    a0 = (ir.const(0),)
    lo, extent = n.info.domain[axis]
    start = dict(n.info.index)
    start[axis] = lo  # the previous point of the first: O[..., lo - 1, ...]
    tr0 = Translator(start, d.lets, b.size, n.tr.read_fn)
    ident = identity("+" if form.op == "linear" else form.op, dt)
    init = ir.seq(ir.Store(carry, a0, ident),
                  ir.If(ir.Bin(">", extent, ir.const(0), dtypes.bool_),
                        ir.Store(carry, a0, cast(tr0(form.prior), dt))))
    sets = [ir.Store(value, a0, cast(n.tr(form.element), dt))]
    starts = [ir.Store(value, a0, ident)]
    refs = [ir.Ref(value, a0, dt), ir.Ref(carry, a0, dt)]
    if coef is not None:
        sets.append(ir.Store(coef, a0, cast(n.tr(form.coef), dt)))
        starts.append(ir.Store(coef, a0, identity("*", dt)))
        refs.insert(0, ir.Ref(coef, a0, dt))
    call = ir.Evaluate(ir.Call(SCAN_OPS[form.op], tuple(refs) + (ir.const(threads),),
                               dtypes.int32))
    body = ir.seq(*starts, n.guarded(n.allg, ir.seq(*sets)), call,
                  n.guarded(n.allg, n.store(ir.Load(value, a0, dt))))
    local = [ir.Buffer(value, dt, (ir.const(1),), "local")]
    if coef is not None:
        local.append(ir.Buffer(coef, dt, (ir.const(1),), "local"))
    for buf in local:
        body = ir.Alloc(buf, body)
    loop = b.loop(n.stage, st, i, n.info, lambda: body)
    return ir.Alloc(ir.Buffer(carry, dt, (ir.const(1),), "local"), ir.seq(init, loop))
