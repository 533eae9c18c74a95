"""How every bench script times a GPU call (torch on the GPU machine):
CUDA events around the call, the L2 cache flushed before each call by
zeroing a 256 MiB buffer (~70 us of GPU time, during which the host
queues the timed call, so the host's launch cost is not counted unless it
is longer than that), median of `reps` calls after 3 warm-up calls."""
from __future__ import annotations

import statistics

import torch


class Timer:
    """`Timer(reps)(fn, args)`: the median milliseconds of fn(*args)."""

    def __init__(self, reps: int = 20):
        self.reps = reps
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, args=()):
        for _ in range(3):
            fn(*args)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self.reps)]
        for a, b in ev:
            self.flush.zero_()
            a.record()
            fn(*args)
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in ev)


_TIMERS: dict[int, Timer] = {}


def timed(fn, reps: int = 20) -> float:
    """The median milliseconds of fn() (one flush buffer per process)."""
    t = _TIMERS.get(0)
    if t is None:
        t = _TIMERS[0] = Timer(reps)
    t.reps = reps
    return t(fn)
