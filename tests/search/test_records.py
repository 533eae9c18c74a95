"""Tuning records: the line format, validation on load, durability after
kill -9, resume, and `best`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import tcomp
from tcomp.search import (MeasureInput, MeasureResult, Record, RecordCheckWarning, Records,
                          RecordsError, RecordsWarning, best)
from tcomp.search.records import FIELDS
from tests.search.fake_programs import MM
from tests.search.test_sim_runner import tiled

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIZES = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(scope="module")
def op():
    return tcomp.op(MM)


def cand(op, t, target="cuda", sizes=SIZES):
    return MeasureInput.of(tiled(op, t), sizes, target)


def filled(path, op):
    """A file with a fast, a slow, a failed and a foreign-device record."""
    recs = Records(path)
    recs.add(cand(op, 8), MeasureResult((2.0, 1.0, 3.0), device="H200"), predicted_ms=1.5)
    recs.add(cand(op, 4), MeasureResult((5.0,), device="H200"))
    recs.add(cand(op, 16), MeasureResult(None, "timeout", "took too long", 0.5, "H200"))
    return recs


def test_a_line_holds_every_field_in_order(tmp_path, op):
    path = tmp_path / "r.jsonl"
    filled(path, op)
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    d = json.loads(lines[0])
    assert list(d) == list(FIELDS)
    assert d["tcomp_record"] == 2 and d["op"] == "matmul" and d["sizes"] == SIZES
    assert d["plan"] is None  # measured without a plan (MeasureInput.of a hand schedule)
    assert d["target"] == "cuda" and d["device"] == "H200"
    assert d["times_ms"] == [2.0, 1.0, 3.0] and d["median_ms"] == 2.0
    assert d["error"] is None and d["predicted_ms"] == 1.5
    assert d["schedule"] == json.loads(tiled(op, 8).to_json())
    assert d["tcomp_version"] == tcomp.__version__ and d["time"].endswith("+00:00")
    assert d["op_hash"] == tcomp.search.op_hash(op)
    f = json.loads(lines[2])
    assert (f["error"], f["message"], f["times_ms"], f["median_ms"]) == ("timeout",
                                                                         "took too long", None,
                                                                         None)


def test_reload_resume_and_best(tmp_path, op):
    path = tmp_path / "r.jsonl"
    filled(path, op)
    recs = Records(path)
    assert len(recs) == 3 and [r.line for r in recs] == [1, 2, 3]
    assert recs.measured(cand(op, 8)) and recs.measured(cand(op, 16))  # failed: measured too
    assert not recs.measured(cand(op, 2))
    assert not recs.measured(cand(op, 8, target="sim"))
    assert not recs.measured(cand(op, 8, sizes={"M": 64, "N": 64, "K": 32}))
    assert recs.best(op, SIZES).median_ms == 2.0
    s = best(path, op, SIZES)
    assert isinstance(s, tcomp.Schedule) and s.to_json() == tiled(op, 8).to_json()
    # appending after a reload keeps every line
    recs.add(cand(op, 2), MeasureResult((0.5,), device="H200"))
    assert best(path, op, SIZES).to_json() == tiled(op, 2).to_json()
    assert len(Records(path)) == 4


def test_best_of_a_sim_run_is_the_best_prediction(tmp_path, op):
    path = tmp_path / "r.jsonl"
    recs = Records(path)
    for t, p in ((8, 3.0), (4, 1.0), (2, 2.0)):
        recs.add(cand(op, t, "sim"), MeasureResult(None, device="sim"), predicted_ms=p)
    recs.add(cand(op, 16, "sim"), MeasureResult(None, "wrong_result", "off", 0.1, "sim"),
             predicted_ms=0.1)
    assert best(path, op, SIZES, target="sim").to_json() == tiled(op, 4).to_json()
    # the target comes from the records when none is given (issue 26 item 6: it was "cuda",
    # and a file of sim records was refused)
    assert best(path, op, SIZES).to_json() == tiled(op, 4).to_json()
    assert Records(path).best(op, SIZES).target == "sim"


def test_best_without_a_target_takes_it_from_the_records(tmp_path, op):
    path = tmp_path / "r.jsonl"
    recs = Records(path)
    recs.add(cand(op, 8, "sim"), MeasureResult(None, device="sim"), predicted_ms=1.0)
    recs.add(cand(op, 4, "cuda:sm_80"), MeasureResult((5.0,), device="A100"))
    with pytest.raises(RecordsError) as e:
        best(path, op, SIZES)
    assert str(e.value) == (f"best: {path} holds records of 'matmul' at M=64,K=64,N=64 for "
                            f"several targets (cuda:sm_80, sim): pass target= one of them")
    assert best(path, op, SIZES, target="cuda:sm_80").to_json() == tiled(op, 4).to_json()
    recs.add(cand(op, 2), MeasureResult((9.0,), device="H200"))  # "cuda" wins among several
    assert best(path, op, SIZES).to_json() == tiled(op, 2).to_json()


def test_best_errors(tmp_path, op):
    path = tmp_path / "r.jsonl"
    with pytest.raises(RecordsError) as e:
        best(path, op, SIZES)
    assert str(e.value) == (f"best: {path} has no record of 'matmul' at M=64,K=64,N=64 for "
                            f"target 'cuda' (the file holds no records)")
    filled(path, op)
    with pytest.raises(RecordsError) as e:
        best(path, op, {"M": 64, "N": 64, "K": 32})
    assert str(e.value) == (f"best: {path} has no record of 'matmul' at M=64,K=32,N=64 for "
                            f"target 'cuda' (it holds: 'matmul' at M=64,K=64,N=64 for 'cuda')")
    Records(path).add(cand(op, 8, sizes={"M": 8, "N": 8, "K": 8}),
                      MeasureResult(None, "compile", "nvrtc", 0.1, "H200"))
    with pytest.raises(RecordsError) as e:
        best(path, op, {"M": 8, "N": 8, "K": 8})
    assert str(e.value) == (f"best: every one of the 1 records of 'matmul' at M=8,K=8,N=8 for "
                            f"target 'cuda' in {path} failed (compile: 1)")
    Records(path).add(cand(op, 2), MeasureResult((0.1,), device="A100"))
    with pytest.raises(RecordsError) as e:
        best(path, op, SIZES)
    assert str(e.value) == (f"best: {path} has timed records of 'matmul' from several devices "
                            f"(A100, H200); times from different devices do not compare: pass "
                            f"device= one of them")
    assert best(path, op, SIZES, device="H200").to_json() == tiled(op, 8).to_json()
    assert best(path, op, SIZES, device="A100").to_json() == tiled(op, 2).to_json()
    with pytest.raises(RecordsError) as e:
        best(path, op, SIZES, device="V100")
    assert str(e.value) == (f"best: {path} has no valid record of 'matmul' on device 'V100' "
                            f"(devices with valid records: A100, H200)")
    with pytest.raises(RecordsError, match="best: op must be a tcomp.Op, got str"):
        best(path, "matmul", SIZES)
    with pytest.raises(tcomp.TcompError, match="best: sizes must give every size of 'matmul' "
                                               r"\(M, K, N\); missing K"):
        best(path, op, {"M": 64, "N": 64})


def test_best_with_neither_times_nor_predictions(tmp_path, op):
    path = tmp_path / "r.jsonl"
    Records(path).add(cand(op, 8, "sim"), MeasureResult(None, device="sim"))
    with pytest.raises(RecordsError) as e:
        best(path, op, SIZES, target="sim")
    assert str(e.value) == (f"best: the 1 valid records of 'matmul' at M=64,K=64,N=64 for target "
                            f"'sim' in {path} have neither times nor predicted times to rank "
                            f"them by")


def _break_first_line(path) -> None:
    """The first (the best) line's schedule no longer replays; it still loads."""
    lines = path.read_text().splitlines()
    d = json.loads(lines[0])
    d["schedule"]["directives"][0]["stage"] = "Q"
    lines[0] = json.dumps(d)
    path.write_text("\n".join(lines) + "\n")


