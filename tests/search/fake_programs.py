"""DevicePrograms that stand in for a GPU in runner tests (module level, so
that spawned workers and Ray actors can unpickle them).

`FakeProgram` reads what to do from the candidate's schedule JSON (a
"fake" field beside the directives) and otherwise does the real work of a
check: the oracle's outputs on the check data, compared by the runner's own
`check`. Behaviours:

  prepare: "schedule" (a ScheduleError while replaying), "prepare_crash"
           (os._exit), "prepare_hang", "oracle" (OracleError: fatal),
           "slow_payload" (a payload that takes 1.5 s to unpickle, in the
           device worker before it begins the task; then as "ok");
  run:     "ok" (times 1, 2, 3 ms), "pid" (times: the worker's pid),
           "wrong" (outputs off by one), "crash" (os._exit(3)), "hang",
           "poison" (a runtime failure that leaves the device unusable),
           "preloaded" (as "ok" when the worker had imported what a check
           imports on first use before its first task, else a runtime failure).
"""
from __future__ import annotations

import json
import os
import sys
import time

import tcomp
from tcomp import Schedule
from tcomp.errors import ScheduleError
from tcomp.lang.evaluate import evaluate
from tcomp.search.cuda_program import CudaProgram
from tcomp.search.oracle import OracleError, make_case
from tcomp.search.runner import CandidateFailed, DeviceInfo, DeviceProgram, stage
from tcomp.search.sim_runner import check

MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def fake_schedule(behaviour: str) -> str:
    return json.dumps({"tcomp_schedule": 1, "directives": [], "fake": behaviour})


class FakeProgram(DeviceProgram):
    def __init__(self, target: str = "sim", arch: str = "sm_fake", archs: dict | None = None,
                 setup_error: str | None = None):
        self.target, self.arch, self.archs, self.setup_error = target, arch, archs or {}, \
            setup_error

    def setup(self) -> DeviceInfo:
        if self.setup_error == "exit":
            os._exit(5)
        if self.setup_error:
            raise RuntimeError(self.setup_error)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return DeviceInfo(f"fake{gpu}", self.archs.get(gpu, self.arch))

    def prepare(self, inp, device):
        what = json.loads(inp.schedule)["fake"]
        if what == "schedule":
            stage("schedule", _raise, ScheduleError("split: factor must be positive"))
        if what == "prepare_crash":
            os._exit(4)
        if what == "prepare_hang":
            time.sleep(600)
        if what == "oracle":
            raise OracleError("cannot check candidates of 'matmul': the oracle fails")
        loaded = sorted(m for m in ("ml_dtypes", "numpy.random") if m in sys.modules)
        arrays, want = make_case(inp.op, inp.sizes)
        if what == "slow_payload":
            return what, inp.op, inp.sizes, arrays, want, SlowToUnpickle()
        return what, inp.op, inp.sizes, arrays, want, loaded

    def run(self, payload):
        what, op, sizes, arrays, want, extra = payload
        if what == "preloaded":
            here = sorted(m for m in ("ml_dtypes", "numpy.random") if m in sys.modules)
            if extra != ["ml_dtypes", "numpy.random"] or here != extra:
                raise CandidateFailed("runtime", f"imported before the task: prepare {extra}, "
                                                 f"run {here}")
        if what == "crash":
            os._exit(3)
        if what == "hang":
            time.sleep(600)
        if what == "poison":
            raise CandidateFailed("runtime", "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        got = evaluate(op, *arrays)
        if what == "wrong":
            got = got + 1
        check(op, got, want, sizes)
        return (float(os.getpid()),) if what == "pid" else (1.0, 2.0, 3.0)

    def poisoned(self, kind: str) -> bool:
        return kind == "runtime"


def _raise(e):
    raise e


class SlowToUnpickle:
    """Unpickles as None, after 1.5 s (in the worker's receive, before its task)."""

    def __reduce__(self):
        return _sleep, (1.5,)


def _sleep(seconds):
    time.sleep(seconds)


# ------------------------------------------------------------------ real GPU faults
# Ops with the signature of the candidate's op that compute something else, built
# with their default schedule in place of the candidate's kernels ("impostors"):
# the real GPU path then meets a wrong result, a hang and an illegal address.
IMPOSTORS = {
    # off by 0.5 per term of the sum
    "wrong": "def matmul(float(M,K) A, float(K,N) B) -> (C) "
             "{ C(m, n) +=! A(m, k) * B(k, n) + 0.5 }",
    # 4e18 dependent additions per output element: a hang, built through tcomp's IR
    "hang": "def matmul(float(M,K) A, float(K,N) B) -> (C) "
            "{ C(m, n) +=! A(m, 0) * B(0, n) * float(r - q) "
            "where r in 0:2000000000, q in 0:2000000000 }",
    # reads 2-8 GB past X (the inputs I are 1..4): an illegal address
    "fault": "def g(float(N) X, int32(M) I) -> (O) { O(i) = X(I(i) * 500000000) }",
}


def with_impostor(schedule_json: str, name: str) -> str:
    """The schedule with an "impostor" field (Schedule.from_json ignores it)."""
    d = json.loads(schedule_json)
    d["impostor"] = name
    return json.dumps(d)


class ImpostorProgram(CudaProgram):
    """CudaProgram whose candidates may name an impostor (see IMPOSTORS)."""

    def prepare(self, inp, device):
        op, sizes, small, timed, checked, arrays, want = super().prepare(inp, device)
        name = json.loads(inp.schedule).get("impostor")
        if name is not None:
            s = Schedule(tcomp.op(IMPOSTORS[name]))
            target = f"cuda:{device.arch}"
            timed = self._compile(s, sizes, target)
            checked = self._compile(s, small, target)
        return op, sizes, small, timed, checked, arrays, want
