"""Every error of ragged ranges (lang/check_ragged.py, schedule/ragged_stages.py,
lower/ragged_loops.py): exception type and message text."""
from __future__ import annotations

import pytest

import tcomp

BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)
}"""


@pytest.mark.parametrize("src, message", [
    ("def f(float(N) X, int32(N) Len) -> (O) { O(b, j) = X(j) where j in 0:Len(b) }",
     "the range of 'j' reads a tensor (a ragged range), but 'j' is on the left-hand side: only "
     "a reduction index may be ragged (the shape of 'O' cannot depend on data)"),
    ("def f(float(N, K) X, int32(N) Len) -> (O) { O(b) +=! X(j, k) where j in 0:Len(k) }",
     "a ragged range's bounds may use sizes, tensor reads and the statement's left-hand-side "
     "indices, not 'k'"),
    ("def f(float(N, N) X, int32(N) Len) -> (O) {\n"
     " O(b) +=! X(j, k) where j in 0:Len(b), k in 0:Len(b) }",
     "only one index of a statement may have a ragged range ('j' and 'k' both read their "
     "bounds)"),
    ("def f(float(N) X, float(N) Len) -> (O) { O(b) +=! X(j) where j in 0:Len(b) }",
     "a bound of the range of 'j' must be an integer, got float32"),
    ("def f(float(N, D) X, int32(N) Len) -> (m, i) {\n"
     " m(b), i(b) argmax=! X(b, j), j where j in 0:Len(b) }",
     "a ragged range (bounds read from a tensor) is not supported in a tuple reduction"),
    ("def f(float(N) X, int32(N) I, int32(N) Len) -> (float(N) O) {\n"
     " O(I(b)) +=! X(j) where j in 0:Len(b) }",
     "a ragged range (bounds read from a tensor) is not supported in a scatter"),
])
def test_lang_errors(src, message):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    assert message in str(e.value)


WHY = "stage 'O' has a ragged range (index 'j' runs between bounds read from a tensor); "


@pytest.mark.parametrize("call, message", [
    (lambda s: s["O"].rfactor(s["O"].reduce_axes[0]),
     "rfactor: " + WHY + "its ragged loop's extent differs from point to point"),
    (lambda s: s["O"].vectorize(s["O"].reduce_axes[0]),
     "vectorize: " + WHY + "its loop's extent is known only when it runs; unroll instead"),
    (lambda s: s.cache_write(s["O"], "local"),
     "cache_write: " + WHY + "it accumulates in a register already"),
])
def test_schedule_refusals(call, message):
    s = tcomp.Schedule(tcomp.op(BAG))
    with pytest.raises(tcomp.ScheduleError) as e:
        call(s)
    assert message in str(e.value)


def test_compute_at_refused():
    op = tcomp.op("""def f(float(V, D) T, int32(L) J, int32(B1) Off) -> (P) {
        O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)
        P(b, d) = O(b, d) * 2.0
    }""")
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError) as e:
        s["O"].compute_at(s["P"], s["P"].axes[0])
    assert ("compute_at: " + WHY + "the region a consumer would need of it depends on data; it "
            "stays at root") in str(e.value)


def test_bound_ragged_loop():
    s = tcomp.Schedule(tcomp.op(BAG))
    st = s["O"]
    st.bind(st.axes[0], "blockIdx.x")
    st.bind(st.reduce_axes[0], "threadIdx.x")
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s)
    assert ("stage 'O': loop 'j' of the ragged index 'j' is bound to threadIdx.x, but its "
            "extent is read at each point; keep it serial and bind the spatial loops") in \
        str(e.value)


def test_ragged_loop_outside_its_bounds_loop():
    s = tcomp.Schedule(tcomp.op(BAG))
    st = s["O"]
    b, d = st.axes
    st.reorder(st.reduce_axes[0], b, d)
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s)
    assert ("stage 'O': loop 'j' of the ragged index 'j' runs outside loop 'b', whose index its "
            "bounds read; reorder it inside") in str(e.value)

