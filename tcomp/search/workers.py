"""Worker processes for `LocalRunner`, and the messages they exchange.

A worker is a fresh interpreter (never forked: a forked CUDA context is
unusable) started as `python -m tcomp.search.worker_main FD`, tcomp's own
entry point, as TVM's popen workers are: it never imports the user's script,
so a script needs no `if __name__ == "__main__":` guard (multiprocessing's
spawn re-runs the main module's top level in every child, which makes a
script without the guard start workers from its workers). It has one socket
to the runner, a multiprocessing Connection, and runs one half of a
DeviceProgram:

    role "prepare": program.prepare(inp, device) on a CPU core;
    role "device":  program.setup() once, then program.run(payload), on the
                    GPU that CUDA_VISIBLE_DEVICES pins it to.

Protocol (tuples over the socket; the runner speaks first, then again after "ready"):

    runner -> worker  ("init", sys_path, main, role, program pickle)
                      the worker takes the runner's sys.path, imports the
                      script's module when `main` says so (below), unpickles
                      the program
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

The script's module: a program is pickled by reference, so one whose class
(or anything it holds: an `inputs=` function) is defined in the script
itself (`__main__`) can only be found by running the script's top level, as
multiprocessing's spawn does. Only then (`uses_main`) does the worker do so,
as `__mp_main__`, and only then does a script need the guard.
"""
from __future__ import annotations

import io
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

from ..errors import TcompError
from .oracle import OracleError
from .runner import CandidateFailed


def serve(conn, role: str, program) -> None:
    """The worker's loop (worker_main.py starts it, CUDA_VISIBLE_DEVICES already
    pinned by the runner in the worker's environment)."""
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

    def __init__(self, role: str, program: tuple[bytes, bool], device_index: int | None,
                 label: str):
        """program: `pickled(the DeviceProgram)`, made once for every worker."""
        self.role = role
        self.program_bytes, self.uses_main = program
        self.device_index, self.label = device_index, label
        self.process = self.conn = None
        self.state = "dead"  # dead -> starting -> idle <-> busy
        self.task = None  # what it works on: (task_id, anything the runner keeps)
        self.deadline = float("inf")
        self.limit = 0.0  # the time limit of its task
        self.info = None  # the DeviceInfo of a ready device worker
        self.started = 0.0

    def start(self, startup_timeout_s: float) -> None:
        if _IN_WORKER:  # the script's top level, run by a worker to find the program
            raise TcompError("LocalRunner: a worker process, running the script's top level "
                             "to find the program defined there, reached code that starts "
                             "workers: make the LocalRunner (or call tcomp.tune) under `if "
                             "__name__ == \"__main__\":`, or move the program into a module")
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # Pin the device before anything can initialise CUDA; a prepare worker sees
        # no GPU at all (NVRTC needs none).
        env["CUDA_VISIBLE_DEVICES"] = "" if self.device_index is None else str(self.device_index)
        # The worker must import this tcomp (whatever put it on sys.path here)
        env["PYTHONPATH"] = os.pathsep.join([_TCOMP_ROOT] + [p for p in env.get(
            "PYTHONPATH", "").split(os.pathsep) if p])
        try:
            popen = subprocess.Popen([sys.executable, "-m", "tcomp.search.worker_main",
                                      str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, env=env, close_fds=True)
        finally:
            theirs.close()
        self.process = Child(popen)
        self.conn = Connection(ours.detach())
        try:
            self.conn.send(("init", list(sys.path), main_module() if self.uses_main else None,
                            self.role, self.program_bytes))
        except OSError:
            pass  # it died at once: the runner sees its end (sentinel, end of file) as a death

        self.state, self.task = "starting", None
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
            self.process.close()
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


_IN_WORKER = False  # set in a worker process: a worker never starts workers
_TCOMP_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Child:
    """A worker process (subprocess.Popen) as the runner uses it: `sentinel`
    (a pidfd, readable once the process has ended, for
    multiprocessing.connection.wait; None where the OS has none: the runner
    then learns of a death from the socket's end of file, or at the deadline),
    `is_alive`, `exitcode` (negative: the signal), `kill`, `join`."""

    def __init__(self, popen: subprocess.Popen):
        self.popen, self.pid = popen, popen.pid
        try:
            self.sentinel = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            self.sentinel = None

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def kill(self) -> None:
        self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None


class _MainFinder(pickle.Pickler):
    """Pickles as usual and notes whether anything pickled by reference lives in
    the script itself (`__main__`): a class, a function."""
    uses_main = False

    def persistent_id(self, obj):
        if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__"):
            if getattr(obj, "__module__", None) == "__main__":
                self.uses_main = True
        return None


def pickled(program) -> tuple[bytes, bool]:
    """The program's pickle, and whether unpickling it needs the script's module."""
    buf = io.BytesIO()
    finder = _MainFinder(buf, protocol=pickle.HIGHEST_PROTOCOL)
    finder.dump(program)
    return buf.getvalue(), finder.uses_main


def main_module() -> dict:
    """How a worker finds the script's module, as multiprocessing's spawn does:
    by its module name (`python -m pkg.script`) or by its path."""
    main = sys.modules["__main__"]
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return {"init_main_from_name": name}
    path = getattr(main, "__file__", None)
    return {} if path is None else {"init_main_from_path": os.path.abspath(path)}


def start_worker(fd: int) -> None:
    """The worker side of `Worker.start` (worker_main.py): read "init", set up,
    then `serve`."""
    conn = Connection(fd)
    try:
        _, sys_path, main, role, program_bytes = conn.recv()
    except (EOFError, OSError):
        return
    sys.path[:] = sys_path
    global _IN_WORKER
    _IN_WORKER = True
    try:
        if main:
            import multiprocessing.spawn
            multiprocessing.spawn.prepare(main)  # runs the script as __mp_main__
        program = pickle.loads(program_bytes)
    except BaseException as e:  # noqa: BLE001  (reported to the runner, which raises)
        conn.send(("setup_failed", f"cannot load the program ({type(e).__name__}: {e})"))
        return
    serve(conn, role, program)
