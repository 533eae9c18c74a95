"""Decode attention (one query token, long KV) split over the key axis
(issue 25's decode row), against SDPA with a 1-token query and a device copy
of K and V. Run on the GPU machine:

    PYTHONPATH=. python3 bench/attention_decode.py [--splits 4,8,16] [--fused 4,8,16,32]
        [--unroll 2,4] [--reps 20] [--only b32] [--out results.json]

Cases (bf16, D = E = 128): B32 H32 T32768 (17.2 GB of K and V); GQA, 32 query
heads over 8 KV heads, T32768; B32 H32 T4096. For each case and each split
count P: build tcomp.kernels.attention_decode(parts=P) once, check it against
a float64 reference on the first `--check-heads` query heads (relative
Frobenius error < 2e-2), then time it; the same for the fused kernels
(attention_decode(fused=True), lower/decode_attention.py) at each parts value
of `--fused` and each unroll of `--unroll` (`--fused ''` skips them, `--splits ''`
the comprehension route) (bench/timing.py: CUDA events, L2
flushed before each call, median), SDPA under each backend that accepts the
shapes (torch.nn.attention.sdpa_kernel: cuDNN, flash, efficient, math; each
also checked), and a device copy (K.clone(), V.clone()). Prints GB/s of the
KV bytes (each backend's time over the bytes of K and V: the bytes a decode
step must read), the copy's read+write rate, and the ratios tcomp / copy
(the issue's target: >= 0.9) and tcomp / best SDPA; writes
`--out PATH` (or $OUT/attention_decode.json when $OUT is set). A case that fails to build, run
or check is reported and the run goes on.

Prediction for the fused kernels (not yet measured): one pass over K and V in
16-byte loads with the next step's rows in flight (16 KB a 128-thread block at
unroll 4; 5 blocks a multiprocessor at 95 registers: ~80 KB a multiprocessor),
so near the copy's read rate: 0.85-0.95x copy at B32 H32 for parts >= 4
(4096+ blocks); GQA reads each K/V row once for its 4 query heads (167
registers at unroll 4: 3 blocks, ~48 KB in flight a multiprocessor; unroll 2:
128 registers, 4 blocks, 32 KB), with 256 K/V matrices parts >= 8 for 2048+
blocks. The combine reads 4 E parts 8 bytes a query row (67 MB at parts 16).

Prediction (not yet measured): the schedule route runs seven kernels; the
scores kernel reads K in 16-byte vectors, the weighted pass reads V in 2-byte
elements (a warp 64 contiguous bytes, a block the 256-byte row, per key), so
K should stream near the
copy's rate and V below it: expect 0.5-0.8x copy overall, larger P helping
at B32 H32 only through more blocks (1024 x P blocks of W). GQA: each query
head's blocks read its K/V rows again (g = 4 times, from L2 at best), so the
GQA case's KV-byte rate is expected lower still.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

D = 128


def cases():
    """(name, batch, q heads, kv heads, T)."""
    return [("b32_h32_t32768", 32, 32, 32, 32768),
            ("gqa_b32_h32_kv8_t32768", 32, 32, 8, 32768),
            ("b32_h32_t4096", 32, 32, 32, 4096)]


def kv_bytes(b, hk, t, d=D, elem=2) -> int:
    """The bytes of K and V: what one decode step must read."""
    return 2 * b * hk * t * d * elem


def parse_splits(text: str, flag: str = "--splits") -> list[int]:
    out = [int(x) for x in text.split(",") if x.strip()]
    if any(p < 1 for p in out):
        raise SystemExit(f"{flag}: positive integers separated by commas, got {text!r}")
    return out


def reference(q, k, v, g):
    """float64 attention of q (Z, 1, D) over k, v (Z / g, T, D): (Z, 1, D)."""
    import torch
    q, k, v = q.double(), k.double(), v.double()
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


def rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def run_case(name, b, h, hk, t, splits, timer, check_heads, fused=(), unrolls=(4,)):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from tcomp.kernels import attention_decode
    g = h // hk
    z, zk = b * h, b * hk
    nbytes = kv_bytes(b, hk, t)
    gen = torch.Generator(device="cuda").manual_seed(0)
    Q = torch.randn(z, 1, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    K = torch.randn(zk, t, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    V = torch.randn(zk, t, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    nq = min(check_heads, z) // g * g or g
    want = reference(Q[:nq], K[:nq // g], V[:nq // g], g)
    res = dict(case=name, B=b, H=h, HK=hk, T=t, D=D, kv_bytes=nbytes, tcomp={}, fused={},
               sdpa={})
    ms = timer(lambda: (K.clone(), V.clone()))
    res["copy"] = dict(ms=ms, kv_GBps=nbytes / ms / 1e6, rw_GBps=2 * nbytes / ms / 1e6)
    for p in splits:
        try:
            k = attention_decode(sizes={"D": D, "E": D}, parts=p, kv_group=g)
            O = k(Q, K, V)
            err = rel_err(O[:nq], want)
            if not err < 2e-2:
                raise AssertionError(f"relative error {err:.3g} against float64")
            ms = timer(k, (Q, K, V))
            res["tcomp"][str(p)] = dict(ms=ms, err=err, kv_GBps=nbytes / ms / 1e6)
        except Exception as e:  # reported, the run goes on
            traceback.print_exc()
            res["tcomp"][str(p)] = dict(error=f"{type(e).__name__}: {e}")
    for p in fused:
        for u in unrolls:
            key = f"{p}/u{u}"
            try:
                k = attention_decode(sizes={"D": D, "E": D, "S": 1}, parts=p, kv_group=g,
                                     fused=True, unroll=u)
                O = k(Q, K, V)
                err = rel_err(O[:nq], want)
                if not err < 2e-2:
                    raise AssertionError(f"relative error {err:.3g} against float64")
                ms = timer(k, (Q, K, V))
                res["fused"][key] = dict(ms=ms, err=err, kv_GBps=nbytes / ms / 1e6,
                                         blocks=p * b * hk)
            except Exception as e:  # reported, the run goes on
                traceback.print_exc()
                res["fused"][key] = dict(error=f"{type(e).__name__}: {e}")
    q4 = Q.view(b, h, 1, D)
    k4, v4 = K.view(b, hk, t, D), V.view(b, hk, t, D)
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    for bname, be in backends.items():
        if bname == "math" and nbytes > 4e9:
            res["sdpa"][bname] = dict(error="skipped: materialises the scores (too slow)")
            continue
        def sdpa():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=g > 1)
        try:
            O = sdpa().reshape(z, 1, D)
            err = rel_err(O[:nq], want)
            if not err < 2e-2:
                raise AssertionError(f"relative error {err:.3g} against float64")
            ms = timer(sdpa)
            res["sdpa"][bname] = dict(ms=ms, err=err, kv_GBps=nbytes / ms / 1e6)
        except Exception as e:
            res["sdpa"][bname] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
    return summarise(res)


def summarise(res: dict) -> dict:
    """Adds the ratios: tcomp's KV rate over the copy's read+write rate, and
    the best SDPA time over tcomp's (> 1: tcomp faster)."""
    best = min((r["ms"] for r in res["sdpa"].values() if "ms" in r), default=None)
    for r in list(res["tcomp"].values()) + list(res.get("fused", {}).values()):
        if "ms" in r:
            r["vs_copy"] = r["kv_GBps"] / res["copy"]["rw_GBps"]
            r["vs_best_sdpa"] = best / r["ms"] if best else None
    return res


