"""Launch overhead of small kernels from model code (issue: a good citizen in a
PyTorch program). Run on the GPU machine:

    PYTHONPATH=. python3 bench/launch_overhead.py [--calls 2000] [--n 4096]

One 4096-element `C(i) = A(i) * B(i) + A(i)` on torch CUDA tensors, called in
a loop: wall time per call over `--calls` calls after a warm-up, synchronised
once at the end, the median of `--repeats` such loops. At this size the GPU
finishes each kernel in a few microseconds, so the loop measures what the
host spends per call (argument checks, allocation, packing, the launch).
Contenders, in one process: torch eager `x * y + x` (two kernels), a Triton
kernel doing the same, the tcomp kernel with its size fixed at build and with
a symbolic size, the tcomp kernel through `k.torch_op()`, and the tcomp kernel
captured in a CUDA graph (per-call cost of `g.replay()`). Every contender is
first checked against `x * y + x`. Prints a table (ratio: Triton time / time,
> 1 is faster than Triton) and writes $OUT/launch_overhead.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

import tcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402

SRC = S.FMA


@triton.jit
def _fma(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(c_ptr + offs, a * b + a, mask=mask)


def triton_fma(a, b):
    c = torch.empty_like(a)
    n = a.numel()
    _fma[(triton.cdiv(n, 256),)](a, b, c, n, BLOCK=256)
    return c


def tcomp_kernel(sizes=None):
    return tcomp.build(S.fma()[1], target="cuda", sizes=sizes)


def per_call_us(fn, calls: int, repeats: int, warmup: int = 200) -> list[float]:
    """Wall time per call (µs) of `repeats` loops of `calls` calls, each loop
    synchronised once at its end."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return out


def graph_of(fn):
    """`fn` captured in a CUDA graph (warmed up on a side stream first): a
    replay callable, and the graph's output tensor."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g.replay, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true",
                    help="also print where the fixed-size tcomp call spends its host time "
                         "(cProfile, top functions by own time)")
    args = ap.parse_args()
    n = args.n
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    want = a * b + a
    fixed, symbolic = tcomp_kernel({"N": n}), tcomp_kernel()
    op = fixed.torch_op()
    contenders = [
        ("torch eager `x * y + x` (2 kernels)", lambda: a * b + a),
        ("Triton kernel", lambda: triton_fma(a, b)),
        ("tcomp, size fixed at build", lambda: fixed(a, b)),
        ("tcomp, symbolic size", lambda: symbolic(a, b)),
        ("tcomp via k.torch_op()", lambda: op(a, b)),
    ]
    parts = [  # the floor a call cannot go below: the output's allocation
        ("(part) `torch.empty_like(a)` alone", lambda: torch.empty_like(a)),
    ]
    replay, graph_out = graph_of(lambda: fixed(a, b))
    rows = []
    for name, fn in contenders:
        torch.testing.assert_close(fn(), want)
        rows.append((name, per_call_us(fn, args.calls, args.repeats)))
    for name, fn in parts:
        rows.append((name, per_call_us(fn, args.calls, args.repeats)))
    replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(graph_out, want)
    rows.append(("tcomp, CUDA graph replay (`g.replay()`)",
                 per_call_us(replay, args.calls, args.repeats)))

    triton_us = statistics.median(rows[1][1])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
          f"{triton.__version__}, {platform.python_implementation()} "
          f"{platform.python_version()}; n={n}, {args.calls} calls x {args.repeats}")
    print(f"| {'contender':44} | µs per call (median) | min | Triton / this |")
    print(f"| {'-' * 44} | --- | --- | --- |")
    results = []
    for name, times in rows:
        med = statistics.median(times)
        print(f"| {name:44} | {med:.1f} | {min(times):.1f} | {triton_us / med:.2f} |")
        results.append({"name": name, "us_per_call": med, "min_us": min(times), "all_us": times,
                        "triton_over_this": triton_us / med})
    if args.profile:
        # the parts of a fixed-size call, each timed alone: what the launch floor is
        from tcomp.target_cuda import cuda_api, streams
        launch = cuda_api.kernel_launcher()
        bound = next(iter(fixed._bound.values()))
        func, *dims = bound.calls[0][1]
        raw = streams.torch_raw_stream()
        s = raw(0)
        s = 0 if s == 1 else s
        n_out = (n,)
        parts2 = [
            ("(part) cuLaunchKernel alone, ready parameters", lambda: launch(func, *dims, s, 0, 0)),
            ("(part) torch.empty(size=(n,)) alone",
             lambda: torch.empty(size=n_out, dtype=torch.float32, device=a.device)),
            ("(part) torch's raw current stream alone", lambda: raw(0)),
            ("(part) 3 x data_ptr + is_contiguous + get_device",
             lambda: (a.data_ptr(), b.data_ptr(), a.data_ptr(), a.is_contiguous(),
                      a.get_device())),
            ("(part) an empty Python call", lambda: None),
        ]
        for name, fn in parts2:
            t = per_call_us(fn, args.calls, args.repeats)
            print(f"| {name:44} | {statistics.median(t):.2f} | {min(t):.2f} | |")
            results.append({"name": name, "us_per_call": statistics.median(t)})
        print("generated fast call:\n" + getattr(fixed._fast, "source", "?"))
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            fixed(a, b)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "launch_overhead.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "python": platform.python_version(),
                       "n": n, "calls": args.calls, "repeats": args.repeats,
                       "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
