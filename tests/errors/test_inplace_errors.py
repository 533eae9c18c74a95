"""The errors of in-place updates: the snapshot stage of a statement that
reads its own tensor stays a complete copy made before the statement
(tcomp/schedule/snapshot.py), and no stage that reads a tensor is computed
inside a stage that overwrites it. Each message is asserted, and a refused
primitive leaves the schedule unchanged."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from .test_schedule_errors import _unchanged, lowering_error, sched_error

SHIFT = """def f(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) = O(i) + O(i - 1) where i in 1:N
}"""
FREE = """def g(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) = O(i) * O(i) + 1.0
}"""
INIT = """def r(float(M, N) A) -> (O) {
    O(i) = A(i, 0)
    O(i) +=! (i + 1 < M ? O(i + 1) : 1.0) * A(i, j) where i in 0:M
}"""

SNAP = ("stage 'O.1.snap' is the snapshot of 'O' that 'O.1' reads (it updates 'O' in place)")


@pytest.fixture
def shift():
    return tcomp.Schedule(tcomp.op(SHIFT))


def test_snapshot_computed_inside_its_reader(shift):
    O1 = shift["O.1"]
    fn = lambda: shift["O.1.snap"].compute_at(O1, O1.axes[0])  # noqa: E731
    sched_error(fn, "compute_at: " + SNAP, "computed inside 'O.1', which writes 'O', it would "
                "copy values 'O.1' has already overwritten",
                "Keep it at root (split and bind its own loops instead)")
    _unchanged(shift, fn)


def test_snapshot_inlined(shift):
    fn = lambda: shift["O.1.snap"].compute_inline()  # noqa: E731
    sched_error(fn, "compute_inline: " + SNAP, "inlined, it would read 'O' while 'O.1' "
                "overwrites it. Keep it at root")
    _unchanged(shift, fn)


@pytest.mark.parametrize("scope", ["shared", "local"])
def test_snapshot_out_of_global_memory(shift, scope):
    fn = lambda: shift["O.1.snap"].set_scope(scope)  # noqa: E731
    sched_error(fn, "set_scope: " + SNAP, "it must be complete before 'O.1' starts, so it stays "
                f"in global memory (cache_read 'O_snap' into {scope} memory for 'O.1' instead)")
    _unchanged(shift, fn)


def test_snapshot_in_global_memory_is_fine(shift):
    shift["O.1.snap"].set_scope("global")
    assert shift.to_json().count('"SetScope"') == 1


def test_cache_read_of_the_updated_tensor_by_its_updater(shift):
    fn = lambda: shift.cache_read("O", "shared", [shift["O.1"]])  # noqa: E731
    sched_error(fn, "cache_read: stage 'O.1' updates 'O' in place and reads its old values from "
                "the snapshot 'O_snap' (stage 'O.1.snap'); cache_read 'O_snap' instead")
    _unchanged(shift, fn)


def test_snapshot_placed_inside_a_writer_through_its_host(shift):
    """The snapshot computed at a copy of its buffer is fine at root; moving
    that copy inside the statement that overwrites O would move the snapshot
    there too."""
    O1 = shift["O.1"]
    C = shift.cache_read("O_snap", "global", [O1])
    snap = shift["O.1.snap"]
    snap.compute_at(C, C.axes[0])
    fn = lambda: C.compute_at(O1, O1.axes[0])  # noqa: E731
    sched_error(fn, "compute_at: " + SNAP, "computed inside 'O.1', which writes 'O'")
    _unchanged(shift, fn)


@pytest.mark.parametrize("scope", ["global", "shared", "local"])
def test_copy_of_a_tensor_computed_inside_its_in_place_writer(scope):
    """The free case reads O(i) where it writes it: a copy of O computed inside
    that statement's loops would read O while the statement's threads
    overwrite it."""
    s = tcomp.Schedule(tcomp.op(FREE))
    O1 = s["O.1"]
    C = s.cache_read("O", scope, [O1])
    fn = lambda: C.compute_at(O1, O1.axes[0])  # noqa: E731
    name = f"O.{scope}"
    sched_error(fn, f"compute_at: stage '{name}' reads 'O' and would be computed inside 'O.1', "
                "which writes 'O' (an in-place update): it would read 'O' while 'O.1' "
                f"overwrites it, racing with the threads that write it. Keep '{name}' at root, "
                "where it runs before 'O.1'")
    _unchanged(s, fn)


def test_global_copy_computed_inside_one_of_its_readers():
    """A copy of A computed inside the first statement holds the column that
    statement reads, but the second, in a later kernel, reads all of A."""
    s = tcomp.Schedule(tcomp.op(INIT))
    C = s.cache_read("A", "global", [s["O"], s["O.1"]])
    C.compute_at(s["O"], s["O"].axes[0])
    lowering_error(lambda: tcomp.lower(s), "stage 'A.global' writes global tensor 'A_global' "
                   "but is computed inside 'O', and 'O' does not read all of it: part of the "
                   "global tensor could stay unwritten (compute it at root instead)")


def test_an_output_computed_at_a_reader_of_its_diagonal_is_refused():
    """The long fuzz run of issue 22 (seed 1 pair 2035): the reader read C(k, k), plain
    indices over the whole ranges, so the cover check passed, and C came out with its
    diagonal only (the rest zero) on the sim and the GPU. The indices must be distinct."""
    op = tcomp.op("""def f(float(N) A) -> (C, O) {
    C(j, i) = A(i) + j where j in 0:N
    O(k) = C(k, k) * 2
}""")
    s = tcomp.Schedule(op)
    s["C"].compute_at(s["O"], s["O"].axes[0])
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, "sim", sizes={"N": 3})
    assert str(e.value) == ("stage 'C' writes output 'C' but is computed inside 'O', and 'O' "
                            "does not read all of it: part of the output could stay unwritten "
                            "(compute it at root instead)")


@pytest.mark.parametrize("sizes", [{"N": 1}, None])
def test_an_output_computed_in_a_loop_that_may_not_run_is_refused(sizes):
    """The long fuzz run of issue 22 (seed 2 pair 1528): an output computed inside its
    reader's loop `where i in 1:N` was never computed at N = 1 (zeros on the sim). A
    range that may be empty, at the sizes bound or at 1, is refused; 0:N is not."""
    op = tcomp.op("""def f(float(N) A) -> (S, O) {
    S() = A(0) * 2
    O(i) = S() + A(i) where i in 1:N
}""")
    s = tcomp.Schedule(op)
    s["S"].compute_at(s["O"], s["O"].axes[0])
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, "sim", sizes=sizes)
    assert str(e.value) == ("stage 'S' writes output 'S' but is computed inside 'O', and 'O' "
                            "reads it inside its loop over 'i', which may run no iteration "
                            "(i in 1:N): the output could stay unwritten (compute it at root "
                            "instead)")
    ok = tcomp.op("""def g(float(N) A) -> (S, O) {
    S() = A(0) * 2
    O(i) = S() + A(i)
}""")
    s = tcomp.Schedule(ok)
    s["S"].compute_at(s["O"], s["O"].axes[0])
    A = np.arange(1, 4, dtype=np.float32)
    for got, want in zip(tcomp.build(s, "sim", sizes=sizes and {"N": 3})(A),
                         tcomp.evaluate(ok, A)):
        np.testing.assert_array_equal(got, want)
    s = tcomp.Schedule(op)  # bound where the range runs: legal
    s["S"].compute_at(s["O"], s["O"].axes[0])
    for got, want in zip(tcomp.build(s, "sim", sizes={"N": 3})(A), tcomp.evaluate(op, A)):
        np.testing.assert_array_equal(got, want)


def test_a_stage_computed_in_an_earlier_kernel_than_what_it_reads_is_refused():
    """The long fuzz run of issue 22 (seed 2 pair 3277): after rfactor, `P` computed at a
    loop of `T` (a sibling: an earlier statement) ran in T's kernel and read `P_rf`, whose
    kernel ran after it: P came out zero on the sim and the GPU. Refused; computing the
    rfactor stage inside P as well is legal and right."""
    op = tcomp.op("""def f(float(N, N) X) -> (T, P) {
    T(i) = X(i, 0) * 2
    P(j) +=! X(j, k) * X(k, j)
}""")
    s = tcomp.Schedule(op)
    s["P"].rfactor(s["P"].reduce_axes[0])
    s["P"].compute_at(s["T"], s["T"].axes[0])
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, "sim", sizes={"N": 2})
    assert str(e.value) == ("stage 'P' is computed in the kernel of 'T' (compute_at), but "
                            "reads 'P_rf', which stage 'P.rf' computes in a later kernel, of "
                            "'P.rf'; compute 'P.rf' at a loop of 'P', or compute 'P' at root")
    s["P.rf"].compute_at(s["P"], s["P"].axes[0])
    X = np.arange(4, dtype=np.float32).reshape(2, 2)
    for got, want in zip(tcomp.build(s, "sim", sizes={"N": 2})(X), tcomp.evaluate(op, X)):
        np.testing.assert_array_equal(got, want)


def test_a_copy_computed_inside_a_producer_of_its_reader_is_refused():
    """The long fuzz run of issue 22 (seed 3 pairs 3159, 5725, 8902): a local copy for C
    computed at a loop of O, which is computed at a loop of C. C read it outside O's
    loops, where its buffer and the loop variable are gone (the sim: "variable 'i_o' is
    not bound"). Refused; computed at C's loop, it runs."""
    op = tcomp.op("""def f(float(N) X, float(N) W) -> (C) {
    O(i) +=! X(j) where i in 0:N
    C(t) = O(0) + W(t)
}""")

    def make(at_o):
        s = tcomp.Schedule(op)
        s["O"].compute_at(s["C"], s["C"].axes[0])
        s["O"].split(s["O"].axes[0], 2)
        W = s.cache_read("W", "local", [s["C"]])
        W.compute_at(*((s["O"], s["O"].leaf_axes[0]) if at_o else (s["C"], s["C"].axes[0])))
        return s
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(make(True), "sim", sizes={"N": 3})
    assert str(e.value) == ("stage 'C' reads 'W_local', which is computed inside 'O', a stage "
                            "computed inside 'C': 'C' reads it outside that stage's loops; "
                            "compute 'W.local' at a loop of 'C' instead")
    X, W = np.arange(3, dtype=np.float32), np.array([5, 6, 7], dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(make(False), "sim", sizes={"N": 3})(X, W),
                                  tcomp.evaluate(op, X, W))
