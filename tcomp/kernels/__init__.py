"""Kernels built directly as Kernel IR with documented construction helpers
(no schedule, no CUDA template): the proofs that the IR, the CUDA target and
the sim carry a mechanism before schedules reach it.

    gemm_sm90(...)        a warp-specialised TMA + wgmma GEMM for Hopper (from its schedule)
    gemm_fp8_sm90(...)    the same on fp8 inputs with per-tensor scales, bfloat16 out
    attention_sm90(...)   FlashAttention's forward pass for Hopper (lower/hopper_attention.py)
    attention_decode(...) decode attention split over the keys (a comprehension + schedule, SIMT;
                          fused=True: two kernels from a plan, lower/decode_attention.py)
"""
from .attention_decode import attention_decode, decode_schedule, decode_source
from .attention_sm90 import AttentionConfig, attention_program, attention_sm90
from .gemm_fp8_sm90 import fp8_schedule, gemm_fp8_sm90
from .gemm_sm90 import GemmConfig, gemm_sm90, gemm_sm90_program

__all__ = ["AttentionConfig", "attention_decode", "decode_schedule", "decode_source", "GemmConfig", "attention_program", "attention_sm90", "gemm_sm90",
           "gemm_sm90_program", "fp8_schedule", "gemm_fp8_sm90"]
