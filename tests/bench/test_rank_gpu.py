"""bench/rank.py on the GPU, small: two ops, one sample each, a few reps, in a
subprocess with $OUT set; every point is timed (or skipped with its reason),
nothing is wrong, and rank.json holds the points and the summary."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .common import BENCH, ROOT

pytestmark = pytest.mark.cuda


def test_rank_runs_checks_and_writes_its_json(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(BENCH / "rank.py"), "--only", "fma,rowsum",
                        "--samples", "1", "--reps", "3", "--minutes", "3"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads((tmp_path / "rank.json").read_text())
    pts = info["points"]
    assert {p["op"] for p in pts} == {"fma", "rowsum"}
    assert not [p for p in pts if (p["skipped"] or "").startswith("WRONG")], pts
    timed = [p for p in pts if p["time_ms"] is not None]
    assert len(timed) >= 6 and all(p["time_ms"] > 0 for p in timed), pts
    assert set(info["summary"]["per_op"]) == {"fma", "rowsum"}
    assert "Spearman's rho, estimate vs H200 time" in r.stdout
