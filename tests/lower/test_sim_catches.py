"""The sim target must catch real lowering bugs.

Each test builds a correct program, checks that it runs, then breaks its
Kernel IR on purpose the way a buggy pass would (drop a barrier, shift a
subscript, drop a tail guard, put a barrier under a thread-dependent `if`,
forget a store, ...) in the IR before storage flattening (`k.unflattened`,
replaced by a rewritten copy, which the sim flattens and runs), and asserts
the `tcomp.SimError` the sim raises, by its message.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.rewriter import Rewriter, walk_stmts
from tcomp.lower.verify import verify

from .util import inputs_for, run_sim

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
SCALE = tcomp.op("def scale(float(M,N) A) -> (O) { O(i, j) = A(i, j) * 2.0 }")
MM_SIZES = {"M": 8, "N": 8, "K": 6}  # K = 6: the second K tile is half empty


def shared_matmul():
    """4x4 output tiles per block, one output per thread; 4x4 tiles of A and B
    staged in shared memory per K tile, fetched one element per thread. Lowered:

        for k_o:
          barrier()                     # WAR: previous tile fully read
          A_shared[ty, tx] = A[...]     # guarded: k_o*4 + tx < K
          B_shared[ty, tx] = B[...]     # guarded: k_o*4 + ty < K
          barrier()                     # RAW: tile fully written
          for k_i in 0:4: if k_o*4 + k_i < K: C[...] += A_shared[m_i, k_i] * B_shared[k_i, n_i]
    """
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    ko, ki = C.split(k, 4)
    C.reorder(mo, no, ko, mi, ni, ki)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [C])
        X.compute_at(C, ko)
        a0, a1 = X.axes
        X.bind(a0, "threadIdx.y")
        X.bind(a1, "threadIdx.x")
    return s


def local_matmul():
    """Register tile: C_local per thread (cache_write local), copied out."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, mi = C.split(m, 4)
    C.bind(mo, "blockIdx.x")
    C.bind(mi, "threadIdx.x")
    CL.compute_at(C, mi)
    return s


def tail_scale():
    """O = A * 2 over 16-thread blocks; 7x5 = 35 elements: the last block is guarded."""
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    f = O.fuse(i, j)
    fo, fi = O.split(f, 16)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    return s, {"M": 7, "N": 5}


# ----------------------------------------------------------------- rewriting
def rewrite(k, rewriter: Rewriter):
    """Replace k's IR before flattening by a copy whose kernel bodies went
    through `rewriter` (the sim runs it flattened); fails if nothing changed
    (the test would prove nothing)."""
    prog = k.unflattened
    kernels = tuple(dataclasses.replace(kk, body=rewriter.stmt(kk.body)) for kk in prog.kernels)
    new = dataclasses.replace(prog, kernels=kernels)
    assert new != prog, f"{type(rewriter).__name__} changed nothing"
    k.set_unflattened(new)
    return k


class RemoveBarriers(Rewriter):
    def stmt_Barrier(self, s):
        return ir.Seq(())


class RemoveLoopTopBarriers(Rewriter):
    """Only the barrier at the top of a loop body (the write-after-read one)."""

    def stmt_For(self, s):
        body = self.stmt(s.body)
        if isinstance(body, ir.Seq) and body.stmts and isinstance(body.stmts[0], ir.Barrier):
            body = ir.seq(*body.stmts[1:])
        return dataclasses.replace(s, body=body)


class RemoveInnerBarriers(Rewriter):
    """Every barrier except those at the top of a loop body (the read-after-write ones)."""

    def stmt_Seq(self, s):
        out = [self.stmt(x) for x in s.stmts]
        keep = [x for i, x in enumerate(out) if not (isinstance(x, ir.Barrier) and i > 0)]
        if len(keep) == len(s.stmts) and all(a is b for a, b in zip(keep, s.stmts)):
            return s
        return ir.seq(*keep)


class BarrierUnderThreadIf(Rewriter):
    """Wrap every barrier in `if threadIdx.x < 2` (a divergent barrier)."""

    def stmt_Barrier(self, s):
        return ir.If(ir.Bin("<", ir.Var("threadIdx.x"), ir.const(2), ir.bool_), s)


