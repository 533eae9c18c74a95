"""bench/rank.py without a GPU: its float64 references against tcomp.evaluate
(at small sizes, on its own inputs), its Spearman's rho, its check, and the
estimate of every hand schedule it will time (so the GPU run ranks them all)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.bench.common import BENCH, _load

R = _load("bench_rank", BENCH / "rank.py")


@pytest.mark.parametrize("name", sorted(R.CASES))
def test_the_reference_is_the_op(name):
    case = R.CASES[name]
    op = tcomp.op(case.src)
    arrays = R.inputs(op, case.small, np.random.default_rng(0))
    want = tcomp.evaluate(op, *[a.astype(t.dtype.numpy) for a, t in zip(arrays, op.inputs)])
    want = want if isinstance(want, tuple) else (want,)
    got = R.reference(case, arrays)
    assert len(got) == len(want) == len(op.outputs)
    assert R.check(op, want, got) is None, R.check(op, want, got)


def test_spearman():
    assert R.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert R.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take their mean rank: ranks (1.5, 1.5, 3) against (1, 2, 3)
    assert R.spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(0.8660254037844386)
    assert list(R.ranks([3.0, 1.0, 3.0, 2.0])) == [3.5, 1.0, 3.5, 2.0]
    assert R.spearman([1, 2], [1, 2]) is None  # too few pairs
    assert R.spearman([1, 1, 1], [1, 2, 3]) is None  # no order on one side
    with pytest.raises(ValueError, match="spearman: 2 values against 3"):
        R.spearman([1, 2], [1, 2, 3])


def test_check_names_the_output_and_the_error():
    op = tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) }")
    want = (np.ones(4),)
    assert R.check(op, (np.ones(4, np.float32),), want) is None
    assert R.check(op, (np.array([1, 1, 1, 2.0]),), want) == \
        "output O: relative error 5.00e-01 > 2e-05 (float32)"


def test_summary_ranks_per_op_and_pooled():
    P = R.Point
    pts = [P("a", "h1", "hand", None, 1.0, 10.0), P("a", "h2", "hand", None, 2.0, 20.0),
           P("a", "h3", "hand", None, 3.0, 30.0), P("a", "s", "sample", None, 4.0, 5.0),
           P("b", "h1", "hand", None, 1.0, 3.0), P("b", "h2", "hand", None, 2.0, 2.0),
           P("b", "h3", "hand", None, 3.0, 1.0),
           P("b", "x", "hand", None, 9.0, None, skipped="build: no")]
    s = R.summary(pts)
    assert s["per_op"]["a"] == {"hand": 1.0, "all": pytest.approx(-0.2), "timed": 4,
                                "hand_timed": 3}
    assert s["per_op"]["b"]["hand"] == pytest.approx(-1.0) and s["per_op"]["b"]["timed"] == 3
    assert s["mean_hand"] == pytest.approx(0.0)
    assert s["pooled_hand"] == pytest.approx(R.spearman([1, 2, 3, 1, 2, 3], [10, 20, 30, 3, 2, 1]))


def test_an_input_type_without_a_maker_is_an_error():
    op = tcomp.op("def f(int32(N) X) -> (O) { O(i) = X(i) }")
    with pytest.raises(ValueError, match="input 'X' of 'f' is int32: give it an input maker"):
        R.inputs(op, {"N": 3}, np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(n for n, c in R.CASES.items() if c.hand))
def test_every_hand_schedule_estimates(name):
    case = R.CASES[name]
    for hname, make in case.hand.items():
        _, s = make()
        ms = R.estimate(s, case.sizes)
        assert np.isfinite(ms) and ms > 0, (hname, ms)


def test_the_watchdog_writes_what_was_measured_and_exits(tmp_path):
    """A kernel that never returns: past HANG_S the point is marked HUNG, the
    results so far are written and the process ends with status 3."""
    import subprocess
    import sys
    code = f"""
import sys, time
sys.path.insert(0, {str(BENCH)!r})
import rank as R
R.HANG_S = 0.2
p = R.Point("op", "k", "hand")
w = R.Watchdog(lambda: open({str(tmp_path / "out.txt")!r}, "w").write(p.skipped))
w.arm(p)
time.sleep(30)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "PYTHONPATH": str(BENCH.parent)})
    assert r.returncode == 3, r.stderr
    assert (tmp_path / "out.txt").read_text().startswith("HUNG: no return within 0.2 s")


def test_a_disarmed_watchdog_does_not_fire():
    import time
    R.HANG_S, old = 0.05, R.HANG_S
    try:
        fired = []
        w = R.Watchdog(lambda: fired.append(1))
        w.arm(R.Point("op", "k", "hand"))
        w.disarm()
        time.sleep(0.2)
        assert not fired
    finally:
        R.HANG_S = old
