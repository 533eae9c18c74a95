"""Issue 22, defect 9: a shared cache computed inside an unrolled loop was declared once
per unrolled copy (`__shared__ float A_shared[4];` twice), and NVRTC refused the source
while the sim ran it. Each shared buffer is now declared once at the top of the kernel."""
import numpy as np
import pytest

import tcomp

from .emulator import HAVE_CXX, run_emulated


def _schedule(copies: int):
    op = tcomp.op("def f(float(N, M) A) -> (O) { O(i, j) = A(i, j) * 2 }")
    s = tcomp.Schedule(op)
    O = s["O"]
    _, j = O.axes
    jo, ji = O.split(j, 4)
    O.bind(ji, "threadIdx.x")
    O.unroll(jo)
    s.cache_read("A", "shared", [O]).compute_at(O, jo)
    return op, s, {"N": 2, "M": 4 * copies}


@pytest.mark.parametrize("copies", [2, 3])
def test_a_shared_cache_in_an_unrolled_loop_is_declared_once(copies):
    op, s, sizes = _schedule(copies)
    k = tcomp.build(s, "cuda", sizes=sizes)  # NVRTC refused it before
    assert k.source.count("float A_shared[4];") == 1, k.source
    a = np.arange(2 * 4 * copies, dtype=np.float32).reshape(2, -1)
    want = tcomp.evaluate(op, a)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(a), want)
    if HAVE_CXX:
        got = run_emulated(k, a)
        np.testing.assert_array_equal(got, want)
