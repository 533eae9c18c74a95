"""Issue 22's long fuzz runs, group C/E of tests/fuzz/open_findings.txt (seed 4 pair
7378, seed 6 pair 4541): a shared copy computed inside a loop bound to threadIdx.T
that binds a loop of its own to threadIdx.T. Its region must be one for the whole
block; where it read the enclosing thread loop, each thread computed only the
elements where the two indices coincide (the sim: "executed by no thread")."""
import json

import numpy as np
import pytest

import tcomp


def schedule(op, *directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": list(directives)}))


def d(kind, stage=None, **kw):
    return dict(kind=kind, **({"stage": stage} if stage else {}), **kw)


ROWS = tcomp.op("""def f(float(M, K) X, uint8(N) G, bool(K, K) A) -> (C) {
    C(j) +=! A(k, k) ? X(G(j) % M, k) : 1.0
}""")


def _rows_schedule():
    return schedule(ROWS, d("CacheRead", tensor="X", scope="shared", readers=["C"]),
                    d("Split", "C", axis="k", factor=2, nparts=None),
                    d("Bind", "C", axis="k_i", tag="threadIdx.x"),
                    d("ComputeAt", "X.shared", target="C", axis="k_i"),
                    d("Bind", "X.shared", axis="ax1", tag="threadIdx.x"))




@pytest.mark.parametrize("sizes", [{"N": 4, "M": 2, "K": 5}, None])
def test_a_gathered_row_guarded_by_another_loop_is_one_region_for_the_block(sizes):
    """Seed 6 pair 4541: the row `G(j) % M` of a shared copy computed at k_i (bound to
    threadIdx.x), its column loop on threadIdx.x too. The gather's guard (pair 4220's)
    was `k_o * 2 + k_i < K ? G[j] % M : 0`, over all of the consumer's ranges, so the
    row read k_i: one row a thread. Only the ranges of the indices the region reads
    at (j) guard it now: the region is the block's, and the result is evaluate's."""
    s = _rows_schedule()
    text = str(tcomp.lower(s, sizes=sizes))
    copy = [line for line in text.splitlines() if "X_shared[" in line and "] = X[" in line]
    assert copy and all("k_i" not in line for line in copy)
    X = np.arange(10, dtype=np.float32).reshape(2, 5)
    G = np.array([0, 1, 0, 1], np.uint8)
    A = np.eye(5, dtype=bool) | np.eye(5, k=1, dtype=bool)
    A[3, 3] = False
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(X, G, A),
                                  tcomp.evaluate(ROWS, X, G, A))


def test_a_shared_copy_of_a_shared_copy_rebinding_the_thread_axis_is_refused():
    """Seed 4 pair 7378: a shared copy of A computed at a loop of another shared copy
    of A, inside that copy's loop ax0_i bound to threadIdx.y, binds its own ax1_i to
    threadIdx.y: its region there moves with ax0_i (a region for each thread of y). The
    sim reported instances "executed by no thread"; the schedule is refused when built,
    naming both loops and the remedy."""
    op = tcomp.op("""def f(int16(N, N) A, uint8(M) G) -> (C) {
    C(i) max=! A(G(i) % N, G(i) % N)
}""")
    s = schedule(op, d("CacheRead", tensor="A", scope="shared", readers=["C"]),
                 d("ComputeAt", "A.shared", target="C", axis="i"),
                 d("Split", "A.shared", axis="ax0", factor=3, nparts=None),
                 d("Bind", "A.shared", axis="ax0_i", tag="threadIdx.y"),
                 d("CacheRead", tensor="A", scope="shared", readers=["A.shared"]),
                 d("ComputeAt", "A.shared1", target="A.shared", axis="ax1"),
                 d("Split", "A.shared1", axis="ax1", factor=3, nparts=None),
                 d("Bind", "A.shared1", axis="ax1_i", tag="threadIdx.y"))
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, "sim", sizes={"N": 2, "M": 1})
    assert str(e.value) == (
        "stage 'A.shared1' (shared scope) binds its loop 'ax1_i' (ax1_i) to threadIdx.y, "
        "but it is computed inside loop 'ax0_i', already bound to threadIdx.y, and the "
        "region it computes there depends on 'ax0_i' (differs between the threads of "
        "threadIdx.y): each thread would compute only the elements where the two indices "
        "coincide. Compute 'A.shared1' at a loop outside 'ax0_i' (or at root), where its "
        "region is one for the whole block")


SELF_GATHER = tcomp.op("""def f(int8(N, N) J, int32(N) B) -> (float32 O) {
    O +=! float32(B(B(k) % N) && J(k, B(k) % N)) / (k / 3.0)
}""")


