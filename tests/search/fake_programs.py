"""DevicePrograms that stand in for a GPU in runner tests (module level, so
that spawned workers and Ray actors can unpickle them).

`FakeProgram` reads what to do from the candidate's schedule JSON (a
"fake" field beside the directives) and otherwise does the real work of a
check: the oracle's outputs on the check data, compared by the runner's own
`check`. Behaviours:

  prepare: "schedule" (a ScheduleError while replaying), "prepare_crash"
           (os._exit), "prepare_hang", "oracle" (OracleError: fatal);
  run:     "ok" (times 1, 2, 3 ms), "pid" (times: the worker's pid),
           "wrong" (outputs off by one), "crash" (os._exit(3)), "hang",
           "poison" (a runtime failure that leaves the device unusable).
"""
from __future__ import annotations

import json
import os
import time

from tcomp.errors import ScheduleError
from tcomp.lang.evaluate import evaluate
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
        arrays, want = make_case(inp.op, inp.sizes)
        return what, inp.op, inp.sizes, arrays, want

    def run(self, payload):
        what, op, sizes, arrays, want = payload
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
