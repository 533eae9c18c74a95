"""2-D convolution on the Hopper path: the implicit GEMM of an NHWC input
and a filter bank, its A operand the input's windows copied by the TMA
engine in im2col mode (docs/hopper.md, "Convolution").

`conv2d_source(filter, padding)` writes the comprehension: an im2col stage
Acol(p, r) (the window of output pixel p = (n, ho, wo) at window position
r = (kh, kw, c), zero in the padding; the form lower/im2col.py recognises)
and the product O(p, k) += Acol(p, r) Wt(r, k), Wt the filters as an
(R S C) x K matrix (a PyTorch filter F of shape (K, C, R, S) is
F.permute(2, 3, 1, 0).reshape(R * S * C, K)) and O the output as
(N Ho Wo) x K, i.e. NHWC. `conv2d_schedule(op, config)` is the Hopper
GEMM's schedule of O (kernels/gemm_sm90.py) with Acol kept in shared
memory and filled by TMA: Acol is never written to global memory.

Requirements (LoweringErrors otherwise): stride 1, dilation 1; C a
multiple of 64 fixed at build (each 64-wide K tile lies in one filter
position); K a multiple of 8 (TMA rows of 16 bytes).
"""
from __future__ import annotations

from .gemm_sm90 import GemmConfig, hopper_schedule


def _plus(name: str, d: int) -> str:
    return name if d == 0 else f"({name} {'+' if d > 0 else '-'} {abs(d)})"


def conv2d_source(filter: tuple[int, int] = (3, 3), padding: tuple[int, int] = (1, 1),
                  dtype: str = "float16", name: str = "conv2d") -> str:
    """The TC source of an R x S convolution, stride 1, with padding (ph,
    pw), of X(N, H, W, C) by Wt(R S C, K) into O(N Ho Wo, K), Ho = H + 2 ph
    - R + 1 and Wo = W + 2 pw - S + 1."""
    R, S = (int(x) for x in filter)
    ph, pw = (int(x) for x in padding)
    if R < 1 or S < 1 or not (0 <= ph < R and 0 <= pw < S):
        raise ValueError(f"conv2d_source: a filter of {R} x {S} with padding ({ph}, {pw}); "
                         f"the filter needs at least one position and 0 <= padding < filter")
    Ho, Wo = _plus("H", 2 * ph - R + 1), _plus("W", 2 * pw - S + 1)
    return (f"def {name}({dtype}(N, H, W, C) X, {dtype}(RSC, K) Wt) -> (O) {{\n"
            f"  Acol(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : "
            f"{dtype}(0.0)\n"
            f"      where n = p / ({Ho} * {Wo}), h = p / {Wo} % {Ho} + r / ({S} * C) - {ph},\n"
            f"            w = p % {Wo} + r / C % {S} - {pw}, p in 0:N * {Ho} * {Wo}, "
            f"r in 0:{R * S} * C\n"
            f"  O(p, k) +=! Acol(p, r) * Wt(r, k)\n}}")


def conv2d_schedule(op, config: GemmConfig = GemmConfig()):
    """The Hopper schedule of `op` (conv2d_source's form): the GEMM of O
    with its im2col operand Acol in shared memory, filled by TMA."""
    return hopper_schedule(op, config, stage="O")
