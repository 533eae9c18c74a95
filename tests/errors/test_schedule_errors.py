"""Every ScheduleError a user can provoke (and every LoweringError reachable
from a user schedule): the right exception type, raised by the primitive that
made the schedule illegal, with a message that names the primitive, the
argument and the reason (API.md "Schedules", "Errors").

Also: a failed primitive leaves the schedule unchanged (`to_json()` equal
before and after), and bad input of any shape never escapes as a non-tcomp
exception.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp

# ------------------------------------------------------------------ programs
MATMUL = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }"
HMATMUL = ("def hmatmul(float16(M,K) A, float16(K,N) B) -> (float16(M,N) C) "
           "{ C(m, n) +=! A(m, r_k) * B(r_k, n) }")
CHAIN = """def chain(float(M,N) A, float(M,N) B) -> (T, U, D) {
  T(m, n) = exp(A(m, n))
  U(m, n) = T(m, n) + B(m, n)
  D(m, n) = U(m, n) * U(m, n)
}"""
SOFTMAX = """def softmax(float(N, D) I) -> (O, maxVal, expDistance, expSum) {
    maxVal(n) max=! I(n, d)
    expDistance(n, d) = exp(I(n, d) - maxVal(n))
    expSum(n) +=! expDistance(n, d)
    O(n, d) = expDistance(n, d) / expSum(n)
}"""
# Two statements writing O: O has two writers (stages "O" and "O.1").
TWO_WRITERS = """def biasconv(float(N,L) I, float(KW) W, float(N) Bias) -> (O, P) {
  O(n, x) +=! I(n, x + r_k) * W(r_k)
  O(n, x) += Bias(n)
  P(n, x) = O(n, x) * 2.0
}"""
# T has two plain writers: stages "T" and "T.1".
TWO_ASSIGN = """def twice(float(N) A) -> (T, D) {
  T(i) = A(i) + 1.0
  T(i) = T(i) * 2.0
  D(i) = T(i) - 1.0
}"""
# D reads T shifted by one: computing T at D's loops leaves T(0) unwritten.
SHIFT = """def shift(float(N) A) -> (T, D) {
  T(i) = A(i) * 2.0
  D(i) = T(i + 1) where i in 0:N-1
}"""


@pytest.fixture(scope="module")
def mm():
    return tcomp.op(MATMUL)


@pytest.fixture(scope="module")
def chain():
    return tcomp.op(CHAIN)


@pytest.fixture(scope="module")
def softmax():
    return tcomp.op(SOFTMAX)


@pytest.fixture(scope="module")
def two_writers():
    return tcomp.op(TWO_WRITERS)


def _fails(exc, fn, *fragments):
    """fn() raises exactly `exc` (a tcomp error class) whose message contains
    every fragment; returns the message."""
    with pytest.raises(tcomp.TcompError) as info:
        fn()
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}: " \
                                    f"{info.value}"
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in message {msg!r}"
    return msg


def sched_error(fn, *fragments):
    return _fails(tcomp.ScheduleError, fn, *fragments)


def lowering_error(fn, *fragments):
    return _fails(tcomp.LoweringError, fn, *fragments)


def _unchanged(s, fn, exc=tcomp.ScheduleError):
    """A failed primitive leaves the schedule as it was."""
    before = s.to_json()
    states = {n: (list(st.leaves), dict(st.bind), set(st.unroll), set(st.vectorize), st.attach)
              for n, st in s.states.items()}
    with pytest.raises(exc):
        fn()
    assert s.to_json() == before
    after = {n: (list(st.leaves), dict(st.bind), set(st.unroll), set(st.vectorize), st.attach)
             for n, st in s.states.items()}
    assert after == states


# ================================================================== ScheduleError
class TestStageAndAxisArguments:
    def test_unknown_stage(self, mm):
        s = tcomp.Schedule(mm)
        msg = sched_error(lambda: s["X"], "no stage named 'X'", "C")
        assert "stages: C" in msg

    def test_schedule_of_non_op(self):
        sched_error(lambda: tcomp.Schedule("C = A"), "Schedule", "Op", "str")

    def test_axis_of_another_stage(self, chain):
        s = tcomp.Schedule(chain)
        t_m = s["T"].axes[0]
        sched_error(lambda: s["D"].split(t_m, 2), "split", "Axis(T.m)", "belongs to stage 'T'",
                    "not 'D'")

    def test_axis_no_longer_exists_after_split(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, _ = C.axes
        C.split(m, 2)
        sched_error(lambda: C.split(m, 2), "split", "Axis(C.m)", "no longer exists",
                    "split or fused")

    def test_axis_no_longer_exists_after_fuse(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        C.fuse(m, n)
        sched_error(lambda: C.bind(n, "threadIdx.x"), "bind", "Axis(C.n)", "no longer exists")

    def test_axis_removed_by_cache_write(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        (k,) = C.reduce_axes
        s.cache_write(C, "local")
        # C is now the copy-out stage: it has no reduction axis any more.
        sched_error(lambda: C.split(k, 2), "split", "stage 'C' has no axis 'r_k'")

    @pytest.mark.parametrize("bad", ["m", 0, None, 1.5])
    def test_non_axis_argument(self, mm, bad):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(bad, 2), "split", "axis must be an Axis of stage 'C'",
                    f"got {bad!r}")

    def test_non_axis_argument_names_the_parameter(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        sched_error(lambda: C.fuse(m, "n"), "fuse", "inner must be an Axis", "'n'")
        sched_error(lambda: C.tile("m", n, 2, 2), "tile", "x must be an Axis", "'m'")

    def test_primitive_on_inlined_stage(self, chain):
        s = tcomp.Schedule(chain)
        T = s["T"]
        T.compute_inline()
        sched_error(lambda: T.split(T.axes[0], 2), "split", "stage 'T' is inlined",
                    "has no loops")


class TestSplitAndTile:
    @pytest.mark.parametrize("factor", [0, -3])
    def test_factor_not_positive(self, mm, factor):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(s["C"].axes[0], factor), "split",
                    "factor must be a positive int", f"got {factor}")

    def test_nparts_not_positive(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(s["C"].axes[0], nparts=0), "split",
                    "nparts must be a positive int", "got 0")

    @pytest.mark.parametrize("factor", [True, 2.0, "4"])
    def test_factor_wrong_type(self, mm, factor):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(s["C"].axes[0], factor), "split",
                    "factor must be a positive int", f"got {factor!r}")

    def test_both_factor_and_nparts(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(s["C"].axes[0], 2, nparts=2), "split",
                    "exactly one of factor= and nparts=", "Axis(C.m)")

    def test_neither_factor_nor_nparts(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].split(s["C"].axes[0]), "split",
                    "exactly one of factor= and nparts=")

    def test_tile_same_axis(self, mm):
        s = tcomp.Schedule(mm)
        m, _ = s["C"].axes
        sched_error(lambda: s["C"].tile(m, m, 2, 2), "tile", "x and y are the same axis",
                    "Axis(C.m)")

    @pytest.mark.parametrize("arg,fx,fy", [("x_factor", 0, 2), ("y_factor", 2, -1),
                                           ("y_factor", 2, False)])
    def test_tile_bad_factor(self, mm, arg, fx, fy):
        s = tcomp.Schedule(mm)
        m, n = s["C"].axes
        sched_error(lambda: s["C"].tile(m, n, fx, fy), "tile", f"{arg} must be a positive int")


class TestReorderAndFuse:
    def test_reorder_duplicate(self, mm):
        s = tcomp.Schedule(mm)
        m, n = s["C"].axes
        sched_error(lambda: s["C"].reorder(m, n, m), "reorder", "axis 'm' is given twice")

    def test_reorder_removed_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        mo, mi = C.split(m, 2)
        sched_error(lambda: C.reorder(n, m), "reorder", "Axis(C.m)", "no longer exists")

    def test_fuse_non_adjacent(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        sched_error(lambda: C.fuse(m, k), "fuse", "Axis(C.m)", "must be the loop directly outside",
                    "Axis(C.r_k, reduce)")

    def test_fuse_wrong_order(self, mm):
        s = tcomp.Schedule(mm)
        m, n = s["C"].axes
        sched_error(lambda: s["C"].fuse(n, m), "fuse", "Axis(C.n)",
                    "must be the loop directly outside", "Axis(C.m)")

    def test_fuse_spatial_with_reduce(self, mm):
        s = tcomp.Schedule(mm)
        _, n = s["C"].axes
        (k,) = s["C"].reduce_axes
        sched_error(lambda: s["C"].fuse(n, k), "fuse", "cannot fuse a spatial and a reduction",
                    "Axis(C.n)", "Axis(C.r_k, reduce)")

    @pytest.mark.parametrize("how", ["bind", "unroll"])
    def test_fuse_annotated_axis(self, mm, how):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        if how == "bind":
            C.bind(m, "blockIdx.x")
        else:
            C.unroll(n)
        name = "m" if how == "bind" else "n"
        sched_error(lambda: C.fuse(m, n), "fuse", f"axis '{name}'",
                    "already bound/unrolled/vectorized")


class TestBind:
    def test_unknown_tag(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].bind(s["C"].axes[0], "threadIdx.w"), "bind",
                    "unknown thread tag 'threadIdx.w'", "blockIdx.x")

    def test_two_axes_one_tag(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        C.bind(m, "threadIdx.x")
        sched_error(lambda: C.bind(n, "threadIdx.x"), "bind", "threadIdx.x is already bound",
                    "axis 'm'", "stage 'C'")

    def test_reduction_axis_to_blocks(self, mm):
        s = tcomp.Schedule(mm)
        (k,) = s["C"].reduce_axes
        sched_error(lambda: s["C"].bind(k, "blockIdx.x"), "bind", "Axis(C.r_k, reduce)",
                    "is a reduction axis", "not to blockIdx.x", "rfactor")

    def test_already_bound_reduction_axis(self, mm):
        """Re-binding the bound reduction axis itself: the reason is that it is
        already bound, not that a *second* reduction axis is being bound."""
        s = tcomp.Schedule(mm)
        C = s["C"]
        (k,) = C.reduce_axes
        C.bind(k, "threadIdx.x")
        sched_error(lambda: C.bind(k, "threadIdx.y"), "bind", "Axis(C.r_k, reduce)",
                    "already bound to threadIdx.x")

    def test_second_reduction_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        ko, ki = C.split(C.reduce_axes[0], 4)
        C.bind(ki, "threadIdx.x")
        sched_error(lambda: C.bind(ko, "threadIdx.y"), "bind", "stage 'C'",
                    "already reduces across threads over 'r_k_i'",
                    "only one reduction axis can be bound")

    def test_already_bound(self, mm):
        s = tcomp.Schedule(mm)
        m, _ = s["C"].axes
        s["C"].bind(m, "blockIdx.x")
        sched_error(lambda: s["C"].bind(m, "blockIdx.y"), "bind", "Axis(C.m)",
                    "already bound to blockIdx.x")

    @pytest.mark.parametrize("how", ["unroll", "vectorize"])
    def test_unrolled_or_vectorized(self, mm, how):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        no, ni = C.split(n, 4)
        getattr(C, how)(ni)
        sched_error(lambda: C.bind(ni, "threadIdx.x"), "bind", "Axis(C.n_i)",
                    "unrolled/vectorized and cannot be bound")

    def test_block_on_stage_computed_at_another(self, chain):
        s = tcomp.Schedule(chain)
        U, D = s["U"], s["D"]
        U.compute_at(D, D.axes[0])
        sched_error(lambda: U.bind(U.axes[1], "blockIdx.x"), "bind", "stage 'U'",
                    "computed inside another stage", "blockIdx.x")

    def test_compute_at_of_block_bound_stage(self, chain):
        s = tcomp.Schedule(chain)
        U, D = s["U"], s["D"]
        U.bind(U.axes[0], "blockIdx.y")
        sched_error(lambda: U.compute_at(D, D.axes[0]), "compute_at", "stage 'U'",
                    "binds blockIdx.y", "cannot bind blocks")


class TestUnrollVectorize:
    def test_unroll_bound_axis(self, mm):
        s = tcomp.Schedule(mm)
        m, _ = s["C"].axes
        s["C"].bind(m, "threadIdx.x")
        sched_error(lambda: s["C"].unroll(m), "unroll", "Axis(C.m)", "already bound or vectorized")

    def test_unroll_vectorized_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        no, ni = C.split(n, 4)
        C.vectorize(ni)
        sched_error(lambda: C.unroll(ni), "unroll", "Axis(C.n_i)", "already bound or vectorized")

    def test_vectorize_not_innermost(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        mo, mi = C.split(m, 4)
        sched_error(lambda: C.vectorize(mi), "vectorize", "Axis(C.m_i)",
                    "is not the innermost loop", "innermost is 'n'")

    def test_vectorize_reduce_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        (k,) = C.reduce_axes
        ko, ki = C.split(k, 4)
        sched_error(lambda: C.vectorize(ki), "vectorize", "Axis(C.r_k_i, reduce)",
                    "is a reduction axis", "cannot be vectorized")

    def test_vectorize_non_constant_extent(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        sched_error(lambda: C.vectorize(n), "vectorize", "Axis(C.n)", "non-constant extent",
                    "split it by a constant factor")

    def test_vectorize_non_constant_after_nparts(self, mm):
        # nparts makes the *outer* loop constant; the inner one is ceil(N / 4).
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        no, ni = C.split(n, nparts=4)
        sched_error(lambda: C.vectorize(ni), "vectorize", "Axis(C.n_i)", "non-constant extent")

    def test_vectorize_bound_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        no, ni = C.split(n, 4)
        C.unroll(ni)
        sched_error(lambda: C.vectorize(ni), "vectorize", "Axis(C.n_i)",
                    "already bound or unrolled")


class TestStorageAlign:
    def test_not_an_original_axis(self, mm):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        a0, _ = AS.axes
        o, i = AS.split(a0, 2)
        sched_error(lambda: AS.storage_align(o, 32, 1), "storage_align", "Axis(A.shared.ax0_o)",
                    "must be an original spatial axis")

    def test_reduce_axis(self, mm):
        s = tcomp.Schedule(mm)
        (k,) = s["C"].reduce_axes
        sched_error(lambda: s["C"].storage_align(k, 32, 1), "storage_align",
                    "Axis(C.r_k, reduce)", "original spatial axis")

    @pytest.mark.parametrize("factor,offset", [(0, 0), (-4, 1), (32, 32), (32, -1), (8.0, 1),
                                               (32, None)])
    def test_bad_factor_or_offset(self, mm, factor, offset):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        sched_error(lambda: AS.storage_align(AS.axes[0], factor, offset), "storage_align",
                    "need factor > 0 and 0 <= offset < factor", f"got {factor}, {offset}")


# A temporary (written, not returned): its scope can change with set_scope.
TMP = """def tmp(float(M,N) A) -> (D) {
  T(m, n) = exp(A(m, n))
  D(m, n) = T(m, n) + 1.0
}"""


class TestStorageOrder:
    @pytest.mark.parametrize("bad", ["ax1", 1, None, ("ax1",)])
    def test_not_an_axis(self, mm, bad):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        sched_error(lambda: AS.storage_order(AS.axes[0], bad), "storage_order",
                    "axes must be Axes of stage 'A.shared'", f"got {bad!r}")
        _unchanged(s, lambda: AS.storage_order(bad, AS.axes[0]))

    def test_axis_of_another_stage(self, mm):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        m, _ = s["C"].axes
        sched_error(lambda: AS.storage_order(AS.axes[1], m), "storage_order",
                    "axes must be Axes of stage 'A.shared'", "got Axis(C.m)")

    def test_axis_of_another_cache_stage(self, mm):
        # Same axis names (ax0, ax1), different stage.
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        BS = s.cache_read("B", "shared", [s["C"]])
        b0, b1 = BS.axes
        sched_error(lambda: AS.storage_order(b1, b0), "storage_order",
                    "axes must be Axes of stage 'A.shared'", "got Axis(B.shared.ax1)")

    @pytest.mark.parametrize("which", ["outer", "inner"])
    def test_split_result(self, mm, which):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        a0, a1 = AS.axes
        o, i = AS.split(a0, 2)
        ax = o if which == "outer" else i
        sched_error(lambda: AS.storage_order(a1, ax), "storage_order",
                    f"axis {ax!r} must be an original spatial axis of the stage")
        _unchanged(s, lambda: AS.storage_order(a1, ax))

    def test_fused_axis(self, mm):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        f = AS.fuse(*AS.axes)
        sched_error(lambda: AS.storage_order(f), "storage_order",
                    "Axis(A.shared.ax0_ax1_f)", "must be an original spatial axis")

    def test_reduce_axis(self):
        # A temporary reduction kept in shared memory: its reduction axis is no
        # dimension of its buffer.
        op = tcomp.op("def rs(float(M,N) A) -> (D) { S(m) +=! A(m, r_n)\n D(m) = S(m) * 2.0 }")
        s = tcomp.Schedule(op)
        S = s["S"]
        S.set_scope("shared")
        (m,) = S.axes
        (r,) = S.reduce_axes
        sched_error(lambda: S.storage_order(r), "storage_order", "Axis(S.r_n, reduce)",
                    "must be an original spatial axis")
        sched_error(lambda: S.storage_order(m, r), "storage_order", "Axis(S.r_n, reduce)",
                    "must be an original spatial axis")

    @pytest.mark.parametrize("pick,got", [
        (lambda a0, a1: (a0,), "(ax0)"),
        (lambda a0, a1: (a1,), "(ax1)"),
        (lambda a0, a1: (), "()"),
        (lambda a0, a1: (a0, a0), "(ax0, ax0)"),
        (lambda a0, a1: (a1, a1), "(ax1, ax1)"),
        (lambda a0, a1: (a1, a0, a1), "(ax1, ax0, ax1)"),
        (lambda a0, a1: (a0, a1, a0, a1), "(ax0, ax1, ax0, ax1)"),
    ])
    def test_missing_or_repeated_axes(self, mm, pick, got):
        s = tcomp.Schedule(mm)
        AS = s.cache_read("A", "shared", [s["C"]])
        axes = pick(*AS.axes)
        sched_error(lambda: AS.storage_order(*axes), "storage_order",
                    "give each of the stage's original spatial axes (ax0, ax1) exactly once",
                    f"got {got}")
        _unchanged(s, lambda: AS.storage_order(*axes))

    def test_missing_axis_of_three(self):
        op = tcomp.op("def p(float(I,J,K) A) -> (O) { T(i, j, k) = A(i, j, k) * 2.0\n"
                      " O(i, j, k) = T(i, j, k) + 1.0 }")
        s = tcomp.Schedule(op)
        T = s["T"]
        T.set_scope("local")
        i, j, k = T.axes
        sched_error(lambda: T.storage_order(k, i), "storage_order",
                    "(i, j, k) exactly once", "got (k, i)")
        T.storage_order(k, i, j)  # every axis once: fine
        assert s.states["T"].storage == ("k", "i", "j")

    def test_output_in_global_memory(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        sched_error(lambda: C.storage_order(n, m), "storage_order",
                    "'C' is in global memory, whose layout is fixed",
                    "storage_order lays out shared and local buffers")
        _unchanged(s, lambda: C.storage_order(n, m))

    def test_temporary_in_global_memory(self):
        s = tcomp.Schedule(tcomp.op(TMP))
        T = s["T"]
        m, n = T.axes
        sched_error(lambda: T.storage_order(n, m), "storage_order",
                    "'T' is in global memory, whose layout is fixed")
        T.set_scope("shared")
        T.storage_order(n, m)  # in shared memory now: fine

    def test_global_cache_read(self, mm):
        s = tcomp.Schedule(mm)
        AG = s.cache_read("A", "global", [s["C"]])
        a0, a1 = AG.axes
        sched_error(lambda: AG.storage_order(a1, a0), "storage_order",
                    "'A_global' is in global memory, whose layout is fixed")

    def test_axes_checked_before_the_scope(self, mm):
        # A bad axis is reported first, even on a stage in global memory.
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, _ = C.axes
        sched_error(lambda: C.storage_order(m), "storage_order", "exactly once", "got (m)")

    @pytest.mark.parametrize("axes", [["ax1"], ["ax1", "ax1"], ["ax1", "zz"], "ax1", 5,
                                      [["ax1"], "ax0"]])
    def test_bad_replay(self, mm, axes):
        """A StorageOrder directive from JSON is replayed through the primitive
        (or refused as not a schedule): always a ScheduleError."""
        text = json.dumps({"tcomp_schedule": 1, "directives": [
            {"kind": "CacheRead", "tensor": "A", "scope": "shared", "readers": ["C"]},
            {"kind": "StorageOrder", "stage": "A.shared", "axes": axes}]})
        with pytest.raises(tcomp.TcompError) as info:
            tcomp.Schedule.from_json(mm, text)
        assert type(info.value) is tcomp.ScheduleError

    def test_replay_of_a_global_stage(self, mm):
        text = json.dumps({"tcomp_schedule": 1, "directives": [
            {"kind": "StorageOrder", "stage": "C", "axes": ["n", "m"]}]})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "storage_order",
                    "'C' is in global memory")


class TestComputeAt:
    def test_itself(self, chain):
        s = tcomp.Schedule(chain)
        U = s["U"]
        sched_error(lambda: U.compute_at(U, U.axes[0]), "compute_at",
                    "stage 'U' cannot be computed at itself")

    def test_target_not_a_stage(self, chain):
        s = tcomp.Schedule(chain)
        sched_error(lambda: s["U"].compute_at("D", s["D"].axes[0]), "compute_at",
                    "target must be a Stage of the same schedule", "'D'")

    def test_target_of_another_schedule(self, chain):
        s, s2 = tcomp.Schedule(chain), tcomp.Schedule(chain)
        sched_error(lambda: s["U"].compute_at(s2["D"], s2["D"].axes[0]), "compute_at",
                    "target must be a Stage of the same schedule")

    def test_non_consumer(self, chain):
        s = tcomp.Schedule(chain)
        # T does not read D: D cannot be computed at T's loops.
        sched_error(lambda: s["D"].compute_at(s["T"], s["T"].axes[0]), "compute_at",
                    "stage 'T' does not read 'D'", "'D' cannot be computed at its loops")

    def test_axis_of_wrong_stage(self, chain):
        s = tcomp.Schedule(chain)
        sched_error(lambda: s["T"].compute_at(s["D"], s["U"].axes[0]), "compute_at",
                    "Axis(U.m)", "belongs to stage 'U'", "not 'D'")

    def test_cycle(self, chain):
        """U is computed at D; computing D at U's loops would nest D inside itself.
        (With a DAG of stages the consumer check already rejects every back edge,
        so compute_at's dedicated "cycle" message is never what fires: accept
        either reason, but it must be compute_at's ScheduleError naming both.)"""
        s = tcomp.Schedule(chain)
        T, U, D = s["T"], s["U"], s["D"]
        U.compute_at(D, D.axes[0])
        T.compute_at(U, U.axes[1])
        for me, target in [(D, U), (D, T), (U, T)]:
            msg = sched_error(lambda: me.compute_at(target, target.axes[0]), "compute_at",
                              f"'{me.name}'", f"'{target.name}'")
            assert "cycle" in msg or "does not read" in msg, msg

    def test_several_writers(self, two_writers):
        s = tcomp.Schedule(two_writers)
        assert [st.name for st in s.stages] == ["O", "O.1", "P"]
        P = s["P"]
        sched_error(lambda: s["O"].compute_at(P, P.axes[0]), "compute_at",
                    "'O' is written by several statements", "O, O.1", "one writer")

    def test_into_inlined_stage(self, chain):
        s = tcomp.Schedule(chain)
        T, U = s["T"], s["U"]
        U.compute_inline()
        sched_error(lambda: T.compute_at(U, U.axes[0]), "compute_at",
                    "target stage 'U' is inlined")

    def test_removed_axis_of_target(self, chain):
        s = tcomp.Schedule(chain)
        D = s["D"]
        m, n = D.axes
        D.split(m, 2)
        sched_error(lambda: s["U"].compute_at(D, m), "compute_at", "Axis(D.m)", "no longer exists")


class TestComputeInlineRoot:
    def test_inline_reduction(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].compute_inline(), "compute_inline", "stage 'C'",
                    "is a reduction and cannot be inlined")

    def test_inline_with_stage_attached(self, chain):
        s = tcomp.Schedule(chain)
        T, U = s["T"], s["U"]
        T.compute_at(U, U.axes[0])
        sched_error(lambda: U.compute_inline(), "compute_inline", "stage 'T' is computed at 'U'",
                    "move it first")

    def test_inline_reduction_continuation(self, two_writers):
        s = tcomp.Schedule(two_writers)
        sched_error(lambda: s["O.1"].compute_inline(), "compute_inline", "stage 'O.1'",
                    "is a reduction")

    @pytest.mark.parametrize("stage", ["T", "T.1"])
    def test_inline_several_writers(self, stage):
        s = tcomp.Schedule(tcomp.op(TWO_ASSIGN))
        assert [st.name for st in s.stages] == ["T", "T.1", "D"]
        sched_error(lambda: s[stage].compute_inline(), "compute_inline",
                    "'T' is written by several statements", "cannot be inlined")

    def test_compute_at_several_plain_writers(self):
        s = tcomp.Schedule(tcomp.op(TWO_ASSIGN))
        D = s["D"]
        sched_error(lambda: s["T.1"].compute_at(D, D.axes[0]), "compute_at",
                    "'T' is written by several statements", "T, T.1")

    def test_compute_at_the_next_writer_is_an_in_place_epilogue(self):
        """T(i) = A(i) + 1; T(i) = T(i) * 2: the first writer may be computed at
        the second's loops (each element's first value just before its update);
        the sim checks the result and the races."""
        import numpy as np
        op = tcomp.op(TWO_ASSIGN)
        s = tcomp.Schedule(op)
        T1 = s["T.1"]
        o, i = T1.split(T1.axes[0], 32)
        T1.bind(o, "blockIdx.x")
        T1.bind(i, "threadIdx.x")
        s["T"].compute_at(T1, i)
        a = np.arange(70, dtype=np.float32)
        t, d = tcomp.build(s, target="sim", sizes={"N": 70})(a)
        np.testing.assert_array_equal(t, (a + 1) * 2)
        np.testing.assert_array_equal(d, (a + 1) * 2 - 1)

    @pytest.mark.parametrize("src,stage,target,why", [
        # the update reads another element (through its snapshot)
        ("def a(float(N) A) -> (T) { T(i) = A(i)\n T(i) = T(i) + T(0) }",
         "T", "T.1", "'T.1' does not update each element of 'T' from that element alone (it "
         "reads other elements through the snapshot 'T.1.snap')"),
        # not the next writer
        ("def c(float(N) A) -> (T) { T(i) = A(i)\n T(i) = T(i) * 2.0\n T(i) = T(i) + 1.0 }",
         "T", "T.2", "'T.2' is not the next statement after 'T' that writes 'T'"),
        # the first writer continues an earlier value of the tensor
        ("def d(float(N) A) -> (T) { T(i) = A(i)\n T(i) = T(i) * 2.0\n T(i) = T(i) + 1.0 }",
         "T.1", "T.2", "'T.1' continues an earlier value of 'T'"),
        # a stage reads T between the two writers (a copy of T for the update)
        ("def b(float(N) A) -> (T) { T(i) = A(i)\n T(i) = T(i) * 2.0 }",
         "T", "T.1", "'T.local' reads 'T' between them"),
    ])
    def test_compute_at_the_next_writer_refused(self, src, stage, target, why):
        s = tcomp.Schedule(tcomp.op(src))
        if why.startswith("'T.local'"):
            s.cache_read("T", "local", [s["T.1"]])
        tg = s[target]
        sched_error(lambda: s[stage].compute_at(tg, tg.axes[0]), "compute_at",
                    "is written by several statements", f"'{stage}' can be computed only at "
                    "the loops of the next statement writing it, when that one updates each "
                    "element in place from that element alone", why)

    def test_inline_cache_write_stage(self, chain):
        s = tcomp.Schedule(chain)
        UL = s.cache_write(s["U"], "local")
        sched_error(lambda: UL.compute_inline(), "compute_inline", "stage 'U.local'",
                    "is a cache_write stage")


