"""Issue 22's long fuzz run, seed 11 pair 93645 (shrunk): a global stage that
accumulates in memory (its reduction loop outside a spatial loop), computed at
a consumer's loop bound to threadIdx.y, whose region moves with that loop but is
not one-to-one in its threads: the consumer reads O(i, i) and a gathered
O(c, X(c) % N), so every thread computed all of O while the others read it (the
sim reported the race; on a GPU a racy kernel). Refused now
(block_regions.check_thread_regions); a region that is one-to-one in the threads
is accepted and right."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp

SRC = """def f(int32(N) X, float(2, N) B) -> (C) {
    O(a, c) +=! X(i) where a in 0:N, c in 0:N
    C(c, i) = (O(i, i) ? 1.0 : float(O(c, X(c) % N))) + B(0, i)
}"""
SCHEDULE = {"tcomp_schedule": 1, "directives": [
    {"kind": "Bind", "stage": "C", "axis": "i", "tag": "threadIdx.y"},
    {"kind": "Reorder", "stage": "O", "axes": ["i", "c"]},
    {"kind": "ComputeAt", "stage": "O", "target": "C", "axis": "i"}]}


def test_an_accumulating_region_not_apart_between_threads_is_refused():
    s = tcomp.Schedule.from_json(tcomp.op(SRC), json.dumps(SCHEDULE))
    with pytest.raises(tcomp.ScheduleError, match="stage 'O' \\(global scope\\) accumulates in "
                                                  "'O' .* inside its thread loop\\(s\\) 'i' "
                                                  "\\(threadIdx.y\\).* is not provably apart "
                                                  "from one thread to the next"):
        tcomp.lower(s, sizes={"N": 2})


def test_the_fuzzers_pair_replays_as_refused():
    src = """def f(int32(N) float4_shared, float(2, N) ax0, bfloat16(N, 2) A, int32(N) float4_shared_shared) -> (C) {
    O(float4, char16_t) +=! float4_shared(i) where float4 in 0:N, char16_t in 0:N
    float4_shared_local_acc +=! min(uint8((double(3.0) * !(float4_shared_shared(float4)))), (N && !(float4 == float4)))
    C(char16_t, atomicAdd, i) = atan2(max(pow((O(i, i) ? N : O(char16_t, float4_shared(char16_t) % N)), (ax0(0, i) + float4_shared_local_acc)), float4_shared_shared(char16_t)), log(hypot((O(char16_t, char16_t) != float4_shared_local_acc), min(float4_shared_shared(atomicAdd), 2))))
}"""  # noqa: E501
    js = {"tcomp_schedule": 1, "directives": [
        {"kind": "Bind", "stage": "C", "axis": "i", "tag": "threadIdx.y"},
        {"kind": "Reorder", "stage": "O", "axes": ["i", "char16_t"]},
        {"kind": "ComputeAt", "stage": "O", "target": "C", "axis": "i"}]}
    s = tcomp.Schedule.from_json(tcomp.op(src), json.dumps(js))
    with pytest.raises(tcomp.ScheduleError, match="is not provably apart from one thread"):
        tcomp.lower(s, sizes={"N": 2})


def test_a_region_one_to_one_in_the_threads_is_accepted_and_right():
    src = """def g(float(N, N, R) X) -> (C) {
    O(a, c) +=! X(a, c, r)
    C(i, j) = O(i, j) * 2.0
}"""
    s = tcomp.Schedule(tcomp.op(src))
    C, O = s["C"], s["O"]
    i, j = C.axes
    C.bind(i, "threadIdx.y")
    a, c = O.axes
    (r,) = O.reduce_axes
    O.reorder(r, c)  # the reduction outside a spatial loop: it accumulates in memory
    O.compute_at(C, i)
    sizes = {"N": 4, "R": 3}
    X = np.random.default_rng(0).random((4, 4, 3), dtype=np.float32)
    got = tcomp.build(s, target="sim", sizes=sizes)(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(tcomp.evaluate(s.op, X)), rtol=1e-6)


def _two_thread_loops(src):
    s = tcomp.Schedule(tcomp.op(src))
    C, O = s["C"], s["O"]
    i, j = C.axes
    C.bind(i, "threadIdx.y")
    C.bind(j, "threadIdx.x")
    (x,) = O.axes
    (r,) = O.reduce_axes
    O.reorder(r, x)
    O.compute_at(C, j)
    return s


def test_two_thread_loops_that_overlap_jointly_are_refused():
    """O(2 i + j), j over 0:3: each loop alone moves the region by at least its width,
    but threads (0, 2) and (1, 0) both sum into O[2] (found in review)."""
    s = _two_thread_loops("""def g(float(N, R) X) -> (C) {
    O(x) +=! X(x, r)
    C(i, j) = O(2 * i + j) * 2.0 where i in 0:4, j in 0:3
}""")
    with pytest.raises(tcomp.ScheduleError, match="inside its thread loop\\(s\\) 'i' "
                                                  "\\(threadIdx.y\\), 'j' \\(threadIdx.x\\)"):
        tcomp.lower(s, sizes={"N": 12, "R": 3})


def test_two_thread_loops_as_a_mixed_radix_are_accepted_and_right():
    s = _two_thread_loops("""def g(float(N, R) X) -> (C) {
    O(x) +=! X(x, r)
    C(i, j) = O(3 * i + j) * 2.0 where i in 0:4, j in 0:3
}""")
    X = np.random.default_rng(1).random((12, 3), dtype=np.float32)
    got = tcomp.build(s, target="sim", sizes={"N": 12, "R": 3})(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(tcomp.evaluate(s.op, X)), rtol=1e-6)


def test_two_block_loops_that_overlap_jointly_are_refused():
    s = tcomp.Schedule(tcomp.op("""def g(float(N, R) X) -> (C) {
    O(x) +=! X(x, r)
    C(i, j) = O(2 * i + j) * 2.0 where i in 0:4, j in 0:3
}"""))
    C, O = s["C"], s["O"]
    i, j = C.axes
    C.bind(i, "blockIdx.y")
    C.bind(j, "blockIdx.x")
    (x,) = O.axes
    (r,) = O.reduce_axes
    O.reorder(r, x)
    O.compute_at(C, j)
    with pytest.raises(tcomp.ScheduleError, match="inside its block loop\\(s\\) 'i' \\(blockIdx.y\\), "
                                                  "'j' \\(blockIdx.x\\).* not provably apart "
                                                  "from one block to the next"):
        tcomp.lower(s, sizes={"N": 12, "R": 3})
