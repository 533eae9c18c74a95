"""The Hopper fp8 GEMM from a schedule: `torch._scaled_mm`'s product with
per-tensor scales and a bfloat16 result,

    T(m, n) +=! float(A(m, k)) * float(B(n, k))        A (M, K), B (N, K): fp8, K-major
    D(m, n) = bfloat16(T(m, n) * sa * sb)              sa, sb: 0-d float32 scales

built by the Hopper path (docs/schedules.md, "Hopper"; kernels/gemm_sm90.py):
`hopper_schedule` picks the k tile of one 128-byte row (128 fp8 values) and
wgmma m64nNk32, T stays in the accumulators (float32) and the epilogue
scales, rounds to bfloat16 and stores through shared memory with TMA.

A and B may be float8_e4m3fn or float8_e5m2 each; both must be K-major (the
wgmma of 8-bit types reads K-major operands only). The factors are cast to
float so that T, the accumulator, is float32: without the casts a product of
fp8 values is fp8 and T would be rounded (and saturated at 448) before the
scales.
"""
from __future__ import annotations

from .gemm_sm90 import GemmConfig, hopper_schedule

FP8 = ("float8_e4m3fn", "float8_e5m2")


def source(a: str = "float8_e4m3fn", b: str = "float8_e4m3fn", out: str = "bfloat16") -> str:
    """The scaled fp8 GEMM's comprehension, A of type `a`, B of type `b`."""
    return (f"def gemm_fp8({a}(M,K) A, {b}(N,K) B, float sa, float sb) -> (D) {{\n"
            f"  T(m, n) +=! float(A(m, k)) * float(B(n, k))\n"
            f"  D(m, n) = {out}(T(m, n) * sa * sb)\n"
            f"}}")


def fp8_schedule(op, config: GemmConfig = GemmConfig()):
    """The Hopper schedule of the scaled fp8 GEMM `op` (from `source`): T on
    the Hopper path, D its fused epilogue."""
    s = hopper_schedule(op, config, stage="T")
    s["T"].epilogue(s["D"])
    return s


def gemm_fp8_sm90(sizes: dict | None = None, config: GemmConfig = GemmConfig(),
                  a: str = "float8_e4m3fn", b: str = "float8_e4m3fn", target: str = "cuda"):
    """The scaled fp8 GEMM built for `target` ("cuda" or "sim"): called as
    `D = k(A, B, sa, sb)` with sa, sb 0-d float32 arrays."""
    import tcomp
    return tcomp.build(fp8_schedule(tcomp.op(source(a, b)), config), target=target,
                       sizes=sizes)
