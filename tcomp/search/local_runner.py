"""`LocalRunner`: measure on the GPUs of this machine.

One device worker process per GPU (pinned with CUDA_VISIBLE_DEVICES) runs
the program's `run` half: check against the oracle, then time. A pool of
prepare worker processes (default: one per CPU core but one) runs the
`prepare` half: replay, lower, compile with NVRTC (which needs no GPU) and
make the check's data, so compiling overlaps with measuring. Processes are
started from tcomp's own entry point (`python -m tcomp.search.worker_main`:
a script needs no main guard), talk over sockets (workers.py has the
protocol) and outlive a batch;
`close()` (or leaving a `with` block) ends them.

Faults: a worker that dies is recorded as "crash" for the candidate it was
working on; one that runs past its deadline (`timeout_s` for a device run,
`prepare_timeout_s` for a prepare, counted from the moment the worker
begins the candidate: workers.py) is killed and recorded as "timeout"; a
device worker whose run failed with a CUDA error (an illegal address leaves
its context unusable) is restarted. Either way the batch goes on, on a fresh
worker. The runner raises only when it cannot measure at all: a worker that
cannot start (no GPU: `TcompError`), or an oracle that fails on the check's
inputs (`OracleError`).
"""
from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import wait

from ..errors import TcompError
from .oracle import OracleError
from .runner import (DeviceInfo, DeviceProgram, MeasureInput, MeasureResult, Runner,
                     gpus_differ)
from .workers import Worker, pickled


def gpu_count() -> int:
    """GPUs the CUDA driver sees here (0 without a driver)."""
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, n = driver.cuDeviceGetCount()
        return int(n) if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:
        return 0


