"""Resume (tcomp/search/resume.py): reruns after interruptions keep exploring,
a timeout is measured again once, a best record that lies is passed over,
a progress callback that raises, records too deeply nested to read."""
from __future__ import annotations

import json
import warnings

import pytest

import tcomp
from tcomp.search import (MeasureResult, ProgressWarning, RecordCheckWarning, Records,
                          RecordsError, Runner)
from tcomp.search.tuner import canonical, tune

from .records_util import MM, lines

SIZES = {"M": 8, "N": 8, "K": 8}


@pytest.fixture(scope="module")
def mm():
    return tcomp.op(MM)


class Checks(Runner):
    """A quick stand-in for the SimRunner: every candidate is correct (not
    timed), except those whose canonical schedule is in `timeouts` (or every
    one, with timeouts=True), which time out. `seen`: what it measured."""
    target = "sim"

    def __init__(self, timeouts=()):
        self.timeouts, self.seen = timeouts, []

    def run(self, batch, on_result=None):
        out = []
        for i, inp in enumerate(self._check_batch(batch, on_result)):
            key = canonical(inp.schedule)
            self.seen.append(key)
            slow = self.timeouts is True or key in self.timeouts
            out.append(MeasureResult(None, "timeout", "took too long", 0.0, "sim") if slow
                       else MeasureResult(None, device="sim"))
            if on_result is not None:
                on_result(i, out[-1])
        return out


def test_interrupted_reruns_keep_exploring_until_the_trials_are_done(mm, tmp_path):
    """Each rerun measures 4 candidates and is interrupted (as kill -9 would
    stop it), with the same call each time. Before: every rerun drew the same
    first pool from seed 0, all of it measured by then, and the tune stopped
    at 52 of 60 with a false "exhausted" on every rerun."""
    path = str(tmp_path / "r.jsonl")
    ends = []
    for _ in range(30):
        here = []

        def four_then_stop(p):
            here.append(p)
            if len(here) == 4:
                raise KeyboardInterrupt
        res = tune(mm, SIZES, trials=60, records=path, target="sim", runner=Checks(), batch=4,
                   population=8, patience=None, progress=four_then_stop)
        ends.append((res.stopped, len(res.history)))
        if res.stopped != "interrupted":
            break
    assert ends[-1] == ("trials", 60)
    assert ends[:-1] == [("interrupted", 4 * (i + 1)) for i in range(len(ends) - 1)]
    assert len({r.key for r in Records(path)}) == 60 == len(Records(path))


def test_an_empty_pool_is_drawn_again_wider_before_the_space_counts_as_exhausted(mm, monkeypatch):
    from tcomp.search import tuner
    calls, real = [], tuner._pool

    def first_empty(st, pop, batch, wide=0):
        calls.append(wide)
        return [] if len(calls) == 1 else real(st, pop, batch, wide)
    monkeypatch.setattr(tuner, "_pool", first_empty)
    res = tune(mm, SIZES, trials=4, target="sim", runner=Checks(), batch=4, population=8)
    assert res.stopped == "trials" and len(res.history) == 4
    assert calls == [0, 8]  # the second pool: a population of fresh ones, every parent


def test_a_timeout_is_measured_again_once_on_resume(mm, tmp_path):
    path = str(tmp_path / "r.jsonl")
    first = tune(mm, SIZES, trials=4, records=path, target="sim", runner=Checks(), batch=4)
    slow = canonical(first.history[1].schedule)
    recs = lines(path)
    path2 = str(tmp_path / "r2.jsonl")
    with open(path2, "w") as f:  # the same four, the second one a timeout
        for r in recs:
            if canonical(json.dumps(r["schedule"])) == slow:
                r = r | {"error": "timeout", "message": "took too long", "times_ms": None,
                         "median_ms": None}
            f.write(json.dumps(r) + "\n")
    runner = Checks()
    res = tune(mm, SIZES, trials=4, records=path2, target="sim", runner=runner, batch=4)
    assert runner.seen == [slow]  # measured again, and nothing else: 3 resumed + 1 = 4 trials
    assert [t.resumed for t in res.history] == [True, True, True, False]
    assert canonical(res.history[-1].schedule) == slow and res.history[-1].ok
    again = lines(path2)
    assert len(again) == 5 and again[-1]["error"] is None and again[-1]["search"] is None
    assert canonical(json.dumps(again[-1]["schedule"])) == slow
    # its last line is its result: a rerun measures nothing and counts it once, as correct
    runner = Checks()
    res = tune(mm, SIZES, trials=4, records=path2, target="sim", runner=runner, batch=4)
    assert runner.seen == [] and len(res.history) == 4 and all(t.ok for t in res.history)
    assert all(t.resumed for t in res.history) and len(lines(path2)) == 5


