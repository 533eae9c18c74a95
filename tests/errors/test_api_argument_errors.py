"""Arguments of the public API of the wrong shape (issue 22, defect 8): `sizes=` that is
not a mapping (a TypeError from dict() before), and `Stage.fuse` of three or more axes
that cannot be fused (checked before anything is fused: the schedule is left as it was)."""
from __future__ import annotations

import pytest

import tcomp

OP = "def t(float(A, B, C) X) -> (O) { O(a, b, c) +=! X(a, b, c) * X(a, b, r) }"


@pytest.fixture(scope="module")
def op():
    return tcomp.op(OP)


@pytest.mark.parametrize("sizes, got", [([1], "list [1]"), ("A", "str 'A'"), (0, "int 0"),
                                        ((("A", 2),), "tuple (('A', 2),)"),
                                        (list(range(100)), "list [0, 1, 2, 3, 4, 5, 6, 7, 8, "
                                                           "9, 10, 11...")])
# (not "cuda" alone: a parameter id "cuda" reads as the cuda marker in conftest.py)
@pytest.mark.parametrize("call", ["lower", "sim", "cuda:sm_90a"])
def test_sizes_not_a_mapping(op, call, sizes, got):
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes=sizes) if call == "lower" else tcomp.build(s, call, sizes=sizes)
    assert str(e.value) == ("lower: sizes must be a dict of size variable -> int (like "
                            f"{{'N': 1024}}), got {got}")


@pytest.mark.parametrize("call", ["lower", "sim", "cuda:sm_90a"])
def test_sizes_with_a_key_that_is_not_a_name(op, call):
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={3: 1}) if call == "lower" else tcomp.build(s, call, sizes={3: 1})
    assert str(e.value) == "lower: 3 is not a size variable of 't' (sizes: A, B, C)"


def fuse_error(make) -> str:
    s = tcomp.Schedule(tcomp.op(OP))
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        make(s)
    assert s.to_json() == before  # nothing fused
    return str(e.value)


def test_fuse_three_not_adjacent():
    def make(s):
        O = s["O"]
        a, b, c = O.axes
        O.fuse(b, c, O.reduce_axes[0])
    assert fuse_error(make) == ("fuse: cannot fuse a spatial and a reduction axis (Axis(O.c), "
                                "Axis(O.r, reduce))")

    def out_of_order(s):
        a, b, c = s["O"].axes
        s["O"].fuse(a, c, b)
    assert fuse_error(out_of_order) == "fuse: Axis(O.a) must be the loop directly outside Axis(O.c)"


def test_fuse_three_with_a_bound_axis():
    def make(s):
        O = s["O"]
        a, b, c = O.axes
        O.bind(c, "threadIdx.x")
        before = s.to_json()
        try:
            O.fuse(a, b, c)
        finally:
            assert s.to_json() == before
    with pytest.raises(tcomp.ScheduleError, match="fuse: axis 'c' is already bound/unrolled/"
                                                  "vectorized"):
        make(tcomp.Schedule(tcomp.op(OP)))


def test_fuse_three_removing_a_loop_a_stage_is_computed_at():
    op = tcomp.op("def u(float(A, B, C) X) -> (T, O) { T(a, b, c) = X(a, b, c) + 1.0 "
                  "O(a, b, c) = T(a, b, c) * 2.0 }")
    s = tcomp.Schedule(op)
    a, b, c = s["O"].axes
    s["T"].compute_at(s["O"], b)
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        s["O"].fuse(a, b, c)
    assert str(e.value) == ("fuse: stage 'T' is computed at 'O.b', which fusing would remove; "
                            "compute it at 'c' or after the fuse")
    assert s.to_json() == before
