"""Scatter and ragged loops against torch (issue 27's index_add and
embedding-bag rows). Run on the GPU machine:

    PYTHONPATH=. python3 bench/scatter_ragged.py [--reps 20] [--check-build]

Per case: build the tcomp kernel once, check tcomp's and torch's results
against a float64 reference on fresh random data, then time both (bench/
timing.py: CUDA events, L2 flushed, median) and print ms, GB/s of the
minimum traffic and tcomp/torch (> 1: tcomp is faster); writes
$OUT/scatter_ragged.json when $OUT is set. `--check-build` only builds the
kernels (NVRTC, no GPU needed) and prints their schedules' IR.

Cases:
  * index_add: 2^20 rows x 256 fp32 added into 65,536 rows at random
    indices (out of place: B copied, then X added: torch's B.index_add(0, I, X)).
    Traffic: X read (1 GiB) + B read + O written; every update an atomicAdd
    of 4 bytes, coalesced along d. Prediction: near the atomics' throughput
    to L2 (65,536 x 256 x 4 = 64 MiB of destination fits L2 poorly: ~0.6-0.8x
    copy); torch's index_add_ also issues one atomicAdd per element.
  * embedding bag (sum): 1M lookups of 128-wide fp32 rows from a 1M-row
    table, bags of 0..63 (mean 32) lookups given by offsets; one block of
    4 x 128 threads per 4 bags, each thread a column: reads the 512-byte rows
    coalesced, no atomics. Prediction: ~0.8x copy of the rows gathered.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tcomp  # noqa: E402

INDEX_ADD = """def index_add(float(N, D) X, int32(N) I, float(M, D) B) -> (O) {
    O(m, d) = B(m, d)
    O(I(i), d) += X(i, d)
}"""

BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)
}"""


def index_add_schedule(rows: int = 4):
    s = tcomp.Schedule(tcomp.op(INDEX_ADD))
    fill = s["O"]
    m, d = fill.axes
    fill.bind(m, "blockIdx.x")
    fill.bind(d, "threadIdx.x")
    st = s["O.1"]
    i, d = st.axes
    io, ii = st.split(i, rows)
    st.bind(io, "blockIdx.x")
    st.bind(ii, "threadIdx.y")
    st.bind(d, "threadIdx.x")
    return s


def bag_schedule(bags: int = 4):
    s = tcomp.Schedule(tcomp.op(BAG))
    st = s["O"]
    b, d = st.axes
    bo, bi = st.split(b, bags)
    st.reorder(bo, bi, d)
    st.bind(bo, "blockIdx.x")
    st.bind(bi, "threadIdx.y")
    st.bind(d, "threadIdx.x")
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--check-build", action="store_true")
    args = ap.parse_args()
    if args.check_build:
        for s in (index_add_schedule(), bag_schedule()):
            k = tcomp.build(s, target="cuda")
            print(tcomp.lower(s), f"cubin: {len(k.cubin)} bytes\n")
        return
    import torch
    from bench.timing import timed
    g = torch.Generator(device="cuda").manual_seed(0)
    results = []

    n, d, m = 1 << 20, 256, 65536
    x = torch.randn(n, d, device="cuda", generator=g)
    idx = torch.randint(0, m, (n,), device="cuda", generator=g, dtype=torch.int32)
    b = torch.randn(m, d, device="cuda", generator=g)
    k = tcomp.build(index_add_schedule(), target="cuda")
    want = b.double().index_add(0, idx.long(), x.double())
    ok = torch.allclose(k(x, idx, b).double(), want, rtol=1e-4, atol=1e-3) and torch.allclose(
        b.index_add(0, idx.long(), x).double(), want, rtol=1e-4, atol=1e-3)
    il = idx.long()
    t_ours, t_torch = timed(lambda: k(x, idx, b), args.reps), \
        timed(lambda: b.index_add(0, il, x), args.reps)
    results.append(("index_add fp32 2^20x256 -> 65536", ok, t_ours, t_torch,
                    (x.numel() + 2 * b.numel()) * 4 + n * 4))

    v, d, lookups = 1 << 20, 128, 1 << 20
    lengths = torch.randint(0, 64, (lookups // 32,), device="cuda", generator=g)
    off = torch.cat([torch.zeros(1, dtype=torch.long, device="cuda"), lengths.cumsum(0)])
    j = torch.randint(0, v, (int(off[-1]),), device="cuda", generator=g)
    table = torch.randn(v, d, device="cuda", generator=g)
    k = tcomp.build(bag_schedule(), target="cuda")
    j32, off32 = j.int(), off.int()
    want = torch.nn.functional.embedding_bag(j, table.double(), off[:-1], mode="sum")
    ok = torch.allclose(k(table, j32, off32).double(), want, rtol=1e-4, atol=1e-4)
    peer = lambda: torch.nn.functional.embedding_bag(j, table, off[:-1], mode="sum")  # noqa
    ok = ok and torch.allclose(peer().double(), want, rtol=1e-4, atol=1e-4)
    t_ours, t_torch = timed(lambda: k(table, j32, off32), args.reps), timed(peer, args.reps)
    results.append((f"embedding_bag sum {int(off[-1])} lookups x 128 fp32", ok, t_ours, t_torch,
                    int(off[-1]) * d * 4 + (lengths.numel()) * d * 4 + int(off[-1]) * 4))

    info = []
    for name, ok, a, t, nbytes in results:
        print(f"{name:48s} check {'ok' if ok else 'FAILED'}  tcomp {a:.3f} ms "
              f"({nbytes / a / 1e6:.0f} GB/s)  torch {t:.3f} ms  tcomp/torch {t / a:.2f}x")
        info.append(dict(case=name, check=bool(ok), tcomp_ms=a, torch_ms=t, bytes=nbytes))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "scatter_ragged.json"), "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
