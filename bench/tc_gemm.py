"""Tensor-core GEMM (mma.sync m16n8k16 through `tensorize`) against cuBLAS
(torch.matmul) in the same run. Run on the GPU machine:

    PYTHONPATH=. python3 bench/tc_gemm.py [--sizes 4096,4096,4096 ...] [--variants ...]

Each tcomp kernel is first checked against a float64 product on random
bfloat16 data (a sample of rows), then timed by bench/timing.py (CUDA
events, L2 flushed before each call, median of --reps); prints TFLOP/s, the ratio to torch.matmul, and per kernel the
registers, shared memory, spills and the HMMA, LDSM and STG counts from the
SASS (when cuobjdump is on the PATH; stg_u16: 16-bit stores, which paired
stores replace by bf16x2 ones; stg_128 and sts: the 16-byte stores and the
shared stores of the epilogue through shared memory). With --conv (on by
default), also the conv2d case of bench/tc_conv.py against cuDNN. --layouts
(NT, TN by default) times B given as (N, K) and A as (K, M) against
torch.matmul on the same layouts; --batched (B64 M512 N512 K64 and B8 M2048
N2048 K128 by default) times batched GEMMs against torch.bmm. Writes
$OUT/tc_gemm.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

import torch

import tcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402
from timing import timed  # noqa: E402
import cuobjdump  # noqa: E402

VARIANTS = {  # name -> tc_gemm arguments
    "128x128_w64x64_k64_pipe2": dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=2),
    "128x128_w64x64_k32_async3": dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3),
    "128x128_w64x64_k32_async4": dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4),
    "128x128_w64x64_k64_async3": dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3),
    "128x256_w64x64_k32_async3": dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=3),
    "128x256_w64x64_k32_async4": dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=4),
    "128x256_w64x64_k64_async3": dict(bm=128, bn=256, wm=64, wn=64, bk=64, pipeline=3),
    "256x128_w64x64_k32_async4": dict(bm=256, bn=128, wm=64, wn=64, bk=32, pipeline=4),
    "128x128_w64x32_k32_async4": dict(bm=128, bn=128, wm=64, wn=32, bk=32, pipeline=4),
    "128x128_w64x64_k64_async3_unrollk": dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                              unroll_k=True),
    "128x128_w64x64_k32_async4_unrollk": dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4,
                                              unroll_k=True),
    "128x256_w64x64_k64_async3_unrollk": dict(bm=128, bn=256, wm=64, wn=64, bk=64, pipeline=3,
                                              unroll_k=True),
    # XOR-swizzled tiles instead of padded rows (Stage.swizzle): the same conflict-free
    # ldmatrix, 8-9% less shared memory, no extra integer ops in the SASS's main loop
    "128x128_w64x64_k64_async3_swz": dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3,
                                          swizzle=True),
    "128x128_w64x64_k64_async3_unrollk_swz": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                  pipeline=3, unroll_k=True, swizzle=True),
    "128x128_w64x64_k32_async4_swz": dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4,
                                          swizzle=True),
    "128x256_w64x64_k64_async3_swz": dict(bm=128, bn=256, wm=64, wn=64, bk=64, pipeline=3,
                                          swizzle=True),
    "128x256_w64x64_k32_async4_swz": dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=4,
                                          swizzle=True),
    # each lane's two adjacent accumulator columns stored as one bf16x2 (STG.E, 64 per
    # thread instead of 128 STG.E.U16): pair_stores
    "128x128_w64x64_k64_async3_swz_pairs": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                pipeline=3, swizzle=True, pair_stores=True),
    "128x256_w64x64_k64_async3_swz_pairs": dict(bm=128, bn=256, wm=64, wn=64, bk=64,
                                                pipeline=3, swizzle=True, pair_stores=True),
    # the A/B fragments of k16 step k+1 loaded (ldmatrix) before the mma of step k, in a
    # second set of fragment registers: fragment_pipeline (`pipeline` on the k16 loop)
    "128x128_w64x64_k64_async3_swz_fpipe": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                pipeline=3, swizzle=True, fragment_pipeline=2),
    "128x128_w64x64_k32_async4_swz_fpipe": dict(bm=128, bn=128, wm=64, wn=64, bk=32,
                                                pipeline=4, swizzle=True, fragment_pipeline=2),
    "128x128_w64x64_k64_async3_swz_pairs_fpipe": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                      pipeline=3, swizzle=True,
                                                      pair_stores=True, fragment_pipeline=2),
    # the epilogue through shared memory (smem_epilogue): fragments -> a swizzled bm x bn
    # bf16 tile (STS), a barrier, then 16-byte coalesced copies to C (STG.E.128, whole
    # 128-byte lines per warp). Extra shared memory: bm * bn * 2 bytes (no aliasing with
    # the ring): k64 async3 goes from 96 to 128 KiB (2 -> 1 block per SM); k32 async4
    # stays at 96 KiB (2 per SM); 128x256 k32 async3 (one block per SM by registers
    # already) 72 -> 136 KiB
    "128x128_w64x64_k64_async3_swz_smemepi": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                  pipeline=3, swizzle=True, smem_epilogue=True),
    "128x128_w64x64_k64_async3_swz_pairs_smemepi": dict(bm=128, bn=128, wm=64, wn=64, bk=64,
                                                        pipeline=3, swizzle=True,
                                                        pair_stores=True, smem_epilogue=True),
    "128x128_w64x64_k32_async4_swz_pairs_smemepi": dict(bm=128, bn=128, wm=64, wn=64, bk=32,
                                                        pipeline=4, swizzle=True,
                                                        pair_stores=True, smem_epilogue=True),
    # K tile 32, ring of 4 (a power of two: the ring index is an AND), with and without
    # the shared epilogue and fragment double buffering
    "128x128_w64x64_k32_async4_swz_pairs": dict(bm=128, bn=128, wm=64, wn=64, bk=32,
                                                pipeline=4, swizzle=True, pair_stores=True),
    "128x128_w64x64_k32_async4_swz_pairs_fpipe": dict(bm=128, bn=128, wm=64, wn=64, bk=32,
                                                      pipeline=4, swizzle=True,
                                                      pair_stores=True, fragment_pipeline=2),
    "128x128_w64x64_k32_async4_swz_pairs_smemepi_fpipe": dict(
        bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4, swizzle=True, pair_stores=True,
        smem_epilogue=True, fragment_pipeline=2),
    "128x256_w64x64_k32_async3_swz_pairs_smemepi": dict(bm=128, bn=256, wm=64, wn=64, bk=32,
                                                        pipeline=3, swizzle=True,
                                                        pair_stores=True, smem_epilogue=True),
}


def sass_stats(cubin: bytes) -> dict:
    got = cuobjdump.dump(cubin)
    if got is None:
        return {}
    res, sass = got
    out = {"hmma": sass.count("HMMA"), "ldsm": sass.count("LDSM"),
           "stg": len(re.findall(r"\bSTG\.", sass)), "stg_u16": sass.count("STG.E.U16"),
           "stg_128": sass.count("STG.E.128"), "sts": len(re.findall(r"\bSTS\b", sass))}
    out.update(cuobjdump.resources(res))
    return out


BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3)
# the best measured (H200, 2026-11-30: 404 TFLOP/s at 4096^3): the fp16 case's schedule
BEST_SWZ = dict(BEST, swizzle=True, pair_stores=True)
# the batched case (--batched): a small K (64, 128) has few K tiles per block, so the
# 4-stage k32 ring and 64-row tiles are candidates beside the best 2-D schedule
BATCHED_VARIANTS = {
    "best_swz": BEST_SWZ,
    "k32_async4_swz_pairs": dict(BEST_SWZ, bk=32, pipeline=4),
    "128x64_w64x32_k64_async3_swz_pairs": dict(BEST_SWZ, bn=64, wn=32),
}
# the fused GEMM + bias + GELU case is timed with each of these (--epilogue-variants)
EPILOGUE_VARIANTS = {
    "best": BEST,
    "swz": dict(BEST, swizzle=True),
    "swz_pairs": dict(BEST, swizzle=True, pair_stores=True),  # float2 bias, bf16x2 stores
    "swz_pairs_fpipe": dict(BEST, swizzle=True, pair_stores=True, fragment_pipeline=2),
    # GELU computed from the fragments, staged in shared memory as bf16, 16-byte stores
    "swz_pairs_smemepi": dict(BEST, swizzle=True, pair_stores=True, smem_epilogue=True),
    "k32_async4_swz_pairs_smemepi": dict(BEST, bk=32, pipeline=4, swizzle=True,
                                         pair_stores=True, smem_epilogue=True),
}


def run_fp16(args):
    M, N, K = (int(x) for x in args.sizes[0].split(","))
    A = torch.randn(M, K, device="cuda").half()
    B = torch.randn(K, N, device="cuda").half()
    lib = timed(lambda: torch.matmul(A, B), args.reps)
    op = tcomp.op(S.TC_GEMM.replace("bfloat16", "float16"))
    op, s = S.tc_gemm(op, **BEST_SWZ)
    k = tcomp.build(s, target="cuda", sizes={"M": M, "N": N, "K": K})
    sample = torch.randint(0, M, (64,), device="cuda")
    exact = A[sample].double() @ B.double()
    err = ((k(A, B)[sample].double() - exact).abs() / (exact.abs() + 1)).max().item()
    t = timed(lambda: k(A, B), args.reps)
    flop = 2 * M * N * K
    print(f"fp16 {M}x{N}x{K}: torch.matmul {lib:.3f} ms, tcomp {t:.3f} ms {flop / t / 1e9:.0f} "
          f"TFLOP/s ratio {lib / t:.2f} (err {err:.1e})", flush=True)
    return [dict(M=M, N=N, K=K, variant="fp16 " + str(BEST_SWZ), ms=t, lib_ms=lib, ratio=lib / t,
                 err=err, ok=err < 2e-2)]


def run_layouts(args):
    """bf16 GEMM with B given as (N, K) (NT), A as (K, M) (TN) or both (TT),
    against torch.matmul on the same layouts (a transposed view: cuBLAS
    takes it without a copy). tcomp reads each layout directly (ldmatrix's
    other form for the transposed operand)."""
    M, N, K = (int(x) for x in args.sizes[0].split(","))
    rows = []
    for layout in args.layouts:
        A = torch.randn(*((K, M) if layout[0] == "T" else (M, K)), device="cuda").bfloat16()
        B = torch.randn(*((N, K) if layout[1] == "T" else (K, N)), device="cuda").bfloat16()
        a = A.t() if layout[0] == "T" else A
        b = B.t() if layout[1] == "T" else B
        lib = timed(lambda: torch.matmul(a, b), args.reps)
        op, s = S.tc_gemm(tcomp.op(S.TC_LAYOUTS[layout]), **BEST_SWZ)
        k = tcomp.build(s, target="cuda", sizes={"M": M, "N": N, "K": K})
        sample = torch.randint(0, M, (64,), device="cuda")
        exact = a[sample].double() @ b.double()
        err = ((k(A, B)[sample].double() - exact).abs() / (exact.abs() + 1)).max().item()
        t = timed(lambda: k(A, B), args.reps)
        flop = 2 * M * N * K
        print(f"{layout} {M}x{N}x{K}: torch.matmul {lib:.3f} ms, tcomp {t:.3f} ms "
              f"{flop / t / 1e9:.0f} TFLOP/s ratio {lib / t:.2f} (err {err:.1e})  "
              f"{sass_stats(k.cubin)}", flush=True)
        rows.append(dict(M=M, N=N, K=K, variant=f"{layout} {BEST_SWZ}", ms=t, lib_ms=lib,
                         ratio=lib / t, err=err, ok=err < 2e-2))
    return rows


def run_batched(args):
    """bf16 batched GEMM (S.TC_BMM, the batch on blockIdx.z) against
    torch.bmm, for each B,M,N,K of --batched and each of BATCHED_VARIANTS."""
    rows = []
    for text in args.batched:
        NB, M, N, K = (int(x) for x in text.split(","))
        A = torch.randn(NB, M, K, device="cuda").bfloat16()
        B = torch.randn(NB, K, N, device="cuda").bfloat16()
        lib = timed(lambda: torch.bmm(A, B), args.reps)
        exact = torch.bmm(A[:, :64].double(), B.double())
        flop = 2 * NB * M * N * K
        for name, kw in BATCHED_VARIANTS.items():
            op, s = S.tc_gemm(tcomp.op(S.TC_BMM), **kw)
            k = tcomp.build(s, target="cuda", sizes={"NB": NB, "M": M, "N": N, "K": K})
            err = ((k(A, B)[:, :64].double() - exact).abs() / (exact.abs() + 1)).max().item()
            t = timed(lambda: k(A, B), args.reps)
            print(f"bmm {NB}x{M}x{N}x{K} [{name}]: torch.bmm {lib:.3f} ms, tcomp {t:.3f} ms "
                  f"{flop / t / 1e9:.0f} TFLOP/s ratio {lib / t:.2f} (err {err:.1e})  "
                  f"{sass_stats(k.cubin)}", flush=True)
            rows.append(dict(NB=NB, M=M, N=N, K=K, variant=f"bmm {name} {kw}", ms=t,
                             lib_ms=lib, ratio=lib / t, err=err, ok=err < 2e-2))
    return rows


def run_epilogue(args):
    M, N, K = (int(x) for x in args.epilogue.split(","))
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    bias = torch.randn(N, device="cuda")
    F = torch.nn.functional
    bias16 = bias.bfloat16()
    eager = lambda: F.gelu(torch.matmul(A, B) + bias16)  # noqa: E731
    lib = timed(eager, args.reps)
    sample = torch.randint(0, M, (64,), device="cuda")
    x = A[sample].double() @ B.double() + bias.double()
    exact = 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))
    rows = []
    for name in args.epilogue_variants:
        kw = EPILOGUE_VARIANTS[name]
        op, s = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), **kw)
        k = tcomp.build(s, target="cuda", sizes={"M": M, "N": N, "K": K})
        err = ((k(A, B, bias)[sample].double() - exact).abs() / (exact.abs() + 1)).max().item()
        t = timed(lambda: k(A, B, bias), args.reps)
        print(f"GEMM + bias + GELU {M}x{N}x{K} [{name}]: torch.matmul + eager epilogue "
              f"{lib:.3f} ms, tcomp fused {t:.3f} ms, ratio {lib / t:.2f} (err {err:.1e})  "
              f"{sass_stats(k.cubin)}", flush=True)
        rows.append(dict(M=M, N=N, K=K, variant=f"bias+gelu {name} {kw}", ms=t, lib_ms=lib,
                         ratio=lib / t, err=err, ok=err < 2e-2))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="*", default=["4096,4096,4096", "8192,8192,8192"])
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--fp16", action="store_true", help="also float16 GEMMs at the first size")
    ap.add_argument("--epilogue", default="8192,8192,4096",
                    help="M,N,K of the fused GEMM + bias + GELU case ('' to skip)")
    ap.add_argument("--epilogue-variants", nargs="*", default=list(EPILOGUE_VARIANTS),
                    choices=list(EPILOGUE_VARIANTS),
                    help="schedules of the fused case (EPILOGUE_VARIANTS)")
    ap.add_argument("--layouts", nargs="*", default=["NT", "TN"], choices=["NT", "TN", "TT"],
                    help="also B given as (N, K) (NT), A as (K, M) (TN), both (TT), at the "
                         "first size, against torch.matmul on the same layouts")
    ap.add_argument("--batched", nargs="*", default=["64,512,512,64", "8,2048,2048,128"],
                    help="B,M,N,K of batched GEMMs against torch.bmm")
    args = ap.parse_args()
    rows = []
    if args.fp16:
        rows += run_fp16(args)
    if args.layouts:
        rows += run_layouts(args)
    if args.batched:
        rows += run_batched(args)
    if args.epilogue:
        rows += run_epilogue(args)
    for text in args.sizes:
        M, N, K = (int(x) for x in text.split(","))
        A = torch.randn(M, K, device="cuda").bfloat16()
        B = torch.randn(K, N, device="cuda").bfloat16()
        lib = timed(lambda: torch.matmul(A, B), args.reps)
        flop = 2 * M * N * K
        print(f"{M}x{N}x{K}: torch.matmul {lib:.3f} ms {flop / lib / 1e9:.0f} TFLOP/s", flush=True)
        sample = torch.randint(0, M, (64,), device="cuda")
        exact = A[sample].double() @ B.double()
        for name in args.variants:
            op, s = S.tc_gemm(**VARIANTS[name])
            try:
                k = tcomp.build(s, target="cuda", sizes={"M": M, "N": N, "K": K})
            except tcomp.TcompError as e:
                print(f"  {name}: {type(e).__name__}: {e}")
                continue
            C = k(A, B)
            torch.cuda.synchronize()
            err = ((C[sample].double() - exact).abs() / (exact.abs() + 1)).max().item()
            ok = err < 2e-2
            t = timed(lambda: k(A, B), args.reps)
            st = sass_stats(k.cubin)
            print(f"  {name}: max rel err {err:.1e} {'ok' if ok else 'WRONG'}  {t:.3f} ms  "
                  f"{flop / t / 1e9:.0f} TFLOP/s  ratio {lib / t:.2f}  {st}", flush=True)
            rows.append(dict(M=M, N=N, K=K, variant=name, ms=t, lib_ms=lib, ratio=lib / t,
                             tflops=flop / t / 1e9, err=err, ok=ok, **st))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "tc_gemm.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