@pytest.mark.parametrize("sizes", [{"N": 2}, {"N": 5}, None])
def test_a_global_copy_of_a_gather_index_reads_its_source_for_its_region(sizes):
    """Seed 4 pair 24650: a global copy of B computed at k_i of `O +=! ... B(B(k) % N)`.
    The bounds of the copy's region load B(k) and loaded it from the copy itself,
    B_global, not yet written there (zeros on the first pass: a wrong row, NaN = 0 / 0
    where evaluate has inf = 1 / 0). The region's bounds read the copy's source B."""
    s = schedule(SELF_GATHER, d("Split", "O", axis="k", factor=4, nparts=None),
                 d("CacheRead", tensor="B", scope="global", readers=["O"]),
                 d("ComputeAt", "B.global", target="O", axis="k_i"))
    text = str(tcomp.lower(s, sizes=sizes))
    region = [line for line in text.splitlines() if "for ax0 in" in line]
    assert region and all("B_global" not in line and "B[" in line for line in region)
    n = 5 if sizes is None else sizes["N"]
    B = np.array([1, 3, 0, 2, 4][:n], np.int32) % n
    J = np.ones((n, n), np.int8)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(J, B),
                                      tcomp.evaluate(SELF_GATHER, J, B))


def test_a_global_copy_of_a_gather_index_at_a_thread_loop_has_no_race():
    """Seed 4 pair 1791: the same global copy computed at a loop bound to threadIdx.y,
    for `O(i) +=! int32(!B(B(i) % N))`: thread 1 overwrote B_global[0] that thread 0
    had read for its region's bound (the sim: a missing barrier). The bound reads B."""
    op = tcomp.op("""def f(int32(N) B) -> (O) {
    O(i) +=! int32(!(B(B(i) % N)))
}""")
    s = schedule(op, d("CacheRead", tensor="B", scope="global", readers=["O"]),
                 d("Bind", "O", axis="i", tag="threadIdx.y"),
                 d("ComputeAt", "B.global", target="O", axis="i"))
    B = np.array([1, 0], np.int32)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes={"N": 2})(B),
                                  tcomp.evaluate(op, B))


def test_a_global_stage_computed_the_same_in_every_block_is_refused():
    """Seed 4 pair 32738: O, a global temporary, computed at C's loop i, while C's
    inner loop k is bound to blockIdx.y: each block computed all of O's region (it
    does not move with k), the same elements in every block (the sim: "block (0, 1, 0)
    overwrites O[0, 0], which block (0, 0, 0) read"). Refused when built."""
    op = tcomp.op("""def f(float(M) A, float(M) X, float(N) Y) -> (C) {
    O(j, m) *=! A(m) + X(k) where j in 0:N
    C(i, k) +=! A(k) * Y(i)
}""")
    s = schedule(op, d("ComputeAt", "O", target="C", axis="i"),
                 d("Bind", "C", axis="i", tag="threadIdx.y"),
                 d("Bind", "C", axis="k", tag="blockIdx.y"))
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, "sim", sizes={"N": 1, "M": 2})
    assert str(e.value) == (
        "stage 'O' (global scope) is computed at a loop of 'C' in each block of its loop "
        "'k' (bound to blockIdx.y), but the region it computes there does not move with "
        "'k': every block would write the same elements of 'O' in no fixed order (a race "
        "between blocks). Compute 'O' at root, or give it shared or local scope (a copy "
        "in each block)")
    shared = schedule(op, d("ComputeAt", "O", target="C", axis="i"),
                      d("Bind", "C", axis="i", tag="threadIdx.y"),
                      d("Bind", "C", axis="k", tag="blockIdx.y"),
                      d("SetScope", "O", scope="local"))
    A, X = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    Y = np.array([5.0], np.float32)
    np.testing.assert_array_equal(tcomp.build(shared, "sim", sizes={"N": 1, "M": 2})(A, X, Y),
                                  tcomp.evaluate(op, A, X, Y))


def test_a_pipelined_shared_copy_of_a_shared_copy_at_the_loop_is_refused():
    """Seed 8 pair 27815: a shared copy of a shared copy, both computed at the
    pipelined loop: the second one's prefetch for the next iteration read the
    first one's buffer before it was filled (the sim: a read of shared memory no
    thread wrote; the GPU would read stale data). Refused, as a non-shared stage
    computed at the loop already was."""
    op = tcomp.op("""def f(float(N, N) X) -> (O) {
    O(t) = X(t, t) + 1.0
}""")
    s = tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "Pipeline", "stage": "O", "axis": "t", "stages": 2},
        {"kind": "CacheRead", "tensor": "X", "scope": "shared", "readers": ["O"]},
        {"kind": "ComputeAt", "stage": "X.shared", "target": "O", "axis": "t"},
        {"kind": "CacheRead", "tensor": "X_shared", "scope": "shared", "readers": ["O"]},
        {"kind": "ComputeAt", "stage": "X_shared.shared", "target": "O", "axis": "t"}]}))
    with pytest.raises(tcomp.LoweringError, match=r"pipeline on 't' runs the copy "
                       r"'X_shared.shared' ahead of the loop's compute, but it reads "
                       r"'X_shared', which 'X.shared' computes at that loop"):
        tcomp.lower(s, sizes={"N": 3})
