"""Worker processes for `LocalRunner`, and the messages they exchange.

A worker is a spawned process (never forked: a forked CUDA context is
unusable, and spawn starts clean) with one pipe to the runner. It runs one
half of a DeviceProgram:

    role "prepare": program.prepare(inp, device) on a CPU core;
    role "device":  program.setup() once, then program.run(payload), on the
                    GPU that CUDA_VISIBLE_DEVICES pins it to.

Protocol (tuples over the pipe; the runner speaks first after "ready"):

    worker -> runner  ("ready", DeviceInfo | None)    after setup
                      ("setup_failed", message)        setup raised; it exits
    runner -> worker  ("task", task_id, argument)
    worker -> runner  ("started", task_id)             as it begins the task
                      ("done", task_id, value)
                      ("failed", task_id, kind, message, poisoned)
                      ("fatal", task_id, message)      OracleError: no candidate can be checked
    runner -> worker  ("stop",)                        or the pipe closes: it exits

A worker that dies or runs past its deadline is killed by the runner
(`Worker.kill`), which records the task as "crash" or "timeout". The
deadline of a task counts from the worker's "started", not from when the
runner sent it, and a worker imports what the halves load on first use
before it says "ready" (`_preload`): neither the wait for a worker that is
still starting nor its imports are charged to a candidate.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback

from .oracle import OracleError
from .runner import CandidateFailed


def worker_main(conn, role: str, program, device_index: int | None) -> None:
    # Pin the device before anything can initialise CUDA; a prepare worker sees no
    # GPU at all (NVRTC needs none).
    os.environ["CUDA_VISIBLE_DEVICES"] = "" if device_index is None else str(device_index)
    # Ctrl-C reaches the whole process group: the runner handles it (it kills the
    # workers that were busy), so a worker ignores it rather than dying mid-message.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    try:
        _preload()
        info = program.setup() if role == "device" else None
    except BaseException as e:  # noqa: BLE001  (reported to the runner, which raises)
        conn.send(("setup_failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", info))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        _, task_id, arg = msg
        conn.send(("started", task_id))
        try:
            value = program.prepare(*arg) if role == "prepare" else program.run(arg)
        except CandidateFailed as f:
            conn.send(("failed", task_id, f.kind, f.message,
                       role == "device" and program.poisoned(f.kind)))
            continue
        except OracleError as e:
            conn.send(("fatal", task_id, str(e)))
            continue
        except Exception as e:  # a bug in the program: the candidate fails, the worker goes on
            kind = "lowering" if role == "prepare" else "runtime"
            conn.send(("failed", task_id, kind, f"internal error ({type(e).__name__}: {e})\n"
                                                f"{traceback.format_exc(limit=-3)}",
                       role == "device"))
            continue
        conn.send(("done", task_id, value))


# A tiny op whose check (make_case: parse, random inputs, the oracle) touches
# what every candidate's check does, bfloat16 included.
WARM_UP = "def warm(bfloat16(N) X, float(N) Y) -> (Z) { Z(i) = float(X(i)) + Y(i) }"


def _preload() -> None:
    """(Also run by RayRunner's actors.) Run a tiny check, so that what a candidate's halves import on first use
    is imported before the worker says "ready": the cost then falls under
    startup_timeout_s, not under the first candidate's deadline. On the
    2-core CI machine ml_dtypes (loaded by tcomp's dtypes for bfloat16) took
    about 1 s and numpy.random 0.1-1 s, under load more than the test's 1 s
    deadline, so that healthy candidates on a fresh worker were "timeout"."""
    from ..lang import op
    from .oracle import make_case
    make_case(op(WARM_UP), {"N": 2})


def _exit_with_parent() -> None:
    """End this process when the runner's process is gone (kill -9 of a tuning
    run): a worker stuck in a hung kernel would otherwise hold its GPU."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, name="tcomp-parent-watch", daemon=True).start()


class Worker:
    """The runner's handle on one worker process (restarted by `start`)."""

    def __init__(self, ctx, role: str, program, device_index: int | None, label: str):
        self.ctx, self.role, self.program = ctx, role, program
        self.device_index, self.label = device_index, label
        self.process = self.conn = None
        self.state = "dead"  # dead -> starting -> idle <-> busy
        self.task = None  # what it works on: (task_id, anything the runner keeps)
        self.deadline = float("inf")
        self.limit = 0.0  # the time limit of its task
        self.info = None  # the DeviceInfo of a ready device worker
        self.started = 0.0

    def start(self, startup_timeout_s: float) -> None:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=worker_main, name=f"tcomp-{self.label}",
                             args=(child, self.role, self.program, self.device_index),
                             daemon=True)
        p.start()
        child.close()
        self.process, self.conn, self.state, self.task = p, parent, "starting", None
        self.started = time.monotonic()
        self.deadline = self.started + startup_timeout_s

    def send(self, task_id, argument, timeout_s: float, keep) -> None:
        """Give it a task; its deadline is `timeout_s` from now, and again from
        its "started" (`began`), which is what counts."""
        self.conn.send(("task", task_id, argument))
        self.state, self.task, self.limit = "busy", (task_id, keep), timeout_s
        self.deadline = time.monotonic() + timeout_s

    def began(self, task_id) -> None:
        if self.task is not None and self.task[0] == task_id:
            self.deadline = time.monotonic() + self.limit

    def kill(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
            self.conn.close()
        self.process = self.conn = None
        self.state, self.task, self.deadline = "dead", None, float("inf")

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive() and self.state != "busy":
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            self.process.join(2)
        self.kill()

    def exit_text(self) -> str:
        code = self.process.exitcode if self.process is not None else None
        if code is None:
            return "it stopped answering"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"


def spawn_context():
    return multiprocessing.get_context("spawn")