class ShiftLoad(Rewriter):
    """Add `delta` to subscript `dim` of every load of `buffer`."""

    def __init__(self, buffer, dim, delta=1):
        self.buffer, self.dim, self.delta = buffer, dim, delta

    def expr_Load(self, e):
        e = self.generic_expr(e)
        if e.buffer != self.buffer:
            return e
        idx = list(e.indices)
        idx[self.dim] = ir.Bin("+", idx[self.dim], ir.const(self.delta), ir.int32)
        return dataclasses.replace(e, indices=tuple(idx))


class ShiftStore(Rewriter):
    def __init__(self, buffer, dim, delta=1):
        self.buffer, self.dim, self.delta = buffer, dim, delta

    def stmt_Store(self, s):
        s = self.generic_stmt(s)
        if s.buffer != self.buffer:
            return s
        idx = list(s.indices)
        idx[self.dim] = ir.Bin("+", idx[self.dim], ir.const(self.delta), ir.int32)
        return dataclasses.replace(s, indices=tuple(idx))


class DropGuards(Rewriter):
    """Drop every `if` whose body stores to `buffer` (keep the body)."""

    def __init__(self, buffer):
        self.buffer = buffer

    def stmt_If(self, s):
        s = self.generic_stmt(s)
        stores = [x for x in walk_stmts(s.then) if isinstance(x, ir.Store)]
        if s.else_ is None and stores and all(x.buffer == self.buffer for x in stores):
            return s.then
        return s


class DropStores(Rewriter):
    def __init__(self, buffer):
        self.buffer = buffer

    def stmt_Store(self, s):
        return ir.Seq(()) if s.buffer == self.buffer else s


class StoreAtZero(Rewriter):
    """Every store to `buffer` goes to subscript [0, ..., 0] (threads collide)."""

    def __init__(self, buffer):
        self.buffer = buffer

    def stmt_Store(self, s):
        if s.buffer != self.buffer:
            return s
        return dataclasses.replace(s, indices=tuple(ir.const(0) for _ in s.indices))


class ThreadDependentLoop(Rewriter):
    """Make the extent of loop `var` depend on threadIdx.x."""

    def __init__(self, var):
        self.var = var

    def stmt_For(self, s):
        s = self.generic_stmt(s)
        if s.var != self.var:
            return s
        ext = ir.Bin("+", s.extent, ir.Bin("%", ir.Var("threadIdx.x"), ir.const(2), ir.int32),
                     ir.int32)
        return dataclasses.replace(s, extent=ext)


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def mm_args():
    return inputs_for(MM, MM_SIZES, seed=3)


def build_shared():
    return tcomp.build(shared_matmul(), target="sim")


# ----------------------------------------------------------------- the tests
def test_unmodified_programs_pass(mm_args):
    run_sim(shared_matmul(), mm_args)
    run_sim(local_matmul(), mm_args, sizes={"N": MM_SIZES["N"]})
    s, sizes = tail_scale()
    run_sim(s, inputs_for(SCALE, sizes))
    run_sim(s, inputs_for(SCALE, sizes), sizes=sizes)


def test_the_shared_program_has_both_barriers():
    text = str(build_shared().program)
    assert text.count("barrier()") == 2


def test_missing_barriers_are_a_race(mm_args):
    k = rewrite(build_shared(), RemoveBarriers())
    with pytest.raises(tcomp.SimError, match=r"since the last barrier \(missing barrier\)"):
        k(*mm_args)


def test_missing_read_after_write_barrier(mm_args):
    k = rewrite(build_shared(), RemoveInnerBarriers())
    assert str(k.program).count("barrier()") == 1
    with pytest.raises(tcomp.SimError, match=r"reads shared [AB]_shared\[\d+, \d+\] written by "
                                             r"thread \(\d+, \d+, 0\) since the last barrier"):
        k(*mm_args)


def test_missing_write_after_read_barrier(mm_args):
    """Without the barrier at the top of the k_o loop, a fast thread overwrites
    the shared tile of k_o = 1 while slow threads still read the k_o = 0 tile:
    a write-after-read race on a GPU."""
    k = rewrite(build_shared(), RemoveLoopTopBarriers())
    assert str(k.program).count("barrier()") == 1
    with pytest.raises(tcomp.SimError, match=r"overwrites shared [AB]_shared .*read since the "
                                             r"last barrier \(missing barrier\)"):
        k(*mm_args)


