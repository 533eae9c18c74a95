"""Shape specialisation as schedule data (schedule/specialize.py): conditions,
the variant's copy semantics, JSON round trips."""
import json

import pytest

import tcomp
from tcomp.schedule.specialize import SizeCondition

ROW = "def scale(float(M, D) X) -> (O) { O(i, d) = X(i, d) * 2.0 }"


@pytest.fixture
def op():
    return tcomp.op(ROW)


def vectorized(s):
    i, d = s["O"].axes
    do, di = s["O"].split(d, 4)
    s["O"].vectorize(di)
    return s


def test_conditions_read_hold_and_say_what_they_know():
    c = SizeCondition.parse("D%4==0 and  M >= 2 and D % 8 == 0 and K == 64", ("M", "D", "K"))
    assert c.text == "D % 4 == 0 and M >= 2 and D % 8 == 0 and K == 64"
    assert c.divisors() == {"D": 8} and c.fixed() == {"K": 64} and c.sizes() == ("D", "M", "K")
    assert c.holds({"D": 16, "M": 2, "K": 64})
    assert not c.holds({"D": 12, "M": 2, "K": 64}) and not c.holds({"D": 16, "M": 1, "K": 64})
    for text, yes, no in (("M < 4", 3, 4), ("M <= 4", 4, 5), ("M > 4", 5, 4), ("M == 4", 4, 3)):
        c = SizeCondition.parse(text, ("M",))
        assert c.holds({"M": yes}) and not c.holds({"M": no}), text


def test_a_variant_copies_the_schedule_so_far_and_then_goes_its_own_way(op):
    s = tcomp.Schedule(op)
    s["O"].bind(s["O"].axes[0], "blockIdx.x")
    fast = vectorized(s.specialize("D % 4 == 0"))
    s["O"].split(s["O"].axes[1], 8)  # the general schedule goes on alone
    assert [type(d).__name__ for d in fast.directives] == ["Bind", "Split", "Vectorize"]
    assert [type(d).__name__ for d in s.directives] == ["Bind", "Split"]
    assert s.specializations[0][1] is fast and fast.specialized_from is s
    assert not fast.specializations


def test_json_round_trip_keeps_every_variant(op):
    s = tcomp.Schedule(op)
    vectorized(s.specialize("D % 4 == 0"))
    s.specialize("M == 1")
    text = s.to_json()
    data = json.loads(text)
    assert [v["when"] for v in data["specialize"]] == ["D % 4 == 0", "M == 1"]
    assert [d["kind"] for d in data["specialize"][0]["directives"]] == ["Split", "Vectorize"]
    back = tcomp.Schedule.from_json(op, text)
    assert back.to_json() == text
    assert [c.text for c, _ in back.specializations] == ["D % 4 == 0", "M == 1"]


def test_a_schedule_without_variants_writes_what_it_always_wrote(op):
    s = vectorized(tcomp.Schedule(op))
    assert "specialize" not in json.loads(s.to_json())
    assert list(json.loads(s.to_json())) == ["tcomp_schedule", "directives"]
