"""Ordered recurrences as scans (issue 27): prefix sums and the linear
recurrence h(t) = a(t) h(t - 1) + x(t) against torch, a Triton kernel with
`tl.associative_scan` (written here) and a device copy. Run on the GPU machine:

    PYTHONPATH=. python3 bench/scan.py [--reps 20] [--only cumsum_rows,linear]

Cases (the issue's table):
  cumsum_rows   fp32 4096 x 32768, along the rows    peers: torch.cumsum, copy
  cumsum_vector fp32 2^28, one row                    peers: torch.cumsum, copy
  linear        bf16 a, x (B8, D2048, T4096; T contiguous), fp32 h
                                                      peers: Triton associative_scan, copy
Per case: build the tcomp kernel once (Stage.scan over the row, one block of
`threads` threads per row, the rows over blocks), check tcomp's and the peers'
results against a float64 reference on fresh random data (relative Frobenius
error), then time each as the median of `reps` calls with CUDA events, the L2
flushed before each (bench/timing.py). Prints GB/s of the minimum traffic
(inputs read once, the output written once) and the ratios; writes
$OUT/scan.json when $OUT is set.

Predictions, not yet measured (no GPU in the session that wrote this): a row
of 32768 fp32 is 32 tiles of 1024, each tile one coalesced load, a warp
shuffle scan (5 steps), a shared-memory step between two barriers and one
store; 4096 blocks of 1024 threads keep the H200 busy, so cumsum_rows should
reach ~0.6-0.8x copy (the two barriers per tile are not hidden with one
block per SM at 1024 threads; 512 threads with two blocks per SM may do
better: --threads). cumsum_vector runs in ONE block (a single row: the
multi-block decoupled look-back scan is not built), so it is far below copy
(expected < 0.05x): it is here to measure what that missing piece costs.
linear: 16384 rows of 4096 in 4 tiles of 1024 each, ~0.6-0.8x copy, against
Triton's one-pass scan per row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tcomp  # noqa: E402
from timing import Timer  # noqa: E402

CUMSUM = """def cumsum(float(B, T) X) -> (O) {
    O(b, t) = X(b, t) where t in 0:1
    O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t
}"""
LINEAR = """def linear(bfloat16(R, T) A, bfloat16(R, T) X) -> (float32(R, T) H) {
    H(r, t) = X(r, t) where t in 0:1
    H(r, t) = A(r, t) * H(r, t - 1) + X(r, t) where t in 1:T, ordered t
}"""


def scanned(src: str, threads: int, sizes: dict):
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    first, rec = s.stages
    row = first.axes[0]
    first.bind(row, "blockIdx.x")  # (the first point of each row: one thread per row)
    b, t = rec.axes
    rec.scan(t, threads=threads)
    rec.bind(b, "blockIdx.x")
    return tcomp.build(s, target="cuda", sizes=sizes)


def triton_linear():
    """A Triton kernel for the linear recurrence: one program per row, tiles
    of BLOCK along T scanned by tl.associative_scan on (a, x) pairs, a carry
    between tiles. None when Triton does not import."""
    try:
        import triton
        import triton.language as tl
    except Exception as e:  # noqa: BLE001
        print(f"(no Triton peer: {type(e).__name__}: {e})", flush=True)
        return None

    @triton.jit
    def combine(a1, b1, a2, b2):
        return a1 * a2, a2 * b1 + b2

    @triton.jit
    def kernel(A, X, H, T, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        carry = tl.zeros((), tl.float32)
        for start in range(0, T, BLOCK):
            m = start + offs < T
            a = tl.load(A + row * T + start + offs, mask=m, other=1.0).to(tl.float32)
            x = tl.load(X + row * T + start + offs, mask=m, other=0.0).to(tl.float32)
            pa, pb = tl.associative_scan((a, x), 0, combine)
            h = pa * carry + pb
            tl.store(H + row * T + start + offs, h, mask=m)
            carry = tl.sum(tl.where(offs == BLOCK - 1, h, 0.0), 0)

    def run(a, x, h, block=1024):
        R, T = a.shape
        kernel[(R,)](a, x, h, T, BLOCK=block, num_warps=8)
        return h
    return run


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / max(want.norm(), 1e-30))


def linear_reference(a, x):
    a64, x64 = a.double(), x.double()
    h = torch.empty_like(x64)
    h[:, 0] = x64[:, 0]
    for t in range(1, x.shape[1]):  # (on the GPU: 4096 small steps)
        h[:, t] = a64[:, t] * h[:, t - 1] + x64[:, t]
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=1024)
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    timer = Timer(args.reps)
    rows = []

    def report(case, nbytes, times, errs):
        line = {"case": case, **{f"{k}_ms": v for k, v in times.items()},
                **{f"{k}_err": v for k, v in errs.items()}}
        gbs = {k: nbytes / (v * 1e-3) / 1e9 for k, v in times.items()}
        print(f"{case}: " + ", ".join(f"{k} {v:.3f} ms ({gbs[k]:.0f} GB/s)"
                                      for k, v in times.items()), flush=True)
        for peer in times:
            if peer != "tcomp":
                print(f"  tcomp / {peer}: {times[peer] / times['tcomp']:.2f}x", flush=True)
        print(f"  errors: {errs}", flush=True)
        rows.append(line)

    for case, (B, T) in (("cumsum_rows", (4096, 32768)), ("cumsum_vector", (1, 1 << 28))):
        if only and case not in only:
            continue
        x = torch.randn(B, T, device="cuda")
        k = scanned(CUMSUM, args.threads, {"B": B, "T": T})
        out = torch.empty_like(x)
        got = torch.as_tensor(k(x))
        want = torch.cumsum(x.double(), 1)
        errs = {"tcomp": rel_err(got, want), "torch": rel_err(torch.cumsum(x, 1), want)}
        times = {"tcomp": timer(lambda: k(x)), "torch": timer(lambda: torch.cumsum(x, 1)),
                 "copy": timer(lambda: out.copy_(x))}
        report(case, 2 * x.numel() * 4, times, errs)

    if not only or "linear" in only:
        B, D, T = 8, 2048, 4096
        a = (torch.rand(B * D, T, device="cuda") * 0.5 + 0.5).to(torch.bfloat16)
        x = torch.randn(B * D, T, device="cuda").to(torch.bfloat16)
        k = scanned(LINEAR, args.threads, {"R": B * D, "T": T})
        want = linear_reference(a, x)
        errs = {"tcomp": rel_err(torch.as_tensor(k(a, x)), want)}
        times = {"tcomp": timer(lambda: k(a, x))}
        peer = triton_linear()
        if peer is not None:
            h = torch.empty(B * D, T, device="cuda")
            errs["triton"] = rel_err(peer(a, x, h), want)
            times["triton"] = timer(lambda: peer(a, x, h))
        buf = torch.empty(B * D, 2 * T, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(buf)
        times["copy"] = timer(lambda: dst.copy_(buf))  # 2 bf16 in, one fp32 out: 8 B a point
        report("linear", B * D * T * (2 + 2 + 4), times, errs)

    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "scan.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
