"""tcomp.kernels.attention_decode on the GPU against float64 attention
(torch): T not a multiple of the parts, empty parts, GQA, D 64 and 128."""
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
