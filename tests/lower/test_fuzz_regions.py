"""Issue 22's long fuzz run, the findings that were open (tests/fuzz/open_findings.txt):
schedules every primitive accepted that made the sim report an error. Each now gives
evaluate's answer, or is refused when built with an error naming its remedy."""
import json
import re

import numpy as np
import pytest

import tcomp
from tcomp.lower.ir_walk import free_vars


def schedule(op, *directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": list(directives)}))


def d(kind, stage, **kw):
    return dict(kind=kind, stage=stage, **kw)


UNION = tcomp.op("""def f(float(N) A) -> (C) {
    O(i) = A(i) * 2
    C(t, i) +=! O(0) + O(m) + t where t in 0:N, i in 0:N
}""")


@pytest.mark.parametrize("n", [1, 4, 5])
def test_a_thread_bound_producer_whose_region_grows_with_a_serial_loop(n):
    """Seed 1 pair 3854: O, its loop on threadIdx.x, computed inside the split reduction
    loop `m_o` of its reader, which reads O(0) and O(m): the region [0, 2 * m_o + 1]
    grows with m_o, and the block's extent named `m_o` ("variable 'm_o' is not bound").
    The region is widened over m_o's range, so the block is fixed."""
    s = schedule(UNION, d("Bind", "O", axis="i", tag="threadIdx.x"),
                 d("Tile", "C", x="t", y="m", x_factor=1, y_factor=2),
                 d("ComputeAt", "O", target="C", axis="t_i"))
    A = np.arange(1, n + 1, dtype=np.float32)
    assert tcomp.lower(s, sizes={"N": n}).kernels[0].block[0].value == 2 * ((n + 1) // 2)
    assert free_vars(tcomp.lower(s).kernels[0].block[0]) == {"N"}
    for sizes in ({"N": n}, None):
        np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(A),
                                      tcomp.evaluate(UNION, A))



GATHER = tcomp.op("""def f(int32(N) G, float(M) A) -> (C) {
    O(j) = A(j) * 2
    C(i) = O(G(i) % M)
}""")


@pytest.mark.parametrize("scope", [None, "shared", "local"])
@pytest.mark.parametrize("sizes", [{"N": 3, "M": 4}, None])
def test_a_gathered_region_is_not_read_in_a_split_tail(scope, sizes):
    """Seed 1 pair 4220: the region of O read at C's inner loop is O(G(i) % M), one
    element at a data-dependent place. In the tail of an imperfect split (i = 3 of N = 3)
    the consumer is guarded off, but the producer's region read G[3] (the sim: "read of
    G[3] out of bounds"; the GPU: any element). The region is read only where the
    consumer's indices are in range."""
    s = schedule(GATHER, d("Split", "C", axis="i", factor=2, nparts=None),
                 d("ComputeAt", "O", target="C", axis="i_i"),
                 *([d("SetScope", "O", scope=scope)] if scope else []))
    G, A = np.array([2, 0, 1], dtype=np.int32), np.arange(1, 5, dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(G, A),
                                  tcomp.evaluate(GATHER, G, A))
    # the CUDA (a read out of bounds there is silent): the producer's loads of G are guarded
    src = tcomp.build(s, "cuda", sizes=sizes).source
    body = src[src.index("for (int i_i"):src.index("C[i_o * 2 + i_i] =")]
    assert body.count("G[") == len(re.findall(
        r"i_o \* 2 \+ i_i < (?:3|N) \? tc_floormod<int>\(G\[i_o \* 2 \+ i_i\]", body)) > 0
