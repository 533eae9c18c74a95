"""tcomp.kernels.attention_decode on the GPU against float64 attention
(torch): T not a multiple of the parts, empty parts, GQA, D 64 and 128; the
comprehension route and the fused kernels (fused=True)."""
from __future__ import annotations

import math

import pytest

from tcomp.kernels import attention_decode

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("Z, g, S, T, D, parts", [
    (8, 1, 1, 1000, 128, 8), (8, 4, 1, 333, 128, 16), (4, 1, 2, 5, 64, 8), (6, 2, 1, 4096, 64, 4),
])
def test_gpu_decode_matches_float64(Z, g, S, T, D, parts):
    import torch
    k = attention_decode({"D": D, "E": D}, parts=parts, kv_group=g)
    q = torch.randn(Z, S, D, device="cuda").bfloat16()
    kk, v = (torch.randn(Z // g, T, D, device="cuda").bfloat16() for _ in range(2))
    O = k(q, kk, v)
    kr, vr = (x.double().repeat_interleave(g, 0) for x in (kk, v))
    want = torch.softmax(q.double() @ kr.transpose(1, 2) / math.sqrt(D), -1) @ vr
    assert O.shape == (Z, S, D) and O.dtype == torch.bfloat16
    assert (O.double() - want).abs().max().item() < 2e-2


@pytest.mark.parametrize("Z, g, S, T, D, parts, dtype, unroll, prefetch", [
    (8, 1, 1, 1000, 128, 8, "bfloat16", 4, True),
    (8, 4, 1, 333, 128, 16, "bfloat16", 4, True),
    (8, 4, 1, 4099, 128, 7, "float16", 2, True),
    (4, 1, 2, 5, 64, 8, "bfloat16", 4, True),       # T < parts: empty parts
    (6, 2, 1, 4096, 64, 4, "bfloat16", 3, False),
    (64, 4, 1, 32768, 128, 16, "bfloat16", 4, True),
])
def test_gpu_fused_decode_matches_float64(Z, g, S, T, D, parts, dtype, unroll, prefetch):
    import torch
    k = attention_decode({"D": D, "E": D, "S": S}, parts=parts, kv_group=g, dtype=dtype,
                         fused=True, unroll=unroll, prefetch=prefetch)
    dt = getattr(torch, dtype)
    q = torch.randn(Z, S, D, device="cuda").to(dt)
    kk, v = (torch.randn(Z // g, T, D, device="cuda").to(dt) for _ in range(2))
    O = k(q, kk, v)
    kr, vr = (x.double().repeat_interleave(g, 0) for x in (kk, v))
    want = torch.softmax(q.double() @ kr.transpose(1, 2) / math.sqrt(D), -1) @ vr
    assert O.shape == (Z, S, D) and O.dtype == dt
    assert (O.double() - want).abs().max().item() < 2e-2


def test_gpu_fused_decode_large_scores():
    """A row of large-magnitude scores (|s| ~ 1e3): the running max keeps exp2 finite."""
    import torch
    k = attention_decode({"D": 128, "E": 128, "S": 1}, parts=4, fused=True)
    q = (torch.randn(2, 1, 128, device="cuda") * 100).bfloat16()
    kk, v = (torch.randn(2, 777, 128, device="cuda").bfloat16() for _ in range(2))
    O = k(q, kk, v)
    want = torch.softmax(q.double() @ kk.double().transpose(1, 2) / math.sqrt(128), -1) @ v.double()
    assert torch.isfinite(O).all() and (O.double() - want).abs().max().item() < 3e-2