def test_a_second_timeout_is_final(mm, tmp_path):
    path = str(tmp_path / "r.jsonl")
    slow = Checks(timeouts=True)
    with pytest.raises(tcomp.search.SearchError):  # nothing valid: both time out
        tune(mm, SIZES, trials=2, records=path, target="sim", runner=slow, batch=2)
    twice = list(slow.seen)
    slow = Checks(timeouts=True)
    with pytest.raises(tcomp.search.SearchError):
        tune(mm, SIZES, trials=4, records=path, target="sim", runner=slow, batch=2)
    assert slow.seen[:2] == twice and len(slow.seen) == 4  # measured again first, then 2 new
    once = slow.seen[2:]
    runner = Checks()
    res = tune(mm, SIZES, trials=6, records=path, target="sim", runner=runner, batch=2)
    assert runner.seen[:2] == once and len(runner.seen) == 4  # two timeouts: final
    assert [t.error for t in res.history[:2]] == ["timeout", "timeout"]
    assert all(t.ok for t in res.history[2:]) and len(res.history) == 6
    assert len(lines(path)) == 2 + 2 + 2 + 2 + 2


def _best_line(path) -> int:
    recs = lines(path)
    ok = [i for i, r in enumerate(recs) if r["error"] is None]
    return min(ok, key=lambda i: recs[i]["predicted_ms"])


def test_a_best_record_that_does_not_replay_is_passed_over_on_resume(mm, tmp_path):
    """Before: every resumed tune raised ScheduleError at its end."""
    path = tmp_path / "r.jsonl"
    first = tune(mm, SIZES, trials=4, records=str(path), target="sim", batch=4)
    recs, i = lines(path), _best_line(path)
    recs[i]["schedule"]["directives"][0]["stage"] = "Q"  # still a schedule object: it loads
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.warns(RecordCheckWarning) as w:
        res = tune(mm, SIZES, trials=4, records=str(path), target="sim", batch=4)
    assert len(w) == 1 and str(w[0].message).startswith(
        f"tune: {path}:{i + 1}: the best recorded candidate is passed over: its re-check on "
        f"the sim failed (schedule: ScheduleError: ")
    assert str(w[0].message).endswith("; the next best is used")
    assert res.stopped == "trials" and res.best.ok and res.best.index != i + 1
    assert res.history[i].error == "schedule"
    assert res.history[i].message.startswith("re-checked on the sim on resume: ScheduleError: ")
    assert res.time_ms >= first.time_ms
    # the failed re-check is recorded: the next run neither warns nor checks it again
    assert len(lines(path)) == 5 and lines(path)[-1]["error"] == "schedule"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordCheckWarning)
        again = tune(mm, SIZES, trials=4, records=str(path), target="sim", batch=4)
    assert canonical(again.best.schedule) == canonical(res.best.schedule)


def plant_wrong_result(monkeypatch, schedule: str) -> None:
    """From now on the sim computes `schedule` wrongly (as a tcomp that lowers
    it differently from the one that recorded it would): its outputs + 1."""
    from tcomp.search import sim_runner
    real, key = sim_runner.build, canonical(schedule)

    def build(s, target, sizes):
        k = real(s, target, sizes)
        return (lambda *a: k(*a) + 1) if canonical(s.to_json()) == key else k
    monkeypatch.setattr(sim_runner, "build", build)


def test_a_best_record_that_computes_a_wrong_result_is_passed_over_on_resume(mm, tmp_path,
                                                                          monkeypatch):
    path = tmp_path / "r.jsonl"
    first = tune(mm, SIZES, trials=4, records=str(path), target="sim", batch=4)
    plant_wrong_result(monkeypatch, first.best.schedule)
    with pytest.warns(RecordCheckWarning, match=r"the best recorded candidate is passed over: "
                                                r"its re-check on the sim failed \(wrong_result: "
                                                r"output 'C': "):
        res = tune(mm, SIZES, trials=4, records=str(path), target="sim", batch=4)
    assert canonical(res.best.schedule) != canonical(first.best.schedule) and res.best.ok
    assert lines(path)[-1]["error"] == "wrong_result"


def test_a_progress_callback_that_raises_is_a_warning_and_the_tune_goes_on(mm, tmp_path):
    calls = []

    def broken(p):
        calls.append(p.done)
        return p.best_ms / 0 if p.done == 2 else None  # ZeroDivisionError at the second trial
    with pytest.warns(ProgressWarning) as w:
        res = tune(mm, SIZES, trials=5, records=str(tmp_path / "r.jsonl"), target="sim",
                   runner=Checks(), batch=2, progress=broken)
    assert [str(x.message) for x in w] == [
        "tune: the progress callback raised ZeroDivisionError: float division by zero (after "
        "trial 2); it is not called again in this run, and the search goes on"]
    assert calls == [1, 2] and res.stopped == "trials" and len(res.history) == 5
    assert len(lines(tmp_path / "r.jsonl")) == 5


def test_records_nested_too_deeply_are_a_clean_error_on_resume(mm, tmp_path):
    path = tmp_path / "r.jsonl"
    tune(mm, SIZES, trials=2, records=str(path), target="sim", runner=Checks(), batch=2)
    deep = "[" * 100000 + "]" * 100000  # RecursionError in json.loads, before
    path.write_text(path.read_text() + deep + "\n")
    with pytest.raises(RecordsError) as e:
        tune(mm, SIZES, trials=4, records=str(path), target="sim", runner=Checks())
    assert str(e.value) == (f"{path}:3: nested too deeply to read (more than 32 levels); not a "
                            f"tcomp record")
