"""The intrinsics `Stage.tensorize` accepts, as data: what each computes, so a
schedule can be checked against it before lowering (the layouts and the code
of each live in lower/warp_layouts.py and the targets). Part of the machine
model: the IR core (lower/intrinsics.py) and the schedule (tensorize) read it.

An entry `C[m, n] += A[m, k] * B[k, n]` over an m x n x k tile, with the input
and accumulator types it takes (a wgmma entry's k is one ring slot, a 128-byte
row: 64 for k16, four instructions; 128 for the fp8 k32, four instructions).
`tcomp.intrinsics()` lists them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorIntrinsic:
    name: str
    m: int
    n: int
    k: int
    inputs: tuple[str, ...]  # dtype names the A and B operands may have (both the same)
    accumulator: str
    doc: str


TENSORIZE = {i.name: i for i in (
    TensorIntrinsic("mma_m16n8k16", 16, 8, 16, ("bfloat16", "float16"), "float32",
                    "warp-wide C[16x8] += A[16x16] @ B[16x8] on tensor cores (mma.sync), "
                    "bfloat16 or float16 inputs, float32 accumulation"),
    *(TensorIntrinsic(f"wgmma_m64n{n}k16", 64, n, 64, ("bfloat16", "float16"), "float32",
                      f"warpgroup-wide C[64x{n}] += A[64x64] @ B[64x{n}] on Hopper tensor cores "
                      f"(wgmma, sm_90a; four k16 steps), A and B in shared memory filled by "
                      f"the TMA engine, float32 accumulators in registers (the Hopper GEMM: "
                      f"docs/schedules.md)") for n in (64, 128, 256)),
    *(TensorIntrinsic(f"wgmma_m64n{n}k32", 64, n, 128, ("float8_e4m3fn", "float8_e5m2"),
                      "float32",
                      f"warpgroup-wide C[64x{n}] += A[64x128] @ B[128x{n}] on Hopper tensor "
                      f"cores (wgmma, sm_90a; four k32 steps), fp8 inputs (e4m3/e5m2, either "
                      f"for either operand), both K-major, from TMA-filled shared memory, "
                      f"float32 accumulators in registers (the Hopper GEMM: "
                      f"docs/schedules.md)") for n in (64, 128, 256)),
)}


def intrinsics() -> dict[str, str]:
    """name -> one-line description of every intrinsic `tensorize` accepts."""
    return {name: i.doc for name, i in TENSORIZE.items()}
