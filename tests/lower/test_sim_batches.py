"""The sim runs the blocks of a launch together, in batches (lanes = blocks x
threads): races between blocks on global memory, per-block barriers and loops,
batching of large grids, and the same results and messages whatever the batch
size. Hand-written Kernel IR where the schedule language cannot express the
bug (two blocks writing one element, a block reading another's output).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.target_sim import executor, run_program

from .test_sim_catches import MM, MM_SIZES, shared_matmul, tail_scale, SCALE
from .util import inputs_for, run_sim

F32 = dtypes.float32
BX, TX = ir.Var("blockIdx.x"), ir.Var("threadIdx.x")


def c(v):
    return ir.const(v)


def f(v):
    return ir.Imm(float(v), F32)


def eq(a, b):
    return ir.Bin("==", a, b, ir.bool_)


def lt(a, b):
    return ir.Bin("<", a, b, ir.bool_)


def add(a, b, dt=ir.int32):
    return ir.Bin("+", a, b, dt)


def program(body, grid, threads, buffers):
    """One kernel over global buffers {name: shape}, all outputs (zero-filled by run())."""
    bufs = tuple(ir.Buffer(n, F32, tuple(c(d) for d in shape), "global", "output")
                 for n, shape in buffers.items())
    k = ir.Kernel("k", tuple(buffers), (), (c(grid), c(1), c(1)), (c(threads), c(1), c(1)), body)
    return ir.Program("p", bufs, (k,), (), tuple(buffers), ())


def run(prog, buffers):
    env = {n: np.zeros(shape, np.float32) for n, shape in buffers.items()}
    run_program(prog, env, {})
    return env


@pytest.fixture(params=["all", "one"], ids=["one-batch", "block-per-batch"])
def batches(request, monkeypatch):
    """Run every block in one batch, or each block in a batch of its own (the
    checks between blocks then span batches)."""
    if request.param == "one":
        monkeypatch.setattr(executor, "MAX_LANES", 1)
    return request.param


# ----------------------------------------------------------------- races between blocks
def test_blocks_writing_different_values_to_one_element(batches):
    bufs = {"O": (1,)}
    prog = program(ir.Store("O", (c(0),), ir.Cast(F32, BX)), 2, 1, bufs)
    with pytest.raises(tcomp.SimError, match=r"kernel k: block \(1, 0, 0\) overwrites O\[0\], "
                                             r"which block \(0, 0, 0\) wrote in the same launch; "
                                             r"blocks run in no fixed order \(race between "
                                             r"blocks\)"):
        run(prog, bufs)


def test_blocks_writing_one_value_to_one_element_is_no_race(batches):
    """Redundant identical stores (e.g. a halo computed by both neighbours) give
    the same result in any order; each block then reads its own value."""
    bufs = {"T": (1,), "O": (3,)}
    body = ir.seq(ir.Store("T", (c(0),), f(7)),
                  ir.Store("O", (BX,), ir.Load("T", (c(0),), F32)))
    env = run(program(body, 3, 1, bufs), bufs)
    np.testing.assert_array_equal(env["O"], [7, 7, 7])


def test_block_reading_what_another_block_wrote(batches):
    bufs = {"T": (1,), "O": (2,)}
    body = ir.seq(ir.If(eq(BX, c(0)), ir.Store("T", (c(0),), f(5))),
                  ir.Store("O", (BX,), ir.Load("T", (c(0),), F32)))
    with pytest.raises(tcomp.SimError, match=r"kernel k: block \(1, 0, 0\) reads T\[0\], which "
                                             r"block \(0, 0, 0\) wrote in the same launch; blocks "
                                             r"run in no fixed order, so it may read the value "
                                             r"before or after that write \(race between "
                                             r"blocks\)"):
        run(program(body, 2, 1, bufs), bufs)


def test_block_overwriting_what_another_block_read(batches):
    """Block 0 reads T[0] first (in program order), block 1 then writes it: on
    a GPU block 1 may run first. Caught at the write, in either batching."""
    bufs = {"T": (1,), "O": (1,)}
    body = ir.seq(ir.If(eq(BX, c(0)), ir.Store("O", (c(0),), ir.Load("T", (c(0),), F32))),
                  ir.If(eq(BX, c(1)), ir.Store("T", (c(0),), f(5))))
    with pytest.raises(tcomp.SimError, match=r"block \(1, 0, 0\) overwrites T\[0\], which block "
                                             r"\(0, 0, 0\) read in the same launch"):
        run(program(body, 2, 1, bufs), bufs)


def test_overwrite_of_what_several_blocks_read():
    bufs = {"T": (1,), "O": (3,)}
    body = ir.seq(ir.Store("O", (BX,), ir.Load("T", (c(0),), F32)),
                  ir.If(eq(BX, c(2)), ir.Store("T", (c(0),), f(5))))
    with pytest.raises(tcomp.SimError, match=r"block \(2, 0, 0\) overwrites T\[0\], which other "
                                             r"blocks read in the same launch"):
        run(program(body, 3, 1, bufs), bufs)


def test_rewriting_the_value_another_block_read_is_no_race():
    """Storing the value an element already holds changes nothing a reader sees."""
    bufs = {"T": (1,), "O": (2,)}
    body = ir.seq(ir.If(eq(BX, c(0)), ir.Store("O", (c(0),), ir.Load("T", (c(0),), F32))),
                  ir.If(eq(BX, c(1)), ir.Store("T", (c(0),), f(0))))
    env = run(program(body, 2, 1, bufs), bufs)
    np.testing.assert_array_equal(env["T"], [0])


STENCIL = tcomp.op("""def st(float(N) A) -> (C) {
  B(i) = A(i) * 2.0 where i in 0:N
  C(i) = B(i) + B(i + 1) where i in 0:N-1
}""")


def test_halo_computed_by_neighbouring_blocks(batches):
    """B (global) computed at C's block loop: neighbouring blocks both write
    the halo element B[4k + 4], with the same value; legal, and right."""
    s = tcomp.Schedule(STENCIL)
    C = s["C"]
    (i,) = C.axes
    io, ii = C.split(i, 4)
    C.bind(io, "blockIdx.x")
    C.bind(ii, "threadIdx.x")
    s["B"].compute_at(C, io)
    assert "buffer temp global float32 B" in str(tcomp.lower(s))
    run_sim(s, [np.arange(13, dtype=np.float32) - 4])


# ----------------------------------------------------------------- per-block control flow
def _per_block_loop(second_barrier=True):
    """Block b runs b + 1 iterations (bounds differ between blocks); each
    exchanges values between its 2 threads through shared S."""
    i = ir.Var("i")
    S = ir.Buffer("S", F32, (c(2),), "shared")
    o = (BX, TX)
    step = [ir.Store("S", (TX,), ir.Cast(F32, add(i, TX))), ir.Barrier(),
            ir.Store("O", o, ir.Bin("+", ir.Load("O", o, F32),
                                    ir.Load("S", (ir.Bin("-", c(1), TX, ir.int32),), F32), F32))]
    if second_barrier:
        step.append(ir.Barrier())
    loop = ir.For("i", c(0), add(BX, c(1)), "serial", ir.seq(*step))
    body = ir.Alloc(S, ir.seq(ir.Store("O", o, f(0)), loop))
    return program(body, 3, 2, {"O": (3, 2)})


def test_loop_bounds_may_differ_between_blocks(batches):
    env = run(_per_block_loop(), {"O": (3, 2)})
    want = [[sum(i + 1 - t for i in range(b + 1)) for t in range(2)] for b in range(3)]
    np.testing.assert_array_equal(env["O"], want)


def test_race_in_an_iteration_only_some_blocks_run(batches):
    """Without the barrier at the end, iteration 1 overwrites S while the other
    thread may still read it; only blocks 1 and 2 run iteration 1."""
    with pytest.raises(tcomp.SimError, match=r"overwrites shared S at offset \d that thread "
                                             r"\(\d, 0, 0\) read since the last barrier \(missing "
                                             r"barrier\) in block \(1, 0, 0\)"):
        run(_per_block_loop(second_barrier=False), {"O": (3, 2)})


def test_loop_bounds_differing_within_a_block_name_the_block():
    """Around a barrier the threads of a block would not meet: an error."""
    body = ir.For("i", c(0), add(TX, BX), "serial",
                  ir.seq(ir.Store("O", (BX, TX), f(1)), ir.Barrier()))
    prog = program(ir.If(lt(c(0), BX), body), 3, 2, {"O": (3, 2)})
    with pytest.raises(tcomp.SimError, match=r"bounds of loop 'i' differ between threads "
                                             r"\(threadIdx.x \+ blockIdx.x\) of block \(1, 0, 0\)"):
        run(prog, {"O": (3, 2)})


def test_loop_bounds_may_differ_between_threads_around_thread_local_work():
    """Thread t of block b runs t + b iterations with nothing shared in the loop,
    as a GPU does (issue 22, fuzz seed 4 pair 66605: a producer computed at a
    thread-bound loop whose region moves with the thread's index)."""
    i = ir.Var("i")
    o = (BX, TX)
    body = ir.seq(ir.Store("O", o, f(0)), ir.For("i", c(0), add(TX, BX), "serial", ir.Store(
        "O", o, ir.Bin("+", ir.Load("O", o, F32), ir.Cast(F32, add(i, c(1))), F32))))
    env = run(program(body, 3, 2, {"O": (3, 2)}), {"O": (3, 2)})
    want = [[sum(range(1, t + b + 1)) for t in range(2)] for b in range(3)]
    np.testing.assert_array_equal(env["O"], want)


def test_barrier_taken_by_whole_blocks_only(batches):
    """A barrier under a block-dependent condition: block 1 takes it, block 0 not."""
    body = ir.seq(ir.If(eq(BX, c(1)), ir.Barrier()), ir.Store("O", (BX, TX), f(2)))
    env = run(program(body, 2, 4, {"O": (2, 4)}), {"O": (2, 4)})
    np.testing.assert_array_equal(env["O"], np.full((2, 4), 2))


def test_a_barrier_taken_by_some_blocks_only_ends_no_race_in_the_others():
    """Thread 0 writes S[0], thread 1 reads it; only block 1 has a barrier in
    between (a block-uniform condition). Both blocks run in one batch: the
    barrier clears block 1's record of who wrote what, not block 0's, where the
    read is a race."""
    S = ir.Buffer("S", F32, (c(1),), "shared")
    body = ir.Alloc(S, ir.seq(
        ir.If(eq(TX, c(0)), ir.Store("S", (c(0),), ir.Cast(F32, BX))),
        ir.If(eq(BX, c(1)), ir.Barrier()),
        ir.If(eq(TX, c(1)), ir.Store("O", (BX,), ir.Load("S", (c(0),), F32)))))
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel k: thread (1, 0, 0) reads shared S[0] written by thread (0, 0, 0) "
            "since the last barrier (missing barrier) in block (0, 0, 0)")):
        run(program(body, 2, 2, {"O": (2,)}), {"O": (2,)})


