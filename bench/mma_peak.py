"""The instruction ceiling of the tensor-core paths on this GPU: how many
TFLOP/s `mma.sync.m16n8k16` (bf16/fp16 in, float32 accumulate) and
`ldmatrix` + `mma.sync` can reach when nothing else runs, with 1..16 warps
per SM and several independent accumulators per warp (ILP).

This is the roof the tensor-core GEMMs of `bench/tc_gemm.py` are measured
against (they use the same two instructions; wgmma, Hopper's warpgroup
instruction, is a different path and is what cuBLAS uses on sm_90).

Usage (GPU machine): PYTHONPATH=. python3 bench/mma_peak.py [--json F]
Needs cupy (to compile and launch the probe kernels) and torch (events).
"""
from __future__ import annotations

import argparse
import json

SRC = r"""
extern "C" __global__ void __launch_bounds__(512)
mma_loop(float* out, int iters) {
  // ACC independent m16n8k16 accumulators per warp; A, B fragments stay in
  // registers (values derived from the thread index so nothing folds)
  unsigned a0 = threadIdx.x * 0x00010001u, a1 = a0 ^ 0x3c003c00u,
           a2 = a0 + 7u, a3 = a0 ^ 0x40004000u;
  unsigned b0 = a0 ^ 0x11111111u, b1 = a1 + 3u;
  float c[ACC][4];
#pragma unroll
  for (int i = 0; i < ACC; ++i) { c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f; }
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < ACC; ++i) {
      asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32." DT "." DT ".f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < ACC; ++i) s += c[i][0] + c[i][1] + c[i][2] + c[i][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// (ldsm_mma_loop and ldsm_mma_pipe repeat their prologue on purpose: each is
// the kernel measured in BENCHMARKS.md; moving the prologue into a shared
// device function changes ptxas's unrolling of the main loops, so the SASS.)

// the same, with the fragments loaded by ldmatrix from shared memory each
// step (one x4 for A and one x4 for two B fragments per two mma, the ratio
// of a 64x64 warp tile: 4 A + 4 B x4 loads per 32 mma)
extern "C" __global__ void __launch_bounds__(256)
ldsm_mma_loop(float* out, int iters) {
  extern __shared__ __align__(16) unsigned short tile[];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < blockDim.x / 32 * 1024; i += blockDim.x)
    tile[i] = (unsigned short)(i * 2654435761u >> 20);
  __syncthreads();
  unsigned base = (unsigned)__cvta_generic_to_shared(tile + warp * 1024) +
                  ((lane % 16) * 64 + (lane / 16) * 16 + (lane % 8) * 0) ;
  float c[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;
  for (int it = 0; it < iters; ++it) {
    unsigned a[4][4], b[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      unsigned addr = base ^ (((it + i) & 3) << 4);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(addr));
      unsigned addr2 = (base + 1024) ^ (((it + i) & 3) << 4);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(b[i][0]), "=r"(b[i][1]), "=r"(b[i][2]), "=r"(b[i][3]) : "r"(addr2));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32." DT "." DT ".f32 "
          "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[i][j][0]), "+f"(c[i][j][1]), "+f"(c[i][j][2]), "+f"(c[i][j][3])
          : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]),
            "r"(b[j / 2][(j % 2) * 2]), "r"(b[j / 2][(j % 2) * 2 + 1]));
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) s += c[i][j][0] + c[i][j][1] + c[i][j][2] + c[i][j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
// ldmatrix_mma_loop with the fragments of step it+1 loaded (into a second
// register set) before the mma of step it: fragment double buffering
extern "C" __global__ void __launch_bounds__(256)
ldsm_mma_pipe(float* out, int iters) {
  extern __shared__ __align__(16) unsigned short tile[];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < blockDim.x / 32 * 1024; i += blockDim.x)
    tile[i] = (unsigned short)(i * 2654435761u >> 20);
  __syncthreads();
  unsigned base = (unsigned)__cvta_generic_to_shared(tile + warp * 1024) +
                  ((lane % 16) * 64 + (lane / 16) * 16);
  float c[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.f;
  unsigned a[2][4][4], b[2][4][4];
#define LOAD(buf, step)                                                              \
  _Pragma("unroll") for (int i = 0; i < 4; ++i) {                                    \
    unsigned addr = base ^ ((((step) + i) & 3) << 4);                                \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"    \
                 : "=r"(a[buf][i][0]), "=r"(a[buf][i][1]), "=r"(a[buf][i][2]),        \
                   "=r"(a[buf][i][3]) : "r"(addr));                                  \
    unsigned addr2 = (base + 1024) ^ ((((step) + i) & 3) << 4);                      \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" \
                 : "=r"(b[buf][i][0]), "=r"(b[buf][i][1]), "=r"(b[buf][i][2]),        \
                   "=r"(b[buf][i][3]) : "r"(addr2));                                 \
  }
#define MMA(buf)                                                                     \
  _Pragma("unroll") for (int i = 0; i < 4; ++i)                                      \
  _Pragma("unroll") for (int j = 0; j < 8; ++j)                                      \
    asm volatile(                                                                    \
      "mma.sync.aligned.m16n8k16.row.col.f32." DT "." DT ".f32 "                     \
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                      \
      : "+f"(c[i][j][0]), "+f"(c[i][j][1]), "+f"(c[i][j][2]), "+f"(c[i][j][3])      \
      : "r"(a[buf][i][0]), "r"(a[buf][i][1]), "r"(a[buf][i][2]), "r"(a[buf][i][3]),  \
        "r"(b[buf][j / 2][(j % 2) * 2]), "r"(b[buf][j / 2][(j % 2) * 2 + 1]));
  LOAD(0, 0)
  for (int it = 0; it < iters; it += 2) {
    LOAD(1, it + 1)
    MMA(0)
    LOAD(0, it + 2)
    MMA(1)
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) s += c[i][j][0] + c[i][j][1] + c[i][j][2] + c[i][j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def main(argv=None):
    import cupy as cp
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write the table here as JSON")
    p.add_argument("--iters", type=int, default=4096)
    args = p.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []

    def run(fn, warps, blocks_per_sm, mmas_per_iter, smem=0):
        threads = warps * 32
        grid = sms * blocks_per_sm
        out = cp.empty(grid * threads, dtype=cp.float32)
        launch = lambda: fn((grid,), (threads,), (out, cp.int32(args.iters)),  # noqa: E731
                            shared_mem=smem)
        launch()
        cp.cuda.Device().synchronize()
        ts = []
        for _ in range(5):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            launch()
            b.record()
            b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b))
        ms = sorted(ts)[len(ts) // 2]
        flops = 2 * 16 * 8 * 16 * mmas_per_iter * args.iters * warps * grid
        return ms, flops / ms / 1e9

    for dt in ("bf16", "f16"):
        for acc in (4, 8, 16):
            mod = cp.RawModule(code=f'#define ACC {acc}\n#define DT "{dt}"\n' + SRC,
                               options=("--gpu-architecture=sm_90a", "-std=c++17"))
            fn = mod.get_function("mma_loop")
            for warps in (4, 8, 16):
                ms, tf = run(fn, warps, 1, acc)
                rows.append(dict(kernel="mma", dtype=dt, acc=acc, warps_per_sm=warps,
                                 ms=round(ms, 4), tflops=round(tf, 1)))
                print(f"mma.sync {dt} acc={acc:2d} warps/SM={warps:2d}: {tf:6.1f} TFLOP/s",
                      flush=True)
        if dt == "bf16":
            mod = cp.RawModule(code='#define ACC 1\n#define DT "bf16"\n' + SRC,
                               options=("--gpu-architecture=sm_90a", "-std=c++17"))
            for kname, label in (("ldsm_mma_loop", "ldmatrix+mma"),
                                 ("ldsm_mma_pipe", "ldmatrix+mma, fragments double-buffered")):
                fn = mod.get_function(kname)
                for warps, blocks in ((4, 1), (8, 1), (4, 2), (4, 3)):
                    ms, tf = run(fn, warps, blocks, 32, smem=warps * 2048 + 1024)
                    rows.append(dict(kernel=f"{label} (64x64 warp tile)", dtype=dt,
                                     acc=32, warps_per_sm=warps * blocks, ms=round(ms, 4),
                                     tflops=round(tf, 1)))
                    print(f"{label} {dt} 64x64 warp tile warps/SM={warps * blocks:2d} "
                          f"({blocks} block(s)): {tf:6.1f} TFLOP/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(0), sms=sms, rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    main()
