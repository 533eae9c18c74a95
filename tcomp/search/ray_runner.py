"""`RayRunner`: measure on many GPUs and hosts through Ray (an optional extra:
`pip install "tcomp[ray]"`).

One Ray actor per GPU (`num_gpus=1`: Ray pins the actor's device with
CUDA_VISIBLE_DEVICES) runs both halves of the DeviceProgram for the
candidates it is given: prepare on its host's CPU, then check and time on its
GPU. Each actor measures one candidate at a time; the runner hands the next
one to whichever actor is free. A candidate whose actor dies is recorded as
"crash", one that runs past `timeout_s` as "timeout" (the actor is killed),
and either way, or after a CUDA error in the run, the actor is replaced by a
fresh one. An actor imports what a check loads on first use before it
reports its device (workers._preload), so that these imports count toward
`startup_timeout_s`, not toward its first candidate's `timeout_s`. tcomp
must be importable on every node of the cluster.

With a `SimProgram` the actors need no GPU (`num_gpus=0`): that is how CI
tests this runner, on a local Ray instance.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence

from ..errors import TcompError
from .oracle import OracleError
from .runner import (PREPARE_KINDS, DeviceProgram, MeasureInput, MeasureResult, Runner,
                     gpus_differ, measure_here)


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise TcompError(f"RayRunner needs Ray, which is not installed here ({e}); install it "
                         f"with `pip install \"tcomp[ray]\"`, or measure on this machine's GPUs "
                         f"with LocalRunner") from None
    return ray


class _Actor:
    """What runs inside a Ray actor (wrapped by ray.remote at run time)."""

    def __init__(self, program: DeviceProgram):
        from .workers import _preload
        _preload()  # first-use imports under startup_timeout_s, not a candidate's timeout_s
        self.program = program
        self.info = program.setup()

    def device(self):
        return self.info

    def measure(self, inp: MeasureInput):
        """("ok", MeasureResult, poisoned) or ("fatal", message)."""
        try:
            res = measure_here(self.program, inp, self.info)
        except OracleError as e:
            return ("fatal", str(e))
        failed_on_device = res.error is not None and res.error not in PREPARE_KINDS
        return ("ok", res, failed_on_device and self.program.poisoned(res.error))


class RayRunner(Runner):
    """Measures on Ray actors (see the module docstring).

    program: default `CudaProgram()`; actors: how many (default: the
    cluster's GPUs for a CUDA program, its CPUs for a sim one);
    timeout_s: per candidate (prepare, check and timing);
    startup_timeout_s: for an actor to start. Ray is initialised with
    `ray.init(**init)` when it is not already."""

    def __init__(self, program: DeviceProgram | None = None, actors: int | None = None,
                 timeout_s: float = 150.0, startup_timeout_s: float = 300.0,
                 init: dict | None = None):
        ray = _import_ray()
        if program is None:
            from .cuda_program import CudaProgram
            program = CudaProgram()
        if not isinstance(program, DeviceProgram):
            raise TcompError(f"RayRunner: program must be a tcomp.search.DeviceProgram, got "
                             f"{type(program).__name__}")
        for name, v in (("timeout_s", timeout_s), ("startup_timeout_s", startup_timeout_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise TcompError(f"RayRunner: {name} must be a positive number of seconds, got "
                                 f"{v!r}")
        if not ray.is_initialized():
            ray.init(**(init or {}))
        self.ray, self.program, self.target = ray, program, program.target
        self.timeout_s, self.startup_timeout_s = float(timeout_s), float(startup_timeout_s)
        gpus = 1 if program.target != "sim" else 0
        if actors is None:
            res = ray.cluster_resources()
            actors = int(res.get("GPU", 0)) if gpus else max(1, int(res.get("CPU", 1)))
            if actors == 0:
                raise TcompError("RayRunner: the Ray cluster has no GPUs; measure with a "
                                 "SimProgram (target 'sim') or add GPU nodes")
        if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
            raise TcompError(f"RayRunner: actors must be an int >= 1, got {actors!r}")
        self._remote = ray.remote(num_gpus=gpus, num_cpus=1 if not gpus else 0,
                                  max_restarts=0)(_Actor)
        self.actors = [None] * actors
        self.infos = [None] * actors

    def _start(self, k: int) -> None:
        a = self._remote.remote(self.program)
        try:
            info = self.ray.get(a.device.remote(), timeout=self.startup_timeout_s)
        except Exception as e:
            self.ray.kill(a)
            raise TcompError(f"RayRunner: actor {k} could not start: {_cause(e)}") from None
        problem = gpus_differ([(f"actor {j}", i) for j, i in enumerate(self.infos)
                               if i is not None and j != k] + [(f"actor {k}", info)])
        if problem is not None:
            self.ray.kill(a)
            raise TcompError(f"RayRunner: {problem}: give Ray GPUs of one kind")
        self.actors[k], self.infos[k] = a, info

    def _replace(self, k: int) -> None:
        try:
            self.ray.kill(self.actors[k])
        except Exception:
            pass
        self.actors[k] = None

    def close(self) -> None:
        for k in range(len(self.actors)):
            if self.actors[k] is not None:
                self._replace(k)

    def run(self, batch: Sequence[MeasureInput], on_result=None) -> list[MeasureResult]:
        batch = self._check_batch(batch, on_result)
        ray = self.ray
        results: list[MeasureResult | None] = [None] * len(batch)

        def finish(i: int, res: MeasureResult) -> None:
            results[i] = res
            if on_result is not None:
                on_result(i, res)
        todo = deque(range(len(batch)))
        pending = {}  # ObjectRef -> (actor index, batch index, deadline)
        try:
            while todo or pending:
                busy = {k for k, _, _ in pending.values()}
                for k in range(len(self.actors)):
                    if k not in busy and todo:
                        if self.actors[k] is None:
                            self._start(k)
                        i = todo.popleft()
                        ref = self.actors[k].measure.remote(batch[i])
                        pending[ref] = (k, i, time.monotonic() + self.timeout_s)
                timeout = max(0.0, min(d for _, _, d in pending.values()) - time.monotonic())
                done, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
                for ref in done:
                    k, i, _ = pending.pop(ref)
                    name = self.infos[k].name
                    try:
                        out = ray.get(ref)
                    except Exception as e:  # the actor died (RayActorError) or the task failed
                        finish(i, MeasureResult(None, "crash", f"the Ray actor {k} died while "
                                                             f"measuring it ({_cause(e)}); it "
                                                             f"was replaced", 0.0, name))
                        self._replace(k)
                        continue
                    if out[0] == "fatal":
                        raise OracleError(out[1])
                    finish(i, out[1])
                    if out[2]:  # its device state is suspect: a fresh actor
                        self._replace(k)
                now = time.monotonic()
                for ref, (k, i, deadline) in list(pending.items()):
                    if now > deadline:
                        del pending[ref]
                        finish(i, MeasureResult(
                            None, "timeout", f"measuring it took longer than timeout_s="
                                             f"{self.timeout_s:g} s (a hang?); the Ray actor {k} "
                                             f"was killed and replaced", 0.0, self.infos[k].name))
                        self._replace(k)
        except BaseException:
            for k, _, _ in pending.values():
                self._replace(k)
            raise
        return results


def _cause(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"