def test_a_best_record_that_no_longer_replays_is_passed_over(tmp_path, op):
    path = tmp_path / "r.jsonl"
    filled(path, op)
    _break_first_line(path)
    with pytest.warns(RecordCheckWarning) as w:
        s = best(path, op, SIZES)
    assert s.to_json() == tiled(op, 4).to_json()  # the next best
    assert [str(x.message) for x in w] == [
        f"{path}:1: the best remaining record of 'matmul' is passed over: its re-check on the "
        f"sim failed (schedule: ScheduleError: schedule: no stage named 'Q' (stages: C))"]
    assert Records(path).best(op, SIZES, check=False).line == 1  # unchecked: as ranked


def test_a_best_record_that_computes_a_wrong_result_is_passed_over(tmp_path, op, monkeypatch):
    from tests.search.test_resume import plant_wrong_result
    path = tmp_path / "r.jsonl"
    filled(path, op)
    plant_wrong_result(monkeypatch, tiled(op, 8).to_json())
    with pytest.warns(RecordCheckWarning, match=r"r.jsonl:1: the best remaining record of "
                                                r"'matmul' is passed over: its re-check on the sim "
                                                r"failed \(wrong_result: output 'C': "):
        assert best(path, op, SIZES).to_json() == tiled(op, 4).to_json()