def test_divergent_barrier_names_its_block(batches):
    cond = ir.Bin("&&", eq(BX, c(1)), lt(TX, c(2)), ir.bool_)
    prog = program(ir.If(cond, ir.Barrier()), 2, 4, {"O": (2, 4)})
    with pytest.raises(tcomp.SimError, match=r"barrier reached by only some threads of block "
                                             r"\(1, 0, 0\) \(2 threads skip it\)"):
        run(prog, {"O": (2, 4)})


def test_write_after_several_threads_read_shared():
    """Threads 0-3 read S[0]; thread 3, the last of them, then overwrites it
    with no barrier: threads 0-2 may not have read it yet."""
    S = ir.Buffer("S", F32, (c(1),), "shared")
    body = ir.Alloc(S, ir.seq(
        ir.If(eq(TX, c(0)), ir.Store("S", (c(0),), f(1))), ir.Barrier(),
        ir.Store("O", (BX, TX), ir.Load("S", (c(0),), F32)),
        ir.If(eq(TX, c(3)), ir.Store("S", (c(0),), f(2)))))
    with pytest.raises(tcomp.SimError, match=r"thread \(3, 0, 0\) overwrites shared S at offset 0 "
                                             r"that several threads read since the last barrier "
                                             r"\(missing barrier\) in block \(0, 0, 0\)"):
        run(program(body, 2, 4, {"O": (2, 4)}), {"O": (2, 4)})


