"""The verifier reads divergence off the uniformity lattice (arch/hierarchy.py
through lower/uniformity.py): a collective intrinsic may sit under a
condition uniform within the group it needs (block, warpgroup, warp), and is
refused under one that is not; each message says how uniform the condition
is and which group must reach the intrinsic. insert_barriers' check of loop
trip counts reads the same lattice."""
from __future__ import annotations

import re

import pytest

from tcomp.errors import LoweringError
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.lower import uniformity as U
from tcomp.lower.verify import verify
from tcomp.arch.hierarchy import Uniformity

F32 = dtypes.float32
TX, TY, BX = ir.Var("threadIdx.x"), ir.Var("threadIdx.y"), ir.Var("blockIdx.x")


def c(v):
    return ir.const(v)


def eq(a, b):
    return ir.Bin("==", a, b, ir.bool_)


def div(a, n):
    return ir.Bin("/", a, c(n), ir.int32)


def mod(a, n):
    return ir.Bin("%", a, c(n), ir.int32)


def kernel(body, block=(256, 1, 1), local=False):
    """A kernel of `block` threads over A (global) and, with `local`, R: a
    one-element register array around `body`."""
    bufs = (ir.Buffer("A", F32, (c(4),), "global", "output"),)
    if local:
        body = ir.Alloc(ir.Buffer("R", F32, (c(1),), "local"), body)
    k = ir.Kernel("k", ("A",), (), (c(1), c(1), c(1)), tuple(c(b) for b in block), body)
    return ir.Program("p", bufs, (k,), (), ("A",), ()), k


def call(fn, *args):
    return ir.Evaluate(ir.Call(fn, tuple(args), ir.int32))


BARRIER = ir.Barrier()
WGMMA_FENCE = call("wgmma_fence")  # warpgroup-wide
QUAD_SUM = call("quad_sum", ir.Ref("R", (c(0),), F32))  # warp-wide


def ok(body, **kw):
    prog, k = kernel(body, **kw)
    verify(k, prog)


def refused(body, message, **kw):
    prog, k = kernel(body, **kw)
    with pytest.raises(LoweringError, match=re.escape(message)):
        verify(k, prog)


def test_a_barrier_under_a_block_uniform_condition():
    """A let of the block index (a derived, block-uniform value): every thread
    of the block takes the same branch."""
    t = ir.Var("t")
    ok(ir.Let("t", ir.Bin("*", BX, c(4), ir.int32), ir.If(eq(mod(t, 8), c(0)), BARRIER)))
    # threadIdx.x / 256 in a block of 256 threads is 0 in all of them
    ok(ir.If(eq(div(TX, 256), c(0)), BARRIER))
    # threadIdx.y is 0 everywhere in a block of one row
    ok(ir.If(eq(TY, c(0)), BARRIER), block=(128, 1, 1))


def test_a_barrier_under_a_warpgroup_condition_is_refused():
    refused(ir.If(eq(div(TX, 128), c(0)), BARRIER),
            "kernel k: barrier under a thread-dependent condition (it is uniform only within "
            "a warpgroup; every thread of the block must reach it)")


def test_wgmma_under_a_warpgroup_condition_but_not_a_warp_one():
    ok(ir.If(eq(div(TX, 128), c(1)), WGMMA_FENCE))
    refused(ir.If(eq(div(TX, 32), c(1)), WGMMA_FENCE),
            "kernel k: wgmma_fence under a thread-dependent condition (it is uniform only "
            "within a warp; every thread of the warpgroup must reach it)")


def test_a_warp_collective_under_a_warp_condition_but_not_a_lane_one():
    ok(ir.If(eq(div(TX, 32), c(3)), QUAD_SUM), local=True)
    ok(ir.Let("w", div(TX, 64), ir.If(eq(ir.Var("w"), c(1)), QUAD_SUM)), local=True)
    refused(ir.If(eq(mod(TX, 32), c(0)), QUAD_SUM),
            "kernel k: quad reduction under a thread-dependent condition (it may differ "
            "between any two threads; every thread of the warp must reach it)", local=True)


def test_threadIdx_y_is_warp_uniform_only_over_whole_warps_along_x():
    """With 32 threads along x a warp is one row of y; with 16, a warp spans
    two rows and a condition on threadIdx.y splits it."""
    ok(ir.If(eq(TY, c(1)), QUAD_SUM), block=(32, 4, 1), local=True)
    refused(ir.If(eq(TY, c(1)), QUAD_SUM),
            "kernel k: quad reduction under a thread-dependent condition (it may differ "
            "between any two threads; every thread of the warp must reach it)",
            block=(16, 4, 1), local=True)


def test_a_condition_on_a_register_value_is_divergent():
    """A thread's register differs between threads whatever its subscript; a
    global element at a uniform subscript does not."""
    refused(ir.If(ir.Bin(">", ir.Load("R", (c(0),), F32), ir.Imm(0.0, F32), ir.bool_),
                  BARRIER),
            "kernel k: barrier under a thread-dependent condition (it may differ between any "
            "two threads; every thread of the block must reach it)", local=True)
    ok(ir.If(ir.Bin(">", ir.Load("A", (c(0),), F32), ir.Imm(0.0, F32), ir.bool_), BARRIER))


def test_loop_bounds_and_their_variable_carry_their_uniformity():
    wg = div(TX, 128)
    # a trip count per warpgroup: wgmma inside is fine, a barrier is not
    ok(ir.For("i", c(0), ir.Bin("+", wg, c(1), ir.int32), "serial", WGMMA_FENCE))
    refused(ir.For("i", c(0), ir.Bin("+", wg, c(1), ir.int32), "serial", BARRIER),
            "barrier under a thread-dependent condition (it is uniform only within a "
            "warpgroup")
    # the variable of a loop from the warp index is warp-uniform
    refused(ir.For("i", div(TX, 32), c(1), "serial", ir.If(eq(ir.Var("i"), c(0)), WGMMA_FENCE)),
            "wgmma_fence under a thread-dependent condition (it is uniform only within a warp")


def test_the_lattice_of_ir_expressions():
    block = (256, 1, 1)
    assert U.of(div(TX, 128), block) is Uniformity.WARPGROUP
    assert U.of(ir.Bin("+", div(TX, 32), BX, ir.int32), block) is Uniformity.WARP
    assert U.of(mod(TX, 32), block) is Uniformity.THREAD
    assert U.of(ir.Var("N"), block, {"N": Uniformity.GRID}) is Uniformity.GRID
    assert U.of(ir.Load("R", (c(0),), F32), block, registers={"R"}) is Uniformity.THREAD
    assert U.of(ir.Load("A", (BX,), F32), block) is Uniformity.BLOCK


def test_insert_barriers_reads_trip_counts_off_the_lattice():
    """barriers.py refuses a barrier inside a loop whose trip count differs
    between the threads of the block; a count uniform over the block (a
    quotient that is 0 in every thread, a size, a block index) is fine."""
    from tcomp.lower import barriers

    def loop(extent):
        prog, k = kernel(ir.For("i", c(0), extent, "serial", BARRIER))
        return barriers.run(k, prog)

    n = ir.Bin("+", ir.Var("N"), BX, ir.int32)
    assert loop(ir.Bin("+", div(TX, 256), n, ir.int32)).body.body == BARRIER
    with pytest.raises(LoweringError, match=re.escape(
            "kernel k: loop 'i' runs threadIdx.x / 128 + 1 times, a count that differs between "
            "the threads of a block")):
        loop(ir.Bin("+", div(TX, 128), c(1), ir.int32))
