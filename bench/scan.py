"""Ordered recurrences as scans (issue 27): prefix sums and the linear
recurrence h(t) = a(t) h(t - 1) + x(t) against torch, a Triton kernel with
`tl.associative_scan` (written here) and a device copy. Run on the GPU machine:

    PYTHONPATH=. python3 bench/scan.py [--reps 20] [--only cumsum_vector,linear_vector]
        [--threads 1024] [--lb-threads 256] [--items 8]

Cases (the issue's table):
  cumsum_rows   fp32 4096 x 32768, along the rows    peers: torch.cumsum, copy
  cumsum_vector fp32 2^28, one row                    peers: torch.cumsum, copy
  linear        bf16 a, x (B8, D2048, T4096; T contiguous), fp32 h
                                                      peers: Triton associative_scan, copy
  linear_vector bf16 a, x, one row of 2^28, fp32 h   peers: Triton (one program), copy
Per case up to two tcomp schedules: "tcomp" (Stage.scan over the row, one
block of `threads` threads a row, the rows over blocks; rows only, a 2^28
row in one block is not measured) and "tcomp_lb" (Stage.scan(..., items=K,
lookback=True): tiles of lb_threads * K elements over blockIdx.x, the rows
over blockIdx.y, chained by the decoupled look-back). A call includes the
zero fill of the look-back's flags (one int32 a tile) and the first point's
launch. Check tcomp's and the peers' results against a float64 reference on
fresh random data (relative Frobenius error), then time each as the median
of `reps` calls with CUDA events, the L2 flushed before each
(bench/timing.py). Prints GB/s of the minimum traffic (inputs read once, the
output written once) and the ratios; writes $OUT/scan.json when $OUT is set.

Measured on the H200 (BENCHMARKS.md, 2026-12-03): at 256 threads x 32 items the
vector cumsum is 1.09x torch (0.66x copy), the rows 2.02x torch; at 256 x 16 the
linear rows tie Triton (one tile a row). The tile goes through shared memory
(coalesced loads and stores), warp 0 looks back 32 tiles at a time, and 32-bit
combines publish flag and value in one 64-bit word (lower/scan_lookback.py,
target_cuda/scan_lookback.py); bench/scan_ncu.py profiles one. linear_vector's
Triton peer is one program for the whole row (the peer kernel scans rows), so it
is slow by construction; its timing uses 3 reps.
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


def scanned(src: str, threads: int, sizes: dict, items: int = 0):
    """items == 0: the single-block scan a row; else the multi-block scan with
    look-back, `items` elements a thread."""
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    first, rec = s.stages
    row = first.axes[0]
    first.bind(row, "blockIdx.x")  # (the first point of each row: one thread per row)
    b, t = rec.axes
    if items:
        rec.scan(t, threads=threads, items=items, lookback=True)
        rec.bind(b, "blockIdx.y")
    else:
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


def linear_reference_chunked(a, x, chunk=4096):
    """linear_reference for long rows: chunks of `chunk` scanned in parallel in
    float64 (their local states and multipliers), their carries chained on the
    CPU, then applied."""
    R, T = x.shape
    pad = (-T) % chunk
    a64 = torch.nn.functional.pad(a.double(), (0, pad), value=1.0).reshape(-1, chunk)
    x64 = torch.nn.functional.pad(x.double(), (0, pad)).reshape(-1, chunk)
    h, p = torch.empty_like(x64), torch.empty_like(a64)
    h[:, 0], p[:, 0] = x64[:, 0], a64[:, 0]
    for t in range(1, chunk):
        h[:, t] = a64[:, t] * h[:, t - 1] + x64[:, t]
        p[:, t] = p[:, t - 1] * a64[:, t]
    C = (T + pad) // chunk
    hl, pl = h[:, -1].reshape(R, C).cpu(), p[:, -1].reshape(R, C).cpu()
    carry = torch.zeros(R, C, dtype=torch.float64)
    for c in range(1, C):  # the state before chunk c (a row's first a is unused: h0 = x0)
        carry[:, c] = pl[:, c - 1] * carry[:, c - 1] + hl[:, c - 1]
    carry[:, 0] = 0.0
    out = h + p * carry.reshape(-1, 1).to(h.device)
    return out.reshape(R, T + pad)[:, :T]


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
    ap.add_argument("--lb-threads", type=int, default=256, help="threads of the look-back scan")
    ap.add_argument("--items", type=int, default=16, help="elements a thread (look-back scan)")
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
        for mine in [m for m in times if m.startswith("tcomp")]:
            for peer in [p for p in times if not p.startswith("tcomp")]:
                print(f"  {mine} / {peer}: {times[peer] / times[mine]:.2f}x", flush=True)
        print(f"  errors: {errs}", flush=True)
        rows.append(line)

    for case, (B, T) in (("cumsum_rows", (4096, 32768)), ("cumsum_vector", (1, 1 << 28))):
        if only and case not in only:
            continue
        x = torch.randn(B, T, device="cuda")
        ks = {"tcomp_lb": scanned(CUMSUM, args.lb_threads, {"B": B, "T": T}, args.items)}
        if B > 1:
            ks["tcomp"] = scanned(CUMSUM, args.threads, {"B": B, "T": T})
        out = torch.empty_like(x)
        want = torch.cumsum(x.double(), 1)
        errs = {name: rel_err(torch.as_tensor(k(x)), want) for name, k in ks.items()}
        errs["torch"] = rel_err(torch.cumsum(x, 1), want)
        times = {name: timer(lambda k=k: k(x)) for name, k in ks.items()}
        times["torch"] = timer(lambda: torch.cumsum(x, 1))
        times["copy"] = timer(lambda: out.copy_(x))
        report(case, 2 * x.numel() * 4, times, errs)

    for case, (R, T) in (("linear", (8 * 2048, 4096)), ("linear_vector", (1, 1 << 28))):
        if only and case not in only:
            continue
        a = (torch.rand(R, T, device="cuda") * 0.5 + 0.5).to(torch.bfloat16)
        x = torch.randn(R, T, device="cuda").to(torch.bfloat16)
        want = linear_reference(a, x) if T <= 4096 else linear_reference_chunked(a, x)
        ks = {"tcomp_lb": scanned(LINEAR, args.lb_threads, {"R": R, "T": T}, args.items)}
        if R > 1:
            ks["tcomp"] = scanned(LINEAR, args.threads, {"R": R, "T": T})
        errs = {name: rel_err(torch.as_tensor(k(a, x)), want) for name, k in ks.items()}
        times = {name: timer(lambda k=k: k(a, x)) for name, k in ks.items()}
        peer = triton_linear()
        if peer is not None:
            h = torch.empty(R, T, device="cuda")
            errs["triton"] = rel_err(peer(a, x, h), want)
            times["triton"] = (timer if R > 1 else Timer(3))(lambda: peer(a, x, h))
        buf = torch.empty(R, 2 * T, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(buf)
        times["copy"] = timer(lambda: dst.copy_(buf))  # 2 bf16 in, one fp32 out: 8 B a point
        report(case, R * T * (2 + 2 + 4), times, errs)

    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "scan.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
