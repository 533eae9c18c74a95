"""The errors of in-place updates: the snapshot stage of a statement that
reads its own tensor stays a complete copy made before the statement
(tcomp/schedule/snapshot.py), and no stage that reads a tensor is computed
inside a stage that overwrites it. Each message is asserted, and a refused
primitive leaves the schedule unchanged."""
from __future__ import annotations

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
