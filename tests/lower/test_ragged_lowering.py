"""Ragged loops on the sim (lower/ragged_loops.py): the loop runs from the
bound read at the point, per block or per thread, against `evaluate` with
empty and one-element segments, split and unrolled ragged loops."""
import numpy as np
import pytest

import tcomp

BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) OP T(J(j), d) where j in Off(b):Off(b + 1)
}"""


def blocks(st, b, d, j):
    st.bind(b, "blockIdx.x")
    st.bind(d, "threadIdx.x")


def threads(st, b, d, j):
    st.bind(b, "threadIdx.x")  # the threads of a block run different trip counts
    st.bind(d, "threadIdx.y")


def split_j(st, b, d, j):
    jo, ji = st.split(j, 3)
    st.unroll(ji)
    st.bind(b, "blockIdx.x")


def split_b(st, b, d, j):
    # a tail of b runs no iteration and reads no bound past Off (Off[b + 1] with b
    # beyond the bags was read before the bounds were guarded)
    bo, bi = st.split(b, 3)
    st.bind(bo, "blockIdx.x")
    st.bind(bi, "threadIdx.x")


SCHEDULES = {"serial": lambda *a: None, "blocks": blocks, "threads": threads,
             "split-j": split_j, "split-b": split_b}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("op_text", ["+=!", "max=!"])
@pytest.mark.parametrize("off", [[0, 2, 2, 7, 8], [0, 0], [0, 7], [1, 2, 3]])
def test_sim_agrees_with_evaluate(schedule, op_text, off):
    op = tcomp.op(BAG.replace("OP", op_text))
    s = tcomp.Schedule(op)
    st = s["O"]
    b, d = st.axes
    (j,) = st.reduce_axes
    SCHEDULES[schedule](st, b, d, j)
    rng = np.random.default_rng(len(off))
    t = rng.standard_normal((10, 3)).astype(np.float32)
    jj = rng.integers(0, 10, 8).astype(np.int32)
    off = np.array(off, np.int32)
    got = tcomp.build(s, target="sim")(t, jj, off)
    np.testing.assert_allclose(got, tcomp.evaluate(op, t, jj, off), rtol=1e-5, atol=1e-6)


def test_ir_reads_the_bounds_at_the_point():
    s = tcomp.Schedule(tcomp.op(BAG.replace("OP", "+=!")))
    text = str(tcomp.lower(s))
    assert "for j in 0:max(Off[b + 1] - Off[b], 0)" in text
    assert "T[J[Off[b] + j] * D + d]" in text


def test_sim_bound_outside_the_tensor_read():
    s = tcomp.Schedule(tcomp.op(BAG.replace("OP", "+=!")))
    k = tcomp.build(s, target="sim")
    with pytest.raises(tcomp.SimError, match=r"read of J\[7\] out of bounds \(shape \(7,\), "
                                             r"dimension 0\)"):
        k(np.ones((4, 2), np.float32), np.zeros(7, np.int32), np.array([0, 3, 8], np.int32))


def test_nvrtc_compiles_a_ragged_loop():
    s = tcomp.Schedule(tcomp.op(BAG.replace("OP", "+=!")))
    st = s["O"]
    threads(st, *st.axes, *st.reduce_axes)
    k = tcomp.build(s, target="cuda")
    assert "for (int j = 0; j < max(Off[b + 1] - Off[b], 0); ++j)" in k.source
    assert len(k.cubin) > 0


def test_automatic_schedule():
    # the search takes a ragged extent as 1: it neither splits nor binds it
    op = tcomp.op(BAG.replace("OP", "+=!"))
    t = np.arange(8, dtype=np.float32).reshape(4, 2)
    j, off = np.array([3, 0, 1], np.int32), np.array([0, 2, 2, 3], np.int32)
    np.testing.assert_array_equal(tcomp.build(op, target="sim")(t, j, off),
                                  tcomp.evaluate(op, t, j, off))
