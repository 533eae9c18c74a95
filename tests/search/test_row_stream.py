"""The `row_stream` rule (templates.row_streamed): each row statistic a pass
over the row through per-piece register caches, the piece loops unrolled by a
factor (`unroll(ax, factor=...)`). It applies where every statistic reads the
row itself (layernorm, RMSNorm), not where a row-shaped temporary feeds two
passes (softmax's e) or a sibling output rides along (add + layernorm); the
hand schedules of bench/row_schedules.py (`layernorm_streamed`,
`rmsnorm_streamed`) are points of it; its candidates compute the right result
at awkward row lengths."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.search import RULES, Space
from tests.bench.common import BENCH, _load
from tests.lower.util import inputs_for, run_sim

R = _load("bench_row_schedules", BENCH / "row_schedules.py")
RS = RULES["row_stream"]


def _plan(space, stage, **p):
    return {"inline": sorted(space.ctx.inlined, key=space.order.index),
            "stages": {stage: {"rule": "row_stream", **p}}}


@pytest.mark.parametrize("src,stage,applies", [
    (R.layernorm_src("bfloat16"), "Y", True),
    (R.layernorm_src("float32"), "Y", True),
    (R.rmsnorm_src("bfloat16"), "Y", True),
    (R.softmax_src("bfloat16", exp2=True), "O", False),  # e feeds the sum and the output
    (R.add_layernorm_src("bfloat16"), "Y", False),  # the sum S is a second output
])
def test_where_the_rule_applies(src, stage, applies):
    space = Space(tcomp.op(src), {"N": 4096, "D": 32768})
    assert RS.applies(space.ctx, stage) is applies


def test_claims_and_keeps():
    space = Space(tcomp.op(R.layernorm_src("bfloat16")), {"N": 4096, "D": 32768})
    assert RS.claims(space.ctx, "Y") == ["sx", "sq"]
    assert RS.keeps(space.ctx, "Y", {}) == {"mu", "rstd"}


@pytest.mark.parametrize("make,dt,threads,unroll", [
    (R.layernorm_streamed, "bfloat16", 512, 4), (R.layernorm_streamed, "float32", 1024, 2),
    (R.rmsnorm_streamed, "bfloat16", 512, 1)])
def test_hand_streamed_kernels_are_points_of_the_space(make, dt, threads, unroll):
    sizes = {"N": 4096, "D": 32768}
    op, hand = make(sizes["D"], dt, threads, unroll)
    space = Space(op, sizes)
    params = {"threads": threads, "vec": R.vec_of(dt), "unroll": unroll}
    assert RS.feasible(space.ctx, "Y", params)
    cand = space.build(_plan(space, "Y", **params))
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    assert space.validate(cand).ok, space.errors[-1:]
    rng = np.random.default_rng(0)
    drawn = [RS.sample(space.ctx, "Y", rng) for _ in range(200)]
    for k, v in params.items():
        assert v in [d[k] for d in drawn], f"{k}={v!r} never drawn"


@pytest.mark.parametrize("src,D", [(R.layernorm_src("float32"), 1000),
                                   (R.layernorm_src("bfloat16"), 1024),
                                   (R.rmsnorm_src("float32"), 257)])
def test_candidates_compute_the_right_result(src, D):
    op = tcomp.op(src)
    sizes = {"N": 3, "D": D}
    space = Space(op, sizes)
    rng = np.random.default_rng(1)
    for _ in range(3):
        p = RS.sample(space.ctx, "Y", rng)
        p["threads"] = min(p["threads"], 64)  # a small block: quick on the sim
        cand = space.build(_plan(space, "Y", **p))
        s = cand.replay(op)
        text = str(tcomp.lower(s, sizes=sizes))
        assert "X_local" in text and (p["unroll"] == 1 or f"@unroll_by({p['unroll']})" in text)
        run_sim(s, inputs_for(op, sizes), sizes)


LN_F64 = """def ln(double(N, D) X, double(D) g) -> (double(N, D) Y) {
  sx(n) +=! X(n, d)
  mu(n) = sx(n) / D
  sq(n) +=! (X(n, d) - mu(n)) * (X(n, d) - mu(n))
  rstd(n) = rsqrt(sq(n) / D + 1e-5)
  Y(n, d) = (X(n, d) - mu(n)) * rstd(n) * g(d)
}"""
LN_3D = """def ln3(float(B, T, D) X) -> (Y) {
  sx(b, t) +=! X(b, t, d)
  mu(b, t) = sx(b, t) / D
  sq(b, t) +=! (X(b, t, d) - mu(b, t)) * (X(b, t, d) - mu(b, t))
  Y(b, t, d) = (X(b, t, d) - mu(b, t)) * rsqrt(sq(b, t) / D + 1e-5)
}"""


@pytest.mark.parametrize("src,sizes,vec", [
    (LN_F64, {"N": 3, "D": 37}, 2),  # 8-byte elements: 2 a piece; 37 is odd
    (LN_3D, {"B": 2, "T": 3, "D": 37}, 4),  # the leading axes fused into the row loop
    (R.rmsnorm_src("bfloat16"), {"N": 2, "D": 250}, 8)])  # not a multiple of 8 x 32
def test_float64_rows_3d_rows_and_ragged_rows(src, sizes, vec):
    op = tcomp.op(src)
    space = Space(op, sizes, target="sim")
    assert RS.applies(space.ctx, "Y")
    rng = np.random.default_rng(2)
    for _ in range(3):
        p = RS.sample(space.ctx, "Y", rng)
        assert p["vec"] == vec and RS.feasible(space.ctx, "Y", p)
        p["threads"] = min(p["threads"], 64)
        cand = space.build(_plan(space, "Y", **p))
        assert space.validate(cand).ok, space.errors[-1:]
        s = cand.replay(op)
        (k,) = tcomp.lower(s, sizes=sizes).kernels
        rows = sizes["N"] if "N" in sizes else sizes["B"] * sizes["T"]
        assert k.grid[0] == ir.const(rows) and k.const_block()[0] == p["threads"]
        run_sim(s, inputs_for(op, sizes), sizes)


@pytest.mark.parametrize("src", [
    # a statistic that is an output of the op (the passes keep statistics in registers)
    "def f(float(N, D) X) -> (Y, sx) { sx(n) +=! X(n, d)\n Y(n, d) = X(n, d) - sx(n) / D }",
    # a statistic that reads no row input
    "def f(float(N, D) X, float(D) g) -> (Y) { s(n) +=! g(d) where n in 0:N\n"
    " Y(n, d) = X(n, d) * s(n) }"])
def test_it_does_not_apply_without_a_streamable_statistic(src):
    space = Space(tcomp.op(src), {"N": 3, "D": 40})
    assert not RS.applies(space.ctx, "Y")