def test_barrier_under_thread_dependent_if(mm_args):
    k = rewrite(build_shared(), BarrierUnderThreadIf())
    with pytest.raises(tcomp.SimError, match=r"barrier reached by only some threads of block "
                                             r"\(0, 0, 0\) \(\d+ threads skip it\)"):
        k(*mm_args)


def test_verifier_rejects_barrier_under_thread_dependent_if():
    k = rewrite(build_shared(), BarrierUnderThreadIf())
    with pytest.raises(tcomp.LoweringError, match="barrier under a thread-dependent condition"):
        for kern in k.unflattened.kernels:
            verify(kern, k.unflattened)


@pytest.mark.parametrize("depth", [1, 2])
def test_verifier_follows_thread_dependence_through_lets(depth):
    """`let t = threadIdx.x` (and `let u = t + 1`): a barrier under a condition
    on t (or u) is under a thread-dependent condition too."""
    tx = ir.Var("threadIdx.x")
    var = ir.Var("t") if depth == 1 else ir.Var("u")
    body = ir.If(ir.Bin("<", var, ir.const(2), ir.bool_), ir.Barrier())
    if depth == 2:
        body = ir.Let("u", ir.Bin("+", ir.Var("t"), ir.ONE, ir.int32), body)
    one = ir.ONE
    k = ir.Kernel("k", (), (), (one, one, one), (ir.const(4), one, one), ir.Let("t", tx, body))
    with pytest.raises(tcomp.LoweringError, match=re.escape(
            "kernel k: barrier under a thread-dependent condition")):
        verify(k, ir.Program("p", (), (k,), (), (), ()))


class DropLastSubscript(Rewriter):
    """Every load of `buffer` loses its last subscript (a pass that forgot a dimension)."""

    def __init__(self, buffer):
        self.buffer = buffer

    def expr_Load(self, e):
        e = self.generic_expr(e)
        return dataclasses.replace(e, indices=e.indices[:-1]) if e.buffer == self.buffer else e


@pytest.mark.parametrize("buffer", ["A", "A_shared"])
def test_verifier_rejects_a_wrong_subscript_count_before_flattening(buffer):
    """verify() checks subscript counts by default (the pipeline relies on it
    between the passes before flattening): a global and a shared buffer."""
    k = rewrite(build_shared(), DropLastSubscript(buffer))
    with pytest.raises(tcomp.LoweringError, match=re.escape(
            f"kernel mm_C: buffer '{buffer}' has 2 dimensions but is accessed with 1 subscripts")):
        for kern in k.unflattened.kernels:
            verify(kern, k.unflattened)


def test_barrier_under_block_uniform_if_is_fine(mm_args):
    """A condition on blockIdx only is taken by all threads of a block alike."""
    class UnderBlockIf(Rewriter):
        def stmt_Barrier(self, s):
            return ir.If(ir.Bin(">=", ir.Var("blockIdx.x"), ir.const(0), ir.bool_), s)
    k = rewrite(build_shared(), UnderBlockIf())
    np.testing.assert_allclose(k(*mm_args), tcomp.evaluate(MM, *mm_args), rtol=1e-5, atol=1e-5)


def test_shared_read_shifted_out_of_bounds(mm_args):
    k = rewrite(build_shared(), ShiftLoad("A_shared", 1, +1))
    with pytest.raises(tcomp.SimError, match=r"read of A_shared\[\d+, 4\] out of bounds "
                                             r"\(shape \(4, 4\), dimension 1\)"):
        k(*mm_args)


def test_global_read_shifted_out_of_bounds(mm_args):
    k = rewrite(build_shared(), ShiftLoad("B", 1, +1))
    with pytest.raises(tcomp.SimError, match=r"read of B\[\d+, 8\] out of bounds \(shape \(6, 8\), "
                                             r"dimension 1\)"):
        k(*mm_args)


def test_shared_store_shifted_leaves_a_hole(mm_args):
    """Fetch stores one row down: row 0 is never written (or row 4 overflows)."""
    k = rewrite(build_shared(), ShiftStore("B_shared", 0, +1))
    with pytest.raises(tcomp.SimError, match=r"write to B_shared\[4, \d+\] out of bounds|"
                                             r"read of shared B_shared\[0, \d+\] that no thread "
                                             r"wrote"):
        k(*mm_args)