# ----------------------------------------------------------------- batching
def _batches(monkeypatch):
    seen = []
    orig = executor._Launch._run_batch

    def spy(self, body, first, nb):
        seen.append((first, nb))
        return orig(self, body, first, nb)
    monkeypatch.setattr(executor._Launch, "_run_batch", spy)
    return seen


def test_grid_runs_in_batches_of_at_most_max_lanes(monkeypatch):
    seen = _batches(monkeypatch)
    monkeypatch.setattr(executor, "MAX_LANES", 8)
    body = ir.Store("O", (BX, TX), ir.Cast(F32, add(ir.Bin("*", BX, c(4), ir.int32), TX)))
    env = run(program(body, 5, 4, {"O": (5, 4)}), {"O": (5, 4)})
    assert seen == [(0, 2), (2, 2), (4, 1)]
    np.testing.assert_array_equal(env["O"], np.arange(20).reshape(5, 4))


def test_batches_are_bounded_by_their_memory(monkeypatch):
    """4 KiB of shared memory per block (plus its tracking): 1 block per batch
    under a 16 KiB budget."""
    seen = _batches(monkeypatch)
    monkeypatch.setattr(executor, "MAX_BATCH_BYTES", 16 << 10)
    S = ir.Buffer("S", F32, (c(1024),), "shared")
    body = ir.Alloc(S, ir.seq(ir.Store("S", (TX,), f(3)), ir.Barrier(),
                              ir.Store("O", (BX, TX), ir.Load("S", (TX,), F32))))
    env = run(program(body, 3, 2, {"O": (3, 2)}), {"O": (3, 2)})
    assert seen == [(0, 1), (1, 1), (2, 1)]
    np.testing.assert_array_equal(env["O"], np.full((3, 2), 3))


