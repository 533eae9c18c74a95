"""Reductions on data chosen to break them, not on standard-normal noise.

Random data almost never has a row whose every value is negative, so a max
reduction started from 0.0 instead of -inf passes every random test. Here each
reduction schedule (sequential, cross-thread allreduce, rfactor, a register
accumulator) runs on: all-negative rows for max, all-positive rows for min,
+-inf, NaN anywhere in a row (and rows of NaN only), magnitudes near float32's
overflow, and size-1 and size-0 dimensions.

The expected values are written out with NumPy here (not only taken from
`tcomp.evaluate`), following the rule README.md states: float max/min ignore
NaN (fmaxf/fminf) and start from their identity, so a row of NaNs reduces to
-inf (max) or +inf (min), like an empty row; `+=` propagates NaN and
overflows to inf. `evaluate` is checked against the same values.

tests/target_cuda/test_adversarial_cuda.py runs the same cases as CUDA (on the
CPU emulator, and on a GPU).
"""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

F32_MAX = float(np.finfo(np.float32).max)
NAN, INF = float("nan"), float("inf")

OPS = {
    "max": tcomp.op("def rowmax(float(M,N) A) -> (S) { S(m) max=! A(m, r_n) }"),
    "min": tcomp.op("def rowmin(float(M,N) A) -> (S) { S(m) min=! A(m, r_n) }"),
    "sum": tcomp.op("def rowsum(float(M,N) A) -> (S) { S(m) +=! A(m, r_n) }"),
}


def expected(kind: str, a: np.ndarray) -> np.ndarray:
    """The documented answer, independent of tcomp."""
    if kind == "max":
        return np.fmax.reduce(a, axis=1, initial=-INF)
    if kind == "min":
        return np.fmin.reduce(a, axis=1, initial=INF)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are the point here
        return a.astype(np.float64).sum(axis=1).astype(np.float32)  # same-sign: order-free


# ------------------------------------------------------------------ schedules
def sched_default(op):
    return tcomp.Schedule(op)


def sched_allreduce(op):
    """The reduction axis over threads: a cross-thread allreduce (warp shuffles
    on CUDA) whose idle lanes contribute the identity."""
    s = tcomp.Schedule(op)
    S = s["S"]
    (r,) = S.reduce_axes
    S.bind(r, "threadIdx.x")
    return s


def sched_rows_on_threads(op):
    """One row per thread, sequential reduction in each."""
    s = tcomp.Schedule(op)
    S = s["S"]
    (m,) = S.axes
    mo, mi = S.split(m, 4)
    S.bind(mo, "blockIdx.x")
    S.bind(mi, "threadIdx.x")
    return s


def sched_rfactor(op):
    """Partial reductions over a split of the row (C.rf, one partial per r_n_i,
    each started from the identity), then their combination."""
    s = tcomp.Schedule(op)
    S = s["S"]
    (r,) = S.reduce_axes
    ro, ri = S.split(r, 2)
    S.rfactor(ri)
    return s


def sched_local_accumulator(op):
    s = tcomp.Schedule(op)
    S = s["S"]
    SL = s.cache_write(S, "local")
    (m,) = S.axes
    S.bind(m, "threadIdx.x")
    SL.compute_at(S, m)
    return s


SCHEDULES = {f.__name__[6:]: f for f in (sched_default, sched_allreduce, sched_rows_on_threads,
                                         sched_rfactor, sched_local_accumulator)}


# ------------------------------------------------------------------ data
def _f32(rows):
    return np.array(rows, np.float32)


def data_all_negative(rng):
    """max of rows whose every value is negative: an identity of 0.0 would win."""
    return (-rng.uniform(0.5, 10.0, (5, 7))).astype(np.float32)


def data_all_positive(rng):
    """min of rows whose every value is positive: an identity of 0.0 would win."""
    return rng.uniform(0.5, 10.0, (5, 7)).astype(np.float32)


def data_infinities(rng):
    return _f32([[-INF, -INF, -INF, -INF, -INF],
                 [INF, -1.0, -2.0, -3.0, -4.0],
                 [-INF, INF, -INF, 2.0, -INF],
                 [-5.0, -4.0, -INF, -3.0, -2.0]])


def data_nans(rng):
    """NaN first, last, in the middle, and rows of NaN only: never the answer
    of max/min (fmaxf/fminf), an all-NaN row gives the identity."""
    return _f32([[NAN, NAN, NAN, NAN, NAN],
                 [NAN, -3.0, -1.0, -2.0, -4.0],
                 [-3.0, -1.0, NAN, -2.0, -4.0],
                 [3.0, 1.0, 2.0, 4.0, NAN],
                 [NAN, -INF, NAN, -INF, NAN]])


