"""`tcomp tune` (tcomp/cli_tune.py): an end-to-end run on the sim as a
subprocess, resume, the final table, --plot, --export, Ctrl-C, the live
progress line, and every error message; on a GPU, a short tune exported as a
.cubin that loads and runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tcomp
from tcomp.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MM_TC = os.path.join(ROOT, "tutorials", "matmul.tc")
SIZES = "M=64,N=64,K=64"


def tune_cli(argv, capsys):
    rc = main(["tune", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def n_lines(path) -> int:
    with open(path) as f:
        return sum(1 for x in f if x.strip())


def test_tune_on_the_sim_as_a_command(tmp_path):
    rec = tmp_path / "mm.jsonl"
    cmd = [sys.executable, "-m", "tcomp", "tune", MM_TC, "--sizes", SIZES, "--trials", "4",
           "--batch", "2", "--records", str(rec), "--target", "sim"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("trial 1/4: best ")
    assert "tuned matmul at M=64,N=64,K=64 for sim: 4 trials, stopped: all trials done" in lines
    assert any(x.startswith("best: ") and "(estimated; the sim checks results but measures "
               "no time), trial " in x for x in lines)
    head = lines.index("rank  trial    estimate  sketch")
    assert lines[head + 1].startswith("   1  ")
    assert f"records: {rec} (the best: tcomp.search.best(path, op, sizes, target='sim'))" in lines
    assert n_lines(rec) == 4 and p.stderr == ""  # no progress line when not on a terminal
    # again: resumes, measures nothing, says so
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "4 trials (4 resumed), stopped: all trials done" in p.stdout
    assert "(resumed)" in p.stdout and n_lines(rec) == 4


def test_plot_and_export(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rec, png, cubin = tmp_path / "mm.jsonl", tmp_path / "curve.png", tmp_path / "best.cubin"
    rc, out, _ = tune_cli([MM_TC, "--sizes", SIZES, "--trials", "3", "--records", str(rec),
                           "--target", "sim", "--plot", str(png), "--export", str(cubin)], capsys)
    assert rc == 0
    assert f"wrote {png}" in out and f"wrote {cubin} (" in out
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert cubin.stat().st_size > 0
    side = json.loads((tmp_path / "best.json").read_text())
    assert side  # the sidecar tcomp.load reads
    # the exported kernel is the best record's schedule
    op = tcomp.op(open(MM_TC).read())
    best = tcomp.search.best(str(rec), op, {"M": 64, "N": 64, "K": 64}, target="sim")
    k = tcomp.build(best, target="cuda", sizes={"M": 64, "N": 64, "K": 64})
    assert k.cubin == cubin.read_bytes()


def test_ctrl_c_prints_the_best_so_far_and_exits_130(tmp_path, capsys, monkeypatch):
    from tcomp.search import sim_runner
    real, calls = sim_runner.SimRunner.run, []

    def run(self, batch, on_result=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, batch, on_result)

    monkeypatch.setattr(sim_runner.SimRunner, "run", run)
    rec = tmp_path / "mm.jsonl"
    rc, out, _ = tune_cli([MM_TC, "--sizes", SIZES, "--trials", "10", "--batch", "2",
                           "--records", str(rec), "--target", "sim"], capsys)
    assert rc == 130
    assert "2 trials, stopped: interrupted (Ctrl-C); what was measured is kept" in out
    assert "best: " in out and n_lines(rec) == 2


def test_the_progress_line_on_a_terminal(capsys):
    from tcomp.cli_tune import _Progress
    from tcomp.search.tuner import Progress, Trial
    show = _Progress(tty=True)
    t = Trial(3, "{}", "C:flat", None, 0.002, None, "", 1.5)
    show(Progress(3, 200, 0.002, 75.0, 4925.0, t))
    show.close()
    _, err = capsys.readouterr()
    assert err == "\r[3/200] best 2 us, 1m15s, ETA 82m05s\n"


def test_a_missing_matplotlib_is_reported_before_the_search(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc, _, err = tune_cli([MM_TC, "--sizes", SIZES, "--records", str(tmp_path / "r.jsonl"),
                           "--target", "sim", "--plot", str(tmp_path / "c.png")], capsys)
    assert rc == 2
    assert err == ("tcomp: --plot needs matplotlib, which is not installed here: pip install "
                   "matplotlib (or pip install 'tcomp[search]'), or leave out --plot\n")
    assert not (tmp_path / "r.jsonl").exists()


def test_no_gpu_suggests_the_sim(tmp_path, capsys, monkeypatch):
    from tcomp.search import local_runner
    monkeypatch.setattr(local_runner, "gpu_count", lambda: 0)
    rc, _, err = tune_cli([MM_TC, "--sizes", SIZES, "--records", str(tmp_path / "r.jsonl")],
                          capsys)
    assert rc == 2
    assert err == ("tcomp: no CUDA GPU found on this machine: tune with --target sim (checks "
                   "each candidate on the CPU and ranks by the cost estimate)\n")


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "M=64,N=64"],
     "tcomp: --sizes must give every size variable of 'matmul' (tuning is for fixed sizes); "
     "missing K\n"),
    (["--sizes", SIZES, "--export", "out.so"], "tcomp: --export must name a .cubin file, got "
                                                "'out.so'\n"),
    (["--sizes", SIZES, "--trials", "0"],
     "tcomp: argument --trials: expected a positive integer, got 0 (see 'tcomp tune --help')\n"),
    (["--records", "r.jsonl"],
     "tcomp: the following arguments are required: --sizes (see 'tcomp tune --help')\n"),
    (["--sizes", SIZES, "--seed", "-5"], "tcomp: tune: seed must be a non-negative integer, "
                                         "got -5\n"),
])
def test_tune_errors(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "--records" not in argv:
        argv = argv + ["--records", "r.jsonl"]
    try:
        rc, _, err = tune_cli([MM_TC, *argv, "--target", "sim"], capsys)
    except SystemExit as e:  # argparse's usage errors
        rc, err = e.code, capsys.readouterr().err
    assert rc == 2 and err == message


def test_a_records_file_of_something_else_is_refused(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    rec.write_text('{"hello": 1}\n')
    rc, _, err = tune_cli([MM_TC, "--sizes", SIZES, "--records", str(rec), "--target", "sim"],
                          capsys)
    assert rc == 2
    assert err == f"tcomp: {rec}:1: not a tcomp record (no \"tcomp_record\" format field)\n"


def test_a_records_file_nested_too_deeply_is_refused_without_a_traceback(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    rec.write_text("[" * 100000 + "]" * 100000 + "\n")  # a RecursionError, before
    rc, _, err = tune_cli([MM_TC, "--sizes", SIZES, "--records", str(rec), "--target", "sim"],
                          capsys)
    assert rc == 2
    assert err == (f"tcomp: {rec}:1: nested too deeply to read (more than 32 levels); not a "
                   f"tcomp record\n")


def test_a_best_record_that_lies_is_a_warning_line_and_the_tune_goes_on(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    argv = [MM_TC, "--sizes", "M=8,N=8,K=8", "--trials", "2", "--batch", "2", "--records",
            str(rec), "--target", "sim"]
    assert tune_cli(argv, capsys)[0] == 0
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    for d in lines:  # neither replays now: both are passed over, and the tune measures two more
        d["schedule"]["directives"].insert(0, {"kind": "Split", "stage": "Q", "axis": "m",
                                               "factor": 2, "nparts": None})
    rec.write_text("".join(json.dumps(d) + "\n" for d in lines))
    rc, out, err = tune_cli(argv[:4] + ["4"] + argv[5:], capsys)
    assert rc == 0 and "tuned matmul at M=8,N=8,K=8 for sim: 4 trials (2 resumed)" in out
    assert err.count("tcomp: warning: tune: ") == 2 and "Traceback" not in err
    assert err.startswith(f"tcomp: warning: tune: {rec}:")
    assert ": the best recorded candidate is passed over: its re-check on the sim failed " \
           "(schedule: ScheduleError: " in err
    assert "RecordCheckWarning" not in err and "warnings.warn" not in err


@pytest.mark.cuda
def test_gpu_tune_command_exports_a_cubin_that_loads_and_runs(tmp_path, capsys):
    rec, cubin = tmp_path / "mm.jsonl", tmp_path / "best.cubin"
    rc, out, _ = tune_cli([MM_TC, "--sizes", "M=256,N=256,K=256", "--trials", "8",
                           "--records", str(rec), "--export", str(cubin)], capsys)
    assert rc == 0, out
    assert "(measured), trial " in out and n_lines(rec) == 8
    k = tcomp.load(str(cubin))
    rng = np.random.default_rng(0)
    A = rng.standard_normal((256, 256)).astype(np.float32)
    B = rng.standard_normal((256, 256)).astype(np.float32)
    np.testing.assert_allclose(k(A, B), A.astype(np.float64) @ B, rtol=1e-3, atol=1e-3)
