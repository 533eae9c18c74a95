"""Measurement: the `Runner` interface and what every runner shares.

A runner takes a batch of `MeasureInput`s (op, sizes, schedule JSON, target)
and returns one `MeasureResult` per input, in order: times (ms) or None, an
error kind, a message, the build time and the device. A candidate that fails
in any way is a result with an error kind, never an exception: a search
goes on past any candidate. A runner raises only when it cannot measure at
all (no GPU, a worker that cannot start, an oracle that fails on the
inputs: `OracleError`).

What happens to one candidate is a `DeviceProgram`, in two halves:
`prepare` (on a CPU: replay the schedule, lower, compile, make the check's
inputs and expected outputs) and `run` (on the device: check, then time).
The runners differ only in where the halves run: `SimRunner` runs both in
this process; `LocalRunner` runs `prepare` in a pool of CPU processes and
`run` in one process per GPU; `RayRunner` runs both in one Ray actor per
GPU. Tests give a runner a program of their own to simulate a hang, a crash
or a wrong result without a GPU.

Error kinds, by the stage that failed:
  "schedule"     the schedule JSON does not replay (Schedule.from_json);
  "lowering"     lowering rejects it (or tcomp fails inside lowering);
  "compile"      NVRTC rejects the generated CUDA;
  "runtime"      the kernel fails as it runs (a CUDA error; a SimError);
  "wrong_result" its outputs differ from the oracle's;
  "timeout"      a stage ran past its time limit (the process is killed);
  "crash"        the process running it died.
"""
from __future__ import annotations

import abc
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import TcompError
from ..lang.op import Op
from .identity import canonical_schedule, check_sizes, op_hash
from .oracle import OracleError

ERROR_KINDS = ("schedule", "lowering", "compile", "runtime", "wrong_result", "timeout", "crash")
PREPARE_KINDS = ("schedule", "lowering", "compile")  # the failures of `prepare`


@dataclass(frozen=True)
class MeasureInput:
    """One candidate to measure. `schedule` is the text of `Schedule.to_json()`;
    `sizes` binds every size variable of `op` (checked here); `target` is
    "sim", "cuda" or "cuda:<arch>". `timeout_s`: this candidate's own limit
    on its device run (check and timing), when shorter than the runner's:
    the search sets it from the best time so far, so that a candidate far
    slower than the best costs seconds, not the runner's hang limit
    (LocalRunner applies it to the device run, SimRunner to the whole check;
    RayRunner's `timeout_s`, which also covers compiling, stays as it is)."""
    op: Op
    sizes: Mapping[str, int]
    schedule: str
    target: str = "cuda"
    timeout_s: float | None = None

    def __post_init__(self):
        if not isinstance(self.op, Op):
            raise TcompError(f"MeasureInput: op must be a tcomp.Op (from tcomp.op), got "
                             f"{type(self.op).__name__}")
        object.__setattr__(self, "sizes", check_sizes(self.op, self.sizes, "MeasureInput"))
        if not isinstance(self.schedule, str):
            raise TcompError(f"MeasureInput: schedule must be the text of Schedule.to_json(), "
                             f"got {type(self.schedule).__name__}")
        if not isinstance(self.target, str) or not (self.target == "sim"
                                                     or self.target.startswith("cuda")):
            raise TcompError(f"MeasureInput: target must be 'sim', 'cuda' or 'cuda:<arch>', "
                             f"got {self.target!r}")
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not t > 0):
            raise TcompError(f"MeasureInput: timeout_s must be a positive number of seconds "
                             f"or None, got {t!r}")

    @classmethod
    def of(cls, schedule, sizes: Mapping[str, int], target: str = "cuda") -> "MeasureInput":
        """From a `tcomp.Schedule`."""
        from ..schedule import Schedule
        if not isinstance(schedule, Schedule):
            raise TcompError(f"MeasureInput.of: needs a tcomp.Schedule, got "
                             f"{type(schedule).__name__}")
        return cls(schedule.op, sizes, schedule.to_json(), target)

    @property
    def key(self) -> tuple:
        """(op hash, sizes, target, canonical schedule): what `Records` calls
        the same measurement."""
        return measurement_key(op_hash(self.op), self.sizes, self.target,
                               canonical_schedule(self.schedule))


def measurement_key(op_h: str, sizes: Mapping[str, int], target: str, schedule: str) -> tuple:
    return (op_h, tuple(sorted(sizes.items())), target, schedule)


@dataclass(frozen=True)
class MeasureResult:
    """What became of one candidate. `times_ms`: the timed runs (None when not
    timed: a failure, or a runner that checks only, like `SimRunner`);
    `error`: None or one of ERROR_KINDS, with `message` saying what happened;
    `build_s`: seconds spent preparing it (replay, lowering, compile);
    `device`: the name of the device that ran it."""
    times_ms: tuple[float, ...] | None
    error: str | None = None
    message: str = ""
    build_s: float = 0.0
    device: str = ""

    def __post_init__(self):
        if self.error is not None and self.error not in ERROR_KINDS:
            raise TcompError(f"MeasureResult: error must be None or one of "
                             f"{', '.join(ERROR_KINDS)}, got {self.error!r}")
        if self.times_ms is not None:
            object.__setattr__(self, "times_ms", tuple(float(t) for t in self.times_ms))
            if self.error is not None or not self.times_ms:
                raise TcompError("MeasureResult: times_ms must be a non-empty sequence for a "
                                 "candidate without error, and None for a failed one")
            if not all(math.isfinite(t) and t >= 0 for t in self.times_ms):
                raise TcompError(f"MeasureResult: times_ms must be finite and >= 0, got "
                                 f"{list(self.times_ms)}")

    @property
    def ok(self) -> bool:
        """It ran and matched the oracle."""
        return self.error is None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None


