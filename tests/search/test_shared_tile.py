"""The shared_tile rule (tcomp/search/rules.py, template tcomp/schedule/tiling.py):
multi-level tiling with shared-memory caches for reductions that are not the
exact `matmul` kind. It applies to a batched product with B transposed, a GEMM
with A transposed, a 3-operand contraction and a convolution; every sampled
candidate validates and computes what tcomp.evaluate computes on the sim at
small awkward sizes; the bench GEMM keeps simt_tile; on a GPU a short tune of
bmm_bt picks a shared-memory candidate that computes the right answer."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang.symbolic import eval_int
from tcomp.search import RULES, Space, validate
from tests.bench.common import S

BMM_BT = ("def bmm_bt(float(B, M, K) X, float(B, N, K) Y) -> (O) "
          "{ O(b, m, n) +=! X(b, m, k) * Y(b, n, k) }")
GEMM_AT = "def gemm_at(float(K, M) A, float(K, N) B) -> (C) { C(m, n) +=! A(k, m) * B(k, n) }"
CHAIN3 = ("def chain3(float(M, K) A, float(K, L) B, float(L, N) C) -> (O) "
          "{ O(m, n) +=! A(m, k) * B(k, l) * C(l, n) }")
CONV = ("def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) "
        "{ O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw) }")

# (name, text, the reduction stage, awkward sizes, rk values to try explicitly)
OPS = [
    ("bmm_bt", BMM_BT, "O", {"B": 3, "M": 13, "N": 10, "K": 7}, [[]]),
    ("gemm_at", GEMM_AT, "C", {"M": 11, "N": 9, "K": 6}, [[]]),
    ("chain3", CHAIN3, "O", {"M": 7, "N": 10, "K": 5, "L": 6}, [[2], [None]]),
    ("conv", CONV, "O", {"N": 2, "C": 3, "H": 9, "W": 11, "F": 4, "KH": 3, "KW": 2},
     [[None, None], [1, 1]]),
]
# explicit points covering every switch (pipeline 0, 2 and the ring of 3,
# fragments on and off, a warp lane grid, padding, scalar copies)
POINTS = [
    dict(bm=8, bn=8, bk=4, tm=2, tn=4, fragments=True, pipeline=2, vector=True, lanes=None,
         pad=True),
    dict(bm=32, bn=16, bk=8, tm=4, tn=2, fragments=False, pipeline=3, vector=True, lanes=[4, 8],
         pad=False),
    dict(bm=16, bn=8, bk=2, tm=1, tn=1, fragments=True, pipeline=0, vector=False, lanes=None,
         pad=True),
]
# the SIMT GEMM's best hand parameters (tests/search/test_space.py GEMM_BEST) on bmm_bt
BMM_HAND = dict(bm=128, bn=128, bk=8, rk=[], tm=8, tn=8, fragments=True, pipeline=2, vector=True,
                lanes=[4, 8], pad=True)
BMM_SIZES = {"B": 64, "M": 512, "N": 512, "K": 256}


def inputs(op, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([eval_int(d, sizes) for d in t.shape]).astype(np.float32)
            for t in op.inputs]


def check_on_sim(op, cand, sizes, arrays, want):
    got = tcomp.build(cand.replay(op), target="sim", sizes=sizes)(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,text,stage,sizes,rks", OPS, ids=[o[0] for o in OPS])
def test_applies_and_every_candidate_computes_the_right_answer(name, text, stage, sizes, rks):
    op = tcomp.op(text)
    space = Space(op, sizes, target="sim")
    rule = RULES["shared_tile"]
    assert space.graph.nodes[stage]["kind"] == "reduction"
    assert rule.applies(space.ctx, stage)
    arrays = inputs(op, sizes)
    want = tcomp.evaluate(op, *arrays)
    rng = np.random.default_rng(4)
    plans = [rule.sample(space.ctx, stage, rng) for _ in range(5)]
    plans += [{**p, "rk": rk} for p in POINTS for rk in rks]
    for p in plans:
        assert rule.feasible(space.ctx, stage, p), p
        cand = space.build({"inline": [], "stages": {stage: {"rule": "shared_tile", **p}}})
        v = space.validate(cand)
        assert v.ok, (p, v)
        assert v.resources[0].shared_bytes > 0
        assert '"scope": "shared"' in cand.schedule
        check_on_sim(op, cand, sizes, arrays, want)


def test_the_space_draws_shared_tile_plans_for_bmm_bt():
    op = tcomp.op(BMM_BT)
    space = Space(op, BMM_SIZES)
    rng = np.random.default_rng(0)
    rules = [space.sample_plan(rng)["stages"]["O"]["rule"] for _ in range(60)]
    assert rules.count("shared_tile") >= 10
    assert "simt_tile" not in rules and "tc_tile" not in rules


def test_the_gemm_keeps_simt_tile_and_its_hand_schedule():
    """The exact matmul kind is simt_tile's (its hand schedules stay points of
    the space: test_space.py); shared_tile leaves it alone."""
    op = tcomp.op(S.GEMM)
    space = Space(op, {"M": 4096, "N": 4096, "K": 4096})
    assert not RULES["shared_tile"].applies(space.ctx, "C")
    assert RULES["simt_tile"].applies(space.ctx, "C")
    rng = np.random.default_rng(1)
    assert all(space.sample_plan(rng)["stages"]["C"]["rule"] != "shared_tile" for _ in range(30))


@pytest.mark.parametrize("text,stage,sizes", [
    ("def rowsum(float(N, D) X) -> (S) { S(n) +=! X(n, d) }", "S", {"N": 8, "D": 8}),
    ("def emb(float(V, D) E, int32(B, L) I) -> (O) { O(b, d) +=! E(I(b, l), d) }", "O",
     {"V": 8, "D": 8, "B": 4, "L": 3}),
    ("def sq(float(N, K) A) -> (O) { O(i, j) +=! A(i, k) * A(j, k) }", "O", {"N": 8, "K": 4}),
    ("def ew(float(M, N) A) -> (O) { O(m, n) = A(m, n) + 1 }", "O", {"M": 8, "N": 8}),
], ids=["one spatial axis", "gather", "one tensor at two subscripts", "no reduction"])
def test_does_not_apply(text, stage, sizes):
    space = Space(tcomp.op(text), sizes, target="sim")
    assert not RULES["shared_tile"].applies(space.ctx, stage)


def test_does_not_apply_to_a_stage_reading_an_inlined_temporary():
    op = tcomp.op("""def f(float(B, M, K) X, float(B, N, K) Y) -> (O) {
      R(b, m, k) = fmax(X(b, m, k), 0.0)
      O(b, m, n) +=! R(b, m, k) * Y(b, n, k)
    }""")
    space = Space(op, {"B": 2, "M": 8, "N": 8, "K": 8}, target="sim")
    assert "R" in space.ctx.inlined
    assert not RULES["shared_tile"].applies(space.ctx, "O")


def test_bmm_bt_hand_point_resources_and_sampling():
    """The SIMT GEMM's best parameters as a shared_tile plan on bmm_bt: feasible,
    every value one the sampler draws, and its resources as computed."""
    op = tcomp.op(BMM_BT)
    space = Space(op, BMM_SIZES)
    rule = RULES["shared_tile"]
    assert rule.feasible(space.ctx, "O", BMM_HAND)
    cand = space.build({"inline": [], "stages": {"O": {"rule": "shared_tile", **BMM_HAND}}})
    v = validate(op, cand.schedule, BMM_SIZES)
    assert v.ok, v
    (r,) = v.resources
    assert r.grid == (4, 4, 64) and r.block == (256, 1, 1)
    # X and Y tiles, each 8 (k) x 128 (+4 padding) floats, double-buffered
    assert r.shared_bytes == 2 * 2 * 8 * 132 * 4
    rng = np.random.default_rng(0)
    drawn = [rule.sample(space.ctx, "O", rng) for _ in range(400)]
    for k, want in BMM_HAND.items():
        assert want in [list(d[k]) if isinstance(d[k], tuple) else d[k] for d in drawn], k


def test_infeasible_plans_are_refused_before_lowering():
    op = tcomp.op(BMM_BT)
    space = Space(op, BMM_SIZES)
    f = RULES["shared_tile"].feasible
    assert not f(space.ctx, "O", {**BMM_HAND, "tm": 3})  # bm not a multiple of tm
    assert not f(space.ctx, "O", {**BMM_HAND, "tm": 1, "tn": 1})  # 16384 threads
    assert not f(space.ctx, "O", {**BMM_HAND, "rk": [4]})  # bmm_bt has one reduce axis
    assert not f(space.ctx, "O", {**BMM_HAND, "bk": 256, "pipeline": 4})  # 1 MiB of shared
    assert not f(space.ctx, "O", {**BMM_HAND, "bm": 32, "tm": 8, "bn": 64, "tn": 8})  # lanes
    conv = Space(tcomp.op(CONV), {"N": 1, "C": 512, "H": 64, "W": 64, "F": 8, "KH": 3,
                                   "KW": 3})
    # 32 channels x (16 + 2) x (32 + 2) input windows: 78 KiB
    p = {**BMM_HAND, "bm": 16, "bn": 32, "tm": 2, "tn": 4, "bk": 32, "rk": [None, None],
         "pipeline": 0}
    assert f(conv.ctx, "O", p)
    assert not f(conv.ctx, "O", {**p, "pipeline": 2})  # the prefetch: 310 values per thread
    assert not f(conv.ctx, "O", {**p, "bk": 128})  # 313 KiB


# ------------------------------------------------------------------ on a GPU
@pytest.mark.cuda
def test_gpu_short_tune_of_bmm_bt_picks_shared_tiles(tmp_path):
    from tcomp.search import LocalRunner
    op = tcomp.op(BMM_BT)
    sizes = {"B": 32, "M": 256, "N": 256, "K": 256}
    with LocalRunner(devices=[0]) as runner:
        res = tcomp.tune(op, sizes, trials=32, records=str(tmp_path / "bmm.jsonl"),
                         target="cuda", runner=runner, batch=8, patience=None)
    assert res.timed and res.best.ok
    top = [(t.sketch, t.time_ms) for t in res.top(5)]
    assert "shared_tile" in res.best.sketch, top
    v = validate(op, res.schedule.to_json(), sizes)
    assert v.ok and v.resources[0].shared_bytes > 0, top
    k = tcomp.build(res.schedule, target="cuda", sizes=sizes)
    X, Y = inputs(op, sizes, seed=1)
    want = np.matmul(X.astype(np.float64), Y.astype(np.float64).transpose(0, 2, 1))
    np.testing.assert_allclose(k(X, Y), want, rtol=1e-3, atol=1e-3)