class LocalRunner(Runner):
    """Measures on local GPUs (see the module docstring).

    devices: GPU indices, one worker each (default: every GPU the driver
      sees); program: the DeviceProgram (default `CudaProgram()`; tests pass
      their own); prepare_workers: CPU processes for `prepare`;
      timeout_s: per candidate on a device (check and timing);
      prepare_timeout_s: per candidate for replay, lowering and compile;
      startup_timeout_s: for a worker to start (imports, CUDA context)."""

    def __init__(self, devices: Sequence[int] | None = None, program: DeviceProgram | None = None,
                 prepare_workers: int | None = None, timeout_s: float = 30.0,
                 prepare_timeout_s: float = 120.0, startup_timeout_s: float = 120.0):
        if program is None:
            from .cuda_program import CudaProgram
            program = CudaProgram()
        if not isinstance(program, DeviceProgram):
            raise TcompError(f"LocalRunner: program must be a tcomp.search.DeviceProgram, got "
                             f"{type(program).__name__}")
        if devices is None:
            n = gpu_count()
            if n == 0:
                raise TcompError("LocalRunner: no CUDA GPU found on this machine; measure with "
                                 "SimRunner (target 'sim') instead, or pass devices=")
            devices = list(range(n))
        devices = list(devices) if isinstance(devices, (list, tuple, range)) else devices
        if (not isinstance(devices, list) or not devices or len(set(devices)) != len(devices)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                           for d in devices)):
            raise TcompError(f"LocalRunner: devices must be a non-empty list of distinct GPU "
                             f"indices (e.g. [0, 1]), got {devices!r}")
        if prepare_workers is None:
            prepare_workers = max(1, (os.cpu_count() or 2) - 1)
        if isinstance(prepare_workers, bool) or not isinstance(prepare_workers, int) \
                or prepare_workers < 1:
            raise TcompError(f"LocalRunner: prepare_workers must be an int >= 1, got "
                             f"{prepare_workers!r}")
        for name, v in (("timeout_s", timeout_s), ("prepare_timeout_s", prepare_timeout_s),
                        ("startup_timeout_s", startup_timeout_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise TcompError(f"LocalRunner: {name} must be a positive number of seconds, "
                                 f"got {v!r}")
        self.program, self.target = program, program.target
        self.timeout_s, self.prepare_timeout_s = float(timeout_s), float(prepare_timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        try:
            data = pickled(program)
        except Exception as e:
            raise TcompError(f"LocalRunner: the program cannot be sent to worker processes "
                             f"({type(e).__name__}: {e}); keep its attributes plain data and "
                             f"its functions at module level") from None
        self.devices = [Worker("device", data, d, f"gpu{d}") for d in devices]
        self.preparers = [Worker("prepare", data, None, f"prepare{i}")
                          for i in range(prepare_workers)]
        self._task = 0

    def __repr__(self) -> str:
        return (f"<LocalRunner GPUs {[w.device_index for w in self.devices]}, "
                f"{len(self.preparers)} prepare worker(s)>")

    @property
    def device(self) -> DeviceInfo | None:
        """The DeviceInfo of the ready GPU workers (None before the first batch)."""
        return next((w.info for w in self.devices if w.info is not None), None)

    def close(self) -> None:
        for w in self.devices + self.preparers:
            w.stop()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ the loop
    def run(self, batch: Sequence[MeasureInput], on_result=None) -> list[MeasureResult]:
        batch = self._check_batch(batch, on_result)
        self._on_result = on_result
        self._results: list[MeasureResult | None] = [None] * len(batch)
        self._todo = deque(range(len(batch)))  # not yet prepared
        self._ready = deque()  # (index, payload, build seconds): prepared, not yet run
        self._batch = batch
        try:
            while any(r is None for r in self._results):
                self._dispatch()
                self._wait()
        except BaseException:
            for w in self.devices + self.preparers:  # their tasks belong to this batch
                if w.state == "busy":
                    w.kill()
            raise
        return list(self._results)

    def _dispatch(self) -> None:
        for w in self.devices + self.preparers:
            if w.state == "idle" and not w.process.is_alive():
                w.kill()  # it died between tasks: nothing of this batch was lost
            if w.state == "dead":
                w.start(self.startup_timeout_s)
        if any(w.info is None for w in self.devices):
            return  # the first batch starts when every GPU worker has said what it runs on
        self._check_devices()  # (prepare compiles for that architecture)
        info = self.device
        for w in self.preparers:
            if w.state == "idle" and self._todo:
                i = self._todo.popleft()
                self._check_target(self._batch[i], info)
                w.send(self._next(), (self._batch[i], info), self.prepare_timeout_s,
                       (i, time.monotonic()))
        for w in self.devices:
            if w.state == "idle" and self._ready:
                i, payload, build_s = self._ready.popleft()
                w.send(self._next(), payload, self._limit(i), (i, build_s))

    def _done(self, i: int, res: MeasureResult) -> None:
        self._results[i] = res
        if self._on_result is not None:
            self._on_result(i, res)

    def _next(self) -> int:
        self._task += 1
        return self._task

    def _wait(self) -> None:
        active = [w for w in self.devices + self.preparers if w.state in ("starting", "busy")]
        if not active:
            return
        timeout = max(0.0, min(w.deadline for w in active) - time.monotonic())
        wait([w.conn for w in active] + [w.process.sentinel for w in active
                                         if w.process.sentinel is not None], timeout)
        for w in active:
            if w.conn.poll():
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    self._died(w)
                    continue
                self._message(w, msg)
            elif not w.process.is_alive():
                self._died(w)
            elif time.monotonic() > w.deadline:
                self._timed_out(w)

    def _message(self, w: Worker, msg: tuple) -> None:
        if msg[0] == "ready":
            w.state, w.info = "idle", msg[1]
            return
        if msg[0] == "started":
            w.began(msg[1])
            return
        if msg[0] == "setup_failed":
            self.close()
            raise TcompError(f"LocalRunner: the worker for {self._what(w)} could not start: "
                             f"{msg[1]}")
        i, extra = w.task[1]
        if msg[0] == "fatal":
            raise OracleError(msg[2])
        w.state, w.task = "idle", None
        if w.role == "prepare":
            build_s = time.monotonic() - extra
            if msg[0] == "done":
                self._ready.append((i, msg[2], build_s))
            else:
                self._done(i, MeasureResult(None, msg[2], msg[3], build_s, self.device.name))
            return
        if msg[0] == "done":
            self._done(i, MeasureResult(msg[2], None, "", extra, w.info.name))
        else:
            self._done(i, MeasureResult(None, msg[2], msg[3], extra, w.info.name))
            if msg[4]:  # its context may be unusable: a fresh process for the next one
                w.kill()

    def _died(self, w: Worker) -> None:
        w.process.join(1)
        how = w.exit_text()
        if w.state == "starting":
            self.close()
            raise TcompError(f"LocalRunner: the worker for {self._what(w)} died while starting "
                             f"({how}; its error output is above){self._main_hint(w)}")
        self._fail(w, "crash", f"the {self._what(w)} worker process died ({how}) while "
                               f"{self._doing(w)}; it was restarted")

    def _timed_out(self, w: Worker) -> None:
        if w.state == "starting":
            self.close()
            raise TcompError(f"LocalRunner: the worker for {self._what(w)} did not start within "
                             f"startup_timeout_s={self.startup_timeout_s:g} s")
        i = w.task[1][0]
        if w.role == "device" and self._limit(i) < self.timeout_s:
            why = (f"{self._limit(i):g} s, the limit the search set for this candidate (far "
                   f"slower than the best so far)")
        else:
            why = (f"timeout_s={self.timeout_s:g} s (a hang?)" if w.role == "device" else
                   f"prepare_timeout_s={self.prepare_timeout_s:g} s (a hang?)")
        self._fail(w, "timeout", f"{self._doing(w)} took longer than {why}; "
                                 f"the {self._what(w)} worker was killed and restarted")

    def _limit(self, i: int) -> float:
        """The device time limit of candidate i of the batch."""
        own = self._batch[i].timeout_s
        return self.timeout_s if own is None else min(own, self.timeout_s)

    def _fail(self, w: Worker, kind: str, message: str) -> None:
        i, extra = w.task[1]
        build_s = extra if w.role == "device" else time.monotonic() - extra
        name = (w.info or self.device).name if (w.info or self.device) else ""
        self._done(i, MeasureResult(None, kind, message, build_s, name))
        w.kill()

    @staticmethod
    def _main_hint(w: Worker) -> str:
        if not w.uses_main:
            return ""
        return (". The program (or something it holds) is defined in the script itself "
                "(__main__), so each worker runs the script's top level to find it: make the "
                "LocalRunner under `if __name__ == \"__main__\":`, or move that definition "
                "into a module")

    @staticmethod
    def _what(w: Worker) -> str:
        return f"GPU {w.device_index}" if w.role == "device" else "prepare"

    @staticmethod
    def _doing(w: Worker) -> str:
        return ("running it (check and timing)" if w.role == "device" else
                "preparing it (replay, lowering, compile)")

    def _check_devices(self) -> None:
        problem = gpus_differ([(f"GPU {w.device_index}", w.info) for w in self.devices
                               if w.info is not None])
        if problem is not None:
            self.close()
            raise TcompError(f"LocalRunner: {problem}: pass devices= GPUs of one kind")

    @staticmethod
    def _check_target(inp: MeasureInput, info: DeviceInfo) -> None:
        if ":" in inp.target and inp.target.split(":", 1)[1] != info.arch:
            raise TcompError(f"LocalRunner: a candidate is for target '{inp.target}', but the "
                             f"GPUs here are {info.name} ({info.arch}); use target 'cuda' (the "
                             f"GPU's own architecture) or 'cuda:{info.arch}'")
