"""conv2d fp16 3x3, stride 1, padding 1, NHWC, as a comprehension on tensor
cores (schedules.TC_CONV2D / tc_conv2d: an im2col stage in shared memory, on
mma.sync; the hopper_* variants: the same comprehension on the Hopper path,
kernels/conv_sm90.py, its im2col stage filled by TMA) against cuDNN (torch.nn.functional.conv2d) in the same run. Run on the GPU
machine:

    PYTHONPATH=. python3 bench/tc_conv.py [--shape 32,56,56,256,256] [--variants ...]

(bench/tc_gemm.py runs the same case with its GEMMs, --conv.) Each tcomp
kernel is first checked against a float64 convolution at a sample of output
pixels, then timed by bench/timing.py (CUDA events, L2 flushed, median of
--reps); cuDNN is timed on NCHW and on channels-last tensors
(cudnn.benchmark on: its best algorithm) and the faster is the peer. Prints TFLOP/s, the ratio to cuDNN and the SASS
figures of each kernel (registers, shared memory, spills, HMMA count, when
cuobjdump is on the PATH); writes $OUT/tc_conv.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

import tcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402
from tc_gemm import VARIANTS as GEMM_VARIANTS  # noqa: E402
from tc_gemm import sass_stats  # noqa: E402
from timing import timed  # noqa: E402

# name -> tc_conv2d arguments: the GEMM's variants of the same name (bench/tc_gemm.py), the
# conv being that GEMM over an im2col stage, plus one block shape the GEMM bench lacks
VARIANTS = {n: GEMM_VARIANTS[n] for n in (
    "128x128_w64x64_k32_async3", "128x128_w64x64_k32_async4", "128x128_w64x64_k64_async3",
    "128x256_w64x64_k32_async3", "128x128_w64x64_k64_async3_unrollk",
    # swizzled tiles (the GEMM's best form on the H200: 377 vs 320 TFLOP/s padded), paired
    # epilogue stores, the epilogue staged in shared memory
    "128x128_w64x64_k64_async3_swz", "128x128_w64x64_k64_async3_swz_pairs",
    "128x128_w64x64_k32_async4_swz_pairs_smemepi")}
VARIANTS["256x128_w64x64_k32_async3"] = dict(bm=256, bn=128, wm=64, wn=64, bk=32, pipeline=3)
# the Hopper path (kernels/conv_sm90.py: the im2col stage filled by TMA in im2col mode,
# wgmma, warp-specialised, persistent): name -> GemmConfig arguments
HOPPER = {"hopper_128x256_s4": {}, "hopper_128x256_s3": dict(stages=3),
          "hopper_128x256_s4_np": dict(persistent=False),
          "hopper_128x128_s5": dict(bn=128, stages=5),
          "hopper_pp_64x256_s4": dict(bm=64, bn=256, pingpong=True),
          "hopper_pp_128x128_s4": dict(bm=128, bn=128, pingpong=True)}


def exact_at(X, Wt, pixels):
    """The float64 convolution at the given flat output pixels (rows of O):
    each pixel's 3 x 3 x C window of the zero-padded NHWC input times Wt."""
    N, H, W, C = X.shape
    Xp = F.pad(X, (0, 0, 1, 1, 1, 1))  # (C, W, H) padding: the halo of zeros
    n, h, w = pixels // (H * W), pixels // W % H, pixels % W
    t = torch.arange(3, device=X.device)
    hh, ww = h[:, None, None] + t[None, :, None], w[:, None, None] + t[None, None, :]
    win = Xp[n[:, None, None], hh, ww]  # (pixels, 3, 3, C)
    return win.reshape(len(pixels), 9 * C).double() @ Wt.double()


def run_conv(shape="32,56,56,256,256", variants=None, reps=20):
    N, H, W, C, K = (int(x) for x in shape.split(","))
    torch.backends.cudnn.benchmark = True
    g = torch.Generator(device="cuda").manual_seed(0)
    X = torch.randn(N, H, W, C, device="cuda", generator=g).half()   # NHWC
    Wt = torch.randn(9 * C, K, device="cuda", generator=g).half()    # (kh, kw, c) x k
    x_cl = X.permute(0, 3, 1, 2)                      # NCHW view, channels-last storage
    filt_cl = Wt.reshape(3, 3, C, K).permute(3, 2, 0, 1).contiguous(
        memory_format=torch.channels_last)
    x_nchw, filt_nchw = x_cl.contiguous(), filt_cl.contiguous()
    flop = 2 * N * H * W * K * 9 * C
    pixels = torch.randint(0, N * H * W, (256,), device="cuda", generator=g)
    exact = exact_at(X, Wt, pixels)

    def rel_err(rows):
        return ((rows.double() - exact).abs() / (exact.abs() + 1)).max().item()
    lib_cl = timed(lambda: F.conv2d(x_cl, filt_cl, padding=1), reps)
    lib_nchw = timed(lambda: F.conv2d(x_nchw, filt_nchw, padding=1), reps)
    lib = min(lib_cl, lib_nchw)
    ref = F.conv2d(x_cl, filt_cl, padding=1).permute(0, 2, 3, 1).reshape(N * H * W, K)
    lib_err = rel_err(ref[pixels])
    print(f"conv2d fp16 N{N} C{C} {H}x{W} K{K} 3x3 pad 1: cuDNN channels-last {lib_cl:.3f} ms, "
          f"NCHW {lib_nchw:.3f} ms, best {flop / lib / 1e9:.0f} TFLOP/s (err {lib_err:.1e})",
          flush=True)
    rows = []
    sizes = {"N": N, "H": H, "W": W, "C": C, "K": K, "R": 9 * C}
    for name in variants or list(VARIANTS) + list(HOPPER):
        if name in HOPPER:
            from tcomp.kernels.conv_sm90 import conv2d_schedule
            from tcomp.kernels.gemm_sm90 import GemmConfig
            s = conv2d_schedule(tcomp.op(S.TC_CONV2D), GemmConfig(**HOPPER[name]))
        else:
            op, s = S.tc_conv2d(**VARIANTS[name])
        try:
            k = tcomp.build(s, target="cuda", sizes=sizes)
        except tcomp.TcompError as e:
            print(f"  {name}: {type(e).__name__}: {e}")
            continue
        O = k(X, Wt)
        torch.cuda.synchronize()
        err = rel_err(O[pixels])
        ok = err < 2e-2
        t = timed(lambda: k(X, Wt), reps)
        st = sass_stats(k.cubin)
        print(f"  {name}: max rel err {err:.1e} {'ok' if ok else 'WRONG'}  {t:.3f} ms  "
              f"{flop / t / 1e9:.0f} TFLOP/s  ratio {lib / t:.2f}  {st}", flush=True)
        rows.append(dict(case="conv2d", N=N, H=H, W=W, C=C, K=K, variant=name, ms=t,
                         lib_ms=lib, lib_cl_ms=lib_cl, lib_nchw_ms=lib_nchw, ratio=lib / t,
                         tflops=flop / t / 1e9, err=err, lib_err=lib_err, ok=ok, **st))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="32,56,56,256,256", help="N,H,W,C,K")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS) + list(HOPPER))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    rows = run_conv(args.shape, args.variants, args.reps)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "tc_conv.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
