"""A local (register) stage computed at a consumer that binds one of its loops to a thread
axis that a reader does not bind: each thread held one part of the registers and read all
of them (found by the long fuzz run of issue 22, seed 1 pairs 228
and 875: the sim refused the run with "read of local O_local before any write", the GPU
would have read garbage). Now a ScheduleError at lowering; with the reader binding the same
axis, each thread reads its own part, which still runs."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

INPLACE = """def f(float(K) X) -> (O) {
    O(i, k) +=! X(i) where i in 0:K, k in 0:K
    O(j, k) *= (k + 1 < K ? O(k + 1, k + 1) : 1.0) where j in 0:K, k in 0:K
}"""
SCALE = "def f(float(K, M) X) -> (O) { O(i, k) = X(i, k) * 2 }"


def test_a_local_stage_bound_to_a_thread_its_reader_does_not_bind_is_refused():
    s = tcomp.Schedule(tcomp.op(INPLACE))
    local = s.cache_write(s["O"], "local")
    local.bind(local.axes[1], "threadIdx.z")
    local.compute_at(s["O"], s["O"].axes[0])
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, "sim", sizes={"K": 3})  # (a local region needs bound sizes)
    assert str(e.value) == (
        "stage 'O.local' (local scope: registers of one thread) binds its loop 'O_local_k' (k) "
        "to threadIdx.z, but its reader 'O' does not bind threadIdx.z: each of its threads "
        "would read registers no thread wrote. Leave the loops of 'O.local' serial (unroll "
        "them), bind a loop of 'O' to threadIdx.z too, or give 'O.local' shared scope (a "
        "cooperative stage covering every thread)")


def test_a_local_stage_whose_reader_binds_the_same_thread_inside_still_runs():
    op = tcomp.op(SCALE)
    s = tcomp.Schedule(op)
    local = s.cache_write(s["O"], "local")
    i, k = s["O"].axes
    s["O"].bind(k, "threadIdx.z")
    local.bind(local.axes[1], "threadIdx.z")
    local.compute_at(s["O"], i)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    k = tcomp.build(s, "sim", sizes={"K": 3, "M": 4})
    np.testing.assert_array_equal(k(x), tcomp.evaluate(op, x))
    tcomp.build(s, "cuda", sizes={"K": 3, "M": 4})  # and compiles


def _column_copy(axis):
    op = tcomp.op("def f(float(N, N) A) -> (S) { S(i) +=! A(k, i) }")
    s = tcomp.Schedule(op)
    S = s["S"]
    local = s.cache_read("A", "local", [S])
    S.bind(S.reduce_axes[0], "threadIdx.x")
    _, inner = local.split(local.axes[axis], 3)
    local.bind(inner, "threadIdx.x")
    local.compute_at(S, S.axes[0])
    return op, s


def test_a_local_stage_bound_along_another_dimension_than_its_reader_is_refused():
    """Seed 2 pair 5388: the reader binds threadIdx.x to k, which reads A's dimension 0,
    and the local copy bound threadIdx.x along dimension 1: the tag check passed, and the
    threads read registers no thread wrote. Bound along dimension 0, it runs."""
    op, s = _column_copy(1)
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, "sim", sizes={"N": 3})
    assert str(e.value) == (
        "stage 'A.local' (local scope: registers of one thread) binds its loop 'ax1_i' (ax1_i) "
        "to threadIdx.x, along dimension 1 of 'A_local', but its reader 'S' binds threadIdx.x "
        "to 'k', not to the index it reads that dimension at: each of its threads would read "
        "registers no thread wrote. Bind the loops of 'A.local' and 'S' along the same "
        "dimension, leave the loops of 'A.local' serial, or give it shared scope")
    op, s = _column_copy(0)
    A = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes={"N": 3})(A),
                                  tcomp.evaluate(op, A))
