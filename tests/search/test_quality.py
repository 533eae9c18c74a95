"""The cost model's quality report (tcomp/search/quality.py, bench/tune_curve.py):
hits counted exactly on records with known ranks, a sim tune and a timed
(fake-GPU) tune read back, the curves' image, and the report's errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tcomp
from tcomp.search import (MeasureInput, MeasureResult, Records, RecordsError, model_quality,
                          plot_quality)
from tcomp.search.tuner import tune
from tests.search.test_sim_runner import tiled
from tests.search.test_tune import FakeTimer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MM = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
SIZES = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(scope="module")
def mm():
    return tcomp.op(MM)


def write(path, op, rows):
    """rows: (tile, times or None, run, round, rank, pool, elapsed) per record;
    run None: a record measured outside a search."""
    recs = Records(path)
    for t, times, run, rnd, rank, pool, el in rows:
        res = MeasureResult(times, None if times else "runtime", "", 0.0, "H200")
        where = None if run is None else {"run": run, "round": rnd, "rank": rank, "pool": pool,
                                          "elapsed_s": el}
        recs.add(MeasureInput.of(tiled(op, t), SIZES, "cuda"), res, 1.0, search=where)
    return path


def test_hits_are_counted_from_the_predicted_rank_of_each_batch_best(mm, tmp_path):
    path = write(tmp_path / "r.jsonl", mm, [
        (1, (5.0,), None, 0, 0, 0, 0.0),         # outside a search: a trial, in no batch
        (2, (3.0,), "a", 1, 0, 30, 1.0),         # batch 1: best (2.0) has rank 12 -> miss
        (4, (2.0,), "a", 1, 12, 30, 2.0),
        (8, None, "a", 2, 0, 30, 3.0),           # batch 2: nothing timed -> not scored
        (16, None, "a", 2, 1, 30, 3.5),
        (32, (1.0,), "b", 1, 3, 20, 0.5),        # a second run: batch 3, best rank 3 -> hit
        (64, (4.0,), "b", 1, 0, 20, 1.5),
    ])
    q = model_quality(path, top=10, after=3)
    assert (q.op, q.sizes, q.target, q.timed) == ("mm", SIZES, "cuda", True)
    assert [(b.run, b.round, b.first, b.size, b.pool, b.best_rank, b.hit) for b in q.batches] == [
        ("a", 1, 2, 2, 30, 12, False), ("a", 2, 4, 2, 30, None, None),
        ("b", 1, 6, 2, 20, 3, True)]
    assert q.hit_rate() == (1, 1)            # batches chosen after 3 trials: the third only
    assert q.hit_rate(0) == (1, 2)
    assert model_quality(path, top=3, after=0).hit_rate() == (0, 2)  # rank 3 is not in a top 3
    assert q.curve(window=1) == [(3, 0.0, 0.0), (7, 1.0, 0.5)]
    # best so far per trial; time: run b starts where run a ended (3.5 s)
    assert [b for _, _, b in q.trials] == [5.0, 3.0, 2.0, 2.0, 2.0, 1.0, 1.0]
    assert [t for _, t, _ in q.trials] == [None, 1.0, 2.0, 3.0, 3.5, 4.0, 5.0]
    assert "1/1 = 100% of the batches chosen after 3 trials (target: at least 80%); " \
           "all batches: 1/2 = 50%" in q.summary()
    assert q.table().splitlines()[1:] == ["    1      1      1     2    30         12  no",
                                          "    2      2      3     2    30          -  -",
                                          "    3      1      5     2    20          3  yes"]


def test_a_sim_tune_reads_back_with_every_batch_hitting(mm, tmp_path):
    path = tmp_path / "sim.jsonl"
    res = tune(mm, SIZES, trials=12, records=str(path), target="sim", batch=4, patience=None)
    q = model_quality(path)
    assert len(q.trials) == 12 and not q.timed
    assert [b.size for b in q.batches] == [4, 4, 4]
    assert all(b.hit and b.best_rank == 0 for b in q.batches)  # scored by the model itself
    assert [t.round for t in res.history] == [1] * 4 + [2] * 4 + [3] * 4
    assert [t.rank for t in res.history] == [json.loads(x)["search"]["rank"]
                                            for x in path.read_text().splitlines()]
    assert "nothing is timed on the sim" in q.summary()
    assert q.trials[-1][2] == res.time_ms


def test_a_timed_tune_reports_the_rank_of_each_batch_best(mm, tmp_path):
    path = tmp_path / "t.jsonl"
    res = tune(mm, SIZES, trials=12, records=str(path), runner=FakeTimer(SIZES), batch=4,
               patience=None, model="ridge")
    q = model_quality(path, mm, SIZES, "cuda", top=2, after=4)
    assert q.timed and len(q.batches) == 3
    for b in q.batches:  # the rank of the fastest of the batch, as the tuner saw it
        trials = res.history[b.first - 1:b.first - 1 + b.size]
        fastest = min((t for t in trials if t.time_ms is not None), key=lambda t: t.time_ms)
        assert b.best_rank == fastest.rank and b.hit == (fastest.rank < 2)
    assert q.hit_rate() == (sum(b.hit for b in q.batches[1:]), 2)


def test_the_curves_image(mm, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sim.jsonl"
    tune(mm, SIZES, trials=8, records=str(path), target="sim", batch=4)
    png = tmp_path / "curve.png"
    plot_quality(model_quality(path), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the script: summary, one line per batch, the image beside the records
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "tune_curve.py"),
                          str(path), "--after", "4", "--batches"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "of the batches chosen after 4 trials" in out.stdout
    assert out.stdout.splitlines()[3].split() == ["batch", "round", "after", "size", "pool",
                                                  "best", "rank", "hit"]
    assert os.path.exists(tmp_path / "sim_curve.png")


def test_report_errors(mm, tmp_path):
    path = write(tmp_path / "r.jsonl", mm, [(2, (3.0,), "a", 1, 0, 30, 1.0)])
    Records(path).add(MeasureInput.of(tiled(mm, 4), SIZES, "sim"),
                      MeasureResult(None, device="sim"), 1.0)
    with pytest.raises(RecordsError) as e:
        model_quality(path)
    assert str(e.value) == (f"model_quality: {path} holds records of several ops, sizes or "
                            f"targets ('mm' at M=64,K=64,N=64 for 'cuda'; 'mm' at M=64,K=64,N=64 "
                            f"for 'sim'); pass op=, sizes= and target= to pick one")
    assert model_quality(path, target="cuda").batches[0].best_rank == 0
    with pytest.raises(RecordsError) as e:
        model_quality(path, "softmax", {"N": 4})
    assert str(e.value) == (f"model_quality: {path} has no record of op 'softmax', sizes N=4")
    with pytest.raises(tcomp.TcompError) as e:
        model_quality(path, top=0)
    assert str(e.value) == "model_quality: top must be an integer >= 1, got 0"
    with pytest.raises(tcomp.TcompError) as e:
        model_quality(path, op=3)
    assert str(e.value) == "model_quality: op must be a tcomp.Op or a def's name, got int"


@pytest.mark.cuda
def test_gpu_a_timed_tune_resumed_then_reported(tmp_path, monkeypatch):
    """On the GPU: a short tune of a 512^3 GEMM, resumed with more trials
    (the recorded candidates are parents of the new round's mutations),
    then the model-quality report and its image from the records."""
    from tcomp.search import LocalRunner
    from tcomp.search.space import Space
    op = tcomp.op(MM)
    sizes = {"M": 512, "N": 512, "K": 512}
    path = tmp_path / "mm.jsonl"
    with LocalRunner(devices=[0], prepare_workers=2) as runner:
        first = tcomp.tune(op, sizes, trials=16, records=str(path), runner=runner, batch=8,
                           patience=None)
        parents, real = [], Space.mutate
        monkeypatch.setattr(Space, "mutate", lambda self, c, rng, attempts=20: (
            parents.append(c.schedule), real(self, c, rng, attempts))[1])
        res = tcomp.tune(op, sizes, trials=24, records=str(path), runner=runner, batch=8,
                         patience=None)
    assert sum(t.resumed for t in res.history) == 16 and len(res.history) == 24
    assert first.best.schedule in parents  # the recorded best, mutated in the resumed run
    q = model_quality(path, op, sizes, "cuda", after=8)
    assert q.timed and len(q.trials) == 24 and len(q.batches) == 3
    assert all(b.best_rank is not None and 0 <= b.best_rank < b.pool for b in q.batches)
    h, n = q.hit_rate()
    assert n == 2 and 0 <= h <= 2
    print(q.summary())
    print(q.table())
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        return  # the image only where matplotlib is installed
    plot_quality(q, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
