"""What bench/first_contact.py checks and compares against, per op of issue 26
(the ops of bench/auto_time.py): a float64 reference written from the
comprehension, and the torch peer a user would write.

A reference takes `xp` (numpy or torch) and the inputs as float64 arrays of
that library, and returns the op's outputs as a tuple in the op's order; it
uses only `@`, slicing, `.sum(-1)`, `xp.exp`, `xp.sqrt` and an erf (torch's,
or math.erf element by element on numpy: small sizes only), so the same code
checks the GPU kernels on float64 torch tensors and is itself checked against
`tcomp.evaluate` on numpy (tests/bench/test_first_contact_cpu.py, no torch).

A peer takes torch tensors in the op's dtypes and returns the outputs (a
tensor, or a tuple for add + RMSNorm). torch is imported inside each peer, so
this module imports without torch. GEMMs in float32 run with TF32 off: the
comprehensions compute in float32 (first_contact.py turns it off).
"""
from __future__ import annotations

import math

import numpy as np


def _erf(xp, x):
    if hasattr(xp, "erf"):  # torch
        return xp.erf(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x)  # numpy has no erf


def group_norm(xp, X, gamma, beta):
    # mean and var(n, g) over d (var: the mean of squared deviations), then per (g, d) affine
    mean = X.sum(-1)[..., None] / X.shape[-1]
    var = ((X - mean) * (X - mean)).sum(-1)[..., None] / X.shape[-1]
    return ((X - mean) / xp.sqrt(var + 1e-5) * gamma + beta,)


def depthwise_conv(xp, I, Wt):
    # O(n, c, h, w) = sum over kh, kw of I(n, c, h + kh, w + kw) * Wt(c, kh, kw): no padding
    C, KH, KW = Wt.shape
    Ho, Wo = I.shape[2] - KH + 1, I.shape[3] - KW + 1
    out = 0
    for kh in range(KH):
        for kw in range(KW):
            out = out + I[:, :, kh:kh + Ho, kw:kw + Wo] * Wt[:, kh, kw][None, :, None, None]
    return (out,)


def bmm_fp16(xp, A, B):
    return (A @ B,)


def stencil(xp, X):
    c = X[1:-1, 1:-1]
    return (c * 4 - X[:-2, 1:-1] - X[2:, 1:-1] - X[1:-1, :-2] - X[1:-1, 2:],)


def swiglu(xp, X, W1, W3):
    G, U = X @ W1, X @ W3
    return (G / (1.0 + xp.exp(-G)) * U,)


def add_rmsnorm(xp, X, R, w):
    H = X + R
    ss = (H * H).sum(-1)[..., None]
    return H, H / xp.sqrt(ss / H.shape[-1] + 1e-6) * w


def gemm_bias_gelu(xp, A, B, bias):
    x = A @ B + bias
    return (0.5 * x * (1.0 + _erf(xp, x * 0.70710678118654752)),)


REFERENCES = {"group_norm": group_norm, "depthwise_conv": depthwise_conv, "bmm_fp16": bmm_fp16,
              "stencil": stencil, "swiglu": swiglu, "add_rmsnorm": add_rmsnorm,
              "gemm_bias_gelu": gemm_bias_gelu}


# ---------------------------------------------------------------- torch peers
def _F():
    import torch.nn.functional as F
    return F


def peer_group_norm(X, gamma, beta):
    # F.group_norm over (N, C) with C = G * D channels of one element each: a group is D
    # channels, the weight per channel is gamma(g, d); the same mean, biased variance and eps
    N, G, D = X.shape
    y = _F().group_norm(X.reshape(N, G * D), G, gamma.reshape(-1), beta.reshape(-1), eps=1e-5)
    return y.reshape(N, G, D)


def peer_depthwise_conv(I, Wt):
    C, KH, KW = Wt.shape
    return _F().conv2d(I, Wt.reshape(C, 1, KH, KW), groups=C)  # no padding, cross-correlation


def peer_bmm_fp16(A, B):
    import torch
    return torch.bmm(A, B)


def peer_stencil(X):
    return stencil(None, X)[0]


def peer_swiglu(X, W1, W3):
    return _F().silu(X @ W1) * (X @ W3)


def peer_add_rmsnorm(X, R, w):
    H = X + R
    return H, _F().rms_norm(H, (H.shape[-1],), w, eps=1e-6)


def peer_gemm_bias_gelu(A, B, bias):
    import torch
    return _F().gelu(torch.addmm(bias, A, B))  # cuBLAS adds the bias; GELU exact (erf)


PEERS = {"group_norm": ("F.group_norm", peer_group_norm),
         "depthwise_conv": ("F.conv2d groups=C", peer_depthwise_conv),
         "bmm_fp16": ("torch.bmm fp16", peer_bmm_fp16),
         "stencil": ("torch slicing", peer_stencil),
         "swiglu": ("2 matmuls + silu*", peer_swiglu),
         "add_rmsnorm": ("add + F.rms_norm", peer_add_rmsnorm),
         "gemm_bias_gelu": ("addmm + F.gelu (erf)", peer_gemm_bias_gelu)}


def triton_peer(name: str):
    """(label, fn) of a Triton peer that bench/ already has for `name`, or None:
    add + RMSNorm is torch's add, then bench/triton_rows.py's RMSNorm (two kernels:
    bench/ has no fused add + RMSNorm in Triton). Imports triton (the GPU machine)."""
    if name != "add_rmsnorm":
        return None
    import triton_rows

    def fn(X, R, w):
        H = X + R
        return H, triton_rows.rmsnorm(H, w, eps=1e-6)
    return "add + triton_rows.rmsnorm", fn


# ---------------------------------------------------------------- checking
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2, "float64": 1e-9}


def max_error(got, want) -> float:
    """The largest |got - want| over the largest |want| (float64 arrays or tensors
    of one library), over every output of the tuples `got` and `want`; inf
    where an output holds a NaN."""
    worst = 0.0
    for g, w in zip(got, want):
        scale = float(abs(w).max()) or 1e-30
        e = float(abs(g - w).max()) / scale
        if math.isnan(e):  # a NaN in the output (max() would pass over it)
            return math.inf
        worst = max(worst, e)
    return worst