def lines(res: dict) -> list[str]:
    out = [f"{res['case']}: KV {res['kv_bytes'] / 1e9:.2f} GB; copy {res['copy']['rw_GBps']:.0f} "
           f"GB/s (read+write)"]
    for p, r in res["tcomp"].items():
        if "ms" in r:
            s = r["vs_best_sdpa"]
            out.append(f"  tcomp P={p}: {r['ms']:.3f} ms {r['kv_GBps']:.0f} GB/s "
                       f"{r['vs_copy']:.2f}x copy " + (f"{s:.2f}x best SDPA" if s else ""))
        else:
            out.append(f"  tcomp P={p}: {r['error']}")
    for p, r in res.get("fused", {}).items():
        if "ms" in r:
            s = r["vs_best_sdpa"]
            out.append(f"  fused P={p} ({r['blocks']} blocks): {r['ms']:.3f} ms "
                       f"{r['kv_GBps']:.0f} GB/s {r['vs_copy']:.2f}x copy "
                       + (f"{s:.2f}x best SDPA" if s else ""))
        else:
            out.append(f"  fused P={p}: {r['error']}")
    for b, r in res["sdpa"].items():
        out.append(f"  sdpa {b}: " + (f"{r['ms']:.3f} ms {r['kv_GBps']:.0f} GB/s" if "ms" in r
                                      else r["error"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", default="4,8,16")
    ap.add_argument("--fused", default="4,8,16,32", help="parts of the fused kernels ('': none)")
    ap.add_argument("--unroll", default="2,4", help="the fused kernels' unroll values")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--check-heads", type=int, default=64)
    a = ap.parse_args(argv)
    splits, fused, unrolls = (parse_splits(a.splits), parse_splits(a.fused, "--fused"),
                               parse_splits(a.unroll, "--unroll"))
    import torch
    from timing import Timer
    timer = Timer(a.reps)
    results = []
    for c in cases():
        if a.only and a.only not in c[0]:
            continue
        try:
            r = run_case(*c, splits, timer, a.check_heads, fused, unrolls or [4])
        except Exception as e:
            traceback.print_exc()
            r = dict(case=c[0], error=f"{type(e).__name__}: {e}")
        results.append(r)
        print("\n".join(lines(r)) if "error" not in r else f"{c[0]}: {r['error']}", flush=True)
        torch.cuda.empty_cache()
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, results=results)
    path = a.out or (os.path.join(os.environ["OUT"], "attention_decode.json")
                     if os.environ.get("OUT") else "")
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