def test_dropped_fetch_guard_reads_out_of_bounds(mm_args):
    """K = 6: without its guard the fetch of the second A tile reads column 6."""
    k = rewrite(build_shared(), DropGuards("A_shared"))
    with pytest.raises(tcomp.SimError, match=r"read of A\[\d+, [67]\] out of bounds "
                                             r"\(shape \(8, 6\), dimension 1\)"):
        k(*mm_args)


def test_dropped_update_guard_reads_unwritten_shared():
    """K = 2: one K tile, half of it outside A and B. Without the k_o*4 + k_i < K
    guard the update reads the half of the tile the (guarded) fetch did not write."""
    args = inputs_for(MM, {"M": 8, "N": 8, "K": 2}, seed=5)
    k = rewrite(build_shared(), DropGuards("C"))
    with pytest.raises(tcomp.SimError, match=r"read of shared [AB]_shared\[\d+, [23]\] that no "
                                             r"thread wrote|read of shared [AB]_shared\[[23], "
                                             r"\d+\] that no thread wrote"):
        k(*args)


def test_dropped_update_guard_with_stale_tile(mm_args):
    """K = 6: the half-empty second tile holds the first tile's values (shared
    memory lives for the whole block), so the unguarded update reads stale data:
    a SimError or, at the least, a wrong answer against the oracle."""
    k = rewrite(build_shared(), DropGuards("C"))
    try:
        got = k(*mm_args)
    except tcomp.SimError:
        return
    assert not np.allclose(got, tcomp.evaluate(MM, *mm_args), rtol=1e-4, atol=1e-4)


def test_dropped_tail_guard_writes_out_of_bounds():
    s, sizes = tail_scale()
    args = inputs_for(SCALE, sizes)
    k = rewrite(tcomp.build(s, target="sim", sizes=sizes), DropGuards("O"))
    with pytest.raises(tcomp.SimError, match=r"(read of A|write to O)\[7, 0\] out of bounds "
                                             r"\(shape \(7, 5\), dimension 0\) in block \(2, 0, 0\), "
                                             r"thread \(3, 0, 0\)"):
        k(*args)


def test_forgotten_shared_fetch(mm_args):
    k = rewrite(build_shared(), DropStores("B_shared"))
    with pytest.raises(tcomp.SimError, match=r"read of shared B_shared\[0, 0\] that no thread "
                                             r"wrote \(block \(0, 0, 0\), thread \(0, 0, 0\)\)"):
        k(*mm_args)


def test_forgotten_local_initialisation(mm_args):
    k = tcomp.build(local_matmul(), target="sim", sizes={"N": MM_SIZES["N"]})
    acc = [x for kk in k.program.kernels for x in walk_stmts(kk.body)
           if isinstance(x, ir.Alloc) and x.buffer.scope == "local"]
    assert acc, str(k.program)

    class DropInit(Rewriter):
        """Drop the `<acc>[0] = identity` store (the one whose value is a constant)."""
        def stmt_Store(self, s):
            if s.buffer.endswith("_acc") and isinstance(s.value, ir.Imm):
                return ir.Seq(())
            return s
    rewrite(k, DropInit())
    with pytest.raises(tcomp.SimError, match=r"read of local C_local_acc before any write "
                                             r"\(thread \(0, 0, 0\)\)"):
        k(*mm_args)


def test_threads_writing_different_values_to_one_shared_word(mm_args):
    k = rewrite(build_shared(), StoreAtZero("A_shared"))
    with pytest.raises(tcomp.SimError, match=r"threads \(\d+, \d+, 0\) and \(\d+, \d+, 0\) write "
                                             r"different values to shared A_shared at offset 0"):
        k(*mm_args)


def test_loop_bounds_differing_between_threads(mm_args):
    """Around the tile loop's barriers (a loop of thread-local work may run its
    own trip count in each thread, as on the GPU: test_sim_batches.py)."""
    k = rewrite(build_shared(), ThreadDependentLoop("k_o"))
    with pytest.raises(tcomp.SimError, match=r"bounds of loop 'k_o' differ between threads"):
        k(*mm_args)