class TestCaches:
    def test_cache_read_unknown_tensor(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_read("Z", "shared", [s["C"]]), "cache_read",
                    "unknown tensor 'Z'")

    def test_cache_read_bad_scope(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_read("A", "texture", [s["C"]]), "cache_read",
                    "scope must be one of global, shared, local", "'texture'")

    def test_cache_read_non_reader(self, chain):
        s = tcomp.Schedule(chain)
        sched_error(lambda: s.cache_read("A", "shared", [s["D"]]), "cache_read",
                    "stage 'D' does not read 'A'")

    def test_cache_read_no_readers(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_read("A", "shared", []), "cache_read",
                    "needs at least one reader stage")

    def test_cache_read_unknown_reader(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_read("A", "shared", ["Q"]), "cache_read",
                    "no stage named 'Q'")

    def test_cache_write_after_transformations(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.split(C.axes[0], 2)
        sched_error(lambda: s.cache_write(C, "local"), "cache_write", "stage 'C'",
                    "already has loop transformations", "before scheduling it")

    def test_cache_write_after_compute_at(self, chain):
        s = tcomp.Schedule(chain)
        U, D = s["U"], s["D"]
        U.compute_at(D, D.axes[0])
        sched_error(lambda: s.cache_write(U, "local"), "cache_write", "stage 'U'",
                    "already has loop transformations")

    def test_cache_write_continuation_stage(self, two_writers):
        s = tcomp.Schedule(two_writers)
        sched_error(lambda: s.cache_write(s["O.1"], "local"), "cache_write", "stage 'O.1'",
                    "continues an earlier definition of 'O'")

    def test_cache_write_bad_scope(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_write(s["C"], "register"), "cache_write",
                    "scope must be one of global, shared, local", "'register'")

    def test_cache_write_unknown_stage(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s.cache_write("Q", "local"), "cache_write", "no stage named 'Q'")


class TestRfactor:
    def test_spatial_axis(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].rfactor(s["C"].axes[0]), "rfactor", "Axis(C.m)",
                    "is not a reduction axis")

    def test_after_other_transformations(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.split(C.axes[0], 2)
        sched_error(lambda: C.rfactor(C.reduce_axes[0]), "rfactor", "stage 'C'",
                    "already has loop transformations", "call rfactor first")

    def test_split_split_again(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        ko, ki = C.split(C.reduce_axes[0], 4)
        C.split(ki, 2)
        # A split of a split is "another transformation" for rfactor.
        sched_error(lambda: C.rfactor(ko), "rfactor", "stage 'C'",
                    "other than splits of its reduction axes")

    def test_not_an_axis(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].rfactor("r_k"), "rfactor", "axis must be an Axis")

    def test_inlined_stage(self):
        op = tcomp.op(CHAIN)
        s = tcomp.Schedule(op)
        s["T"].compute_inline()
        sched_error(lambda: s["T"].rfactor(s["T"].axes[0]), "rfactor", "inlined")

    def test_failure_leaves_schedule_unchanged(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.split(C.axes[1], 2)
        _unchanged(s, lambda: C.rfactor(C.reduce_axes[0]))
        assert [st.name for st in s.stages] == ["C"]
        assert set(s.tensors) == {"A", "B", "C"}

    def test_rfactor_twice(self, mm):
        """rfactor of the stage that a first rfactor left: both factored stages
        must survive (today the second is also named 'C.rf' and replaces the
        first, whose buffer C_rf is then read but never written)."""
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.rfactor(C.reduce_axes[0])
        try:
            C.rfactor(C.reduce_axes[0])
        except tcomp.ScheduleError as e:
            assert "rfactor" in str(e)
            return
        assert len(s.stages) == 3, [st.name for st in s.stages]
        A = np.arange(35, dtype=np.float32).reshape(5, 7) / 10
        B = np.arange(21, dtype=np.float32).reshape(7, 3) / 10
        np.testing.assert_allclose(tcomp.build(s, "sim")(A, B), tcomp.evaluate(mm, A, B),
                                   rtol=1e-5)


class TestTensorizeArguments:
    def test_unknown_intrinsic(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].tensorize(s["C"].axes[1], "wmma"), "tensorize",
                    "unknown intrinsic 'wmma'; tcomp.intrinsics() lists mma_m16n8k16")

    def test_checks_axis_first(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].tensorize("m", None), "tensorize", "axis must be an Axis")

    def test_refusal_leaves_schedule_unchanged(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        _unchanged(s, lambda: C.tensorize(C.axes[0], None))
        assert s.to_json() == tcomp.Schedule(mm).to_json()


class TestPipeline:
    @pytest.mark.parametrize("stages", [6, 1, True, "2"])
    def test_stages_from_2_to_5(self, mm, stages):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].pipeline(s["C"].reduce_axes[0], stages=stages), "pipeline",
                    "stages must be an int from 2 to 5", f"got {stages!r}")

    @pytest.mark.parametrize("how", ["bind", "unroll"])
    def test_not_a_serial_loop(self, mm, how):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, _ = C.axes
        C.bind(m, "blockIdx.x") if how == "bind" else C.unroll(m)
        sched_error(lambda: C.pipeline(m), "pipeline", "Axis(C.m)", "must be a serial loop")

    def test_not_an_axis(self, mm):
        s = tcomp.Schedule(mm)
        sched_error(lambda: s["C"].pipeline("r_k"), "pipeline", "axis must be an Axis")

    def test_failure_leaves_schedule_unchanged(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        _unchanged(s, lambda: C.pipeline(C.reduce_axes[0], stages=6))

    def test_no_shared_copy_at_the_loop(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        (k,) = C.reduce_axes
        C.pipeline(k)
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "K": 4, "N": 2}), "stage 'C'",
                       "pipeline on 'r_k'", "no shared-memory copy is computed at that loop")

    @pytest.mark.parametrize("stages", [2, 3])
    def test_copy_of_a_tensor_computed_at_the_loop(self, stages):
        op = tcomp.op("def mm2(float(M,K) A, float(K,N) B) -> (C) {\n"
                      "  T(m, k) = A(m, k) * 2.0\n  C(m, n) +=! T(m, k) * B(k, n)\n}")
        s = tcomp.Schedule(op)
        C = s["C"]
        (k,) = C.reduce_axes
        ko, ki = C.split(k, 2)
        s["T"].compute_at(C, ko)
        s.cache_read("T", "shared", [C]).compute_at(C, ko)
        C.pipeline(ko, stages=stages)
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "K": 4, "N": 2}), "stage 'C'",
                       "pipeline on 'k_o' runs the copy 'T.shared' ahead of the loop's "
                       "compute, but it reads 'T', which 'T' computes at that loop",
                       "compute 'T' at an outer loop, or do not pipeline 'k_o'")

    def test_a_ring_copy_that_computes_a_global_stage(self):
        op = tcomp.op("def c1(float(B,L) I, float(KW) W) -> (O) "
                      "{ O(b, x) +=! I(b, x + kw) * W(kw) where x in 0:L }")
        s = tcomp.Schedule(op)
        O = s["O"]
        x = O.axes[1]
        IS = s.cache_read("I", "shared", [O])
        IS.compute_at(O, x)
        IG = s.cache_read("I", "global", [IS])
        IG.compute_at(IS, IS.axes[0])
        O.pipeline(x, stages=3)
        lowering_error(lambda: tcomp.lower(s, sizes={"B": 2, "KW": 2, "L": 3}),
                       "pipeline on 'x' (stages=3): no copy into a shared ring at the top of "
                       "the loop: the copy into the ring also writes 'I_global'",
                       "keep that stage in registers ('local'), compute it elsewhere, or use "
                       "stages=2")

    @pytest.mark.parametrize("stages,cooperative", [(3, False), (4, False), (2, True)])
    def test_a_copy_run_ahead_that_computes_a_shared_copy(self, stages, cooperative):
        """A ring's copy, or a cooperative copy double-buffered through registers,
        computing another shared copy inside it: refused (stages=2 without threads
        sharing the copy is supported: test_properties, hosting another copy)."""
        op = tcomp.op("def tr(float(M,N) A) -> (B) { B(n, m) = A(m, n) * 2.0 }")
        s = tcomp.Schedule(op)
        B = s["B"]
        n = B.axes[0]
        AS = s.cache_read("A", "shared", [B])
        AS.compute_at(B, n)
        AS1 = s.cache_read("A", "shared", [AS])
        AS1.compute_at(AS, AS.axes[0])
        if cooperative:
            AS.bind(AS.axes[1], "threadIdx.x")
        B.pipeline(n, stages=stages)
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "N": 3}),
                       "pipeline on 'n' runs the copy 'A.shared' ahead of the loop's compute, "
                       "but 'A.shared1' (shared memory) is computed inside it",
                       "compute 'A.shared1' elsewhere, or do not pipeline 'n'")

    @pytest.mark.parametrize("stages", [2, 3])
    def test_no_shared_copy_for_a_ring(self, mm, stages):
        s = tcomp.Schedule(mm)
        C = s["C"]
        (k,) = C.reduce_axes
        ko, ki = C.split(k, 2)
        C.pipeline(ko, stages=stages)
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "K": 4, "N": 2}), "stage 'C'",
                       "pipeline on 'r_k_o', but no shared-memory copy is computed at that "
                       "loop")

    def test_double_buffered_gemm(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.bind(n, "threadIdx.x")
        ko, ki = C.split(k, 2)
        AS = s.cache_read("A", "shared", [C])
        AS.compute_at(C, ko)
        C.pipeline(ko)
        A = np.arange(15, dtype=np.float32).reshape(3, 5) / 7
        B = np.arange(20, dtype=np.float32).reshape(5, 4) / 7
        out = tcomp.build(s, "sim", sizes={"M": 3, "K": 5, "N": 4})(A, B)
        np.testing.assert_allclose(out, tcomp.evaluate(mm, A, B), rtol=1e-5)


class TestFromJson:
    @pytest.mark.parametrize("text", ["garbage", "", "[]", "null", "{}", '{"directives": 3}',
                                      '{"tcomp_schedule": 1}',
                                      '{"tcomp_schedule": 1, "directives": 3}',
                                      '{"tcomp_schedule": 1, "directives": [{"kind": "Teleport", '
                                      '"stage": "C"}]}',
                                      '{"tcomp_schedule": 1, "directives": [{"kind": "Split", '
                                      '"stage": "C"}]}',
                                      '{"tcomp_schedule": 1, "directives": [{"kind": "Split", '
                                      '"stage": "C", "axis": "m", "factor": 2, "nparts": null, '
                                      '"x": 1}]}',
                                      '{"tcomp_schedule": 1, "directives": [7]}'])
    def test_garbage(self, mm, text):
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "from_json",
                    "not a tcomp schedule")

    def test_not_an_object(self, mm):
        sched_error(lambda: tcomp.Schedule.from_json(mm, "[1, 2]"), "from_json",
                    'not a tcomp schedule (expected a JSON object with "tcomp_schedule" and '
                    '"directives", got list)')

    def test_missing_version(self, mm):
        text = json.dumps({"directives": []})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "from_json",
                    'it has no format version (the field "tcomp_schedule"; this tcomp reads '
                    'version 1)')

    @pytest.mark.parametrize("version", [2, 0, "1", True, 1.5])
    def test_unknown_version(self, mm, version):
        text = json.dumps({"tcomp_schedule": version, "directives": []})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "from_json",
                    f"schedule format version {version!r} is not supported; this tcomp reads "
                    f"version 1 (write the schedule again with this tcomp's Schedule.to_json)")

    def test_to_json_writes_the_version_from_json_reads(self, mm):
        s = tcomp.Schedule(mm)
        s["C"].split(s["C"].axes[0], 4)
        assert json.loads(s.to_json())["tcomp_schedule"] == 1
        assert tcomp.Schedule.from_json(mm, s.to_json()).to_json() == s.to_json()

    def test_tutorial_schedules_still_load(self):
        import os
        tut = os.path.join(os.path.dirname(__file__), "..", "..", "tutorials")
        prog = tcomp.parse(open(os.path.join(tut, "matmul.tc")).read())
        text = open(os.path.join(tut, "matmul_schedule.json")).read()
        assert tcomp.Schedule.from_json(prog["matmul"], text).to_json() == text.strip()
        prog = tcomp.parse(open(os.path.join(tut, "softmax.tc")).read())
        text = open(os.path.join(tut, "softmax_schedule.json")).read()
        assert tcomp.Schedule.from_json(prog["softmax"], text).to_json() == text.strip()

    def test_replay_is_validated(self, mm):
        text = json.dumps({"tcomp_schedule": 1, "directives": [
            {"kind": "Split", "stage": "C", "axis": "zz", "factor": 2, "nparts": None}]})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "split",
                    "stage 'C' has no axis 'zz'")

    def test_replay_illegal_factor(self, mm):
        text = json.dumps({"tcomp_schedule": 1, "directives": [
            {"kind": "Split", "stage": "C", "axis": "m", "factor": 0, "nparts": None}]})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "split",
                    "factor must be a positive int")

    def test_replay_unknown_stage(self, mm):
        text = json.dumps({"tcomp_schedule": 1, "directives": [
            {"kind": "ComputeInline", "stage": "Nope"}]})
        sched_error(lambda: tcomp.Schedule.from_json(mm, text), "no stage named 'Nope'")

    @pytest.mark.parametrize("directive", [
        {"kind": "ComputeInline", "stage": {"a": 1}},
        {"kind": "ComputeInline", "stage": ["C"]},
        {"kind": "Split", "stage": "C", "axis": ["m"], "factor": 2, "nparts": None},
        {"kind": "Split", "stage": "C", "axis": {"m": 1}, "factor": 2, "nparts": None},
        {"kind": "Reorder", "stage": "C", "axes": [["m"], "n"]},
        {"kind": "Bind", "stage": "C", "axis": "m", "tag": ["threadIdx.x"]},
        {"kind": "CacheRead", "tensor": "A", "scope": "shared", "readers": 5},
        {"kind": "CacheRead", "tensor": ["A"], "scope": "shared", "readers": ["C"]},
        {"kind": "CacheRead", "tensor": "A", "scope": "shared", "readers": [["C"]]},
        {"kind": "CacheWrite", "stage": ["C"], "scope": "local"},
        {"kind": "ComputeAt", "stage": "C", "target": {"x": 1}, "axis": "m"},
    ])
    def test_wrong_field_types_are_schedule_errors(self, mm, directive):
        """Well-formed JSON whose fields have the wrong types is still "not a
        schedule": a ScheduleError, never a TypeError from inside tcomp."""
        text = json.dumps({"tcomp_schedule": 1, "directives": [directive]})
        with pytest.raises(tcomp.TcompError) as info:
            tcomp.Schedule.from_json(mm, text)
        assert type(info.value) is tcomp.ScheduleError