@pytest.mark.parametrize("scope", ["local", "shared"])
def test_batch_memory_counts_local_per_thread_and_shared_per_block(monkeypatch, scope):
    """32 threads per block. Local memory is per thread: 16 floats cost
    16 * 32 * (4 + 1) = 2560 bytes per block (value + written flag per lane);
    shared is per block: 1024 floats cost 1024 * (4 + 9) = 13312 bytes (value,
    written flag, race tracking). A budget of two blocks' worth runs 5 blocks
    as batches of 2, 2, 1 in both cases."""
    seen = _batches(monkeypatch)
    n, per_block = (16, 2560) if scope == "local" else (1024, 13312)
    monkeypatch.setattr(executor, "MAX_BATCH_BYTES", 2 * per_block)
    S = ir.Buffer("S", F32, (c(n),), scope)
    at = c(0) if scope == "local" else TX
    body = ir.Alloc(S, ir.seq(ir.Store("S", (at,), f(3)), ir.Barrier(),
                              ir.Store("O", (BX, TX), ir.Load("S", (at,), F32))))
    env = run(program(body, 5, 32, {"O": (5, 32)}), {"O": (5, 32)})
    assert seen == [(0, 2), (2, 2), (4, 1)]
    np.testing.assert_array_equal(env["O"], np.full((5, 32), 3))


@pytest.mark.parametrize("lanes", [1, 32, 1 << 15])
def test_results_and_messages_do_not_depend_on_the_batch_size(monkeypatch, lanes):
    monkeypatch.setattr(executor, "MAX_LANES", lanes)
    args = inputs_for(MM, MM_SIZES, seed=3)
    run_sim(shared_matmul(), args)
    s, sizes = tail_scale()
    run_sim(s, inputs_for(SCALE, sizes), sizes=sizes)
    from .test_sim_catches import DropGuards, rewrite
    k = rewrite(tcomp.build(s, target="sim", sizes=sizes), DropGuards("O"))
    with pytest.raises(tcomp.SimError, match=r"out of bounds \(shape \(7, 5\), dimension 0\) in "
                                             r"block \(2, 0, 0\), thread \(3, 0, 0\)"):
        k(*inputs_for(SCALE, sizes))