def test_wrong_index_without_sim_error_is_a_wrong_answer():
    """Not every bug is a SimError: reading B_shared transposed stays in bounds
    (square, full tiles: K = 8), and the comparison with the oracle catches it."""
    mm_args = inputs_for(MM, {"M": 8, "N": 8, "K": 8}, seed=4)
    class Transpose(Rewriter):
        def expr_Load(self, e):
            e = self.generic_expr(e)
            if e.buffer == "B_shared":
                return dataclasses.replace(e, indices=e.indices[::-1])
            return e
    k = rewrite(build_shared(), Transpose())
    assert not np.allclose(k(*mm_args), tcomp.evaluate(MM, *mm_args), rtol=1e-4, atol=1e-4)


SOFTMAX = tcomp.op("""def softmax(float(N, D) X) -> (O, mx, ex, sm) {
  mx(n) max=! X(n, d)
  ex(n, d) = exp(X(n, d) - mx(n))
  sm(n) +=! ex(n, d)
  O(n, d) = ex(n, d) / sm(n)
}""")


def test_global_cross_thread_race_is_caught():
    """ex is written by 8 threads (each its columns) and then summed by every
    thread over all columns, with no barrier in between: a race on a GPU (the
    lowering inserts barriers only for shared buffers). The sim must notice the
    cross-thread read of global memory written since the last barrier, as it
    does for shared memory -- or the lowering must put a barrier there."""
    s = tcomp.Schedule(SOFTMAX)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 8)
    O.bind(di, "threadIdx.x")
    for p in ("mx", "ex", "sm"):
        s[p].compute_at(O, n)
    ex = s["ex"]
    _, ed = ex.axes
    edo, edi = ex.split(ed, 8)
    ex.bind(edi, "threadIdx.x")
    k = tcomp.build(s, target="sim")
    args = inputs_for(SOFTMAX, {"N": 2, "D": 16})
    if "barrier()" in str(k.program):
        # The lowering synchronises; then the sim must catch the race once the
        # barriers are gone.
        rewrite(k, RemoveBarriers())
    with pytest.raises(tcomp.SimError, match=r"reads (ex|mx|sm)\[[\d, ]+\] written by thread "
                                             r"\(\d+, 0, 0\) since the last barrier "
                                             r"\(missing barrier\)"):
        k(*args)


def test_golden_shared_examples_all_need_their_barriers():
    """Every golden example with shared memory fails on the sim once its
    barriers are gone (the barriers in the golden files are all necessary)."""
    from .test_golden_ir import EXAMPLES
    for name in ("cache_read_shared", "cache_read_shared_tail", "storage_align"):
        s, sizes = EXAMPLES[name]()
        k = tcomp.build(s, target="sim", sizes=sizes)
        args = inputs_for(s.op, sizes)
        rewrite(k, RemoveBarriers())
        with pytest.raises(tcomp.SimError, match="missing barrier"):
            k(*args)


# ----------------------------------------------------------------- no false alarms
def _hand_program(scope: str):
    """4 threads: every thread stores 1.0 to T[0] (same value), then thread t
    copies T[0] to O[t]. No barrier: every thread reads its own store or an
    identical one, so the result is defined (1.0 everywhere) on a GPU."""
    from tcomp.lang import dtypes
    f32 = dtypes.float32
    tx = ir.Var("threadIdx.x")
    one = ir.const(1)
    body = ir.seq(ir.Store("T", (ir.const(0),), ir.Imm(1.0, f32)),
                  ir.Store("O", (tx,), ir.Load("T", (ir.const(0),), f32)))
    bufs = [ir.Buffer("O", f32, (ir.const(4),), "global", "output")]
    if scope == "shared":
        body = ir.Alloc(ir.Buffer("T", f32, (one,), "shared"), body)
        params = ("O",)
    else:
        bufs.append(ir.Buffer("T", f32, (one,), "global", "temp"))
        params = ("T", "O")
    k = ir.Kernel("k", params, (), (one, one, one), (ir.const(4), one, one), body)
    return ir.Program("p", tuple(bufs), (k,), (), ("O",), ())


@pytest.mark.parametrize("scope", ["shared", "global"])
def test_identical_redundant_store_then_read_is_not_a_race(scope):
    from tcomp.target_sim import run_program
    env = {"O": np.zeros(4, np.float32), "T": np.zeros(1, np.float32)}
    run_program(_hand_program(scope), env, {})
    np.testing.assert_array_equal(env["O"], np.ones(4, np.float32))
