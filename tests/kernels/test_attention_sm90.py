"""tcomp.kernels.attention_sm90 (lower/hopper_attention.py) on the sim: against
tcomp.evaluate of its comprehension and a float64 reference at awkward sizes
(S and T not multiples of the tiles, T shorter than a key block, one query),
causal, fp16, D != E, large scores, ping-pong consumers; the sim's checks of
the overlap (a P rewritten while the P . V that reads it is in flight); the
plan in the dump; the errors of bad configurations."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tcomp
from tcomp.kernels.attention_sm90 import (AttentionConfig, attention_program, attention_sm90,
                                          source)
from tcomp.lower import hopper_attention as H, ir

from .attention_ops import data, reference

ATOL = 2e-2  # bfloat16 outputs of values of magnitude ~1: a few ulps


@pytest.mark.parametrize("Z, S, T, D, E, causal, dtype", [
    (1, 128, 128, 64, 64, False, "bfloat16"),
    (2, 200, 333, 64, 64, False, "bfloat16"),
    (1, 1, 70, 64, 64, False, "bfloat16"),
    (1, 300, 300, 64, 64, True, "bfloat16"),
    (1, 130, 130, 128, 64, True, "float16"),
    (1, 64, 260, 64, 128, False, "float16"),
])
def test_sim_matches_evaluate_and_float64(Z, S, T, D, E, causal, dtype):
    cfg = AttentionConfig(causal=causal, dtype=dtype)
    Q, K, V = data(Z, S, T, D, E, dtype)
    got = attention_sm90(cfg, {"D": D, "E": E}, target="sim")(Q, K, V).astype(np.float64)
    want = tcomp.evaluate(tcomp.op(source(dtype, None, causal, D)), Q, K, V).astype(np.float64)
    assert got.shape == (Z, S, E)
    assert np.abs(got - want).max() < ATOL
    assert np.abs(got - reference(Q, K, V, causal)).max() < ATOL


def test_three_consumer_warpgroups():
    Q, K, V = data(1, 250, 200, 64, 64)
    for causal in (False, True):
        cfg = AttentionConfig(bm=192, causal=causal)
        got = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V).astype(np.float64)
        assert np.abs(got - reference(Q, K, V, causal)).max() < ATOL


def test_grouped_query_attention():
    """Four query matrices per K/V matrix (matrix z reads K and V's z / 4)."""
    Q, _, _ = data(8, 130, 1, 64, 64)
    _, K, V = data(2, 1, 200, 64, 64, seed=1)
    cfg = AttentionConfig(kv_group=4, causal=True)
    got = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V).astype(np.float64)
    want = tcomp.evaluate(tcomp.op(source(causal=True, d=64, kv_group=4)), Q, K, V)
    assert np.abs(got - want.astype(np.float64)).max() < ATOL
    rep = lambda x: np.repeat(x, 4, axis=0)  # noqa: E731
    assert np.abs(got - reference(Q, rep(K), rep(V), True)).max() < ATOL


def test_large_scores_and_ping_pong_consumers():
    Q, K, V = data(1, 192, 400, 64, 64, scale=8.0)  # scores of magnitude ~500
    cfg = AttentionConfig(pingpong=True, stages=3)
    got = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V).astype(np.float64)
    assert np.isfinite(got).all()
    assert np.abs(got - reference(Q, K, V)).max() < 0.1  # |V| ~ 8: a few bfloat16 ulps


def test_the_plan_is_in_the_dump():
    prog = attention_program(AttentionConfig(causal=True), {"D": 128, "E": 128})
    (k,) = prog.kernels
    assert k.plan.startswith("hopper_attention: 128 queries x 128 keys per step, D=128, E=128")
    assert "causal (blocks past the diagonal skipped)" in k.plan
    text = str(prog)
    assert "# plan: hopper_attention" in text
    for fn in ("wgmma_m64n128k16_bf16", "wgmma_rs_m64n128k16_bf16", "quad_max", "quad_sum",
               "exp2_approx"):
        assert fn in text, fn


def test_sim_reports_p_rewritten_while_its_product_is_in_flight(monkeypatch):
    """The overlap's hazard: the P registers that a wgmma_rs in flight reads,
    written before its wait. The sim must refuse it."""
    orig_pv = H._pv

    def pv(p, sfx, slot):  # the P . V issued, then P rewritten at once
        return ir.seq(orig_pv(p, sfx, slot), H._pack(p))
    monkeypatch.setattr(H, "_pv", pv)
    Q, K, V = data(1, 128, 256, 64, 64)
    with pytest.raises(tcomp.SimError, match="wgmma"):
        attention_sm90(AttentionConfig(), {"D": 64, "E": 64}, target="sim")(Q, K, V)


@pytest.mark.parametrize("cfg, sizes, msg", [
    (AttentionConfig(), {"D": 96, "E": 64}, "D must be given in sizes as 64 or 128"),
    (AttentionConfig(), {"D": 64}, "E must be given in sizes as 64 or 128"),
    (AttentionConfig(bn=32), {"D": 64, "E": 64}, "bn = 32; 64 or 128 keys per step"),
    (AttentionConfig(stages=0), {"D": 64, "E": 64}, "stages must be at least 1"),
    (AttentionConfig(dtype="float32"), {"D": 64, "E": 64}, "bfloat16 or float16"),
    (AttentionConfig(bm=256), {"D": 64, "E": 64}, "128 or 192 queries per block"),
    (AttentionConfig(kv_group=0), {"D": 64, "E": 64}, "kv_group must be at least 1"),
    (AttentionConfig(bm=192, pingpong=True), {"D": 64, "E": 64}, "two consumer warpgroups"),
    (AttentionConfig(bm=192, consumer_regs=200), {"D": 64, "E": 64}, "lower consumer_regs"),
])
def test_errors(cfg, sizes, msg):
    with pytest.raises(tcomp.LoweringError, match=msg):
        attention_program(cfg, sizes)


def test_the_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        AttentionConfig().causal = True


def test_cuda_prints_the_ptx_of_the_new_intrinsics():
    """wgmma with A in registers, the quad shuffles, ex2.approx and bar.arrive,
    as the CUDA target prints them (NVRTC compiles it; no GPU needed)."""
    k = attention_sm90(AttentionConfig(pingpong=True), {"D": 128, "E": 128})
    src = k.source
    for text in [
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
        "{%64, %65, %66, %67}, %68, p, 1, 1, 1;",  # A's four registers, B's descriptor, trans-b
        "const unsigned* ar = reinterpret_cast<const unsigned*>(a);",
        "tc_wgmma_rs_m64n128k16_bf16_t1((&O_acc[0]), (&P[0]), ",
        "mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 1));",
        "mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], 2));",
        "l_run[1] = l_run[1] + __shfl_xor_sync(0xffffffffu, l_run[1], 2);",
        'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));',
        'asm volatile("bar.arrive %0, %1;"',
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
    ]:
        assert text in src, text
    # one block per 128 queries of each matrix
    assert k.meta["kernels"][0]["grid"] == [["/", ["+", "S", 127], 128], "Z", 1]