def test_a_kernel_compiles_once_per_program(monkeypatch):
    compiled = []
    orig = executor._Launch.__init__

    def spy(self, k):
        compiled.append(k.name)
        orig(self, k)
    monkeypatch.setattr(executor._Launch, "__init__", spy)
    k = tcomp.build(shared_matmul(), target="sim")
    args = inputs_for(MM, MM_SIZES, seed=3)
    first = k(*args)
    np.testing.assert_array_equal(k(*args), first)
    assert compiled == ["mm_C"], compiled


def test_overwrite_of_what_several_blocks_wrote(batches):
    bufs = {"T": (1,)}
    body = ir.seq(ir.If(lt(BX, c(2)), ir.Store("T", (c(0),), f(1))),
                  ir.If(eq(BX, c(2)), ir.Store("T", (c(0),), f(2))))
    with pytest.raises(tcomp.SimError, match=r"block \(2, 0, 0\) overwrites T\[0\], which other "
                                             r"blocks wrote in the same launch"):
        run(program(body, 3, 1, bufs), bufs)


def test_block_reading_what_several_other_blocks_wrote(batches):
    """Blocks 0 and 1 store the same value, block 2 reads it: it may run first."""
    bufs = {"T": (1,), "O": (1,)}
    body = ir.seq(ir.If(lt(BX, c(2)), ir.Store("T", (c(0),), f(1))),
                  ir.If(eq(BX, c(2)), ir.Store("O", (c(0),), ir.Load("T", (c(0),), F32))))
    with pytest.raises(tcomp.SimError, match=r"block \(2, 0, 0\) reads T\[0\], which other "
                                             r"blocks wrote in the same launch"):
        run(program(body, 3, 1, bufs), bufs)


# ----------------------------------------------------------------- if / else
# No lowering pass builds an `If` with an `else_` today; hand-built IR and later
# passes may. The else branch runs on the lanes of the enclosing mask where the
# condition is false, and on no other lane.
_ELSE_CASES = {
    # name: (outer guard or None, inner condition, want(b, t) with 0 = not written)
    "top-level": (None, lt(TX, c(3)), lambda b, t: 1 if t < 3 else 2),
    "in-a-thread-guard": (lt(TX, c(6)), lt(TX, c(3)),
                          lambda b, t: 0 if t >= 6 else (1 if t < 3 else 2)),
    "block-condition-in-a-thread-guard": (lt(TX, c(6)), eq(BX, c(1)),
                                          lambda b, t: 0 if t >= 6 else (1 if b == 1 else 2)),
}


@pytest.mark.parametrize("case", list(_ELSE_CASES))
def test_else_branch_runs_on_the_other_active_lanes(batches, case):
    guard, cond, want = _ELSE_CASES[case]
    o = (BX, TX)
    body = ir.If(cond, ir.Store("O", o, f(1)), ir.Store("O", o, f(2)))
    if guard is not None:
        body = ir.If(guard, body)
    env = run(program(body, 2, 8, {"O": (2, 8)}), {"O": (2, 8)})
    np.testing.assert_array_equal(env["O"], [[want(b, t) for t in range(8)] for b in range(2)])


def test_per_lane_local_subscripts_under_a_guard():
    """A local array indexed per lane (t % 2), written and read back under a
    guard that leaves thread 3 out: each thread gets its own value."""
    T = ir.Buffer("T", F32, (c(2),), "local")
    t2 = ir.Bin("%", TX, c(2), ir.int32)
    val = ir.Cast(F32, add(TX, c(1)))
    body = ir.Alloc(T, ir.If(lt(TX, c(3)), ir.seq(
        ir.Store("T", (t2,), val), ir.Store("O", (BX, TX), ir.Load("T", (t2,), F32)))))
    env = run(program(body, 2, 4, {"O": (2, 4)}), {"O": (2, 4)})
    np.testing.assert_array_equal(env["O"], [[1, 2, 3, 0]] * 2)


# ----------------------------------------------------------------- shadowed variables
# Kernel IR lets an inner loop or let reuse an outer name. The sim computes an
# invariant expression (no loop variable in it) once per batch: a loop variable
# that shadows a size parameter or an invariant let is not invariant, and an
# invariant let that shadows a loop variable ends with its body.
_SHADOWING = ["loop-shadowing-a-size", "loop-in-invariant-let", "invariant-let-in-loop"]


