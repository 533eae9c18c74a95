"""How a stage's reduction accumulates.

When every reduction loop is inside every spatial loop, the value
accumulates in a per-thread register (`<T>_acc`) and is stored once; a
reduction loop bound to threads ends in an all-reduce across them. Otherwise
it accumulates in the tensor itself, which must then have the accumulation
type (use cache_write to get one), initialised just before the outermost
reduction loop.

A continuing float `max=`/`min=` with reduction indices starts from
`fmax(current, identity)` (`fmin`): the row reduces from its identity and
then meets the current value (docs/language.md), so a NaN current value
meeting a row of NaNs (or an empty row) gives the identity, as `evaluate`
does and as every schedule does that starts partial reductions from the
identity (threads, rfactor); without this start the serial loop alone
would keep the NaN.
"""
from __future__ import annotations

from . import ir
from .construct import conj
from .simplify import simplify_expr
from .ir import identity
from .translate import combine


def continued_start(n) -> ir.Expr:
    """Where a continuing reduction (`op=` without `!`) of StageNest `n` starts."""
    d, acc_dt = n.d, n.acc_dt
    if d.reduce and d.reduce_op in ("max", "min") and acc_dt.is_float:
        return combine(d.reduce_op, n.current(), identity(d.reduce_op, acc_dt), acc_dt)
    return n.current()


def needs_start(d, acc_dt) -> bool:
    """Does memory accumulation store a start value before the reduction loops?"""
    return d.init or bool(d.reduce and d.reduce_op in ("max", "min") and acc_dt.is_float)


def register_accumulation(n, i: int) -> ir.Stmt:
    """The reduction loops from leaf i (the first reduction leaf) of StageNest
    `n`, accumulating in a register; initialised before, stored after."""
    d, st, acc_dt, guarded = n.d, n.st, n.acc_dt, n.guarded
    acc = ir.Buffer(n.acc_name, acc_dt, (ir.const(1),), "local")
    a0 = (ir.const(0),)
    load_acc = ir.Load(n.acc_name, a0, acc_dt)
    # The update is translated inside the loops, after the stages computed
    # at them have registered their buffers (views).
    inner = n.reduction_loops(i, lambda: guarded(n.allg, ir.Store(
        n.acc_name, a0, combine(d.reduce_op, load_acc, n.value(), acc_dt))))
    if not n.cross:
        init = identity(d.reduce_op, acc_dt) if d.init else continued_start(n)
        return ir.Alloc(acc, ir.seq(guarded(n.sg, ir.Store(n.acc_name, a0, init)), inner,
                                    guarded(n.sg, n.store(load_acc))))
    # Every thread starts from the identity and takes part in the
    # all-reduce; the threads of a group then store the same value.
    # The block keeps at least one thread along the reduction's axis even
    # when the axis is empty (a runtime extent of 0): the threads past the
    # extent hold the identity (their updates are predicated off), so
    # the result is the identity, and the launch still stores it.
    leaf = n.cross[0]
    count = simplify_expr(ir.Bin("max", n.info.ext[leaf], ir.const(1), ir.int32))
    red = ir.AllReduce(d.reduce_op, n.acc_name, acc_dt, st.bind[leaf], count)
    if d.init:
        final, fg = load_acc, n.sg
    else:
        # Continuing adds to the tensor's value: a read-modify-write that
        # one thread of the group does (all of them would race on it).
        final = combine(d.reduce_op, n.current(), load_acc, acc_dt)
        fg = conj([c for k, c in n.guards if k == "spatial"] + [ir.Bin(
            "==", ir.Var(st.bind[leaf]), ir.const(0), ir.bool_)])
    return ir.Alloc(acc, ir.seq(ir.Store(n.acc_name, a0, identity(d.reduce_op, acc_dt)),
                                inner, red, guarded(fg, n.store(final))))


def init_nest(n, i: int) -> ir.Stmt:
    """Memory accumulation: initialise the points of the spatial loops inside the
    outermost reduction loop (leaf i of StageNest `n`), just before it (with the
    identity, or for a continuing float max/min with `continued_start`)."""
    st = n.st
    inner_sp = [l for l in st.leaves[i:] if st.kinds[l] == "spatial"]
    start = identity(n.d.reduce_op, n.acc_dt) if n.d.init else continued_start(n)
    s = n.guarded(n.sg, n.store(start))
    for leaf in reversed(inner_sp):
        s = n.for_loop(leaf, s)
    return s
