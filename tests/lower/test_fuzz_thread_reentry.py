"""Fuzz seed 7 pair 50377: a global reduction computed at a loop bound to
threadIdx.x of a shared cache_write stage that is itself computed at its
reader's loop bound to threadIdx.x (the tag re-entered). Each thread computes
its own element of the reduction, through the inner loop's variable; the
one-thread guard (loops.one_thread) saw the outer loop's variable unused and
let only thread 0 compute, so the other threads' elements stayed 0."""
from __future__ import annotations

import numpy as np

import tcomp

SRC = """def f(float(N) X) -> (Y, O) {
    O(c) +=! X(c) + float(r) where c in 0:N, r in 0:N
    Y(o) = O(o) * 2.0
}"""


def _schedule():
    s = tcomp.Schedule(tcomp.op(SRC))
    o = s["O"]
    o.tile(o.axes[0], o.reduce_axes[0], 4, 5)  # the sum's loop outside c's: it accumulates in O
    ys = s.cache_write("Y", "shared")
    ys.bind(ys.axes[0], "threadIdx.x")
    s["O"].compute_at(ys, ys.axes[0])
    s["Y"].bind(s["Y"].axes[0], "threadIdx.x")
    ys.compute_at(s["Y"], s["Y"].axes[0])
    return s


def test_a_reduction_reading_the_reentered_thread_index_runs_in_every_thread():
    s = _schedule()
    text = str(tcomp.lower(s, sizes={"N": 4}))
    assert "O[Y_shared_o + c_i] = O[Y_shared_o + c_i] +" in text  # accumulates in memory
    assert "if o == 0" not in text  # no one-thread guard over a producer that reads the tag
    X = np.arange(4, dtype=np.float32)
    want = tcomp.evaluate(s.op, X)
    got = tcomp.build(s, target="sim", sizes={"N": 4})(X)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)
