"""`unroll(axis, factor=N)`: the loop stays a loop, the CUDA compiler is asked
to unroll it by N (`#pragma unroll N`; 1 keeps it rolled), the sim runs it as
a loop, results never change, and the directive replays from JSON."""
from __future__ import annotations

import re

import pytest

import tcomp
from tcomp.errors import ScheduleError

from ..lower.util import inputs_for, run_sim

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
SIZES = {"M": 8, "N": 16, "K": 24}


def _mm(factor, axis="k"):
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.bind(n, "threadIdx.x")
    C.unroll({"k": k, "m": m}[axis], factor=factor)
    return s


@pytest.mark.parametrize("factor", [1, 2, 8, 100])
def test_the_loop_stays_and_cuda_gets_the_pragma(factor):
    s = _mm(factor)
    text = str(tcomp.lower(s, sizes=SIZES))
    assert re.search(rf"for k in 0:24  @unroll_by\({factor}\)", text)
    src = tcomp.build(s, target="cuda", sizes=SIZES).source
    lines = src.split("\n")
    at = next(i for i, x in enumerate(lines) if "for (int k = 0; k < 24; ++k)" in x)
    assert lines[at - 1].strip() == f"#pragma unroll {factor}"
    assert src.count("#pragma unroll") == 1


@pytest.mark.parametrize("factor", [1, 3])
@pytest.mark.parametrize("axis", ["k", "m"])
def test_the_sim_gives_the_same_result(factor, axis):
    s = _mm(factor, axis)
    run_sim(s, inputs_for(MM, SIZES), SIZES)


def test_a_runtime_extent_keeps_its_factor():
    s = _mm(4)
    src = tcomp.build(s, target="cuda").source  # K only known at run time
    assert re.search(r"#pragma unroll 4\n\s*for \(int k = 0; k < K; \+\+k\)", src)


def test_without_factor_nothing_changes():
    s = tcomp.Schedule(MM)
    C = s["C"]
    C.unroll(C.reduce_axes[0])
    text = str(tcomp.lower(s, sizes=SIZES))
    assert "unroll_by" not in text and "for k in" not in text  # expanded: 24 copies
    assert "UnrollBy" not in s.to_json()


def test_json_replays_the_factor():
    s = _mm(2)
    js = s.to_json()
    assert '"kind": "UnrollBy"' in js and '"factor": 2' in js
    again = tcomp.Schedule.from_json(MM, js)
    assert str(tcomp.lower(again, sizes=SIZES)) == str(tcomp.lower(s, sizes=SIZES))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2"])
def test_a_factor_that_is_not_a_positive_int_is_refused(bad):
    s = tcomp.Schedule(MM)
    C = s["C"]
    with pytest.raises(ScheduleError, match=r"unroll: factor must be a positive int \(1: keep "
                                            r"the loop rolled\), got " + re.escape(repr(bad))):
        C.unroll(C.reduce_axes[0], factor=bad)


def test_unrolling_twice_is_refused():
    s = tcomp.Schedule(MM)
    C = s["C"]
    (k,) = C.reduce_axes
    C.unroll(k, factor=2)
    with pytest.raises(ScheduleError, match=r"unroll: axis .*k.* is already unrolled"):
        C.unroll(k)


def test_a_bound_axis_is_refused():
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    C.bind(n, "threadIdx.x")
    with pytest.raises(ScheduleError, match=r"unroll: axis .*n.* is already bound or vectorized"):
        C.unroll(n, factor=2)
    C.unroll(m, factor=2)
    with pytest.raises(ScheduleError, match=r"bind: axis .*m.* is unrolled/vectorized and "
                                            r"cannot be bound"):
        C.bind(m, "threadIdx.y")


def test_a_numpy_integer_factor_is_taken_and_recorded_as_an_int():
    """As split's factor: a NumPy integer (from a search's arrays) is an int."""
    import numpy as np
    s = _mm(np.int64(3))
    (d,) = [d for d in s.directives if type(d).__name__ == "UnrollBy"]
    assert d.factor == 3 and type(d.factor) is int
    assert '"factor": 3' in s.to_json()


def test_unrolling_twice_names_the_remedy():
    s = tcomp.Schedule(MM)
    C = s["C"]
    (k,) = C.reduce_axes
    C.unroll(k)
    with pytest.raises(ScheduleError, match=r"unroll: axis .*k.* is already unrolled \(an axis "
                                            r"takes one unroll: leave out the second call, or "
                                            r"give the first the factor you want\)"):
        C.unroll(k, factor=2)


def test_a_loop_that_picks_fragment_registers_is_expanded_whatever_its_factor():
    """As documented: the fragment pipeline's loop (k16 steps) names registers by
    its variable, so tensor_cores expands it even with factor=1; the K-tile loop
    keeps its pragma. The sim result is unchanged."""
    from ..bench.common import S as bench
    op = tcomp.op("def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                  "{ C(m, n) +=! A(m, k) * B(k, n) }")
    sizes = {"M": 30, "N": 32, "K": 80}
    s = bench.tc_gemm(op, bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3,
                      fragment_pipeline=2)[1]
    CF = s["C.fragment"]
    by_name = {a.name: a for a in CF.leaf_axes}
    CF.unroll(by_name["k_o"], factor=2)
    CF.unroll(by_name["k_i_o"], factor=1)
    src = tcomp.build(s, target="cuda", sizes=sizes).source
    assert re.search(r"#pragma unroll 2\n\s*for \(int k_o = 0;", src)
    assert "#pragma unroll 1" not in src and "for (int k_i_o" not in src
    run_sim(s, inputs_for(op, sizes), sizes)
