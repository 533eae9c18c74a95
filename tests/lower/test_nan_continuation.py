"""A continuing float `max=`/`min=` (no `!`) whose current value is NaN
(issue 22, fuzz finding seed 3 pairs 14492/14494/14495).

The rule (docs/language.md, "NaN in max= and min="): the row reduces from its
identity, NaN ignored, and the result then meets the current value with
fmax/fmin. So `S(m) min= A(m, r)` on a NaN `S(m)` gives the row's minimum, or
+inf where the row is all NaN or empty: NaN never wins, not even against
the identity. Before the fix the sim's serial loop started from the current
value and kept the NaN, while `evaluate` and the sim's cross-thread
allreduce (whose lanes start from the identity) gave +inf: the answer
depended on the schedule.

The expected values are written out with NumPy (np.fmin.reduce with
initial=+inf, then np.fmin with the current value), not taken from
`evaluate`; `evaluate` is checked against them too.
tests/target_cuda/test_nan_continuation_cuda.py runs the same cases as CUDA.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

NAN, INF = float("nan"), float("inf")


def program(op: str, ctype: str = "float"):
    return tcomp.op(f"def f({ctype}(M,N) A, {ctype}(M) B) -> (S) {{\n"
                    f"  S(m) = B(m)\n  S(m) {op}= A(m, r_n)\n}}")


def expected(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    f, ident = (np.fmin, INF) if op == "min" else (np.fmax, -INF)
    return f(b, f.reduce(a, axis=1, initial=ident)).astype(a.dtype)


def data(dtype=np.float32):
    """Rows: all NaN on a NaN start (the finding), mixed on a NaN start,
    all NaN on a finite start, NaN-free on a NaN start, +-inf on a NaN start."""
    a = np.array([[NAN, NAN, NAN, NAN],
                  [NAN, 1.0, -2.0, NAN],
                  [NAN, NAN, NAN, NAN],
                  [3.0, 4.0, -5.0, 6.0],
                  [NAN, INF, -INF, NAN],
                  [NAN, NAN, NAN, NAN]], dtype)
    b = np.array([NAN, NAN, 7.0, NAN, NAN, -INF], dtype)
    return a, b


# ------------------------------------------------------------------ schedules
def _stage(s):
    return s["S.1"]


def sched_default(s):
    """A register accumulator started from the current value."""


def sched_memory(s):
    """The reduction loop outside the spatial one: accumulation in S itself."""
    st = _stage(s)
    (r,) = st.reduce_axes
    st.reorder(r, st.axes[0])


def sched_allreduce(s):
    """The reduction over threads: lanes start from the identity."""
    st = _stage(s)
    (r,) = st.reduce_axes
    st.bind(r, "threadIdx.x")


def sched_rows_on_threads(s):
    st = _stage(s)
    st.bind(st.axes[0], "threadIdx.x")


def sched_rfactor(s):
    """Partials over a split of the row, each from the identity, then combined
    with the current value."""
    st = _stage(s)
    (r,) = st.reduce_axes
    _, ri = st.split(r, 2)
    st.rfactor(ri)


def sched_rfactor_whole(s):
    """rfactor over the whole reduction axis: the partials are the values
    themselves (NaN), and the combining stage reduces them."""
    st = _stage(s)
    (r,) = st.reduce_axes
    st.rfactor(r)


SCHEDULES = {f.__name__[6:]: f for f in (sched_default, sched_memory, sched_allreduce,
                                         sched_rows_on_threads, sched_rfactor,
                                         sched_rfactor_whole)}


def schedule(op, name):
    s = tcomp.Schedule(op)
    SCHEDULES[name](s)
    return s


def assert_same(got, want, what):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(got, want, err_msg=what)


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("ctype,dtype", [("float", np.float32), ("double", np.float64)])
def test_evaluate_follows_the_rule(op, ctype, dtype):
    a, b = data(dtype)
    got = tcomp.evaluate(program(op, ctype), a, b)
    assert not np.isnan(got).any()
    assert_same(got, expected(op, a, b), f"evaluate {op}")


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("op", ["min", "max"])
def test_sim_follows_the_rule_under_every_schedule(op, name):
    a, b = data()
    got = tcomp.build(schedule(program(op), name), target="sim")(a, b)
    assert_same(got, expected(op, a, b), f"sim {op}, schedule {name}")


@pytest.mark.parametrize("name", ["default", "memory", "allreduce"])
@pytest.mark.parametrize("op", ["min", "max"])
def test_empty_rows_give_the_identity_on_a_nan(op, name):
    """An empty row reduces to the identity, which then beats a NaN start
    (and leaves a number as it is)."""
    a, b = data()
    a = a[:, :0]
    want = expected(op, a, b)
    assert_same(tcomp.evaluate(program(op), a, b), want, "evaluate")
    assert_same(tcomp.build(schedule(program(op), name), target="sim")(a, b), want,
                f"sim, schedule {name}")


def test_no_reduction_index_keeps_the_pointwise_rule():
    """Without a reduction index `S(m) min= X(m)` is fmin(S(m), X(m)) per point:
    no identity enters, so NaN meeting NaN stays NaN (as np.fmin)."""
    op = tcomp.op("def f(float(M) X, float(M) B) -> (S) { S(m) = B(m)\n S(m) min= X(m) }")
    x = np.array([NAN, NAN, 1.0], np.float32)
    b = np.array([NAN, 2.0, NAN], np.float32)
    want = np.fmin(b, x)
    assert_same(tcomp.evaluate(op, x, b), want, "evaluate")
    assert_same(tcomp.build(tcomp.Schedule(op), target="sim")(x, b), want, "sim")


def test_the_fuzz_finding():
    """The shrunk reproducer of seed 3 pair 14492: O is NaN everywhere
    (`% 0` of a float), then `min=` over a row of it."""
    op = tcomp.op("def f(float(N, N, M) A) -> (O) {\n"
                  "  O(a, c) = (A(a, a, c) % 0)\n"
                  "  O(s, a) min= float32(O(k, a)) where s in 0:N\n}")
    a = np.ones((1, 1, 1), np.float32)
    with np.errstate(invalid="ignore"):
        assert_same(tcomp.evaluate(op, a), np.array([[INF]], np.float32), "evaluate")
        assert_same(tcomp.build(tcomp.Schedule(op), target="sim")(a),
                    np.array([[INF]], np.float32), "sim")