class TestBadPythonArguments:
    """Bad arguments of the wrong Python type are ScheduleErrors too."""

    @pytest.mark.parametrize("readers", [5, None, [["C"]], [3.5]])
    def test_cache_read_readers(self, mm, readers):
        s = tcomp.Schedule(mm)
        with pytest.raises(tcomp.TcompError) as info:
            s.cache_read("A", "shared", readers)
        assert type(info.value) is tcomp.ScheduleError
        assert "cache_read" in str(info.value)

    @pytest.mark.parametrize("tensor", [["A"], None, 3])
    def test_cache_read_tensor(self, mm, tensor):
        s = tcomp.Schedule(mm)
        with pytest.raises(tcomp.TcompError) as info:
            s.cache_read(tensor, "shared", [s["C"]])
        assert type(info.value) is tcomp.ScheduleError

    @pytest.mark.parametrize("stage", [["C"], {"C": 1}])
    def test_unhashable_stage_names(self, mm, stage):
        s = tcomp.Schedule(mm)
        with pytest.raises(tcomp.TcompError) as info:
            s[stage]
        assert type(info.value) is tcomp.ScheduleError
        with pytest.raises(tcomp.TcompError) as info:
            s.cache_write(stage, "local")
        assert type(info.value) is tcomp.ScheduleError


