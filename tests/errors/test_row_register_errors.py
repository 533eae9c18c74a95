"""Errors of rows in registers: a thread reading a local buffer's elements that
other threads hold (the `registers` pass's ownership check), and compute_at of
a sibling stage (a stage its target does not read)."""
from __future__ import annotations

import re

import pytest

import tcomp
from tcomp.schedule import templates
from tests.lower.util import ROW_SOFTMAX as SOFTMAX, inputs_for, run_sim


def row_softmax(e_vec=4, o_vec=4):
    s = tcomp.Schedule(tcomp.op(SOFTMAX))
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    templates.row_slices(O, d, 32, o_vec)
    XL = s.cache_read("X", "local", [s["mx"], s["e"]])
    XL.compute_at(O, n)
    templates.row_slices(XL, XL.axes[1], 32, 4)
    for name in ("mx", "sm", "e"):
        st = s[name]
        st.compute_at(O, n)
        st.set_scope("local")
        ax = st.reduce_axes[0] if st.reduce_axes else st.axes[1]
        templates.row_slices(st, ax, 32, e_vec if name == "e" else 4)
    return s


def test_matching_slices_compact_and_run():
    s = row_softmax()
    text = str(tcomp.lower(s, sizes={"N": 2, "D": 256}))
    assert "alloc local float32 X_local[8]" in text and "alloc local float32 e[8]" in text
    run_sim(s, inputs_for(s.op, {"N": 2, "D": 256}), sizes={"N": 2, "D": 256})


def test_a_reader_split_differently_is_an_error():
    s = row_softmax(e_vec=2)
    with pytest.raises(tcomp.LoweringError, match=re.escape(
            "local buffer 'X_local' is written at [0, ax1_o_i * 4 + ax1_i] by threads that each "
            "hold their own copy (its stage is split over threads), but it is read at "
            "[0, e_d_o_i * 2 + e_d_i], a different thread offset: a thread would read elements "
            "other threads hold. Split and bind the readers' loops like the writer's (same "
            "factors, same thread axis), or make the buffer shared")):
        tcomp.lower(s, sizes={"N": 2, "D": 256})


def test_reading_a_neighbours_element_is_an_error():
    op = tcomp.op("""def diff(float(N, D) X) -> (O) {
      O(n, d) = X(n, d + 1) - X(n, d)
    }""")
    s = tcomp.Schedule(op)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    templates.row_slices(O, d, 32, 4)
    XL = s.cache_read("X", "local", [O])
    XL.compute_at(O, n)
    templates.row_slices(XL, XL.axes[1], 32, 4)
    with pytest.raises(tcomp.LoweringError, match=re.escape(
            "local buffer 'X_local' is read at [0, d_o_i * 4 + d_i + 1], but its thread never "
            "writes element threadIdx.x * 4 + 4 (its stage is split over threads): split the reading "
            "stage's loops like the writing stage's, so that each thread reads the slice it "
            "computed")):
        tcomp.lower(s, sizes={"N": 2, "D": 257})


def test_slices_in_a_serial_loop_stay_in_local_memory_and_stay_correct():
    s = tcomp.Schedule(tcomp.op(SOFTMAX))
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    dv_o, dv = O.split(d, 4)
    k, t = O.split(dv_o, 32)
    O.bind(t, "threadIdx.x")  # k serial: e is read at a loop variable
    E = s["e"]
    E.compute_at(O, n)
    E.set_scope("local")
    templates.row_slices(E, E.axes[1], 32, 4)
    for name in ("mx", "sm"):
        s[name].compute_at(O, n)
        s[name].set_scope("local")
        templates.row_slices(s[name], s[name].reduce_axes[0], 32, 4)
    text = str(tcomp.lower(s, sizes={"N": 2, "D": 256}))
    assert "alloc local float32 e[1, 256]" in text
    run_sim(s, inputs_for(s.op, {"N": 2, "D": 256}), sizes={"N": 2, "D": 256})


TWO = """def two(float(N, D) X) -> (S, Y) {
  h(n, d) = X(n, d) * 2.0
  S(n, d) = h(n, d) + 1.0
  Y(n, d) = h(n, d) - 1.0
}"""


def test_a_sibling_is_computed_with_its_target():
    s = tcomp.Schedule(tcomp.op(TWO))
    Y = s["Y"]
    n, d = Y.axes
    Y.bind(n, "blockIdx.x")
    templates.row_slices(Y, d, 32, 4)
    for name in ("h", "S"):
        s[name].compute_at(Y, n)
        templates.row_slices(s[name], s[name].axes[1], 32, 4)
    s["h"].set_scope("local")
    prog = tcomp.lower(s, sizes={"N": 3, "D": 300})
    assert len(prog.kernels) == 1 and "barrier" not in str(prog)
    run_sim(s, inputs_for(s.op, {"N": 3, "D": 300}), sizes={"N": 3, "D": 300})
    again = tcomp.Schedule.from_json(s.op, s.to_json())
    assert str(tcomp.lower(again, sizes={"N": 3, "D": 300})) == str(prog)


def test_a_sibling_needs_the_same_ranges():
    op = tcomp.op("""def two(float(N, D) X) -> (S, Y) {
      S(n, d) = X(n, d) + 1.0
      Y(n, d) = X(n, d + 1) - 1.0
    }""")
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError, match=re.escape(
            "compute_at: stage 'Y' does not read 'S' (directly or through other stages), so 'S' "
            "cannot be computed at its loops (a stage that it does not read must range over the "
            "same indices, as a sibling: (n in 0:N, d in 0:D) vs (n in 0:N, d in 0:D - 1))")):
        s["S"].compute_at(s["Y"], s["Y"].axes[0])


def test_a_sibling_cannot_read_its_target():
    op = tcomp.op("""def two(float(N, D) X) -> (Y, S) {
      Y(n, d) = X(n, d) + 1.0
      S(n, d) = Y(n, d) * 2.0
    }""")
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError, match=re.escape(
            "compute_at: stage 'Y' does not read 'S' (directly or through other stages), so 'S' "
            "cannot be computed at its loops ('S' reads 'Y' itself)")):
        s["S"].compute_at(s["Y"], s["Y"].axes[0])
