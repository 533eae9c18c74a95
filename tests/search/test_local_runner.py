"""LocalRunner on the CPU: worker processes running FakeProgram (a stand-in for
the GPU half) — every fault is recorded and the batch goes on."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.search import LocalRunner, MeasureInput, OracleError, SimProgram
from tests.search.fake_programs import MM, FakeProgram, fake_schedule

SIZES = {"M": 8, "N": 5, "K": 3}


def inputs(*behaviours, target="sim"):
    op = tcomp.op(MM)
    return [MeasureInput(op, SIZES, fake_schedule(b), target) for b in behaviours]


@pytest.fixture(scope="module")
def runner():
    r = LocalRunner(devices=[0, 3], program=FakeProgram(), prepare_workers=1, timeout_s=1.0,
                    prepare_timeout_s=1.5)
    yield r
    r.close()


def test_every_fault_is_recorded_and_the_batch_goes_on(runner):
    batch = inputs("ok", "wrong", "crash", "hang", "schedule", "prepare_crash", "prepare_hang",
                   "ok")
    seen = []
    res = runner.run(batch, on_result=lambda i, r: seen.append((i, r)))
    assert [r.error for r in res] == [None, "wrong_result", "crash", "timeout", "schedule",
                                      "crash", "timeout", None]
    # each result reported as it came, the same objects as returned
    assert sorted(i for i, _ in seen) == list(range(8)) and all(res[i] is r for i, r in seen)
    assert res[0].times_ms == (1.0, 2.0, 3.0) and res[0].median_ms == 2.0
    assert res[-1].ok and res[-1].times_ms == (1.0, 2.0, 3.0)
    assert res[1].message.startswith("output 'C': 40 of 40 elements differ beyond the float32 "
                                     "tolerance 0.0001")
    assert res[1].message.endswith("(checked at M=8,K=3,N=5 on random inputs)")
    assert "worker process died (exit status 3) while running it (check and timing); it was " \
           "restarted" in res[2].message
    assert res[3].message.startswith("running it (check and timing) took longer than "
                                     "timeout_s=1 s (a hang?); the GPU ")
    assert res[4].message == "ScheduleError: split: factor must be positive"
    assert res[5].message == ("the prepare worker process died (exit status 4) while preparing "
                              "it (replay, lowering, compile); it was restarted")
    assert res[6].message == ("preparing it (replay, lowering, compile) took longer than "
                              "prepare_timeout_s=1.5 s (a hang?); the prepare worker was killed "
                              "and restarted")
    # one worker per GPU, pinned: the fake program names the device CUDA_VISIBLE_DEVICES shows it
    assert {r.device for r in res} <= {"fake0", "fake3"}
    assert all(r.times_ms is None for r in res if not r.ok)


def test_the_deadline_counts_from_the_candidate_s_start_on_a_warm_worker():
    """A fresh worker has imported what a check imports on first use (ml_dtypes
    alone took ~1 s on the 2-core CI machine) before its first task, and a
    task's deadline counts from the worker's "started", not from dispatch: a
    payload that takes 1.5 s to arrive is not charged to a 1 s limit."""
    r = LocalRunner(devices=[0], program=FakeProgram(), prepare_workers=1, timeout_s=1.0,
                    prepare_timeout_s=1.0)
    try:
        res = r.run(inputs("preloaded", "slow_payload", "ok"))
    finally:
        r.close()
    assert [(x.error, x.message) for x in res] == [(None, "")] * 3


def test_a_poisoned_worker_is_restarted_a_wrong_result_is_not(runner):
    one = LocalRunner(devices=[1], program=FakeProgram(), prepare_workers=1, timeout_s=5.0)
    try:
        res = one.run(inputs("pid", "wrong", "pid", "poison", "pid"))
        assert [r.error for r in res] == [None, "wrong_result", None, "runtime", None]
        pids = [r.times_ms[0] for r in res if r.ok]
        assert pids[0] == pids[1] != pids[2]
        assert res[3].message == "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS"
        assert one.device.name == "fake1"
    finally:
        one.close()


def test_an_oracle_failure_stops_the_batch_and_the_runner_goes_on(runner):
    with pytest.raises(OracleError, match="cannot check candidates of 'matmul'"):
        runner.run(inputs("ok", "oracle", "ok"))
    assert [r.error for r in runner.run(inputs("ok"))] == [None]


def test_an_empty_batch(runner):
    assert runner.run([]) == []


def test_a_batch_for_another_target_is_refused(runner):
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner.run: batch\[0\] is for target "
                                               r"'cuda', but this runner measures target 'sim'"):
        runner.run(inputs("ok", target="cuda"))
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner.run: needs a list of MeasureInput, "
                                               r"got MeasureInput"):
        runner.run(inputs("ok")[0])
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner.run: batch\[1\] is a str, not a "
                                               r"MeasureInput"):
        runner.run(inputs("ok") + ["x"])
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner.run: on_result must be a function "
                                               r"\(index, result\), got list"):
        runner.run(inputs("ok"), on_result=[])


def test_a_worker_that_cannot_start_is_an_error():
    r = LocalRunner(devices=[0], program=FakeProgram(setup_error="no GPU here"),
                    prepare_workers=1)
    with pytest.raises(tcomp.TcompError, match="LocalRunner: the worker for GPU 0 could not "
                                               "start: RuntimeError: no GPU here"):
        r.run(inputs("ok"))
    r.close()


def test_a_worker_that_dies_or_hangs_while_starting_is_an_error():
    r = LocalRunner(devices=[0], program=FakeProgram(setup_error="exit"), prepare_workers=1)
    with pytest.raises(tcomp.TcompError) as e:
        r.run(inputs("ok"))
    assert str(e.value) == ("LocalRunner: the worker for GPU 0 died while starting (exit status "
                            "5; its error output is above)")
    r.close()
    r = LocalRunner(devices=[0], program=FakeProgram(), prepare_workers=1,
                    startup_timeout_s=0.01)
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner: the worker for (GPU 0|prepare) did "
                                               r"not start within startup_timeout_s=0.01 s"):
        r.run(inputs("ok"))
    r.close()


def test_gpus_differ_message():
    from tcomp.search.runner import DeviceInfo, gpus_differ
    a, b = DeviceInfo("NVIDIA H200", "sm_90a"), DeviceInfo("NVIDIA A100", "sm_80")
    assert gpus_differ([("actor 0", a), ("actor 1", a)]) is None
    assert gpus_differ([("actor 0", a), ("actor 1", b)]) == (
        "the GPUs differ (actor 0: NVIDIA H200 (sm_90a), actor 1: NVIDIA A100 (sm_80)); times "
        "from different GPUs do not compare")


def test_gpus_of_different_kinds_and_a_target_for_another_arch_are_errors():
    r = LocalRunner(devices=[0, 1], program=FakeProgram(target="cuda", archs={"1": "sm_80"}),
                    prepare_workers=1)
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner: the GPUs differ \(GPU 0: fake0 "
                                               r"\(sm_fake\), GPU 1: fake1 \(sm_80\)\); times "
                                               r"from different GPUs do not compare"):
        r.run(inputs("ok", "ok", "ok", target="cuda"))
    r.close()
    r = LocalRunner(devices=[0], program=FakeProgram(target="cuda", arch="sm_90a"),
                    prepare_workers=1)
    with pytest.raises(tcomp.TcompError, match=r"a candidate is for target 'cuda:sm_80', but the "
                                               r"GPUs here are fake0 \(sm_90a\); use target "
                                               r"'cuda' \(the GPU's own architecture\) or "
                                               r"'cuda:sm_90a'"):
        r.run(inputs("ok", target="cuda:sm_80"))
    assert [x.error for x in r.run(inputs("ok", target="cuda:sm_90a"))] == [None]
    r.close()


def test_the_sim_program_in_worker_processes():
    """The real prepare half (replay, lowering at the real sizes, the sim build at
    small sizes, the oracle) in a spawned prepare worker, the run half in a device
    worker."""
    from tests.search.test_sim_runner import tiled
    op = tcomp.op(MM)
    big = {"M": 512, "N": 512, "K": 512}
    batch = [MeasureInput.of(tiled(op), big, "sim"), MeasureInput(op, big, "{}", "sim")]
    with LocalRunner(devices=[0], program=SimProgram(), prepare_workers=1) as r:
        res = r.run(batch)
    assert [x.error for x in res] == [None, "schedule"]
    assert res[0].device == "sim" and res[0].times_ms is None and res[0].build_s > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(devices=[]), r"devices must be a non-empty list of distinct GPU indices \(e.g. "
                       r"\[0, 1\]\), got \[\]"),
    (dict(devices=[0, 0]), r"devices must be a non-empty list .*, got \[0, 0\]"),
    (dict(devices="0"), r"devices must be a non-empty list .*, got '0'"),
    (dict(devices=[0], prepare_workers=0), r"prepare_workers must be an int >= 1, got 0"),
    (dict(devices=[0], timeout_s=0), r"timeout_s must be a positive number of seconds, got 0"),
    (dict(devices=[0], prepare_timeout_s="1"), r"prepare_timeout_s must be a positive number "
                                               r"of seconds, got '1'"),
    (dict(devices=[0], program=object()), r"program must be a tcomp.search.DeviceProgram, got "
                                          r"object"),
])
def test_bad_arguments(kwargs, message):
    kwargs.setdefault("program", FakeProgram())
    with pytest.raises(tcomp.TcompError, match="LocalRunner: " + message):
        LocalRunner(**kwargs)


def test_no_gpu_is_an_error_that_names_the_sim_runner(monkeypatch):
    from tcomp.search import local_runner
    monkeypatch.setattr(local_runner, "gpu_count", lambda: 0)
    with pytest.raises(tcomp.TcompError, match=r"LocalRunner: no CUDA GPU found on this machine; "
                                               r"measure with SimRunner \(target 'sim'\) "
                                               r"instead, or pass devices="):
        LocalRunner()


KILLED_RUNNER = """
import os, sys, threading, time
import tcomp
from tcomp.search import LocalRunner, MeasureInput
from tests.search.fake_programs import MM, FakeProgram, fake_schedule

