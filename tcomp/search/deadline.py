"""A time limit on Python code that runs in this process (SimRunner's candidates).

    try:
        with Deadline(5.0):
            work()            # stopped from inside after 5 s
    except DeadlineExceeded:
        ...                   # the work ran past its limit

SimRunner replays, lowers and runs each candidate in the calling process, so
a candidate that hangs (a sim run of 10^9 iterations, a lowering that
unrolls 64^3 copies) would hang the search; a worker process, as
LocalRunner has, would cost a spawn and the pickling of every candidate.
Instead a timer thread raises `DeadlineExceeded` in the thread doing the
work, with CPython's `PyThreadState_SetAsyncExc`. That works in any thread
(a signal alarm works only in the main thread, and would take the
program's own SIGALRM), and it is delivered between two bytecodes: the
sim and lowering are Python, so they stop within milliseconds; code inside
one long C call (a NumPy operation on a huge array, a `time.sleep`) stops
when that call returns.

`DeadlineExceeded` is a BaseException, like KeyboardInterrupt, so that the
`except Exception` of the code being limited (runner.stage, which turns any
exception into a failed candidate) does not take it for the candidate's own
error. The limit is disarmed on leaving the block; an exception already
raised but not yet delivered then is withdrawn, so none escapes the block
late.
"""
from __future__ import annotations

import ctypes
import threading


class DeadlineExceeded(BaseException):
    """The work inside a `Deadline` block ran past its limit."""


def _raise_in(thread: int, exc) -> None:
    """Make `thread` raise `exc` at its next bytecode (None: withdraw one not
    yet raised; passed untyped, so that ctypes gives NULL, not Py_None)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread), None if exc is None else ctypes.py_object(exc))


class Deadline:
    """Raise DeadlineExceeded inside the block after `seconds` (see the module
    docstring). `fired`: whether the limit was reached."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.fired = False
        self._lock = threading.Lock()
        self._armed = False
        self._thread = 0
        self._timer = None

    def __enter__(self) -> "Deadline":
        self._thread = threading.get_ident()
        self._armed = True
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if self._armed:
                self.fired = True
                _raise_in(self._thread, DeadlineExceeded)

    def __exit__(self, *exc) -> bool:
        self._timer.cancel()
        with self._lock:
            self._armed = False
            if self.fired:  # raised after the block's last bytecode: withdraw it
                _raise_in(self._thread, None)
        return False
