"""The `row_regs` rule's candidates on the GPU: softmax and layernorm (the
bench/schedules.py ops) at the benchmark row lengths and at awkward ones,
every thread count the rule samples there (and staged weights for
layernorm), against float64 NumPy references. A few seconds on an H200."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.search import RULES, Space
from tests.bench.common import S

pytestmark = pytest.mark.cuda

RULE = RULES["row_regs"]


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_ref(x, gamma, beta):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


CASES = [("softmax", S.SOFTMAX, "O", n, d) for n, d in ((64, 32768), (256, 4096), (8, 1000),
                                                        (8, 257))]
CASES += [("layernorm", S.LAYERNORM, "Y", n, d) for n, d in ((64, 32768), (256, 4096), (8, 1000),
                                                             (8, 257))]


@pytest.mark.parametrize("name,src,stage,n,d", CASES, ids=[f"{c[0]} {c[3]}x{c[4]}" for c in CASES])
def test_row_regs_candidates_match_numpy(name, src, stage, n, d):
    sizes = {"N": n, "D": d}
    space = Space(tcomp.op(src), sizes)
    rng = np.random.default_rng(d)
    plans = {tuple(sorted(RULE.sample(space.ctx, stage, rng).items())) for _ in range(60)}
    assert plans
    x = (rng.standard_normal((n, d)) * 2 + 0.25).astype(np.float32)
    args = (x,) if name == "softmax" else (
        x, rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32))
    want = softmax_ref(*args) if name == "softmax" else layernorm_ref(*args)
    for params in sorted(plans):
        p = dict(params)
        cand = space.build({"inline": [], "stages": {stage: {"rule": "row_regs", **p}}})
        assert space.validate(cand).ok, space.errors[-1:]
        k = tcomp.build(cand.replay(space.op), target="cuda", sizes=sizes)
        got = np.asarray(k(*args), dtype=np.float64)
        assert np.isfinite(got).all(), p
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert rel < 1e-5, (p, rel)


# bench/row_schedules.py's ops: statistics behind inlined temporaries, e / h kept in
# registers with keep_rows, the fused add + layernorm's S stored at the row
from tests.bench.common import BENCH, _load  # noqa: E402
from tests.lower.util import assert_matches, inputs_for  # noqa: E402

RS = _load("bench_row_schedules", BENCH / "row_schedules.py")
ROW_OPS = [("softmax fp32", RS.softmax_src("float32"), "O"),
           ("softmax bf16 exp2", RS.softmax_src("bfloat16", exp2=True), "O"),
           ("layernorm bf16", RS.layernorm_src("bfloat16"), "Y"),
           ("rmsnorm fp32", RS.rmsnorm_src("float32"), "Y"),
           ("add_layernorm bf16", RS.add_layernorm_src("bfloat16"), "Y"),
           ("add_layernorm fp32", RS.add_layernorm_src("float32"), "Y")]
ROW_CASES = [(name, src, stage, n, d) for name, src, stage in ROW_OPS
             for n, d in ((64, 32768), (256, 4096), (8, 1000), (8, 257))]


@pytest.mark.parametrize("name,src,stage,n,d", ROW_CASES,
                         ids=[f"{c[0]} {c[3]}x{c[4]}" for c in ROW_CASES])
def test_row_schedules_ops_candidates_match_evaluate(name, src, stage, n, d):
    """Up to 16 distinct row_regs plans the sampler draws (both keep_rows
    values where there is a row temporary), as Space.sample_plan makes them
    (every inlinable temporary listed, the rule's keeps deciding), on the
    GPU against tcomp.evaluate (tests/lower/util.py tolerances)."""
    sizes = {"N": n, "D": d}
    space = Space(tcomp.op(src), sizes)
    rng = np.random.default_rng(d)
    plans = sorted({tuple(sorted(RULE.sample(space.ctx, stage, rng).items()))
                    for _ in range(80)})[:16]
    assert plans
    args = inputs_for(space.op, sizes, seed=d)
    want = tcomp.evaluate(space.op, *args)
    inline = sorted(space.ctx.inlined, key=space.order.index)
    for params in plans:
        p = dict(params)
        cand = space.build({"inline": inline, "stages": {stage: {"rule": "row_regs", **p}}})
        assert space.validate(cand).ok, space.errors[-1:]
        k = tcomp.build(cand.replay(space.op), target="cuda", sizes=sizes)
        assert_matches(space.op, k(*args), want)
