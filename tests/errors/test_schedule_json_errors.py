"""Schedule files that are not schedules (`Schedule.from_json`, `tcomp ... --schedule`):
every malformed directive is a ScheduleError naming the directive, its index in the
list and the field; JSON nested deeper than Python's recursion limit is one too (it
was a RecursionError)."""
from __future__ import annotations

import json

import pytest

import tcomp
from tcomp.cli import main

OP = "def scale(float(M, N) X) -> (O) { O(i, j) = X(i, j) * 2 }"


@pytest.fixture(scope="module")
def op():
    return tcomp.op(OP)


def from_json_error(op, text) -> str:
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.Schedule.from_json(op, text)
    return str(e.value)


def schedule(*directives) -> str:
    return json.dumps({"tcomp_schedule": 1, "directives": list(directives)})


SPLIT = {"kind": "Split", "stage": "O", "axis": "i", "factor": 4, "nparts": None}
PREFIX = "from_json: not a tcomp schedule: "


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"tcomp_schedule": 1, "directives": ' + "[" * 100_000
                                  + "]" * 100_000 + "}",
                                  '{"a": ' * 50_000 + "1" + "}" * 50_000])
def test_deeply_nested_json(op, text):
    assert from_json_error(op, text) == ("from_json: not a tcomp schedule (its JSON is nested "
                                         "too deeply to be one)")


@pytest.mark.parametrize("directive, message", [
    ({k: v for k, v in SPLIT.items() if k != "nparts"},
     "directive 1 (Split) lacks the field 'nparts' (a Split has stage, axis, factor, nparts)"),
    ({"kind": "Explode", "stage": "O"},
     "directive 1 has an unknown kind 'Explode' (kinds: Split, Tile, Reorder, Fuse, Bind, "),
    ({"stage": "O"}, "directive 1 has no \"kind\" (kinds: Split, "),
    ({"kind": 3, "stage": "O"}, "directive 1 has a kind that is not a string (integer 3) "),
    ({"kind": "E" * 100}, "directive 1 has an unknown kind '" + "E" * 37 + "...' (kinds: "),
    # 40 characters are shown whole, 41 are cut (mutant 0dd62f3797 of the checkers' run)
    ({"kind": "E" * 40}, "directive 1 has an unknown kind '" + "E" * 40 + "' (kinds: "),
    ({"kind": "E" * 41}, "directive 1 has an unknown kind '" + "E" * 37 + "...' (kinds: "),
    (dict(SPLIT, x=1), "directive 1 (Split) has an unknown field 'x' (a Split has stage, axis, "
                       "factor, nparts)"),
    (dict(SPLIT, factor="4"), "directive 1 (Split) field 'factor' must be an integer or null, "
                              "got string \"4\""),
    (dict(SPLIT, factor=4.0), "directive 1 (Split) field 'factor' must be an integer or null, "
                              "got number 4.0"),
    (dict(SPLIT, factor=True), "directive 1 (Split) field 'factor' must be an integer or null, "
                               "got true"),
    (dict(SPLIT, stage=None), "directive 1 (Split) field 'stage' must be a string, got null"),
    (dict(SPLIT, axis=["i"]), "directive 1 (Split) field 'axis' must be a string, got list"),
    ({"kind": "Reorder", "stage": "O", "axes": "ij"},
     "directive 1 (Reorder) field 'axes' must be a list of strings, got string \"ij\""),
    ({"kind": "Reorder", "stage": "O", "axes": [["j"], "i"]},
     "directive 1 (Reorder) field 'axes' must be a list of strings, got list"),
    ({"kind": "UnrollBy", "stage": "O", "axis": "j", "factor": None},
     "directive 1 (UnrollBy) field 'factor' must be an integer, got null"),
    ({"kind": "CacheRead", "tensor": "X", "scope": "shared", "readers": {"O": 1}},
     "directive 1 (CacheRead) field 'readers' must be a list of strings, got object"),
    (7, "directive 1 must be a JSON object with a \"kind\", got integer 7"),
    ("x" * 100, "directive 1 must be a JSON object with a \"kind\", got string \"" + "x" * 36
     + "..."),
])
def test_malformed_directive(op, directive, message):
    good = {"kind": "Bind", "stage": "O", "axis": "j", "tag": "threadIdx.x"}
    assert from_json_error(op, schedule(good, directive)).startswith(PREFIX + message)


@pytest.mark.parametrize("directives, got", [(3, "integer 3"), ({"a": 1}, "object"),
                                             (None, "null"), ("[]", "string \"[]\"")])
def test_directives_not_a_list(op, directives, got):
    text = json.dumps({"tcomp_schedule": 1, "directives": directives})
    assert from_json_error(op, text) == (PREFIX + "\"directives\" must be a list of directive "
                                         f"objects, got {got}")


def test_no_directives_field(op):
    assert from_json_error(op, '{"tcomp_schedule": 1}') == (
        PREFIX + "\"directives\" must be a list of directive objects, got none")


def test_every_directive_written_reads_back(op):
    s = tcomp.Schedule(op)
    O = s["O"]
    i, j = O.axes
    io, ii = O.split(i, nparts=2)
    O.bind(io, "blockIdx.x")
    jo, ji = O.split(j, 4)
    O.reorder(ii, jo)
    O.bind(ji, "threadIdx.x")
    O.unroll(ii, 2)
    assert tcomp.Schedule.from_json(op, s.to_json()).to_json() == s.to_json()


def test_cli_deeply_nested_schedule(tmp_path, capsys):
    src, sched = tmp_path / "s.tc", tmp_path / "deep.json"
    src.write_text(OP)
    sched.write_text("[" * 100_000 + "]" * 100_000)
    rc = main(["run", str(src), "--schedule", str(sched), "--sizes", "M=2,N=3",
               "--target", "sim"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (f"tcomp: {sched}: from_json: not a tcomp schedule (its JSON is nested too "
                   f"deeply to be one)\n")
