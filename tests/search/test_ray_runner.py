"""RayRunner on a local Ray instance (CPU actors): the sim program, and the
fake program's faults. Skipped where Ray is not installed (`pip install
"tcomp[ray]"`); the error without Ray is tested everywhere."""
from __future__ import annotations

import os
import sys

import pytest

import tcomp
from tcomp.search import MeasureInput, SimProgram
from tests.search.fake_programs import MM, FakeProgram, fake_schedule
from tests.search.test_sim_runner import tiled

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(tcomp.TcompError, match=r"RayRunner needs Ray, which is not installed "
                                               r"here \(.*\); install it with `pip install "
                                               r"\"tcomp\[ray\]\"`, or measure on this "
                                               r"machine's GPUs with LocalRunner"):
        tcomp.search.RayRunner()


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    # actors import tcomp and these tests from the source tree
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


def test_sim_program_on_ray_actors(ray):
    op = tcomp.op(MM)
    big = {"M": 256, "N": 256, "K": 256}
    batch = [MeasureInput.of(tiled(op), big, "sim"), MeasureInput(op, big, "{}", "sim"),
             MeasureInput.of(tiled(op, 4), {"M": 9, "N": 7, "K": 5}, "sim")]
    r = tcomp.search.RayRunner(SimProgram(), actors=2)
    try:
        res = r.run(batch)
    finally:
        r.close()
    assert [x.error for x in res] == [None, "schedule", None]
    assert all(x.device == "sim" and x.times_ms is None for x in res)


def test_faults_on_ray_actors(ray):
    op = tcomp.op(MM)
    sizes = {"M": 8, "N": 5, "K": 3}
    batch = [MeasureInput(op, sizes, fake_schedule(b), "sim")
             for b in ("ok", "crash", "wrong", "hang", "poison", "ok")]
    r = tcomp.search.RayRunner(FakeProgram(), actors=2, timeout_s=3.0)
    try:
        seen = {}
        res = r.run(batch, on_result=seen.__setitem__)
        assert [x.error for x in res] == [None, "crash", "wrong_result", "timeout", "runtime",
                                          None]
        assert seen == dict(enumerate(res))
        assert res[0].times_ms == (1.0, 2.0, 3.0)
        assert res[1].message.startswith("the Ray actor ") and "died while measuring it" in \
            res[1].message
        assert res[3].message.endswith("took longer than timeout_s=3 s (a hang?); the Ray "
                                       "actor " + res[3].message.split("actor ")[1])
        assert "was killed and replaced" in res[3].message
        with pytest.raises(tcomp.search.OracleError, match="cannot check candidates of 'matmul'"):
            r.run([MeasureInput(op, sizes, fake_schedule("oracle"), "sim")])
        assert [x.error for x in r.run(batch[:1])] == [None]
    finally:
        r.close()


def test_bad_arguments(ray):
    with pytest.raises(tcomp.TcompError, match="RayRunner: actors must be an int >= 1, got 0"):
        tcomp.search.RayRunner(SimProgram(), actors=0)
    with pytest.raises(tcomp.TcompError, match="RayRunner: timeout_s must be a positive number "
                                               "of seconds, got -1"):
        tcomp.search.RayRunner(SimProgram(), timeout_s=-1)
    with pytest.raises(tcomp.TcompError, match="RayRunner: program must be a "
                                               "tcomp.search.DeviceProgram, got int"):
        tcomp.search.RayRunner(3)
    with pytest.raises(tcomp.TcompError, match="RayRunner: the Ray cluster has no GPUs; measure "
                                               r"with a SimProgram \(target 'sim'\) or add GPU "
                                               "nodes"):
        tcomp.search.RayRunner(FakeProgram(target="cuda"))


def test_an_actor_that_cannot_start(ray):
    r = tcomp.search.RayRunner(FakeProgram(setup_error="no GPU here"), actors=1,
                               startup_timeout_s=60)
    op = tcomp.op(MM)
    with pytest.raises(tcomp.TcompError, match=r"RayRunner: actor 0 could not start: .*no GPU "
                                               r"here"):
        r.run([MeasureInput(op, {"M": 1, "N": 1, "K": 1}, fake_schedule("ok"), "sim")])
    r.close()
