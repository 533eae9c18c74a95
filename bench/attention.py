"""FlashAttention forward on Hopper (tcomp.kernels.attention_sm90; issue 25
Part B) against SDPA with each of its backends (cuDNN, flash, efficient) in
the same process. tcomp's kernel is the schedule `attention_schedule(config)`
(the tutorial's, for each configuration below) lowered and built. Run on the
GPU machine:

    PYTHONPATH=. python3 bench/attention.py [--cases all|NAME,...] [--reps 20]

Each case: dtype, B, H, S (= T), D, causal (and the KV heads of grouped-query cases). For each, a float64 check of
every kernel on a sample of heads and rows (random data), then TFLOP/s (4 B H
S T D flops, halved when causal) by bench/timing.py (CUDA events, L2 flushed,
median). Prints one line per kernel and writes $OUT/attention.json when $OUT
is set, with the SASS counts and resources of tcomp's kernel.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tcomp.kernels.attention_sm90 import (SMEM_LIMIT, AttentionConfig, attention_sm90,
                                          smem_bytes)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timed  # noqa: E402
from hopper_gemm import sass_stats  # noqa: E402

CASES = {  # name -> (dtype, B, H, S, D, causal)
    "bf16_B4_H32_S4096_D128": ("bfloat16", 4, 32, 4096, 128, False),
    "fp16_B4_H32_S4096_D128": ("float16", 4, 32, 4096, 128, False),
    "bf16_B4_H32_S4096_D128_causal": ("bfloat16", 4, 32, 4096, 128, True),
    "fp16_B4_H32_S4096_D128_causal": ("float16", 4, 32, 4096, 128, True),
    "bf16_B4_H32_S4096_D64": ("bfloat16", 4, 32, 4096, 64, False),
    "bf16_B16_H32_S512_D128": ("bfloat16", 16, 32, 512, 128, False),
    "bf16_B8_H32_S1024_D128": ("bfloat16", 8, 32, 1024, 128, False),
    "bf16_B2_H32_S8192_D128": ("bfloat16", 2, 32, 8192, 128, False),
    "bf16_B1_H32_S16384_D128": ("bfloat16", 1, 32, 16384, 128, False),
    "bf16_B1_H32_S16384_D128_causal": ("bfloat16", 1, 32, 16384, 128, True),
    # grouped-query: 32 query heads over 8 KV heads (K and V (B, 8, S, D); SDPA's enable_gqa)
    "bf16_B4_H32_KV8_S4096_D128_gqa": ("bfloat16", 4, 32, 4096, 128, False, 8),
}
CONFIGS = {  # "auto": the defaults (AttentionConfig.resolved); the rest pin bm, bn, the grid
    "auto": AttentionConfig(),
    "s2": AttentionConfig(bm=128, bn=128, persistent=True),
    "s2_np": AttentionConfig(bm=128, bn=128, persistent=False),  # the kernel before 2026-12-02 pm
    "s3": AttentionConfig(bm=128, bn=128, stages=3, persistent=True),
    "s2_pp": AttentionConfig(bm=128, bn=128, pingpong=True, persistent=True),
    "bm192_s2": AttentionConfig(bm=192, bn=128, persistent=True),
    "bm192_np": AttentionConfig(bm=192, bn=128, persistent=False),
    "bn176_s2": AttentionConfig(bm=128, bn=176, persistent=True),
    "bn176_np": AttentionConfig(bm=128, bn=176, persistent=False),
    "bn176_pp": AttentionConfig(bm=128, bn=176, pingpong=True, persistent=True),
}
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def check(O, q, k, v, causal, heads=4, rows=128) -> float:
    """Max error of O (B, H, S, D) against float64 attention on a sample
    (K and V with H / g heads: grouped-query)."""
    B, H, S, D = q.shape
    grp = H // k.shape[1]
    worst = 0.0
    g = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(heads):
        b_, h_ = int(torch.randint(B, (1,), generator=g)), int(torch.randint(H, (1,), generator=g))
        idx = torch.randperm(S, generator=g)[:rows].to(q.device)
        s = (q[b_, h_, idx].double() @ k[b_, h_ // grp].double().T) / math.sqrt(D)
        if causal:
            s = s.masked_fill(torch.arange(k.shape[2], device=q.device)[None, :] > idx[:, None],
                              float("-inf"))
        ref = torch.softmax(s, dim=-1) @ v[b_, h_ // grp].double()
        worst = max(worst, (O[b_, h_, idx].double() - ref).abs().max().item())
    return worst


def run(name, configs, reps):
    dtype, B, H, S, D, causal, *kv = CASES[name]
    hkv = kv[0] if kv else H
    q = torch.randn(B, H, S, D, device="cuda").to(TORCH[dtype])
    k, v = (torch.randn(B, hkv, S, D, device="cuda").to(TORCH[dtype]) for _ in range(2))
    gqa = {"enable_gqa": True} if hkv != H else {}
    flops = 4 * B * H * S * S * D / (2 if causal else 1)
    row = {"case": name, "sdpa": {}, "tcomp": {}}
    for bname, backend in BACKENDS.items():
        try:
            with sdpa_kernel([backend]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)  # noqa
                err = check(fn(), q, k, v, causal)
                t = timed(fn, reps)
            row["sdpa"][bname] = {"tflops": flops / t / 1e9, "ms": t, "err": err}
            print(f"{name} sdpa {bname} {flops / t / 1e9:.1f} TFLOP/s (err {err:.1e})",
                  flush=True)
        except RuntimeError as e:
            row["sdpa"][bname] = {"error": str(e).splitlines()[0][:200]}
            print(f"{name} sdpa {bname} unavailable: {row['sdpa'][bname]['error']}", flush=True)
    qz, kz, vz = q.reshape(B * H, S, D), k.reshape(B * hkv, S, D), v.reshape(B * hkv, S, D)
    best = None
    for cname in configs:
        cfg = AttentionConfig(**{**CONFIGS[cname].__dict__, "causal": causal, "dtype": dtype,
                                 "kv_group": H // hkv}).resolved(D, D)
        if smem_bytes(cfg, D, D) > SMEM_LIMIT or (D == 128 and cfg.bm > 128):  # 160 regs
            continue
        kern = attention_sm90(cfg, {"D": D, "E": D})
        fn = lambda: kern(qz, kz, vz)  # noqa: E731
        O = fn().reshape(B, H, S, D)
        err = check(O, q, k, v, causal)
        t = timed(fn, reps)
        row["tcomp"][cname] = {"tflops": flops / t / 1e9, "ms": t, "err": err}
        print(f"{name} tcomp {cname} {flops / t / 1e9:.1f} TFLOP/s (err {err:.1e})", flush=True)
        if best is None or t < best[0]:
            best = (t, cname, kern)
    peers = {n: r["tflops"] for n, r in row["sdpa"].items() if "tflops" in r}
    row.update(best=best[1], best_tflops=flops / best[0] / 1e9, sass=sass_stats(best[2].cubin))
    row["ratios"] = {n: row["best_tflops"] / t_ for n, t_ in peers.items()}
    print(f"{name} best {best[1]} {row['best_tflops']:.1f} TFLOP/s; ratios "
          + ", ".join(f"{n} {r:.3f}" for n, r in row["ratios"].items()) + f" {row['sass']}",
          flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="all")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    names = list(CASES) if args.cases == "all" else args.cases.split(",")
    torch.manual_seed(0)
    out = [run(n, args.configs.split(","), args.reps) for n in names]
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "attention.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "cases": out}, f, indent=1)


if __name__ == "__main__":
    main()