def data_near_overflow(rng):
    """Magnitudes near float32's largest: max/min exact; same-sign sums overflow to inf."""
    a = _f32([[F32_MAX, F32_MAX, 1.0, F32_MAX],
              [-F32_MAX, -F32_MAX, -F32_MAX, -F32_MAX],
              [-F32_MAX, -3e38, -2e38, -1e38],
              [1e38, 2e38, 3e38, F32_MAX]])
    return a


def data_one_column(rng):
    return (-rng.uniform(1.0, 2.0, (6, 1))).astype(np.float32)


def data_one_row(rng):
    return (-rng.uniform(1.0, 2.0, (1, 9))).astype(np.float32)


def data_empty_rows(rng):
    """N = 0: every row reduces over nothing and is the identity."""
    return np.zeros((3, 0), np.float32)


def data_no_rows(rng):
    return np.zeros((0, 4), np.float32)


DATA = {f.__name__[5:]: f for f in (data_all_negative, data_all_positive, data_infinities,
                                     data_nans, data_near_overflow, data_one_column,
                                     data_one_row, data_empty_rows, data_no_rows)}

# (reduction, data) pairs worth running: the mixed-sign data with everything,
# sums only where the IEEE result does not depend on the order of additions.
PAIRS = [(k, d) for k in ("max", "min") for d in DATA] + [
    ("sum", d) for d in ("all_negative", "all_positive", "infinities", "nans", "one_column",
                         "one_row", "empty_rows", "no_rows")] + [("sum", "overflow_positive")]


def data_overflow_positive(rng):
    """A sum of same-sign values near the largest float32 overflows to +inf."""
    return _f32([[F32_MAX, F32_MAX, 1.0], [1e38, 1e38, 1e38], [3e38, 2e38, -1.0]])


DATA["overflow_positive"] = data_overflow_positive


def case(kind: str, data: str, seed: int = 0):
    a = DATA[data](np.random.default_rng(seed))
    return OPS[kind], a, expected(kind, a)


def assert_result(got, want, what=""):
    """Exact match of infinities and NaN positions; values to float32 rounding."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(want) * np.sign(want),
                                  err_msg=f"{what}: infinities")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0, equal_nan=True, err_msg=what)


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("kind,data", PAIRS)
def test_evaluate_follows_the_documented_rule(kind, data):
    op, a, want = case(kind, data)
    assert_result(tcomp.evaluate(op, a), want, f"evaluate {kind} on {data}")


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("kind,data", PAIRS)
def test_sim_on_adversarial_data(kind, data, schedule):
    op, a, want = case(kind, data)
    k = tcomp.build(SCHEDULES[schedule](op), target="sim")
    assert_result(k(a), want, f"sim {kind} on {data}, schedule {schedule}")


def test_max_of_negative_rows_is_negative():
    """The pin of the max identity (tcomp/lower/ir.py `identity`): with
    every value in [-10, -0.5], no row's max may be 0.0 on any schedule."""
    op = OPS["max"]
    a = data_all_negative(np.random.default_rng(3))
    for name, make in SCHEDULES.items():
        got = tcomp.build(make(op), target="sim")(a)
        assert (got < 0).all(), f"schedule {name}: max of negative rows gave {got}"
        np.testing.assert_array_equal(got, a.max(axis=1), err_msg=name)


def test_softmax_of_negative_rows():
    """The usual consumer of a max reduction: softmax of all-negative logits
    far below zero: exp(I) alone underflows to 0 in float32, so only a max that
    really is the row's maximum gives rows that sum to 1."""
    op = tcomp.op("""def softmax(float(N, D) I) -> (O) {
        mx(n) max=! I(n, d)
        e(n, d) = exp(I(n, d) - mx(n))
        sm(n) +=! e(n, d)
        O(n, d) = e(n, d) / sm(n)
    }""")
    a = (-np.random.default_rng(4).uniform(104.0, 118.0, (3, 8))).astype(np.float32)
    s = tcomp.Schedule(op)
    s["mx"].bind(s["mx"].reduce_axes[0], "threadIdx.x")
    got = tcomp.build(s, target="sim")(a)
    want = np.exp(a - a.max(axis=1, keepdims=True))
    want = want / want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
