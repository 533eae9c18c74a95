"""Every error of scatters (lang/check_scatter.py, schedule/scatter_stages.py,
lower/scatter_store.py and their range checks): exception type and message."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

ADD = """def f(float(N, D) X, int32(N) I, float(M, D) B) -> (O) {
    O(m, d) = B(m, d)
    O(I(i), d) OP X(i, d)
}"""


def add(op="+="):
    return tcomp.op(ADD.replace("OP", op))


@pytest.mark.parametrize("src, message", [
    ("def f(float(N) X, int32(N) I) -> (O) { O(I(i)) = X(i) }",
     "a scatter into 'O' needs its shape before the statement: declare it with a type and "
     "shape (e.g. float(N, D) O) or define it in an earlier statement"),
    ("def f(float(N) X) -> (float(N) O) { O(min(i, 3)) = X(i) }",
     "left-hand side subscripts must be plain index variables (or read a tensor: a scatter, "
     "e.g. O(I(i), d) += X(i, d))"),
    ("def f(float(N) X, int32(N) I) -> (O) {\n O(i) = X(i)\n O(I(i)) += O(i) }",
     "a scatter cannot read the tensor it writes ('O'): its points run in any order; read a "
     "copy written by an earlier statement"),
    ("def f(float(N) X, float(N) F) -> (float(N) O) { O(F(i)) = X(i) }",
     "subscript of 'O' must be an integer, got float32"),
    ("def f(float(N) X, int32(N) I) -> (float(N) O) { O(I(i)) += X(i) }",
     "reduction '+=' continues an earlier definition of 'O', but there is none; write '+=!'"),
    ("def f(float(N, D) X, int32(N) I) -> (a, b) { a(I(n)), b(n) argmax=! X(n, d), d }",
     "a tuple reduction cannot write through a data-dependent subscript (a scatter); write "
     "each component in its own statement"),
])
def test_lang_errors(src, message):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    assert message in str(e.value)


def test_evaluate_out_of_range():
    x, b = np.ones((2, 3), np.float32), np.zeros((4, 3), np.float32)
    with pytest.raises(tcomp.LangError) as e:
        tcomp.evaluate(add(), x, np.array([0, 7], np.int32), b)
    assert ("scatter into 'O(I(i), d)': subscript I(i) = 7 is outside dimension 0 of 'O' "
            "(extent 4) when i=1, d=0") in str(e.value)


WHY = "stage 'O.1' is a scatter (it writes 'O' through data-dependent subscripts); "


@pytest.mark.parametrize("call, message", [
    (lambda s: s["O.1"].compute_inline(),
     "compute_inline: " + WHY + "the elements it writes are known only when it runs, so it "
     "stays at root"),
    (lambda s: s["O.1"].compute_at(s["O"], s["O"].axes[0]),
     "compute_at: " + WHY + "the elements it writes are known only when it runs"),
    (lambda s: s["O.1"].vectorize(s["O.1"].axes[1]),
     "vectorize: " + WHY + "the elements its lanes would write are not contiguous; unroll "
     "the loop instead"),
    (lambda s: s.cache_write(s["O.1"], "local"),
     "cache_write: " + WHY + "its updates land in the tensor itself"),
    (lambda s: s["O.1"].set_scope("shared"),
     "set_scope: " + WHY + "its tensor lives in global memory, where its updates land"),
])
def test_schedule_refusals(call, message):
    s = tcomp.Schedule(add())
    with pytest.raises(tcomp.ScheduleError) as e:
        call(s)
    assert message in str(e.value)


@pytest.mark.parametrize("op, dtype, message", [
    ("*=", "float", "but '*=' has no atomic update (atomics update with +=, max=, min= only)"),
    ("+=", "int8", "but no atomic '+=' updates int8 (atomics update float16, bfloat16, float32, "
     "float64, int32, uint32, int64, uint64)"),
])
def test_no_atomic_for_a_parallel_gathered_loop(op, dtype, message):
    src = ADD.replace("OP", op).replace("float", dtype)
    s = tcomp.Schedule(tcomp.op(src))
    st = s["O.1"]
    st.bind(st.axes[0], "blockIdx.x")
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s)
    assert ("stage 'O.1': its loop 'i' over a gathered index is bound to blockIdx.x, so several "
            "threads may update one element of 'O' and the update must be atomic, " + message +
            "; keep the gathered loops serial (bind the others), or write into a tensor of a "
            "type that has one") in str(e.value)


def scheduled(op, bind_i=True):
    s = tcomp.Schedule(op)
    st = s["O.1"]
    i, d = st.axes
    if bind_i:
        st.bind(i, "threadIdx.x")
    st.bind(d, "threadIdx.y")
    return tcomp.build(s, target="sim")


def test_sim_out_of_range_subscript():
    k = scheduled(add())
    x, b = np.ones((3, 2), np.float32), np.zeros((4, 2), np.float32)
    with pytest.raises(tcomp.SimError) as e:
        k(x, np.array([0, 1, 4], np.int32), b)
    assert ("kernel f_O_1: scatter into 'O(I(i), d)': subscript I(i) (dimension 0 of 'O') = 4 "
            "is outside 0:4 in block (0, 0, 0), thread (2, 0, 0)") in str(e.value)


def test_sim_parallel_assignment_with_duplicates_is_a_race():
    k = scheduled(add("="))
    x, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.zeros((4, 2), np.float32)
    k(x, np.array([0, 1, 2], np.int32), b)  # no duplicates: fine
    with pytest.raises(tcomp.SimError) as e:
        k(x, np.array([1, 0, 1], np.int32), b)
    assert "threads write different values to O at offset 2 in the same step" in str(e.value)
