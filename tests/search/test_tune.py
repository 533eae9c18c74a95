"""The search (tcomp/search/tuner.py, tcomp.tune): an end-to-end tune on the
sim in seconds, resume, Ctrl-C, early stop, failures that do not stop the
search, a model that learns from (fake) timings, every argument error; and,
on a GPU, a short real tune of a small GEMM with the LocalRunner."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.search import MeasureInput, MeasureResult, Records, Runner, SearchError, best
from tcomp.search import features as F
from tests.bench.common import S
from tcomp.search.tuner import canonical, tune

from .records_util import MM, lines

SIZES = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(scope="module")
def mm():
    return tcomp.op(MM)


def check_result(op, schedule, sizes=None):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((32, 16)).astype(np.float32)
    B = rng.standard_normal((16, 24)).astype(np.float32)
    k = tcomp.build(schedule, target="sim")
    np.testing.assert_allclose(k(A, B), tcomp.evaluate(op, A, B), rtol=1e-4, atol=1e-4)


class FakeTimer(Runner):
    """A 'GPU' whose time for a candidate is its analytic proxy times a factor
    the proxy does not know (threads per block far from 256 are slower), and
    which fails every candidate in `fail` (by position in the calls)."""
    target = "cuda"

    def __init__(self, space_sizes, fail=(), error="runtime"):
        self.sizes, self.fail, self.error, self.calls = space_sizes, set(fail), error, 0
        self.batches = []
        self.report = True  # call on_result as each finishes (False: only return the list)

    def run(self, batch, on_result=None):
        from tcomp.search.validate import validate
        batch = self._check_batch(batch, on_result)
        self.batches.append(len(batch))
        out = []
        for inp in batch:
            self.calls += 1
            if self.calls in self.fail:
                out.append(MeasureResult(None, self.error, "injected", 0.0, "fake"))
            else:
                v = validate(inp.op, inp.schedule, inp.sizes, "cuda")
                f = F.as_dict(F.extract(v, inp.sizes))
                slow = 1 + abs(np.log2(max(f["threads"], 1) / 256))
                out.append(MeasureResult((np.exp(f["log_analytic_ms"]) * slow,), None, "", 0.0,
                                         "fake"))
            if on_result is not None and self.report:
                on_result(len(out) - 1, out[-1])
        return out


def test_tune_on_the_sim_end_to_end(mm, tmp_path):
    path = tmp_path / "mm.jsonl"
    seen = []
    res = tcomp.tune(mm, SIZES, trials=6, records=str(path), target="sim", batch=3,
                     progress=seen.append)
    assert len(res.history) == 6 and res.stopped in ("trials", "patience")
    assert [p.done for p in seen] == list(range(1, 7)) and seen[-1].total == 6
    assert not res.timed and res.target == "sim"
    ok = [t for t in res.history if t.ok]
    assert ok and all(t.time_ms is None and t.predicted_ms > 0 for t in res.history)
    assert res.best in ok and res.time_ms == min(t.predicted_ms for t in ok)
    assert res.top(3)[0] is res.best and len(res.top(3)) == min(3, len(ok))
    assert res.schedule.to_json() == tcomp.Schedule.from_json(mm, res.best.schedule).to_json()
    check_result(mm, res.schedule)
    recs = lines(path)
    assert len(recs) == 6 and all(r["target"] == "sim" for r in recs)
    assert [r["predicted_ms"] for r in recs] == [t.predicted_ms for t in res.history]
    # the records' best is the tune's best
    assert best(str(path), mm, SIZES, target="sim").to_json() == res.schedule.to_json()


def test_a_rerun_resumes_and_measures_nothing_twice(mm, tmp_path):
    path = str(tmp_path / "mm.jsonl")
    first = tcomp.tune(mm, SIZES, trials=4, records=path, target="sim", batch=2)
    again = tcomp.tune(mm, SIZES, trials=4, records=path, target="sim", batch=2)
    assert again.stopped == "trials" and len(lines(path)) == 4
    assert all(t.resumed for t in again.history)
    assert canonical(again.best.schedule) == canonical(first.best.schedule)
    more = tcomp.tune(mm, SIZES, trials=7, records=path, target="sim", batch=2, seed=1)
    assert len(more.history) == 7 and sum(t.resumed for t in more.history) == 4
    recs = Records(path)
    assert len(recs) == 7 and len({r.key for r in recs}) == 7  # no candidate measured twice
    assert more.time_ms <= first.time_ms


def test_ctrl_c_keeps_what_was_measured_and_the_run_resumes(mm, tmp_path):
    path = str(tmp_path / "mm.jsonl")

    def interrupt(p):
        if p.done == 3:
            raise KeyboardInterrupt

    res = tcomp.tune(mm, SIZES, trials=10, records=path, target="sim", batch=4,
                     progress=interrupt)
    assert res.stopped == "interrupted" and len(res.history) == 3
    assert len(lines(path)) == 3  # flushed per measurement on the sim
    res = tcomp.tune(mm, SIZES, trials=5, records=path, target="sim", batch=4)
    assert len(res.history) == 5 and sum(t.resumed for t in res.history) == 3


def test_ctrl_c_before_any_measurement_says_so(mm, tmp_path, monkeypatch):
    from tcomp.search import sim_runner

    def stop(self, batch, on_result=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_runner.SimRunner, "run", stop)
    path = tmp_path / "mm.jsonl"
    with pytest.raises(SearchError) as e:
        tcomp.tune(mm, SIZES, trials=4, records=str(path), target="sim")
    assert str(e.value) == (f"tune: interrupted before any valid candidate of 'mm' was "
                            f"measured (0 trials); the records are in {path}")


def test_the_model_learns_from_timings_and_finds_a_fast_candidate(mm, tmp_path):
    runner = FakeTimer(SIZES)
    res = tune(mm, SIZES, trials=32, records=str(tmp_path / "r.jsonl"), target="cuda",
               runner=runner, batch=8, patience=None, model="ridge")
    assert res.timed and res.model.trained and res.model.samples == 32
    assert runner.batches[0] == 8 and sum(runner.batches) == 32
    times = [t.time_ms for t in res.history]
    assert res.time_ms == min(times)
    # better than the median of what it measured
    assert res.time_ms < np.median(times)
    # and the trained model ranks 40 fresh candidates (not chosen by it: the
    # predictions of the candidates it chose are biased, those it ranked fast by
    # mistake are among them) by their times, better than the analytic proxy it
    # corrects (seeds 0-3: 0.54-0.82 against -0.2-0.4)
    from tcomp.search.validate import validate
    cands = res.space.generate(40, np.random.default_rng(100))
    out = runner.run([MeasureInput(mm, SIZES, c.schedule, "cuda") for c in cands])
    X = np.array([F.extract(validate(mm, c.schedule, SIZES, "cuda"), SIZES) for c in cands])
    t = np.array([o.median_ms for o in out])
    analytic = X[:, F.NAMES.index("log_analytic_ms")]

    def spearman(a, b):
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return np.corrcoef(ra, rb)[0, 1]
    model = spearman(res.model.predict_ms(X), t)
    assert model > 0.5 and model > spearman(analytic, t), (model, spearman(analytic, t))
    recs = lines(tmp_path / "r.jsonl")
    assert all(r["times_ms"] and r["device"] == "fake" and r["predicted_ms"] for r in recs)


def test_a_runner_that_reports_nothing_as_it_goes_is_still_recorded(mm, tmp_path):
    runner = FakeTimer(SIZES)
    runner.report = False
    res = tune(mm, SIZES, trials=4, records=str(tmp_path / "r.jsonl"), runner=runner, batch=4)
    assert len(res.history) == 4 and len(lines(tmp_path / "r.jsonl")) == 4


def test_a_batch_interrupted_midway_keeps_what_finished(mm, tmp_path):
    class Dies(FakeTimer):
        def run(self, batch, on_result=None):
            def stop_after_two(i, res):
                on_result(i, res)
                if i == 1:
                    raise KeyboardInterrupt
            return super().run(batch, stop_after_two)

    path = tmp_path / "r.jsonl"
    res = tune(mm, SIZES, trials=8, records=str(path), runner=Dies(SIZES), batch=4)
    assert res.stopped == "interrupted" and len(res.history) == 2 and len(lines(path)) == 2


def test_resumed_timings_train_the_model(mm, tmp_path):
    path = str(tmp_path / "r.jsonl")
    tune(mm, SIZES, trials=10, records=path, runner=FakeTimer(SIZES), batch=5, model="ridge")
    res = tune(mm, SIZES, trials=10, records=path, runner=FakeTimer(SIZES), model="ridge")
    assert res.model.trained and res.model.samples == 10 and res.stopped == "trials"


def _spy_on_mutations(monkeypatch) -> list:
    """The schedules of the parents Space.mutate is asked to mutate."""
    from tcomp.search.space import Space
    parents, real = [], Space.mutate

    def spy(self, cand, rng, attempts=20):
        parents.append(cand.schedule)
        return real(self, cand, rng, attempts)
    monkeypatch.setattr(Space, "mutate", spy)
    return parents


def test_a_resumed_run_mutates_the_recorded_candidates(mm, tmp_path, monkeypatch):
    path = str(tmp_path / "r.jsonl")
    first = tune(mm, SIZES, trials=6, records=path, runner=FakeTimer(SIZES), batch=3)
    recs = lines(path)
    assert all(r["tcomp_record"] == 2 and r["plan"]["stages"] is not None for r in recs)
    plans = {canonical(t.schedule): t.sketch for t in first.history}
    parents = _spy_on_mutations(monkeypatch)
    res = tune(mm, SIZES, trials=9, records=path, runner=FakeTimer(SIZES), batch=3, seed=1)
    resumed = [t for t in res.history if t.resumed]
    assert len(resumed) == 6 and len(res.history) == 9
    # each resumed record got its plan back: the same rules as when it was measured
    assert all(t.sketch == plans[canonical(t.schedule)] and t.sketch for t in resumed)
    # the best recorded candidates are parents of this run's mutations
    best_recorded = sorted((t for t in resumed if t.ok), key=lambda t: t.time_ms)[0]
    assert canonical(best_recorded.schedule) in {canonical(p) for p in parents}
    # and the new candidates are recorded with their plans too
    assert all(r["plan"] is not None for r in lines(path))


def test_records_without_a_usable_plan_are_replayed_not_mutated(mm, tmp_path, monkeypatch):
    """Version 1 lines (no plan) and a plan that no longer yields the recorded
    schedule: both resume (counted, learnt from) but are never parents."""
    path = tmp_path / "r.jsonl"
    tune(mm, SIZES, trials=4, records=str(path), runner=FakeTimer(SIZES), batch=2)
    recs = lines(path)
    old = [{k: v for k, v in r.items() if k not in ("plan", "search")} | {"tcomp_record": 1}
           for r in recs[:2]]
    wrong = recs[2] | {"plan": {"inline": [], "stages": {"C": {"rule": "no_such_rule"}}}}
    path.write_text("".join(json.dumps(r) + "\n" for r in old + [wrong, recs[3]]))
    parents = _spy_on_mutations(monkeypatch)
    res = tune(mm, SIZES, trials=6, records=str(path), runner=FakeTimer(SIZES), batch=2)
    resumed = res.history[:4]
    assert all(t.resumed for t in resumed) and len(res.history) == 6
    assert [bool(t.sketch) for t in resumed] == [False, False, False, True]
    unusable = {canonical(t.schedule) for t in resumed[:3]}
    assert not unusable & {canonical(p) for p in parents}


def test_failed_candidates_are_recorded_and_the_search_goes_on(mm, tmp_path):
    runner = FakeTimer(SIZES, fail={1, 2, 5})
    res = tune(mm, SIZES, trials=8, records=str(tmp_path / "r.jsonl"), runner=runner, batch=4)
    assert len(res.history) == 8 and res.errors() == {"runtime": 3}
    assert [t.error for t in res.history][:2] == ["runtime", "runtime"]
    assert res.best.ok and [r["error"] for r in lines(tmp_path / "r.jsonl")].count("runtime") == 3


def test_every_candidate_failing_is_an_error_naming_the_kinds(mm, tmp_path):
    path = tmp_path / "r.jsonl"
    runner = FakeTimer(SIZES, fail=range(1, 100), error="wrong_result")
    with pytest.raises(SearchError) as e:
        tune(mm, SIZES, trials=4, records=str(path), runner=runner, batch=4)
    assert str(e.value) == (f"tune: no valid candidate of 'mm' after 4 trials "
                            f"(wrong_result: 4); the records are in {path}")


def test_patience_stops_a_search_that_no_longer_improves(mm):
    class Flat(FakeTimer):
        def run(self, batch, on_result=None):
            return [MeasureResult((1.0,), None, "", 0.0, "fake") for _ in self._check_batch(batch)]

    res = tune(mm, SIZES, trials=200, runner=Flat(SIZES), batch=2, patience=2, population=8)
    assert res.stopped == "patience" and len(res.history) == 6  # 1 round + 2 without a gain
    assert res.records is None


def test_time_limit_stops_the_search(mm):
    res = tune(mm, SIZES, trials=200, runner=FakeTimer(SIZES), batch=2, time_limit_s=1e-9,
               population=8)
    assert res.stopped == "time_limit" and len(res.history) == 2


def test_a_space_with_one_candidate_is_exhausted():
    op = tcomp.op("def s(float A) -> (B) { B = A * 2.0 }")
    res = tune(op, {}, trials=5, target="sim")
    assert res.stopped == "exhausted" and len(res.history) == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"op": "mm"}, "tune: op must be a tcomp.Op (from tcomp.op), got str"),
    ({"trials": 0}, "tune: trials must be a positive integer, got 0"),
    ({"batch": 2.5}, "tune: batch must be a positive integer, got 2.5"),
    ({"population": -1}, "tune: population must be a positive integer, got -1"),
    ({"patience": 0}, "tune: patience must be a positive integer or None, got 0"),
    ({"epsilon": 1.5}, "tune: epsilon must be a number in [0, 1], got 1.5"),
    ({"time_limit_s": 0}, "tune: time_limit_s must be a positive number of seconds or None, "
                          "got 0"),
    ({"target": "gpu"}, "tune: target must be 'cuda', 'cuda:<arch>' or 'sim', got 'gpu'"),
    ({"seed": -5}, "tune: seed must be a non-negative integer, got -5"),
    ({"seed": 1.5}, "tune: seed must be a non-negative integer, got 1.5"),
    ({"model": 3}, "tune: model must be a CostModel or a backend name, got int"),
    ({"runner": "local"}, "tune: runner must be a tcomp.search Runner (SimRunner, LocalRunner, "
                          "...), got str"),
    ({"sizes": {"M": 8}}, "Space: sizes must bind every size variable of 'mm'; missing K, N "
                          "(e.g. sizes={'K': 1024})"),
])
def test_argument_errors(mm, kwargs, message):
    args = {"op": mm, "sizes": SIZES, "trials": 4, "target": "sim", **kwargs}
    with pytest.raises(SearchError) as e:
        tune(**args)
    assert str(e.value) == message


def test_a_runner_for_the_other_target_is_refused(mm):
    with pytest.raises(SearchError) as e:
        tune(mm, SIZES, trials=2, target="sim", runner=FakeTimer(SIZES))
    assert str(e.value) == ("tune: the runner measures target 'cuda' but target is 'sim'; pass "
                            "a SimRunner or target='cuda'")


# ------------------------------------------------------------------ on a GPU
@pytest.mark.cuda
def test_gpu_short_tune_of_a_small_gemm_with_the_local_runner(mm, tmp_path):
    from tcomp.search import LocalRunner
    sizes = {"M": 512, "N": 512, "K": 512}
    path = str(tmp_path / "mm.jsonl")
    with LocalRunner(devices=[0], prepare_workers=2) as runner:
        res = tcomp.tune(mm, sizes, trials=16, records=path, target="cuda", runner=runner,
                         batch=8)
    assert res.timed and len(res.history) == 16 and res.time_ms > 0
    ok = [t for t in res.history if t.ok]
    assert ok and all(t.time_ms is not None for t in ok)
    assert res.time_ms == min(t.time_ms for t in ok)
    recs = lines(path)
    assert len(recs) == 16 and all(r["device"] for r in recs)
    # the best replays from the records and computes the right answer on the GPU
    s = best(path, mm, sizes)
    assert s.to_json() == res.schedule.to_json()
    k = tcomp.build(s, target="cuda", sizes=sizes)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((512, 512)).astype(np.float32)
    B = rng.standard_normal((512, 512)).astype(np.float32)
    np.testing.assert_allclose(k(A, B), A.astype(np.float64) @ B, rtol=1e-3, atol=1e-3)
    # a rerun resumes: nothing measured twice
    again = tcomp.tune(mm, sizes, trials=16, records=path, target="cuda")
    assert again.stopped == "trials" and len(lines(path)) == 16


@pytest.mark.cuda
def test_gpu_tune_of_a_bf16_gemm_finds_a_tensor_core_schedule(tmp_path):
    op = tcomp.op(S.TC_GEMM_F32_OUT)
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    res = tcomp.tune(op, sizes, trials=24, records=str(tmp_path / "bf.jsonl"), target="cuda",
                     batch=8)
    assert res.timed and res.best.ok
    # the analytic proxy ranks tensor-core candidates first; the best measured uses them
    # (mma.sync tiles or, on sm_90a, the Hopper path's wgmma tiles)
    assert any(r in res.best.sketch for r in ("tc_tile", "hopper_tile")), \
        [(t.sketch, t.time_ms) for t in res.top(5)]


def test_candidates_far_slower_than_the_best_get_a_shorter_device_limit(mm):
    """The first batch has no best: the runner's own limit. Later batches carry
    MeasureInput.timeout_s = max(SLOW_FLOOR_S, SLOW_FACTOR x the best time)."""
    from tcomp.search import tuner

    class Limits(FakeTimer):
        def run(self, batch, on_result=None):
            self.limits.append([inp.timeout_s for inp in batch])
            return super().run(batch, on_result)
    runner = Limits(SIZES)
    runner.limits = []
    res = tune(mm, SIZES, trials=8, runner=runner, batch=4, model="ridge", patience=None)
    first, second = runner.limits
    assert first == [None] * 4
    best_first = min(t.time_ms for t in res.history[:4] if t.ok)
    want = max(tuner.SLOW_FLOOR_S, tuner.SLOW_FACTOR * best_first / 1000)
    assert second == [pytest.approx(want)] * 4
    # a best of 20 ms gives 20 s: the factor, not the floor
    st = type("St", (), {"timed": True, "best": type("T", (), {"time_ms": 20.0})()})()
    assert tuner._slow_limit_s(st) == pytest.approx(20.0)
