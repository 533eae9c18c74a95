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
