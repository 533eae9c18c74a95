"""Splitting a bound loop (found by the long fuzz run of issue 22, seed 1 pair 1028): the
bind stayed on the loop that split removed, the stage's loops ran unbound in every thread
of a block that another stage's bind made, and its updates raced (the sim: "overwrites P[0]
that several threads read since the last barrier"; the GPU: a wrong sum). split and tile
now refuse a bound axis, leaving the schedule as it was."""
from __future__ import annotations

import pytest

import tcomp

SRC = """def f(float(N) A) -> (O) {
    O(j) = A(j) * 2
    S(j) = A(j) + 1
    P(k) +=! S(j) + O(k)
}"""


def _bound():
    s = tcomp.Schedule(tcomp.op(SRC))
    P, O = s["P"], s["O"]
    P.bind(P.reduce_axes[0], "threadIdx.y")
    O.compute_at(P, P.reduce_axes[0])
    jo, ji = O.split(O.axes[0], 5)
    O.bind(ji, "threadIdx.y")
    s["S"].bind(s["S"].axes[0], "threadIdx.y")
    return s


def test_tile_of_a_bound_axis_is_refused_and_changes_nothing():
    s = _bound()
    P = s["P"]
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        P.tile(P.reduce_axes[0], P.axes[0], 16, 4)
    assert str(e.value) == ("tile: axis 'j' is bound to threadIdx.y; split it before binding, "
                            "and bind one of its parts")
    with pytest.raises(tcomp.ScheduleError) as e:
        P.tile(P.axes[0], P.reduce_axes[0], 4, 16)  # the bound axis second: nothing split
    assert s.to_json() == before


def test_split_of_a_bound_axis_is_refused():
    s = _bound()
    with pytest.raises(tcomp.ScheduleError) as e:
        s["S"].split(s["S"].axes[0], 2)
    assert str(e.value) == ("split: axis 'j' is bound to threadIdx.y; split it before binding, "
                            "and bind one of its parts")