def test_when_every_valid_record_fails_its_re_check(tmp_path, op):
    path = tmp_path / "r.jsonl"
    Records(path).add(cand(op, 8), MeasureResult((1.0,), device="H200"))
    _break_first_line(path)
    with pytest.warns(RecordCheckWarning), pytest.raises(RecordsError) as e:
        best(path, op, SIZES)
    assert str(e.value) == (f"best: every one of the 1 valid records of 'matmul' at "
                            f"M=64,K=64,N=64 for target 'cuda' in {path} failed its re-check on "
                            f"the sim (see the warnings)")


def test_a_candidate_counts_by_its_last_line(tmp_path, op):
    """A re-measured timeout, or a failed re-check tune recorded: the last line
    of a candidate is its result."""
    path = tmp_path / "r.jsonl"
    recs = filled(path, op)
    recs.add(cand(op, 8), MeasureResult(None, "wrong_result", "re-checked", 0.1, "sim"))
    recs.add(cand(op, 16), MeasureResult((0.5,), device="H200"))
    assert [r.line for r in Records(path).latest(op, SIZES, "cuda")] == [4, 2, 5]
    assert Records(path).best(op, SIZES).line == 5
    assert len(Records(path).matching(op, SIZES, "cuda")) == 5


def test_an_op_the_oracle_cannot_check_is_re_checked_by_replay_and_lowering(tmp_path):
    from tcomp.search.recheck import recheck
    g = tcomp.op("def g(float(N) X, int32(M) I) -> (O) { O(i) = X(I(i)) }")
    s = tcomp.Schedule(g)
    assert recheck(g, {"N": 4, "M": 8}, s.to_json()).ok
    bad = json.loads(s.to_json())
    bad["directives"] = [{"kind": "Split", "stage": "O", "axis": "q", "factor": 2,
                          "nparts": None}]
    res = recheck(g, {"N": 4, "M": 8}, json.dumps(bad))
    assert res.error == "schedule" and res.message.startswith("ScheduleError: ")


@pytest.mark.parametrize("depth", [33, 100000])
def test_a_line_nested_too_deeply_is_an_error_not_a_recursion_error(tmp_path, op, depth):
    path = tmp_path / "r.jsonl"
    d = good_line(op)
    d["plan"] = {"inline": [], "stages": {"C": {"rule": "flat", "x": {}}}}
    inner = d["plan"]["stages"]["C"]
    for _ in range(min(depth, 40)):
        inner["x"] = {"x": {}}
        inner = inner["x"]
    text = json.dumps(d) if depth < 1000 else "[" * depth + "]" * depth
    path.write_text(json.dumps(good_line(op)) + "\n" + text + "\n")
    with pytest.raises(RecordsError) as e:
        Records(path)
    assert str(e.value) == (f"{path}:2: nested too deeply to read (more than 32 levels); not a "
                            f"tcomp record")


# ------------------------------------------------------------------ validation on load
def good_line(op) -> dict:
    return json.loads(Record.of(cand(op, 8), MeasureResult((1.0,), device="H200")).to_line())


