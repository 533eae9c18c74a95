"""Errors of shape specialisation (Schedule.specialize, its JSON, specialised kernels):
each names the primitive or the call and the remedy."""
import json

import numpy as np
import pytest

import tcomp
from tcomp.specialized import SpecializedExportWarning

ROW = "def scale(float(M, D) X) -> (O) { O(i, d) = X(i, d) * 2.0 }"


@pytest.fixture
def s():
    return tcomp.Schedule(tcomp.op(ROW))


@pytest.mark.parametrize("cond, message", [
    (4, "specialize: the condition must be a str such as \"D % 4 == 0\" or \"N >= 1024 and K % 8 "
        "== 0\", got int"),
    ("D % 4", "specialize: cannot read 'D % 4' in 'D % 4': a condition is comparisons of a size "
              "with an integer joined by 'and': 'D % 4 == 0', 'N >= 1024', 'K == 4096' (also <, "
              "<=, >)"),
    ("D % 4 == 0 or M > 1", "specialize: cannot read 'D % 4 == 0 or M > 1' in 'D % 4 == 0 or M "
                            "> 1': a condition is"),
    ("N % 4 == 0", "specialize: 'N' in 'N % 4 == 0' is not a size of the op (sizes: M, D)"),
    ("D % 4 == 1", "specialize: 'D % 4 == 1': divisibility is written 'D % m == 0' with m an "
                   "integer from 2 to 2^62"),
    ("D % 1 == 0", "specialize: 'D % 1 == 0': divisibility is written 'D % m == 0'"),
    ("M > 99999999999999999999", "specialize: 'M > 99999999999999999999': the integer is out of "
                                 "range (at most 2^62 in magnitude)"),
    ("D == 6 and D % 4 == 0", "specialize: the condition 'D == 6 and D % 4 == 0' never holds (D "
                              "== 6 contradicts D % 4 == 0)"),
    ("D == 6 and D < 5", "specialize: the condition 'D == 6 and D < 5' never holds (D == 6 "
                         "contradicts D < 5)"),
    ("M == -1", "specialize: the condition 'M == -1' never holds (M == -1: sizes are not "
                "negative)"),
])
def test_a_condition_that_is_not_one(s, cond, message):
    with pytest.raises(tcomp.ScheduleError) as e:
        s.specialize(cond)
    assert str(e.value).startswith(message), str(e.value)
    assert not s.specializations  # nothing recorded


def test_a_second_variant_for_one_condition_and_a_variant_of_a_variant(s):
    fast = s.specialize("D % 4 == 0")
    with pytest.raises(tcomp.ScheduleError) as e:
        s.specialize("D%4 == 0")
    assert str(e.value) == "specialize: there is a variant for 'D % 4 == 0' already"
    with pytest.raises(tcomp.ScheduleError) as e:
        fast.specialize("M > 4")
    assert str(e.value) == ("specialize: this schedule is itself a variant (of a specialised "
                            "schedule); specialise the general one, with the conditions joined "
                            "by 'and'")


@pytest.mark.parametrize("field, message", [
    ({"when": "D % 4 == 0"}, "from_json: not a tcomp schedule: \"specialize\" must be a list of "
                             "objects {\"when\": condition, \"directives\": [...]}"),
    ([3], "from_json: specialize[0] must be an object with exactly the fields \"when\" (a "
          "condition) and \"directives\" (a list)"),
    ([{"when": "D % 4 == 0", "directives": [], "x": 1}], "from_json: specialize[0] must be an "
                                                         "object with exactly the fields"),
    ([{"when": "Q > 1", "directives": []}], "from_json: specialize[0]: 'Q' in 'Q > 1' is not a "
                                            "size of the op (sizes: M, D)"),
    ([{"when": "D > 1", "directives": {}}], "from_json: specialize[0]: \"directives\" must be a "
                                            "list of directive objects, got object"),
    ([{"when": "D > 1", "directives": [{"kind": "Split"}]}],
     "from_json: specialize[0]: directive 0 (Split) lacks the field 'stage'"),
    ([{"when": "D > 1", "directives": [{"kind": "Vectorize", "stage": "O", "axis": "z"}]}],
     "from_json: specialize[0]: directive 0: vectorize: stage 'O' has no axis 'z'"),
])
def test_a_specialize_field_that_is_not_one(s, field, message):
    text = json.dumps({"tcomp_schedule": 1, "directives": [], "specialize": field})
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.Schedule.from_json(s.op, text)
    assert message in str(e.value), str(e.value)


def test_a_variant_called_alone_refuses_sizes_outside_its_condition(s):
    fast = s.specialize("D % 4 == 0")
    do, di = fast["O"].split(fast["O"].axes[1], 4)
    fast["O"].vectorize(di)
    k = tcomp.build(s, target="sim")
    X = np.ones((2, 6), np.float32)
    with pytest.raises(tcomp.TcompError) as e:
        k.variants[0](X)
    assert str(e.value) == ("this variant runs only when D % 4 == 0; these inputs have D=6: call "
                            "the specialized kernel, which chooses the variant")
    np.testing.assert_array_equal(k.variants[1](X), X * 2)  # the general one takes any size


def test_a_specialized_cuda_kernel_exports_its_general_variant_and_says_so(s, tmp_path):
    s.specialize("D % 4 == 0")
    k = tcomp.build(s, target="cuda")
    path = str(tmp_path / "k.cubin")
    with pytest.warns(SpecializedExportWarning) as w:
        k.export(path)
    assert str(w[0].message) == (f"export: {path} holds the 'otherwise' variant only, which is "
                                 f"correct at every size; the faster variant(s) when D % 4 == 0 "
                                 f"are not exported (export each with k.variants[i].export(path) "
                                 f"and choose among them in your program)")
    assert open(path, "rb").read() == k.variants[1].cubin
    with pytest.raises(tcomp.TcompError, match=r"a specialized kernel has one cubin per variant: "
                                               r"read k.variants\[i\].cubin"):
        k.cubin
    assert isinstance(k.variants[0].cubin, bytes)


def test_strict_names_the_variant_that_declined(s):
    fast = s.specialize("M > 4")  # no divisibility: D's tail guard keeps the lanes apart
    do, di = fast["O"].split(fast["O"].axes[1], 4)
    fast["O"].vectorize(di)
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, target="cuda", strict=True)
    assert str(e.value).startswith("build(strict=True): lowering declined what the schedule "
                                   "asked for:\n  [when M > 4] scale_O: vectorize: loop 'd_i' "
                                   "runs lane by lane"), str(e.value)


def test_build_specialize_is_for_an_op():
    s = tcomp.Schedule(tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) }"))
    with pytest.raises(tcomp.TcompError, match="build: specialize= lets the automatic choice "
                                               "for an Op add variants; this call passes a "
                                               "Schedule"):
        tcomp.build(s, target="sim", specialize=True)