@dataclass(frozen=True)
class DeviceInfo:
    """The device a worker runs on: its name (for records) and architecture
    (what `prepare` compiles for: "sm_90a"; "sim" for the CPU)."""
    name: str
    arch: str


def gpus_differ(labelled) -> str | None:
    """For [(label, DeviceInfo)] of a runner's workers: None when all share one
    architecture, else a message listing them (times from different kinds of
    GPU do not compare, and prepare compiles for one architecture)."""
    if len({info.arch for _, info in labelled}) <= 1:
        return None
    seen = ", ".join(f"{label}: {info.name} ({info.arch})" for label, info in labelled)
    return f"the GPUs differ ({seen}); times from different GPUs do not compare"


class CandidateFailed(Exception):
    """Raised by a DeviceProgram's halves: the candidate failed with `kind`."""

    def __init__(self, kind: str, message: str):
        assert kind in ERROR_KINDS, kind
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


def stage(kind: str, fn, *args):
    """Run one stage of a candidate; any failure becomes CandidateFailed(kind).
    A TcompError is the candidate's fault and keeps its message; any other
    exception is a bug in tcomp, said so, and still only fails the candidate."""
    try:
        return fn(*args)
    except (CandidateFailed, OracleError):
        raise
    except TcompError as e:
        raise CandidateFailed(kind, f"{type(e).__name__}: {e}") from None
    except Exception as e:
        raise CandidateFailed(kind, f"internal error in tcomp ({type(e).__name__}: {e}); "
                                    f"please report it with this schedule") from None


class DeviceProgram(abc.ABC):
    """What happens to a candidate, in two halves (see the module docstring).
    Instances travel to worker processes: keep them picklable (plain
    attributes; functions defined at module level). `target`: "cuda" or
    "sim", the inputs' target this program measures."""
    target = "cuda"

    def setup(self) -> DeviceInfo:
        """Once per device worker, before any `run`: claim the device."""
        return DeviceInfo("sim", "sim")

    @abc.abstractmethod
    def prepare(self, inp: MeasureInput, device: DeviceInfo):
        """On a CPU: everything `run` needs (picklable). Raises CandidateFailed
        for the candidate's failures, OracleError when no candidate of this op
        can be checked."""

    @abc.abstractmethod
    def run(self, payload) -> tuple[float, ...] | None:
        """On the device: check the candidate against the oracle, then time it
        (ms per run) or return None (check only). Raises CandidateFailed."""

    def poisoned(self, kind: str) -> bool:
        """Whether the device state of the worker that saw a failure of `kind`
        in `run` is unusable, so that the worker must be restarted."""
        return False


def measure_here(program: DeviceProgram, inp: MeasureInput, device: DeviceInfo) -> MeasureResult:
    """Both halves of `program` in this process."""
    t0 = time.perf_counter()
    try:
        payload = program.prepare(inp, device)
    except CandidateFailed as f:
        return MeasureResult(None, f.kind, f.message, time.perf_counter() - t0, device.name)
    build_s = time.perf_counter() - t0
    try:
        times = program.run(payload)
    except CandidateFailed as f:
        return MeasureResult(None, f.kind, f.message, build_s, device.name)
    return MeasureResult(times, None, "", build_s, device.name)


class Runner(abc.ABC):
    """Measures batches of candidates. Use as a context manager (or call
    `close`) so that worker processes end with it."""
    target: str = "cuda"

    @abc.abstractmethod
    def run(self, batch: Sequence[MeasureInput],
            on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        """One result per input, in order. `on_result(i, result)` is called as
        each candidate finishes (in any order), so that a caller can record it
        at once: a run stopped mid-batch then loses only the candidates in
        flight."""

    def close(self) -> None:
        """Stop the runner's workers (nothing for an in-process runner)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_batch(self, batch, on_result=None) -> list[MeasureInput]:
        name = type(self).__name__
        if on_result is not None and not callable(on_result):
            raise TcompError(f"{name}.run: on_result must be a function (index, result), got "
                             f"{type(on_result).__name__}")
        if isinstance(batch, MeasureInput) or not isinstance(batch, Sequence):
            raise TcompError(f"{name}.run: needs a list of MeasureInput, got "
                             f"{type(batch).__name__}")
        for i, inp in enumerate(batch):
            if not isinstance(inp, MeasureInput):
                raise TcompError(f"{name}.run: batch[{i}] is a {type(inp).__name__}, not a "
                                 f"MeasureInput")
            if (inp.target == "sim") != (self.target == "sim"):
                raise TcompError(f"{name}.run: batch[{i}] is for target '{inp.target}', but "
                                 f"this runner measures target '{self.target}'")
        return list(batch)