# ------------------------------------------------------------------ failed primitive = no-op
class TestFailedPrimitiveLeavesScheduleUnchanged:
    def test_many_failures(self, mm, chain):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        mo, mi = C.split(m, 4)
        C.bind(mo, "blockIdx.x")
        failing = [
            lambda: C.split(m, 2),
            lambda: C.split(mi, 0),
            lambda: C.split(mi, 2, nparts=2),
            lambda: C.tile(mi, mi, 2, 2),
            lambda: C.tile(mi, n, 2, 0),
            lambda: C.tile(mi, m, 2, 2),
            lambda: C.reorder(n, mi, n),
            lambda: C.reorder(mi, m),
            lambda: C.fuse(mo, n),
            lambda: C.fuse(n, k),
            lambda: C.fuse(mo, mi),
            lambda: C.bind(k, "blockIdx.y"),
            lambda: C.bind(mi, "blockIdx.x"),
            lambda: C.bind(mi, "warp.x"),
            lambda: C.unroll(mo),
            lambda: C.vectorize(mi),
            lambda: C.vectorize(k),
            lambda: C.storage_align(mi, 32, 1),
            lambda: C.storage_order(mi, n),
            lambda: C.storage_order(n, m),  # C is in global memory
            lambda: C.storage_order(m),
            lambda: C.compute_inline(),
            lambda: C.compute_at(C, mi),
            lambda: C.rfactor(k),  # after other transformations
            lambda: C.tensorize(mi, None),
            lambda: C.pipeline(k, stages=6),
            lambda: C.pipeline(mo),
            lambda: s.cache_read("A", "shared", []),
            lambda: s.cache_read("A", "nowhere", [C]),
            lambda: s.cache_read("Z", "shared", [C]),
            lambda: s.cache_read("C", "shared", [C]),
            lambda: s.cache_write(C, "local"),
            lambda: s.cache_write(C, "nowhere"),
        ]
        for fn in failing:
            _unchanged(s, fn)
        # ... and the schedule still works after all those failures.
        A = np.arange(15, dtype=np.float32).reshape(5, 3)
        B = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_allclose(tcomp.build(s, "sim")(A, B), tcomp.evaluate(mm, A, B))

    def test_tile_failure_after_validation_records_nothing(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        _unchanged(s, lambda: C.tile(m, n, 4, "8"))
        assert C.leaf_axes == (m, n, C.reduce_axes[0])

    def test_compute_at_failures(self, chain):
        s = tcomp.Schedule(chain)
        T, U, D = s["T"], s["U"], s["D"]
        U.compute_inline()
        for fn in [lambda: T.compute_at(U, U.axes[0]),
                   lambda: D.compute_at(T, T.axes[0]),
                   lambda: T.compute_at(T, T.axes[0]),
                   lambda: T.compute_at(D, T.axes[0])]:
            _unchanged(s, fn)

    def test_from_json_failure_has_no_side_effect_on_other_schedules(self, mm):
        s = tcomp.Schedule(mm)
        s["C"].split(s["C"].axes[0], 2)
        before = s.to_json()
        with pytest.raises(tcomp.ScheduleError):
            tcomp.Schedule.from_json(mm, before.replace('"m"', '"q"'))
        assert s.to_json() == before


# ================================================================== LoweringError
class TestLoweringErrors:
    def test_thread_tag_with_different_extents(self, chain):
        s = tcomp.Schedule(chain)
        U, D = s["U"], s["D"]
        m, n = D.axes
        no, ni = D.split(n, 4)
        D.bind(ni, "threadIdx.x")
        U.compute_at(D, m)
        U.bind(U.axes[1], "threadIdx.x")
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 4, "N": 8}), "stage 'D'",
                       "threadIdx.x is bound to loops of different extents", "(8)", "(4)",
                       "same extent")

    def test_block_loop_inside_serial_loop(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        _, n = C.axes
        C.bind(n, "blockIdx.x")
        lowering_error(lambda: tcomp.lower(s), "stage 'C'", "loop 'n' bound to blockIdx.x",
                       "nested inside a serial loop", "reorder it outward")

    def test_shared_cache_with_non_constant_region(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, _ = C.axes
        AS = s.cache_read("A", "shared", [C])
        AS.compute_at(C, m)
        lowering_error(lambda: tcomp.lower(s), "stage 'A.shared' (shared)", "computed at 'C.m'",
                       "non-constant extent K", "dimension 1", "split the consumer's loops")

    def test_shared_cache_region_constant_once_sizes_are_bound(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, _ = C.axes
        s.cache_read("A", "shared", [C]).compute_at(C, m)
        A = np.arange(15, dtype=np.float32).reshape(5, 3)
        B = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = tcomp.build(s, "sim", sizes={"M": 5, "K": 3, "N": 4})(A, B)
        np.testing.assert_allclose(out, tcomp.evaluate(mm, A, B))

    def test_too_many_threads(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        C.bind(m, "threadIdx.y")
        C.bind(n, "threadIdx.x")
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 64, "N": 32}), "stage 'C'",
                       "32x64x1 threads per block exceed 1024")

    def test_thread_loop_runtime_extent(self, mm):
        """A loop of runtime extent bound to threads: the block is N threads,
        checked against the limits when it runs."""
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.bind(C.axes[1], "threadIdx.x")
        assert "block=(N, 1, 1)" in str(tcomp.lower(s))
        k = tcomp.build(s, "sim")
        A = np.arange(6, dtype=np.float32).reshape(2, 3)
        B = np.arange(15, dtype=np.float32).reshape(3, 5)
        np.testing.assert_allclose(k(A, B), tcomp.evaluate(mm, A, B))
        with pytest.raises(tcomp.SimError, match=r"kernel matmul_C: a block of 1025x1x1 = 1025 "
                                                 r"threads \(blockDim.x: N = 1025\) exceeds the "
                                                 r"device's 1024 threads per block"):
            k(A, np.zeros((3, 1025), np.float32))

    def test_unroll_runtime_extent_is_a_hint(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.unroll(C.axes[0])
        assert "for m in 0:M  @unroll" in str(tcomp.lower(s))
        src = tcomp.build(s, "cuda").source
        assert "#pragma unroll\n  for (int m = 0; m < M; ++m) {" in src, src

    def test_unroll_too_many_iterations(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.unroll(C.axes[0])
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 200}), "unrolled loop 'm'",
                       "200 iterations", "at most 128")

    def test_unroll_constant_once_sizes_are_bound(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.unroll(C.axes[0])
        assert "unroll" not in str(tcomp.lower(s, sizes={"M": 3}))

    def test_cross_thread_reduction_with_spatial_loop_inside(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        C.bind(k, "threadIdx.x")
        lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "K": 4, "N": 3}), "stage 'C'",
                       "reduction across threads", "'r_k'",
                       "reorder the reduction axes innermost")

    def test_cross_thread_reduction_runtime_extent(self, mm):
        """K threads reduce; K = 0 still launches one thread, which stores 0."""
        s = tcomp.Schedule(mm)
        C = s["C"]
        C.bind(C.reduce_axes[0], "threadIdx.x")
        assert "block=(max(K, 1), 1, 1)" in str(tcomp.lower(s))
        k = tcomp.build(s, "sim")
        for kk in (0, 1, 7):
            A = np.arange(2 * kk, dtype=np.float32).reshape(2, kk)
            B = np.arange(3 * kk, dtype=np.float32).reshape(kk, 3)
            np.testing.assert_allclose(k(A, B), tcomp.evaluate(mm, A, B))

    def test_cross_thread_reduction_works(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        C.bind(n, "threadIdx.y")
        C.bind(C.reduce_axes[0], "threadIdx.x")
        A = np.arange(15, dtype=np.float32).reshape(5, 3) / 7
        B = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
        out = tcomp.build(s, "sim", sizes={"M": 5, "K": 3, "N": 4})(A, B)
        np.testing.assert_allclose(out, tcomp.evaluate(mm, A, B), rtol=1e-5)

    def test_half_reduction_in_memory_needs_cache_write(self):
        op = tcomp.op(HMATMUL)
        s = tcomp.Schedule(op)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(k, m)
        lowering_error(lambda: tcomp.lower(s), "stage 'C'",
                       "spatial loops inside its reduction loops accumulate in 'C' (float16)",
                       "needs float32", "cache_write(..., 'local')")

    def test_half_reduction_with_cache_write_lowers(self):
        op = tcomp.op(HMATMUL)
        s = tcomp.Schedule(op)
        CL = s.cache_write(s["C"], "global")
        m, n = CL.axes
        (k,) = CL.reduce_axes
        CL.reorder(k, m)
        A = (np.arange(6, dtype=np.float16) / 8).reshape(2, 3)
        B = (np.arange(12, dtype=np.float16) / 8).reshape(3, 4)
        out = tcomp.build(s, "sim")(A, B)
        np.testing.assert_allclose(out.astype(np.float32),
                                   tcomp.evaluate(op, A, B).astype(np.float32), rtol=1e-3)

    def test_output_computed_at_partial_reader(self):
        op = tcomp.op(SHIFT)
        s = tcomp.Schedule(op)
        T, D = s["T"], s["D"]
        T.compute_at(D, D.axes[0])
        lowering_error(lambda: tcomp.lower(s), "stage 'T' writes output 'T'",
                       "computed inside 'D'", "'D' does not read all of it",
                       "compute it at root")

    def test_lower_unknown_size_name(self, mm):
        lowering_error(lambda: tcomp.lower(tcomp.Schedule(mm), sizes={"Q": 3}), "lower",
                       "'Q' is not a size variable of 'matmul'", "M, K, N")

    @pytest.mark.parametrize("v", [-3, True, 2.0, "4"])
    def test_lower_bad_size_value(self, mm, v):
        lowering_error(lambda: tcomp.lower(tcomp.Schedule(mm), sizes={"M": v}), "lower",
                       "size M must be a non-negative int", f"got {v!r}")

    def test_lower_not_a_schedule(self, mm):
        lowering_error(lambda: tcomp.lower(mm), "lower", "needs a tcomp.Schedule", "Op")

    def test_build_propagates_lowering_errors(self, mm):
        s = tcomp.Schedule(mm)
        s["C"].bind(s["C"].axes[1], "blockIdx.x")
        lowering_error(lambda: tcomp.build(s, "sim"), "nested inside a serial loop")

    def test_vectorized_loop_hosting_a_local_cache(self, chain):
        """compute_at into a vectorized loop makes it non-innermost; API.md:
        "An illegal schedule raises tcomp.ScheduleError at the primitive that
        made it illegal" -- the compute_at (or lowering it, but naming the
        compute_at'ed stage). Today lowering raises a message that names
        neither the stage nor the primitive."""
        s = tcomp.Schedule(chain)
        D = s["D"]
        m, n = D.axes
        no, ni = D.split(n, 4)
        D.vectorize(ni)
        UL = s.cache_read("U", "local", [D])
        try:
            UL.compute_at(D, ni)
        except tcomp.ScheduleError as e:
            assert "compute_at" in str(e) and "vectoriz" in str(e)
            return
        msg = lowering_error(lambda: tcomp.lower(s, sizes={"M": 2, "N": 8}),
                             "vectorized loop 'n_i' is not innermost")
        assert "U.local" in msg or "compute_at" in msg, msg


class TestBuildAndRun:
    def test_unknown_target(self, mm):
        _fails(tcomp.TcompError, lambda: tcomp.build(tcomp.Schedule(mm), target="opencl"),
               "build", "unknown target 'opencl'", "sim, cuda")

    def test_build_not_a_schedule(self):
        _fails(tcomp.TcompError, lambda: tcomp.build(42, target="sim"), "build",
               "needs a tcomp.Schedule", "int")

    def test_sim_kernel_with_other_sizes(self, mm):
        k = tcomp.build(tcomp.Schedule(mm), "sim", sizes={"M": 8})
        A, B = np.zeros((9, 3), np.float32), np.zeros((3, 4), np.float32)
        lowering_error(lambda: k(A, B), "'matmul' was compiled for M=8", "inputs have M=9")

    def test_sim_kernel_with_right_sizes(self, mm):
        k = tcomp.build(tcomp.Schedule(mm), "sim", sizes={"M": 8})
        A = np.ones((8, 3), np.float32)
        B = np.ones((3, 4), np.float32)
        np.testing.assert_allclose(k(A, B), np.full((8, 4), 3.0))

    def test_sim_kernel_inconsistent_inputs(self, mm):
        k = tcomp.build(tcomp.Schedule(mm), "sim")
        with pytest.raises(tcomp.LangError):
            k(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))


