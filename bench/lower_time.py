"""Lowering time per candidate schedule (what an autotuner pays per point).

    python3 bench/lower_time.py [--candidates 50] [--size 1024] [--warmup 3]

The candidate: a 3-level tiled matmul at M = N = K = size (1024 by default):
  * blocks: 64x64 output tiles  (blockIdx.y, blockIdx.x)
  * threads: 16x16 per block, each owning a 4x4 register tile
    (cache_write(C, "local"), computed at the thread loop, unrolled)
  * K in tiles of 8, the 64x8 tile of A and the 8x64 tile of B staged in
    shared memory at k_o, fetched cooperatively by all 256 threads (fuse, split,
    bind to threadIdx.y / threadIdx.x).

Each of the N candidates is a fresh Schedule (built from scratch, then lowered
with all sizes bound). Building the Schedule and lowering it are timed
separately; the script prints mean / median / min / max milliseconds of each,
and the per-pass split of one lowering (from the pipeline's pass list).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tcomp  # noqa: E402
from tcomp.lower import pipeline  # noqa: E402
from tcomp.lower.printer import expr as show  # noqa: E402

MATMUL = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"

BLOCK, REG, KTILE = 64, 4, 8
THREADS = BLOCK // REG  # 16 x 16 threads


def schedule(op) -> tcomp.Schedule:
    s = tcomp.Schedule(op)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, BLOCK, BLOCK)
    mio, mii = C.split(mi, REG)
    nio, nii = C.split(ni, REG)
    C.reorder(mo, no, mio, nio, mii, nii)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    CL.compute_at(C, nio)
    lm, ln = CL.axes
    (lk,) = CL.reduce_axes
    ko, ki = CL.split(lk, KTILE)
    CL.reorder(ko, ki, lm, ln)
    CL.unroll(lm)
    CL.unroll(ln)
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [CL])
        X.compute_at(CL, ko)
        a0, a1 = X.axes
        f = X.fuse(a0, a1)
        fo, fi = X.split(f, THREADS)
        X.bind(fi, "threadIdx.x")
        foo, foi = X.split(fo, THREADS)
        X.bind(foi, "threadIdx.y")
    return s


def per_pass(s, sizes) -> dict[str, float]:
    """Milliseconds of construction and of each pass, for one lowering."""
    from tcomp.lower.build import Builder
    out = {}
    t = time.perf_counter()
    prog = Builder(s, sizes).program()
    out["build (construction)"] = (time.perf_counter() - t) * 1e3
    for name, fn in pipeline.PASSES:
        t = time.perf_counter()
        prog = dataclasses.replace(prog, kernels=tuple(fn(k, prog) for k in prog.kernels))
        out[name] = out.get(name, 0.0) + (time.perf_counter() - t) * 1e3
    return out


def stats(xs: list[float]) -> str:
    return (f"mean {statistics.mean(xs):8.2f}  median {statistics.median(xs):8.2f}  "
            f"min {min(xs):8.2f}  max {max(xs):8.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    op = tcomp.op(MATMUL)
    sizes = {"M": args.size, "N": args.size, "K": args.size}

    for _ in range(args.warmup):
        tcomp.lower(schedule(op), sizes=sizes)

    t_sched, t_lower = [], []
    for _ in range(args.candidates):
        t = time.perf_counter()
        s = schedule(op)
        t_sched.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        prog = tcomp.lower(s, sizes=sizes)
        t_lower.append((time.perf_counter() - t) * 1e3)

    k = prog.kernels[0]
    print(f"3-level tiled matmul, M=N=K={args.size}: grid=({', '.join(show(g) for g in k.grid)}) "
          f"block=({', '.join(show(b) for b in k.block)}), {len(str(prog).splitlines())} IR lines")
    print(f"{args.candidates} fresh candidates (ms per candidate)")
    print(f"  build Schedule : {stats(t_sched)}")
    print(f"  tcomp.lower    : {stats(t_lower)}")
    print(f"  total          : {stats([a + b for a, b in zip(t_sched, t_lower)])}")
    print("one lowering, per pass (ms):")
    for name, ms in per_pass(schedule(op), sizes).items():
        print(f"  {name:24s} {ms:8.2f}")


if __name__ == "__main__":
    main()
