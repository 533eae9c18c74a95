"""Kernels built directly as Kernel IR with documented construction helpers
(no schedule, no CUDA template): the proofs that the IR, the CUDA target and
the sim carry a mechanism before schedules reach it.

    gemm_sm90(...)   a warp-specialised TMA + wgmma GEMM for Hopper
"""
from .gemm_sm90 import GemmConfig, gemm_sm90, gemm_sm90_program

__all__ = ["GemmConfig", "gemm_sm90", "gemm_sm90_program"]