@pytest.mark.parametrize("edit, message", [
    (lambda d: [1, 2], "not a tcomp record (a JSON list, expected an object)"),
    (lambda d: {"hello": 1}, 'not a tcomp record (no "tcomp_record" format field)'),
    (lambda d: dict(d, tcomp_record=3), "record format version 3 is not supported; this tcomp "
                                        "reads versions 1 and 2 (written by a newer tcomp? "
                                        "upgrade tcomp to read it)"),
    (lambda d: dict(d, tcomp_record=0), "record format version 0 is not supported; this tcomp "
                                        "reads versions 1 and 2"),
    (lambda d: dict(d, tcomp_record=True), "record format version True is not supported"),
    (lambda d: dict(d, tcomp_record=1), "unknown fields plan, search"),  # not in version 1
    (lambda d: dict(d, search={"run": "r", "round": 0, "rank": 0, "pool": 1, "elapsed_s": 0}),
     'field "search" must be null or {"run": text, "round": int >= 1, "rank": int >= 0, '
     '"pool": int > rank, "elapsed_s": seconds >= 0}, got {"run": "r", "round": 0, "rank": 0, '
     '"pool": 1, "elapsed_s": 0}'),
    (lambda d: dict(d, search={"run": "r"}), 'field "search" must be null or {"run": text, '),
    (lambda d: dict(d, plan=[1]), 'field "plan" must be null or a plan object {"inline": '
                                  '[stage, ...], "stages": {stage: {"rule": name, parameter: '
                                  'value, ...}}}'),
    (lambda d: dict(d, plan={"inline": [3], "stages": {}}), 'field "plan" must be null or a plan '
                                                             'object'),
    (lambda d: dict(d, plan={"inline": [], "stages": {"C": {"bm": 8}}}),
     'field "plan" must be null or a plan object {"inline": [stage, ...], "stages": {stage: '
     '{"rule": name, parameter: value, ...}}}; stage "C" has {"bm": 8}'),
    (lambda d: {k: v for k, v in d.items() if k not in ("op", "time")}, "missing fields op, time"),
    (lambda d: dict(d, extra=1), "unknown field extra"),
    (lambda d: dict(d, device=3), 'field "device" must be a string, got 3'),
    (lambda d: dict(d, sizes={"M": -1}), 'field "sizes" must map size names to positive ints, '
                                         'got {"M": -1}'),
    (lambda d: dict(d, schedule="x"), 'field "schedule" must be a schedule object from '
                                      'Schedule.to_json()'),
    (lambda d: dict(d, error="slow"), 'field "error" must be null or one of schedule, lowering, '
                                      'compile, runtime, wrong_result, timeout, crash, got "slow"'),
    (lambda d: dict(d, times_ms=[]), 'field "times_ms" must be null or a non-empty list of '
                                     'times, got []'),
    (lambda d: dict(d, times_ms=["1"]), 'field "times_ms" must be null or a non-empty list of '
                                        'times, got ["1"]'),
    (lambda d: dict(d, error="crash"), 'a failed record (error "crash") has times'),
    (lambda d: dict(d, median_ms=7.0), 'field "median_ms" (7.0) is not the median of "times_ms" '
                                       '(1.0)'),
    (lambda d: dict(d, times_ms=None), 'field "median_ms" is set but "times_ms" is null'),
    (lambda d: dict(d, build_s="fast"), 'field "build_s" must be a number, got "fast"'),
    (lambda d: dict(d, predicted_ms=False), 'field "predicted_ms" must be a number, got false'),
])
def test_a_corrupt_or_foreign_line_is_an_error_naming_file_and_line(tmp_path, op, edit, message):
    path = tmp_path / "r.jsonl"
    good = json.dumps(good_line(op))
    path.write_text(good + "\n\n" + json.dumps(edit(good_line(op))) + "\n" + good + "\n")
    with pytest.raises(RecordsError) as e:
        Records(path)
    assert str(e.value).startswith(f"{path}:3: {message}")


def test_version_1_lines_still_load_without_a_plan(tmp_path, op):
    """A file written before plans were kept (format 1) loads, its records
    have no plan, and new (version 2) lines are appended after them."""
    path = tmp_path / "r.jsonl"
    old = {k: v for k, v in good_line(op).items() if k not in ("plan", "search")}
    old["tcomp_record"] = 1
    path.write_text(json.dumps(old) + "\n")
    recs = Records(path)
    assert len(recs) == 1 and recs.records[0].plan is None and recs.records[0].median_ms == 1.0
    plan = {"inline": [], "stages": {"C": {"rule": "flat", "threads": 64, "vec": 1}}}
    recs.add(cand(op, 4), MeasureResult((2.0,), device="H200"), plan=plan)
    again = Records(path)
    assert [r.plan for r in again] == [None, plan] and again.records[0].search is None
    assert [json.loads(x)["tcomp_record"] for x in path.read_text().splitlines()] == [1, 2]