if __name__ == "__main__":
    r = LocalRunner(devices=[0], program=FakeProgram(), prepare_workers=1, timeout_s=600)
    inp = MeasureInput(tcomp.op(MM), {"M": 2, "N": 2, "K": 2}, fake_schedule("hang"), "sim")
    threading.Thread(target=r.run, args=([inp],), daemon=True).start()
    while r.devices[0].state != "busy":
        time.sleep(0.05)
    print(r.devices[0].process.pid, r.preparers[0].process.pid, flush=True)
    os.kill(os.getpid(), 9)
"""


def test_workers_end_when_the_runner_process_is_killed(tmp_path):
    """kill -9 of a tuning run leaves no worker behind, not even one stuck in a hung
    kernel (it watches its parent)."""
    import os
    import subprocess
    import sys
    import time
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    script, out = tmp_path / "killed.py", tmp_path / "out.txt"
    script.write_text(KILLED_RUNNER)
    with open(out, "w") as f:  # a file, not a pipe: a surviving worker would hold a pipe open
        proc = subprocess.run([sys.executable, str(script)], cwd=root, stdout=f,
                              stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=root),
                              timeout=120)
    assert proc.returncode == -9, out.read_text()
    pids = [int(p) for p in out.read_text().split()[:2]]

    def running(pid):
        try:
            return "zombie" not in open(f"/proc/{pid}/status").read()
        except OSError:
            return False
    deadline = time.monotonic() + 10
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [p for p in pids if running(p)]
    for p in alive:  # (only on failure: do not leave them behind)
        os.kill(p, 9)
    assert not alive, f"workers still running: {alive}"


def test_a_candidate_limit_shorter_than_the_runner_s_cuts_it_and_says_why():
    """MeasureInput.timeout_s (the search sets it from the best so far) caps
    that candidate's device run below the runner's hang limit; a longer one
    leaves the runner's limit in force."""
    import time
    op = tcomp.op(MM)
    r = LocalRunner(devices=[0], program=FakeProgram(), prepare_workers=1, timeout_s=600)
    try:
        t0 = time.monotonic()
        res = r.run([MeasureInput(op, SIZES, fake_schedule("hang"), "sim", timeout_s=0.5),
                     MeasureInput(op, SIZES, fake_schedule("ok"), "sim", timeout_s=900)])
        assert time.monotonic() - t0 < 60  # not the runner's 600 s
    finally:
        r.close()
    assert [x.error for x in res] == ["timeout", None]
    assert res[0].message.startswith(
        "running it (check and timing) took longer than 0.5 s, the limit the search set for "
        "this candidate (far slower than the best so far); the GPU ")


@pytest.mark.parametrize("bad", [0, -1.0, "2", True])
def test_a_candidate_limit_must_be_a_positive_number(bad):
    with pytest.raises(tcomp.TcompError) as e:
        MeasureInput(tcomp.op(MM), SIZES, fake_schedule("ok"), "sim", timeout_s=bad)
    assert str(e.value) == (f"MeasureInput: timeout_s must be a positive number of seconds or "
                            f"None, got {bad!r}")
