"""Launch one tensor-core GEMM of bench/tc_gemm.py and the cuBLAS GEMM of the
same size a few times each, for a profiler to read (what limits the kernel:
tensor-pipe, shared-memory, L2 and DRAM throughput, warp stall reasons):

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section ComputeWorkloadAnalysis \\
        -k regex:'mm_C|gemm|sm90' -c 2 python3 bench/tc_ncu.py [VARIANT] [M,N,K]

(GPU machine; `PYTHONPATH=.`). The first profiled launch is tcomp's, the
second torch.matmul's (cuBLAS). Inputs are random bf16."""
from __future__ import annotations

import os
import sys

import torch

import tcomp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedules as S  # noqa: E402
from tc_gemm import VARIANTS  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else "128x128_w64x64_k32_async4_swz_pairs_smemepi"
    M, N, K = (int(x) for x in (argv[1] if len(argv) > 1 else "4096,4096,4096").split(","))
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    op, s = S.tc_gemm(**VARIANTS[name])
    k = tcomp.build(s, target="cuda", sizes={"M": M, "N": N, "K": K})
    k(A, B)
    torch.matmul(A, B)
    torch.cuda.synchronize()
    print(f"profiled: tcomp {name} then torch.matmul, {M}x{N}x{K} bf16", flush=True)


if __name__ == "__main__":
    main()
