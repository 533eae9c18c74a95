"""`SimRunner`: correctness without a GPU.

Each candidate's schedule is replayed, lowered at the real sizes (so a
schedule that lowering rejects there fails here too), built for the "sim"
target at the check sizes and run on random inputs against the oracle
(oracle.py). Nothing is timed: `times_ms` is None for every result, and a
search on the sim ranks candidates by its cost model alone. Used by CI and
by runs on machines without a GPU.

Check sizes: the real sizes when the op's work there (identity.work_of:
iterations of its statements, or elements of its tensors, whichever is
larger) is at most `budget` (default 2**15: the sim runs a fully serial
32x32x32 matmul in about half a second); else `identity.small_sizes`
halves the largest size until it fits.

Time limit: the candidates run in this process, one after another, each
under `timeout_s` (default SIM_TIMEOUT_S, 60 s: a check within the budget
takes about a second), or the candidate's own `MeasureInput.timeout_s` when
shorter; one that runs past it (a sim run or a lowering that does not end)
is stopped from inside (deadline.py) and recorded as "timeout", and the
batch goes on.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from ..build import build, lower
from ..schedule import Schedule
from ..errors import TcompError
from .deadline import Deadline, DeadlineExceeded
from .identity import op_hash, sizes_text, small_sizes
from .oracle import compare, make_case
from .runner import (CandidateFailed, DeviceInfo, DeviceProgram, MeasureInput, MeasureResult,
                     Runner, measure_here, stage)

SIM_BUDGET = 1 << 15
SIM_TIMEOUT_S = 60.0
SIM_DEVICE = DeviceInfo("sim", "sim")


class Cases:
    """The check's (inputs, expected outputs) per (op, sizes), made once: every
    candidate of an op is checked on the same data. Keeps the last few."""

    def __init__(self, inputs=None, keep: int = 4):
        self.inputs, self.keep, self._cases = inputs, keep, {}

    def get(self, op, sizes: dict) -> tuple[list, list]:
        key = (op_hash(op), tuple(sizes.items()))
        if key not in self._cases:
            if len(self._cases) >= self.keep:
                self._cases.pop(next(iter(self._cases)))
            self._cases[key] = make_case(op, sizes, self.inputs)
        return self._cases[key]

    def __getstate__(self):  # the cache stays behind when a program travels to a worker
        return {"inputs": self.inputs, "keep": self.keep, "_cases": {}}


class SimProgram(DeviceProgram):
    """The sim's DeviceProgram (see the module docstring); `inputs`: a
    module-level function (op, sizes, rng) -> arrays, for ops whose oracle
    needs inputs of a kind random data is not."""
    target = "sim"

    def __init__(self, budget: int = SIM_BUDGET, inputs=None):
        self.budget = budget
        self.cases = Cases(inputs)

    def setup(self) -> DeviceInfo:
        return SIM_DEVICE

    def prepare(self, inp: MeasureInput, device: DeviceInfo):
        sched = stage("schedule", Schedule.from_json, inp.op, inp.schedule)
        small = small_sizes(inp.op, inp.sizes, self.budget)
        if small != inp.sizes:
            stage("lowering", lower, sched, inp.sizes)  # the real sizes must lower too
        kernel = stage("lowering", build, sched, "sim", small)
        arrays, want = self.cases.get(inp.op, small)
        return inp.op, small, kernel, arrays, want

    def run(self, payload) -> None:
        op, small, kernel, arrays, want = payload
        got = stage("runtime", kernel, *arrays)
        check(op, got, want, small)
        return None


def check(op, got, want, sizes: dict) -> None:
    """CandidateFailed("wrong_result") unless `got` matches the oracle."""
    problem = compare(op, got, want)
    if problem is not None:
        raise CandidateFailed("wrong_result", f"{problem} (checked at {sizes_text(sizes)} on "
                                              f"random inputs)")


class SimRunner(Runner):
    """Checks candidates on the sim, in this process, one after another, each
    under a time limit of `timeout_s` seconds (see the module docstring)."""
    target = "sim"

    def __init__(self, budget: int = SIM_BUDGET, inputs=None, timeout_s: float = SIM_TIMEOUT_S):
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not timeout_s > 0:
            raise TcompError(f"SimRunner: timeout_s must be a positive number of seconds, got "
                             f"{timeout_s!r}")
        self.program = SimProgram(budget, inputs)
        self.timeout_s = float(timeout_s)

    def run(self, batch: Sequence[MeasureInput], on_result=None) -> list[MeasureResult]:
        out = []
        for i, inp in enumerate(self._check_batch(batch, on_result)):
            out.append(self._measure(inp))
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def _measure(self, inp: MeasureInput) -> MeasureResult:
        own = inp.timeout_s is not None and inp.timeout_s < self.timeout_s
        limit = inp.timeout_s if own else self.timeout_s
        # the check's data is the op's, made once for all its candidates: not in the limit
        self.program.cases.get(inp.op, small_sizes(inp.op, inp.sizes, self.program.budget))
        t0 = time.perf_counter()
        try:
            with Deadline(limit):
                return measure_here(self.program, inp, SIM_DEVICE)
        except DeadlineExceeded:
            why = (f"{limit:g} s, the limit the search set for this candidate" if own else
                   f"timeout_s={limit:g} s (a hang?)")
            return MeasureResult(None, "timeout", f"checking it on the sim (replay, lowering, "
                                                  f"the sim run) took longer than {why}; it was "
                                                  f"stopped", time.perf_counter() - t0,
                                 SIM_DEVICE.name)
