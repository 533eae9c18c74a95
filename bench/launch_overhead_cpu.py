"""The host side of bench/launch_overhead.py, measured without a GPU: what
Python spends per tcomp call on torch "CUDA" tensors. Run with a libcuda stub
whose every entry point returns success at once, and CPU torch:

    LD_LIBRARY_PATH=/path/to/stub PYTHONPATH=. python3 bench/launch_overhead_cpu.py [--profile]

Stand-ins (bench only): `FakeCudaTensor` answers what the fast path asks of a
torch CUDA tensor with C-level callables (a CPU tensor's data_ptr and
is_contiguous, `int` for get_device() == 0) and is registered in
arrays.TORCH_TYPES; outputs are allocated with CPU torch.empty (its cost is
printed as a row of its own: on the GPU the caching allocator's is ~1.6 µs);
torch's current stream is a C-level constant function. cuLaunchKernel is
cuda.bindings' real argument conversion into the stub's no-op.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import tcomp
from tcomp.target_cuda import arrays as A
from tcomp.target_cuda import streams

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402

SRC = S.FMA


class FakeCudaTensor:
    is_cuda = True
    data_ptr = None  # (what arrays.kind_of looks for on a torch type; set per instance)

    def __init__(self, n):
        self._t = torch.empty(n)
        self.shape, self.dtype = self._t.shape, self._t.dtype
        self.data_ptr, self.is_contiguous = self._t.data_ptr, self._t.is_contiguous
        self.get_device = int  # int() == 0: device 0


FakeCudaTensor.__module__ = "torch.bench_fake"


def kernel(sizes=None):
    return tcomp.build(S.fma()[1], target="cuda", sizes=sizes)


def per_call_us(fn, calls, repeats):
    for _ in range(200):
        fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    A.kind_of(FakeCudaTensor(1))  # registers the type in A.TORCH_TYPES
    A._torch_allocators = (torch.empty, torch.zeros, torch.device("cpu"))
    streams._torch_raw_stream = (0x5000).__add__  # C-level: stream 0x5000 for device 0
    n = 4096
    a, b = FakeCudaTensor(n), FakeCudaTensor(n)
    fixed, symbolic = kernel({"N": n}), kernel()
    cpu = torch.device("cpu")
    assert fixed(a, b).shape == (n,)
    launch = tcomp.target_cuda.cuda_api.kernel_launcher()
    bound = next(iter(fixed._bound.values()))
    func, *dims = bound.calls[0][1]
    rows = [("tcomp, size fixed at build", lambda: fixed(a, b)),
            ("tcomp, symbolic size", lambda: symbolic(a, b)),
            ("(part) torch.empty(size=(4096,)) on the CPU",
             lambda: torch.empty(size=(n,), dtype=torch.float32, device=cpu)),
            ("(part) cuLaunchKernel alone", lambda: launch(func, *dims, 0x5000, 0, 0))]
    print(f"| {'path':40} | µs per call (median) | min |")
    for name, fn in rows:
        t = per_call_us(fn, args.calls, args.repeats)
        print(f"| {name:40} | {statistics.median(t):.2f} | {min(t):.2f} |")
    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            fixed(a, b)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