def test_a_plan_that_is_not_a_plan_cannot_be_recorded(op):
    with pytest.raises(RecordsError) as e:
        Record.of(cand(op, 8), MeasureResult((1.0,), device="H200"), plan="C:flat")
    assert str(e.value) == ('Record.of: cannot record this candidate: field "plan" must be null '
                            'or a plan object {"inline": [stage, ...], "stages": {stage: '
                            '{"rule": name, parameter: value, ...}}}')


def test_a_line_that_is_not_json(tmp_path, op):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good_line(op)) + "\n{oops\n" + json.dumps(good_line(op)) + "\n")
    with pytest.raises(RecordsError) as e:
        Records(path)
    assert str(e.value).startswith(f"{path}:2: not a JSON line (JSONDecodeError: ")
    assert str(e.value).endswith("; records files hold one JSON object per line")
    path.write_bytes(b"\xff\xfe\n")
    with pytest.raises(RecordsError, match=r":1: not a JSON line \(UnicodeDecodeError: "):
        Records(path)


def test_an_unreadable_file(tmp_path):
    with pytest.raises(RecordsError, match=f"records: cannot read {tmp_path} "):
        Records(tmp_path)


def test_a_truncated_last_line_is_skipped_with_a_warning_and_cut_off(tmp_path, op):
    path = tmp_path / "r.jsonl"
    filled(path, op)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"tcomp_record": 1, "op_ha')
    with pytest.warns(RecordsWarning, match=f"{path}:4: the last line is incomplete \\(a run was "
                                            f"killed while writing it\\); it is ignored and will "
                                            f"be cut off at the next append"):
        recs = Records(path)
    assert len(recs) == 3
    recs.add(cand(op, 2), MeasureResult((9.0,), device="H200"))
    assert path.read_bytes().startswith(whole) and len(Records(path)) == 4


def test_a_complete_last_line_without_its_newline(tmp_path, op):
    path = tmp_path / "r.jsonl"
    filled(path, op)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    recs = Records(path)
    assert len(recs) == 3
    recs.add(cand(op, 2), MeasureResult((9.0,), device="H200"))
    assert len(Records(path)) == 4


def test_append_needs_a_record(tmp_path, op):
    with pytest.raises(RecordsError, match="Records.append: needs a Record, got dict"):
        Records(tmp_path / "r.jsonl").append({})
    with pytest.raises(RecordsError, match="Record.of: needs a MeasureInput and a MeasureResult, "
                                           "got str and MeasureResult"):
        Record.of("x", MeasureResult(None, "crash"))


KILLED_WRITER = textwrap.dedent("""
    import os, sys, tcomp
    from tcomp.search import MeasureInput, MeasureResult, Records
    from tests.search.test_sim_runner import tiled
    op = tcomp.op("def matmul(float(M,K) A, float(K,N) B) -> (C) {{ C(m, n) +=! A(m, k) * B(k, n) }}")
    recs = Records(sys.argv[1])
    for t in (1, 2, 4, 8, 16, 32):
        recs.add(MeasureInput.of(tiled(op, t), {{"M": 64, "N": 64, "K": 64}}, "cuda"),
                 MeasureResult((float(t),), device="H200"))
        if t == {stop}:
            os.kill(os.getpid(), 9)   # kill -9 right after an append returned
""")


def test_kill_9_loses_nothing_that_was_appended_and_a_rerun_resumes(tmp_path, op):
    path = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER.format(stop=4), str(path)],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    recs = Records(path)
    assert [r.median_ms for r in recs] == [1.0, 2.0, 4.0]
    todo = [cand(op, t) for t in (1, 2, 4, 8, 16, 32)]
    assert [c for c in todo if not recs.measured(c)] == todo[3:]


def test_a_candidate_whose_schedule_is_not_a_schedule_object_cannot_be_recorded(tmp_path, op):
    inp = MeasureInput(op, SIZES, '{"directives": []}', "sim")
    res = MeasureResult(None, "schedule", "no format version", 0.0, "sim")
    with pytest.raises(RecordsError) as e:
        Records(tmp_path / "r.jsonl").add(inp, res)
    assert str(e.value) == ('Record.of: cannot record this candidate: field "schedule" must be a '
                            'schedule object from Schedule.to_json()')
    assert not (tmp_path / "r.jsonl").exists()
