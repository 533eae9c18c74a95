"""tcomp.kernels.attention_sm90 on the GPU against float64 attention (torch),
at awkward sizes, causal, fp16, D != E, ping-pong consumers."""
from __future__ import annotations

import math

import pytest

from tcomp.kernels.attention_sm90 import AttentionConfig, attention_sm90

pytestmark = pytest.mark.cuda


def _ref(q, k, v, causal):
    import torch
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(q.shape[1], device=q.device)[:, None]
        j = torch.arange(k.shape[1], device=q.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    return torch.softmax(s, -1) @ v.double()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("Z, S, T, D, E, causal, pingpong, bm", [
    (3, 200, 333, 128, 128, False, False, 128),
    (2, 300, 300, 64, 64, True, False, 128),
    (1, 1, 70, 128, 128, False, True, 128),
    (2, 1000, 1000, 128, 128, True, True, 128),
    (1, 256, 384, 128, 64, False, False, 128),
    (2, 500, 500, 64, 64, True, False, 192),
])
def test_gpu_attention_matches_float64(dtype, Z, S, T, D, E, causal, pingpong, bm):
    import torch
    cfg = AttentionConfig(causal=causal, dtype=dtype, pingpong=pingpong, bm=bm)
    k = attention_sm90(cfg, {"D": D, "E": E})
    dt = getattr(torch, dtype)
    q = torch.randn(Z, S, D, device="cuda").to(dt)
    kk = torch.randn(Z, T, D, device="cuda").to(dt)
    v = torch.randn(Z, T, E, device="cuda").to(dt)
    O = k(q, kk, v)
    assert O.shape == (Z, S, E) and O.dtype == dt
    assert (O.double() - _ref(q, kk, v, causal)).abs().max().item() < 2e-2


def test_gpu_grouped_query_attention():
    import torch
    k = attention_sm90(AttentionConfig(kv_group=4), {"D": 128, "E": 128})
    q = torch.randn(8, 300, 128, device="cuda").bfloat16()
    kk, v = (torch.randn(2, 257, 128, device="cuda").bfloat16() for _ in range(2))
    O = k(q, kk, v)
    want = _ref(q, kk.repeat_interleave(4, 0), v.repeat_interleave(4, 0), False)
    assert (O.double() - want).abs().max().item() < 2e-2


@pytest.mark.parametrize("causal", [False, True])
def test_gpu_log_sum_exp_176_keys_and_one_block_per_tile(causal):
    """The log-sum-exp output (default bn = 176), bn = 128, and the grid of one
    block per tile against float64 (the persistent grid's O equal to one block
    per tile's)."""
    import torch
    q = torch.randn(3, 700, 128, device="cuda").bfloat16()
    kk, v = (torch.randn(3, 650, 128, device="cuda").bfloat16() for _ in range(2))
    s = q.double() @ kk.double().transpose(-1, -2) / math.sqrt(128)
    if causal:
        s = s.masked_fill(torch.arange(650, device="cuda")[None, :] >
                          torch.arange(700, device="cuda")[:, None], float("-inf"))
    want_lse = torch.logsumexp(s, -1)
    want = _ref(q, kk, v, causal)
    O, L = attention_sm90(AttentionConfig(causal=causal, lse=True), {"D": 128, "E": 128})(q, kk, v)
    assert L.dtype == torch.float32 and L.shape == (3, 700)
    assert (L.double() - want_lse).abs().max().item() < 1e-3
    assert (O.double() - want).abs().max().item() < 2e-2
    O128 = attention_sm90(AttentionConfig(causal=causal, bn=128), {"D": 128, "E": 128})(q, kk, v)
    assert (O128.double() - want).abs().max().item() < 2e-2
    O1 = attention_sm90(AttentionConfig(causal=causal, persistent=False),
                        {"D": 128, "E": 128})(q, kk, v)
    O2 = attention_sm90(AttentionConfig(causal=causal, persistent=True),
                        {"D": 128, "E": 128})(q, kk, v)
    assert torch.equal(O1, O2)
