"""Time to generate schedule candidates (what the search pays per point
before measuring): replay + lowering + resource checks per candidate.

    PYTHONPATH=. python3 bench/space_time.py [--n 100] [--size 4096] [--bf16]

Generates n valid candidates of the bench GEMM (bench/schedules.py GEMM, or
TC_GEMM with --bf16) at M = N = K = size with tcomp.search.Space and prints
the median / mean / max milliseconds per validated candidate, the total
wall time, how many were rejected and why, and the rules the candidates use.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import tcomp  # noqa: E402
from tcomp.search import Space  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    op = tcomp.op(S.TC_GEMM if args.bf16 else S.GEMM)
    space = Space(op, {"M": args.size, "N": args.size, "K": args.size})
    t = time.perf_counter()
    cands = space.generate(args.n, np.random.default_rng(args.seed))
    wall = time.perf_counter() - t
    ms = space.lower_ms
    print(f"{op.name} {args.size}^3: {len(cands)} valid candidates in {wall:.1f} s "
          f"({len(ms)} validated, rejected {dict(space.rejected)})")
    print(f"validate ms per candidate: median {statistics.median(ms):.1f}  "
          f"mean {statistics.mean(ms):.1f}  min {min(ms):.1f}  max {max(ms):.1f}")
    print("rules:", dict(Counter(c.sketch for c in cands)))


if __name__ == "__main__":
    main()