# ================================================================== cache stages left at root
class TestCacheStagesAtRoot:
    """API.md: the copy of cache_read "is computed at root until compute_at
    places it inside a reader's loops". A shared/local cache stage left at root
    must either work or be rejected with a tcomp error at lower/build time --
    not a KeyError from flatten_storage nor a SimError at run time."""

    @pytest.mark.parametrize("scope", ["shared", "local"])
    @pytest.mark.parametrize("kind", ["cache_read", "cache_write"])
    def test_root_cache_stage(self, mm, scope, kind):
        s = tcomp.Schedule(mm)
        if kind == "cache_read":
            s.cache_read("A", scope, [s["C"]])
        else:
            s.cache_write(s["C"], scope)
        A = np.arange(15, dtype=np.float32).reshape(5, 3)
        B = np.arange(12, dtype=np.float32).reshape(3, 4)
        try:
            tcomp.lower(s)
            out = tcomp.build(s, "sim")(A, B)
        except (tcomp.LoweringError, tcomp.ScheduleError) as e:
            assert scope in str(e) and ("compute_at" in str(e) or "root" in str(e)), str(e)
            return
        np.testing.assert_allclose(out, tcomp.evaluate(mm, A, B))


class TestRasterize:
    """Every ScheduleError of rasterize; each leaves the schedule unchanged (the
    checks run before any of the primitives it stands for)."""

    def tiled(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        mo, no, mi, ni = C.tile(*C.axes, 8, 8)
        return s, C, mo, no, mi, ni

    @pytest.mark.parametrize("group", [0, -2, 2.0, "2", None, True])
    def test_bad_group(self, mm, group):
        s, C, mo, no, *_ = self.tiled(mm)
        sched_error(lambda: C.rasterize(mo, no, group), "rasterize",
                    "group must be a positive int", f"got {group!r}")
        _unchanged(s, lambda: C.rasterize(mo, no, group))

    @pytest.mark.parametrize("tag", ["threadIdx.x", "blockIdx.w", "x"])
    def test_bad_tag(self, mm, tag):
        s, C, mo, no, *_ = self.tiled(mm)
        sched_error(lambda: C.rasterize(mo, no, 2, tag), "rasterize",
                    "tag must be one of blockIdx.x, blockIdx.y, blockIdx.z", f"got '{tag}'")
        _unchanged(s, lambda: C.rasterize(mo, no, 2, tag))

    def test_not_adjacent(self, mm):
        s, C, mo, no, mi, ni = self.tiled(mm)
        sched_error(lambda: C.rasterize(mo, mi, 2), "rasterize",
                    "Axis(C.m_o) must be the loop directly outside Axis(C.m_i)")
        sched_error(lambda: C.rasterize(no, mo, 2), "rasterize",
                    "Axis(C.n_o) must be the loop directly outside Axis(C.m_o)")
        _unchanged(s, lambda: C.rasterize(no, mo, 2))

    def test_reduction_axis(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        C.reorder(m, k, n)
        sched_error(lambda: C.rasterize(m, k, 2), "rasterize",
                    "Axis(C.r_k, reduce) is a reduction axis; blocks are spatial")
        _unchanged(s, lambda: C.rasterize(m, k, 2))

    @pytest.mark.parametrize("how", ["bind", "unroll"])
    def test_already_annotated(self, mm, how):
        s, C, mo, no, *_ = self.tiled(mm)
        if how == "bind":
            C.bind(no, "blockIdx.y")
        else:
            C.unroll(no)
        sched_error(lambda: C.rasterize(mo, no, 2), "rasterize",
                    "axis Axis(C.n_o) is already bound/unrolled/vectorized")
        _unchanged(s, lambda: C.rasterize(mo, no, 2))

    def test_tag_taken(self, mm):
        s, C, mo, no, mi, ni = self.tiled(mm)
        C.reorder(mo, no, mi, ni)
        C.bind(ni, "blockIdx.x")
        sched_error(lambda: C.rasterize(mo, no, 2), "rasterize",
                    "blockIdx.x is already bound to axis 'n_i' of stage 'C'")
        _unchanged(s, lambda: C.rasterize(mo, no, 2))

    def test_stage_computed_at_a_block_axis(self, mm):
        s, C, mo, no, *_ = self.tiled(mm)
        AS = s.cache_read("A", "shared", [C])
        AS.compute_at(C, no)
        sched_error(lambda: C.rasterize(mo, no, 2), "rasterize",
                    "stage 'A.shared' is computed at 'C.n_o', which rasterizing would remove")
        _unchanged(s, lambda: C.rasterize(mo, no, 2))

    def test_not_a_root_stage(self, mm):
        s = tcomp.Schedule(mm)
        C = s["C"]
        CL = s.cache_write(C, "local")
        mo, no, mi, ni = C.tile(*C.axes, 8, 8)
        CL.compute_at(C, ni)
        a, b = CL.axes
        sched_error(lambda: CL.rasterize(a, b, 2), "rasterize",
                    "stage 'C.local' is computed inside another stage; only root stages bind "
                    "blocks")

    def test_inlined_stage(self, mm):
        s = tcomp.Schedule(tcomp.op(CHAIN))
        T = s["T"]
        m, n = T.axes
        T.compute_inline()
        sched_error(lambda: T.rasterize(m, n, 2), "rasterize", "stage 'T' is inlined")

    def test_stale_and_foreign_axes(self, mm):
        s, C, mo, no, *_ = self.tiled(mm)
        m, n = C.axes
        sched_error(lambda: C.rasterize(m, no, 2), "rasterize", "rows Axis(C.m)",
                    "no longer exists as a loop")
        AS = s.cache_read("A", "shared", [C])
        a0, a1 = AS.axes
        sched_error(lambda: C.rasterize(mo, a0, 2), "rasterize", "cols Axis(A.shared.ax0)",
                    "belongs to stage 'A.shared'")


def test_one_copy_for_readers_of_two_versions():
    """Two snapshots of O taken before and after an in-place update cannot share
    one copy of O (the second read the values from before the update)."""
    op = tcomp.op("def d(float(M, N) A) -> (O) {\n  O(i, j) = A(i, j)\n"
                  "  O(i, j) = O(i - 1, j + 1) - O(i, j) where i in 1:M, j in 0:N - 1\n"
                  "  O(i, j) = O(i, j) * O(i, j) + 1.0 where i in 0:M, j in 0:N\n}")
    s = tcomp.Schedule(op)
    s.cache_write("O.2", "global")  # O.2 then reads O through a snapshot too
    sched_error(lambda: s.cache_read("O", "global", [s["O.1.snap"], s["O.2.snap"]]),
                "cache_read", "'O.1.snap' reads 'O' before 'O.1' updates it and 'O.2.snap' "
                "after", "cache 'O' for each of them separately")
    s.cache_read("O", "global", [s["O.2.snap"]])  # one version: fine


def test_one_copy_for_a_reader_that_updates_and_a_later_reader():
    """O.1 reads O and updates it in place; O.2 reads the updated O: one copy
    made before O.1 would serve O.2 the old values (fuzz seed 4 pairs 45339,
    53864, 61226: wrong answers on the sim before the check)."""
    op = tcomp.op("def d(float(N) X) -> (O) {\n  O(i) = X(i) + 1\n  O(i) = O(i) * 2\n"
                  "  O(i) = O(i) + 10\n}")
    s = tcomp.Schedule(op)
    sched_error(lambda: s.cache_read("O", "global", [s["O.1"], s["O.2"]]),
                "cache_read", "'O.1' reads 'O' before 'O.1' updates it and 'O.2' after",
                "cache 'O' for each of them separately")
    s.cache_read("O", "global", [s["O.2"]])  # one version: fine
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(s, target="sim")(x), (x + 1) * 2 + 10)
