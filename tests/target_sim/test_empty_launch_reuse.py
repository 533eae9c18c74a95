"""A kernel called again after an empty launch (a size of 0) recomputes its
grid: the sim memoised the grid's expression per batch, and an empty launch
starts no batch, so the next call reused the empty grid and ran nothing."""
import numpy as np

import tcomp


def test_call_after_empty_launch_runs_the_kernel():
    op = tcomp.op("def f(float(N, D) X) -> (O) { O(i, d) = X(i, d) * 2.0 }")
    s = tcomp.Schedule(op)
    st = s["O"]
    i, d = st.axes
    o, t = st.split(st.fuse(i, d), 64)
    st.bind(o, "blockIdx.x")
    st.bind(t, "threadIdx.x")
    k = tcomp.build(s, target="sim")
    for n in (5, 0, 5, 3):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_array_equal(k(x), x * 2)
