"""Time to analyse schedule candidates (what the search pays per point before
measuring): replay + lowering + resource checks + feature extraction.

    PYTHONPATH=. python3 bench/space_time.py [--op gemm|tc_gemm|softmax|conv2d|all]
                                             [--n 100] [--seed 0] [--profile FILE]

For each op, draws `n` plans from `tcomp.search.Space` (the same plans for a
given seed), builds each one's schedule and times `Space.analyse` on it: the
whole per-candidate cost of the search (the schedule replayed, lowered as far
as the checks and features need, checked against the device limits, its
feature vector read). Prints median / p90 / max milliseconds over the valid
candidates (CPU time of this process, so that other jobs on a shared machine
do not inflate it), the rejections by kind, the wall time of the whole
loop, and the slowest sketch. The ops, at the
issue's sizes:

  gemm     fp32 GEMM 4096^3 (bench/schedules.py GEMM, the SIMT space)
  tc_gemm  bf16 GEMM 4096^3 (TC_GEMM, the tensor-core space)
  softmax  softmax fp32 32768 x 4096 (SOFTMAX)
  conv2d   fp16 conv2d N32 C256 56x56 K256 3x3 (TC_CONV2D, im2col GEMM)

`--profile FILE` writes a cProfile of the analyses (pstats format).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import tcomp  # noqa: E402
from tcomp.errors import TcompError  # noqa: E402
from tcomp.search import Space  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402

OPS = {
    "gemm": ("fp32 GEMM 4096^3", S.GEMM, {"M": 4096, "N": 4096, "K": 4096}),
    "tc_gemm": ("bf16 GEMM 4096^3", S.TC_GEMM, {"M": 4096, "N": 4096, "K": 4096}),
    "softmax": ("softmax 32768x4096", S.SOFTMAX, {"N": 32768, "D": 4096}),
    "conv2d": ("conv2d N32 C256 56x56 K256", S.TC_CONV2D,
               {"N": 32, "H": 56, "W": 56, "C": 256, "R": 9 * 256, "K": 256}),
}


def p90(xs: list) -> float:
    return float(np.percentile(xs, 90)) if xs else float("nan")


def run(name: str, n: int, seed: int, prof: cProfile.Profile | None) -> dict:
    title, src, sizes = OPS[name]
    space = Space(tcomp.op(src), sizes)
    rng = np.random.default_rng(seed)
    ms, slow, rejected = [], (0.0, ""), Counter()
    t0 = time.perf_counter()
    for _ in range(n):
        plan = space.sample_plan(rng)
        try:
            cand = space.build(plan)
        except TcompError:
            rejected["schedule"] += 1
            continue
        t = time.process_time()
        if prof is not None:
            prof.enable()
        res = space.analyse(cand)
        if prof is not None:
            prof.disable()
        dt = (time.process_time() - t) * 1e3
        if res.ok:
            ms.append(dt)
            slow = max(slow, (dt, cand.sketch))
        else:
            rejected[res.kind] += 1
    wall = time.perf_counter() - t0
    return {"op": title, "valid": len(ms), "rejected": dict(rejected), "wall": wall,
            "median": statistics.median(ms) if ms else float("nan"), "p90": p90(ms),
            "max": max(ms) if ms else float("nan"), "slowest": slow[1]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="all", choices=[*OPS, "all"])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args(argv)
    prof = cProfile.Profile() if args.profile else None
    names = list(OPS) if args.op == "all" else [args.op]
    print(f"{'op':28s} {'valid':>5s} {'median ms':>9s} {'p90 ms':>8s} {'max ms':>8s} "
          f"{'wall s':>7s}  rejected / slowest sketch")
    for name in names:
        r = run(name, args.n, args.seed, prof)
        print(f"{r['op']:28s} {r['valid']:5d} {r['median']:9.1f} {r['p90']:8.1f} "
              f"{r['max']:8.1f} {r['wall']:7.1f}  {r['rejected']} / {r['slowest']}", flush=True)
    if prof is not None:
        prof.dump_stats(args.profile)


if __name__ == "__main__":
    main()
