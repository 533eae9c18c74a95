"""Issue 22's long fuzz run, seed 4 pair 65201: `O` computed at loop `j` of the
statement that updates it in place (`O(j, k) = int64(O(j, k) - ...)`), whose `k` is
split with nparts=2. The region of `O` at `j` was not known (`k_o * ((N + 1) / 2)`, a
symbolic step), so the whole tensor was computed in every iteration of `j`, over the
rows earlier iterations had updated: row 0 came out as if never updated (not a cast
disagreement, as first triaged). Refused when lowered now; with the region known
(split by a factor) it runs."""
import json

import numpy as np
import pytest

import tcomp

OP = tcomp.op("""def f(float(N, N) A, int64(N) B) -> (O) {
    O(i, t) = B(t) where i in 0:N
    O(j, k) = int64(O(j, k) - A(j, k) * N)
}""")


def _schedule(split):
    return tcomp.Schedule.from_json(OP, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "ComputeAt", "stage": "O", "target": "O.1", "axis": "j"},
        dict({"kind": "Split", "stage": "O.1", "axis": "k", "factor": None, "nparts": None},
             **split)]}))


def test_a_region_not_known_at_an_in_place_update_is_refused():
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(_schedule({"nparts": 2}))
    assert str(e.value) == (
        "stage 'O' is computed at 'O.1.j', where 'O.1' updates 'O' in place, but the region "
        "of 'O' there is not known (it would be the whole tensor, computed again in every "
        "iteration, over the elements earlier iterations updated): compute 'O' at root, or "
        "split the loops of 'O.1' by constant factors (`factor=`) so that its region is "
        "known")


def test_the_region_of_a_row_runs_like_evaluate():
    A = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5], [3.0, 1.0, 0.25]], np.float32)
    B = np.array([1, -3, 7], np.int64)
    s = _schedule({"factor": 2})
    np.testing.assert_array_equal(tcomp.build(s, "sim")(A, B), tcomp.evaluate(OP, A, B))


def test_a_region_not_known_at_an_overwriting_statement_is_refused():
    """Seed 7 pair 24612 (the seed 7 long run, on a snapshot before the rule): the
    next statement overwrites every element (`O(j, k) = 7.5`) without reading it, and
    `O` was computed at its loop of a split by nparts: the whole tensor recomputed in
    every iteration put the first statement's values back over the rows already
    overwritten (got -2.0, evaluate 7.5)."""
    op = tcomp.op("""def f(double(3, K) A, float(N, M) B) -> (O) {
    O(k, m) = min(A(1, k), B(m, 0))
    O(v, i) = float64(7.5) where v in 0:K, i in 0:N
}""")
    s = tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "Split", "stage": "O.1", "axis": "i", "factor": None, "nparts": 2},
        {"kind": "ComputeAt", "stage": "O", "target": "O.1", "axis": "v"}]}))
    with pytest.raises(tcomp.LoweringError, match=r"^stage 'O' is computed at 'O.1.v', "
                       r"where 'O.1' updates 'O' in place, but the region of 'O' there is "
                       r"not known"):
        tcomp.lower(s)


def test_a_strided_region_at_an_in_place_update_is_refused():
    """Seed 8 pair 22374: `O` computed at O.1's `m`, then `m` split by 3 and `m_o`
    moved inside `k`: at `m_i` the region of `O` is the box m_i .. m_i + 3, but O.1
    updates only m_i and m_i + 3 there; O[3], updated at m_i = 0, was computed again
    at m_i = 1 (2 of 5 elements wrong on the sim). Refused, naming the dimension."""
    op = tcomp.op("""def f(int8(K, K) X, int16(N, N) A) -> (bool(K, N) O) {
    O(k, n) = X(k, k) > A(n, n)
    O(m, k) max= bool(X(m, 0)) where k in 0:N
}""")
    s = tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "ComputeAt", "stage": "O", "target": "O.1", "axis": "m"},
        {"kind": "Split", "stage": "O.1", "axis": "m", "factor": 3, "nparts": None},
        {"kind": "Reorder", "stage": "O.1", "axes": ["k", "m_o"]}]}))
    with pytest.raises(tcomp.LoweringError, match=r"^stage 'O' is computed at 'O.1.m_i', "
                       r"where 'O.1' updates 'O' in place, but its region there along "
                       r"dimension 0 \(4 elements\) is wider than what 'O.1' updates"):
        tcomp.lower(s, sizes={"K": 5, "N": 1})
    # without the reorder the loops inside m_o .. cover a block: it runs
    s = tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "ComputeAt", "stage": "O", "target": "O.1", "axis": "m"},
        {"kind": "Split", "stage": "O.1", "axis": "m", "factor": 3, "nparts": None}]}))
    rng = np.random.default_rng(3)
    X = rng.integers(-3, 3, (5, 5)).astype(np.int8)
    A = rng.integers(-3, 3, (1, 1)).astype(np.int16)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes={"K": 5, "N": 1})(X, A),
                                  tcomp.evaluate(op, X, A))
