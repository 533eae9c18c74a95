"""Re-checking a recorded candidate before it is trusted as the best.

A records line is data: it can pass validation and still lie (edited by
hand, written by another program, or by a tcomp that lowered differently):
its schedule may not replay, or replay and compute a wrong result. So the
record that `tcomp.search.best` would return, and the best record a resumed
`tcomp.tune` starts from, is checked again first:

    res = recheck(op, sizes, schedule_text)      # a MeasureResult

on the sim, whatever the record's target (a SimRunner: replay, lowering at
the real sizes, a run at small sizes against `tcomp.evaluate`): it needs no
GPU, and the sim executes the same Kernel IR with GPU semantics; about a
second at the sim's check budget. The search's own candidates were checked
when they were measured; only what comes from a file is re-checked. A
record that fails is passed over with a `RecordCheckWarning` that names its
line and why, and the next best is checked in turn.

An op whose oracle cannot take random inputs (`OracleError`: a gather whose
index input must lie within a tensor) cannot be run against it: its records
are re-checked by replay and lowering at the real sizes alone.
"""
from __future__ import annotations

import time

from ..build import lower
from ..schedule import Schedule
from .oracle import OracleError
from .records import RecordsWarning
from .runner import CandidateFailed, MeasureInput, MeasureResult, stage


class RecordCheckWarning(RecordsWarning):
    """A record that would have been the best failed its re-check (it does not
    replay, or computes a wrong result); the next valid record is used."""


def recheck(op, sizes: dict, schedule: str, runner=None) -> MeasureResult:
    """The result of checking `schedule` (the text of Schedule.to_json) of `op`
    at `sizes` again (see the module docstring); `runner`: a sim Runner to
    use (default: a SimRunner)."""
    if runner is None:
        from .sim_runner import SimRunner
        runner = SimRunner()
    try:
        return runner.run([MeasureInput(op, sizes, schedule, "sim")])[0]
    except OracleError:
        return _replay_and_lower(op, sizes, schedule)


def _replay_and_lower(op, sizes: dict, schedule: str) -> MeasureResult:
    t0 = time.perf_counter()
    try:
        sched = stage("schedule", Schedule.from_json, op, schedule)
        stage("lowering", lower, sched, dict(sizes))
    except CandidateFailed as f:
        return MeasureResult(None, f.kind, f.message, time.perf_counter() - t0, "sim")
    return MeasureResult(None, None, "", time.perf_counter() - t0, "sim")


def failed_text(res: MeasureResult) -> str:
    """What a failed re-check says, for warnings and records."""
    return f"its re-check on the sim failed ({res.error}: {res.message})"
