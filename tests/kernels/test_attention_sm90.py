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


@pytest.mark.parametrize("causal, Z", [(False, 4), (True, 4), (True, 3)])
def test_persistent_blocks_walk_several_tiles(causal, Z):
    """The sim's grid of 3 multiprocessors over Z x 3 tiles: each block walks
    several tiles of different lengths (causal: in pairs of long and short
    ones, the last pair of 9 tiles a single one) through one K/V ring and one
    Q slot; the same values as one block per tile."""
    Q, K, V = data(Z, 300, 290, 64, 64, seed=2)
    got = {}
    for persistent in (True, False):
        cfg = AttentionConfig(causal=causal, persistent=persistent, stages=3)
        got[persistent] = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V)
    assert np.array_equal(got[True], got[False])
    assert np.abs(got[True].astype(np.float64) - reference(Q, K, V, causal)).max() < ATOL
    k = attention_program(AttentionConfig(persistent=False), {"D": 64, "E": 64}).kernels[0]
    assert k.plan.endswith("one block per tile, TMA-store epilogue (bfloat16)")


def test_log_sum_exp_output():
    """L = m scale + log(l) per row, causal, T shorter than S: against float64
    (the kernel's softmax state is float32) and tcomp.evaluate (whose
    intermediates are bfloat16, as the comprehension types them: a few
    bfloat16 ulps of values ~5)."""
    Q, K, V = data(2, 200, 150, 64, 64, seed=3)
    cfg = AttentionConfig(causal=True, lse=True)
    O, L = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V)
    q, k = Q.astype(np.float64), K.astype(np.float64)
    s = q @ k.transpose(0, 2, 1) / 8.0
    s = np.where(np.arange(150)[None, None, :] > np.arange(200)[None, :, None], -np.inf, s)
    m = s.max(-1)
    want = m + np.log(np.exp(s - m[..., None]).sum(-1))
    assert L.shape == (2, 200) and L.dtype == np.float32
    assert np.abs(L - want).max() < 1e-3
    wantO, wantL = tcomp.evaluate(tcomp.op(source(causal=True, d=64, lse=True)), Q, K, V)
    assert np.abs(L - wantL).max() < 3e-2
    assert np.abs(O.astype(np.float64) - wantO.astype(np.float64)).max() < ATOL
    assert "log-sum-exp to L" in attention_program(cfg, {"D": 64, "E": 64}).kernels[0].plan


def test_rows_without_keys_are_zero_with_log_sum_exp_minus_inf():
    """T = 0: evaluate's max over nothing is -inf and its sums are 0, so O is
    0 and L is -inf; the kernel gives the same, not 0 / 0 (causally every row
    has key 0, so T = 0 is the way to have rows without keys)."""
    Q, K, V = data(1, 64, 100, 64, 64, seed=4)
    cfg = AttentionConfig(lse=True, causal=True)
    O, L = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K[:, :0], V[:, :0])
    wantO, wantL = tcomp.evaluate(tcomp.op(source(causal=True, d=64, lse=True)), Q, K[:, :0],
                                  V[:, :0])
    assert np.isneginf(wantL).all() and (wantO.astype(np.float32) == 0).all()
    assert np.isneginf(L).all() and (O.astype(np.float32) == 0).all()
    assert O.shape == (1, 64, 64) and L.shape == (1, 64)


def test_176_keys_per_step():
    """bn = 176 (11 k16 steps of P . V, T not a multiple: the last block masked)."""
    Q, K, V = data(1, 130, 400, 64, 64, seed=5)
    cfg = AttentionConfig(bn=176)
    got = attention_sm90(cfg, {"D": 64, "E": 64}, target="sim")(Q, K, V).astype(np.float64)
    assert np.abs(got - reference(Q, K, V)).max() < ATOL


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
    assert k.plan.startswith("hopper_attention: 128 queries x 176 keys per step, D=128, E=128")
    assert "causal (blocks past the diagonal skipped)" in k.plan
    assert "one block per tile" in k.plan
    text = str(prog)
    assert "# plan: hopper_attention" in text
    for fn in ("wgmma_m64n176k16_bf16", "wgmma_rs_m64n128k16_bf16", "quad_max", "quad_sum",
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
    (AttentionConfig(bn=32), {"D": 64, "E": 64}, "bn = 32; 64, 128, 176 keys per step"),
    (AttentionConfig(stages=0), {"D": 64, "E": 64}, "stages must be at least 1"),
    (AttentionConfig(dtype="float32"), {"D": 64, "E": 64}, "bfloat16 or float16"),
    (AttentionConfig(bm=256), {"D": 64, "E": 64}, "128 or 192 queries per block"),
    (AttentionConfig(kv_group=0), {"D": 64, "E": 64}, "kv_group must be at least 1"),
    (AttentionConfig(bm=192, pingpong=True), {"D": 64, "E": 64}, "two consumer warpgroups"),
    (AttentionConfig(bm=192, consumer_regs=200), {"D": 64, "E": 64}, "lower consumer_regs"),
    (AttentionConfig(stages=3), {"D": 128, "E": 128},
     r"bm=128, bn=176, 3 stages at D=128, E=128 need 320624 bytes of shared memory; a block "
     r"may have 232448 \(fewer stages or a smaller bn\)"),
])
def test_errors(cfg, sizes, msg):
    with pytest.raises(tcomp.LoweringError, match=msg):
        attention_program(cfg, sizes)


@pytest.mark.parametrize("cfg, D, want", [
    (AttentionConfig(), 128, (128, 176, True)),
    (AttentionConfig(causal=True), 128, (128, 176, False)),
    (AttentionConfig(), 64, (192, 128, False)),
    (AttentionConfig(pingpong=True), 64, (128, 128, True)),
    (AttentionConfig(bm=128, bn=64, persistent=False), 64, (128, 64, False)),
])
def test_defaults_resolved_per_head_size(cfg, D, want):
    r = cfg.resolved(D, D)
    assert (r.bm, r.bn, r.persistent) == want
    plan = attention_program(cfg, {"D": D, "E": D}).kernels[0].plan
    assert plan.startswith(f"hopper_attention: {want[0]} queries x {want[1]} keys per step")
    assert ("persistent over the SMs" if want[2] else "one block per tile") in plan


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
    # one block per multiprocessor (persistent), or per 128 queries of each matrix
    assert k.meta["kernels"][0]["grid"] == ["tc_sm_count", 1, 1]
    k1 = attention_sm90(AttentionConfig(persistent=False), {"D": 128, "E": 128})
    assert k1.meta["kernels"][0]["grid"] == [["*", ["/", ["+", "S", 127], 128], "Z"], 1, 1]