def _shadowing(case):
    """2 threads; thread t stores 3 * v to O[4 t + v] for v = 0..3 (P: a side store)."""
    v = ir.Var("N" if case == "loop-shadowing-a-size" else "i")
    at = add(ir.Bin("*", TX, c(4), ir.int32), v)
    times3 = ir.Cast(F32, ir.Bin("*", v, c(3), ir.int32))
    if case == "loop-shadowing-a-size":
        body = ir.For("N", c(0), c(4), "serial", ir.Store("O", (at,), times3))
    elif case == "loop-in-invariant-let":
        body = ir.Let("i", TX, ir.For("i", c(0), c(4), "serial", ir.Store("O", (at,), times3)))
    else:
        inner = ir.Let("i", c(7), ir.Store("P", (TX,), ir.Cast(F32, v)))
        body = ir.For("i", c(0), c(4), "serial", ir.seq(inner, ir.Store("O", (at,), times3)))
    prog = program(body, 1, 2, {"O": (8,), "P": (2,)})
    return dataclasses.replace(prog, kernels=(dataclasses.replace(prog.kernels[0], sizes=("N",)),))


@pytest.mark.parametrize("case", _SHADOWING)
def test_a_shadowing_variable_is_invariant_only_in_its_own_scope(case):
    env = {"O": np.zeros(8, np.float32), "P": np.zeros(2, np.float32)}
    run_program(_shadowing(case), env, {"N": 5})
    np.testing.assert_array_equal(env["O"], np.tile(np.arange(4) * 3, 2))


# ----------------------------------------------------------------- out-of-bounds subscripts
@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64"])
def test_negative_subscript_of_any_integer_dtype_is_out_of_bounds(dt):
    """A gather O[t] = A[I[t]] whose subscript is the loaded value itself (the
    lowering widens gather subscripts to int32; hand-built IR need not):
    a negative int8/int16 subscript is caught like an int32 one."""
    idt = getattr(dtypes, dt)
    bufs = (ir.Buffer("A", F32, (c(5),), "global", "input"),
            ir.Buffer("I", idt, (c(4),), "global", "input"),
            ir.Buffer("O", F32, (c(4),), "global", "output"))
    body = ir.Store("O", (TX,), ir.Load("A", (ir.Load("I", (TX,), idt),), F32))
    k = ir.Kernel("k", ("A", "I", "O"), (), (c(1), c(1), c(1)), (c(4), c(1), c(1)), body)
    prog = ir.Program("p", bufs, (k,), ("A", "I"), ("O",), ())
    env = {"A": np.arange(5, dtype=np.float32), "I": np.array([0, 1, -1, 2], idt.numpy),
           "O": np.zeros(4, np.float32)}
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel k: read of A[-1] out of bounds (shape (5,), dimension 0) in block (0, 0, 0), "
            "thread (2, 0, 0)")):
        run_program(prog, env, {})


def test_uniform_subscript_out_of_bounds_names_the_one_active_thread(batches):
    """The same out-of-range subscript for every lane, stored by thread 5 only:
    the message names thread 5, not the first lane of the batch."""
    body = ir.If(eq(TX, c(5)), ir.Store("O", (BX, c(10)), f(1)))
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel k: write to O[0, 10] out of bounds (shape (2, 8), dimension 1) in block "
            "(0, 0, 0), thread (5, 0, 0)")):
        run(program(body, 2, 8, {"O": (2, 8)}), {"O": (2, 8)})


# ----------------------------------------------------------------- global races in a block
def test_threads_of_a_block_writing_different_values_in_one_step():
    prog = program(ir.Store("O", (BX,), ir.Cast(F32, TX)), 2, 4, {"O": (2,)})
    with pytest.raises(tcomp.SimError, match=r"kernel k: threads write different values to O at "
                                             r"offset 0 in the same step \(threads \(0, 0, 0\) "
                                             r"and \(1, 0, 0\) of block \(0, 0, 0\)\)"):
        run(prog, {"O": (2,)})


def test_threads_writing_different_values_to_a_0d_buffer():
    prog = program(ir.Store("O", (), ir.Cast(F32, TX)), 1, 2, {"O": ()})
    with pytest.raises(tcomp.SimError, match=r"threads write different values to O in the same "
                                             r"step \(threads \(0, 0, 0\) and \(1, 0, 0\) of "
                                             r"block \(0, 0, 0\)\)"):
        run(prog, {"O": ()})


