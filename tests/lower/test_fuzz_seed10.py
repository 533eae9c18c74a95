"""Issue 22's long fuzz run, seed 10 (on f30f158): one test per failure found."""
import json

import numpy as np
import pytest

import tcomp


def _schedule(op, directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": directives}))


def test_a_vector_loop_over_a_mangled_name_compiles():
    """Pair 9764: a vectorized load's lane loop over a name that the CUDA printer
    mangles (`tc_out1` -> `tc_u_tc_out1`): the register copy was read with the
    printed name printed again (`tc_u_tc_u_tc_out1_piece`), which NVRTC refused."""
    op = tcomp.op("""def f(int32(K) tc_s, uint32(K, N) A) -> (int32(N) O) {
    O(i) max=! int32(A(tc_k, i) != A(tc_s(tc_k) % K, i))
}""")
    s = tcomp.Schedule(op)
    s["O"].unroll(s["O"].reduce_axes[0])
    k = tcomp.build(s, target="cuda", sizes={"K": 2, "N": 1})
    assert "tc_u_tc_u_" not in k.source


MOVING = tcomp.op("""def f(int32(N) A) -> (O, C) {
    O(j) max=! A(j)
    C(k) *=! int32(O(j) == O(k))
}""")


def test_a_barrier_in_a_loop_whose_trip_count_differs_between_threads_is_refused():
    """Pair 5951: O computed at C's reduction loop bound to threadIdx.x, over the
    region between `j` and `k` (a trip count that moves with the thread), with a
    shared copy of A inside that loop: its barriers would be reached a different
    number of times by each thread (the sim: the loop's bounds differ)."""
    s = _schedule(MOVING, [
        {"kind": "CacheRead", "tensor": "A", "scope": "shared", "readers": ["O"]},
        {"kind": "Split", "stage": "O", "axis": "j", "factor": None, "nparts": 1},
        {"kind": "Bind", "stage": "C", "axis": "j", "tag": "threadIdx.x"},
        {"kind": "ComputeAt", "stage": "O", "target": "C", "axis": "j"},
        {"kind": "Split", "stage": "O", "axis": "j_i", "factor": 2, "nparts": None},
        {"kind": "ComputeAt", "stage": "A.shared", "target": "O", "axis": "j_i_o"}])
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={"N": 3})
    assert str(e.value) == (
        "kernel f_C: loop 'j_i_o' runs (max(j, k) - min(j, k) + 2) / 2 times, a count that "
        "differs between the threads of a block, and a barrier inside it (a shared buffer "
        "computed there) would be reached a different number of times by each: compute the "
        "shared stage outside that loop, or the loop's stage at a loop where its region "
        "does not move with the thread")


def test_the_moving_region_without_a_shared_copy_runs_like_evaluate():
    s = _schedule(MOVING, [
        {"kind": "Bind", "stage": "C", "axis": "j", "tag": "threadIdx.x"},
        {"kind": "ComputeAt", "stage": "O", "target": "C", "axis": "j"}])
    A = np.array([3, 1, 3], np.int32)
    for g, w in zip(tcomp.build(s, "sim", sizes={"N": 3})(A), tcomp.evaluate(MOVING, A)):
        np.testing.assert_array_equal(g, w)