def test_thread_overwriting_another_threads_global_store():
    def only(t, v):
        cond = ir.Bin("&&", eq(BX, c(1)), eq(TX, c(t)), ir.bool_)
        return ir.If(cond, ir.Store("O", (BX,), f(v)))
    prog = program(ir.seq(only(0, 1), only(1, 2)), 2, 4, {"O": (2,)})
    with pytest.raises(tcomp.SimError, match=r"kernel k: thread \(1, 0, 0\) overwrites O at offset "
                                             r"1 with a different value than another thread wrote "
                                             r"since the last barrier \(block \(1, 0, 0\)\)"):
        run(prog, {"O": (2,)})


# ----------------------------------------------------------------- cross-thread reductions
def _allreduce(value, where=None):
    """R[0] = value per thread; allreduce(+) over the 4 threads (under `where`); O[b, t] = R[0]."""
    R = ir.Buffer("R", F32, (c(1),), "local")
    red = ir.AllReduce("+", "R", F32, "threadIdx.x", c(4))
    body = ir.seq(ir.Store("R", (c(0),), value), red if where is None else ir.If(where, red),
                  ir.Store("O", (BX, TX), ir.Load("R", (c(0),), F32)))
    return program(ir.Alloc(R, body), 3, 4, {"O": (3, 4)})


def test_allreduce_per_block(batches):
    value = ir.Cast(F32, add(ir.Bin("*", BX, c(10), ir.int32), TX))
    env = run(_allreduce(value), {"O": (3, 4)})
    np.testing.assert_array_equal(env["O"], [[40 * b + 6] * 4 for b in range(3)])
    env = run(_allreduce(value, eq(BX, c(1))), {"O": (3, 4)})  # block 1 only
    np.testing.assert_array_equal(env["O"], [[0, 1, 2, 3], [46] * 4, [20, 21, 22, 23]])


def test_allreduce_reached_by_some_threads_of_a_block():
    where = ir.Bin("||", lt(BX, c(1)), lt(TX, c(2)), ir.bool_)
    with pytest.raises(tcomp.SimError, match=r"kernel k: cross-thread reduction reached by only "
                                             r"some threads of block \(1, 0, 0\)"):
        run(_allreduce(f(1), where), {"O": (3, 4)})


def test_allreduce_before_every_thread_wrote():
    R = ir.Buffer("R", F32, (c(1),), "local")
    body = ir.seq(ir.If(lt(TX, c(2)), ir.Store("R", (c(0),), f(1))),
                  ir.AllReduce("+", "R", F32, "threadIdx.x", c(4)))
    with pytest.raises(tcomp.SimError, match=r"kernel k: cross-thread reduction of R before every "
                                             r"thread wrote it"):
        run(program(ir.Alloc(R, body), 2, 4, {"O": (2,)}), {"O": (2,)})


def test_the_first_error_in_launch_order_is_reported(monkeypatch):
    """Batched, block 2's bad store comes first (statement 1); one block after
    another, block 0's (statement 2). The report is block 0's, and the rerun
    starts from the buffers as they were before the launch."""
    seen = _batches(monkeypatch)
    bufs = {"O": (3,)}
    o = (BX,)
    body = ir.seq(ir.Store("O", o, ir.Bin("+", ir.Load("O", o, F32), f(1), F32)),
                  ir.If(eq(BX, c(2)), ir.Store("O", (c(5),), f(1))),
                  ir.If(eq(BX, c(0)), ir.Store("O", (c(7),), f(1))))
    env = {"O": np.zeros(3, np.float32)}
    with pytest.raises(tcomp.SimError, match=r"write to O\[7\] out of bounds \(shape \(3,\), "
                                             r"dimension 0\) in block \(0, 0, 0\), thread "
                                             r"\(0, 0, 0\)"):
        run_program(program(body, 3, 1, bufs), env, {})
    assert seen == [(0, 3), (0, 1)]  # the batch, then block 0 alone
    np.testing.assert_array_equal(env["O"], [1, 0, 0])  # not [2, 1, 1]: O was restored
