"""The search analyses a candidate from its IR before unrolling (validate.py,
features.py, Space.analyse): the same verdicts as lowering through every pass,
the same features as the whole pipeline's IR (unrolled extents and integer
operations excepted, by design), one analysis per schedule."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tests.bench.common import S
from tcomp.lang.dtypes import float32 as F32
from tcomp.lower import unroll
from tcomp.lower.pipeline import lower
from tcomp.search import Space, validate
from tcomp.search import features as F

# what differs before unrolling by design: the unrolled extents are still loops (a feature
# of their own), and index arithmetic is counted as written (docs/tune.md, "Features")
DIFFERENT = {"int_ops", "unroll"}

CASES = [
    ("gemm", S.GEMM, {"M": 256, "N": 256, "K": 128}),
    ("tc_gemm", S.TC_GEMM, {"M": 256, "N": 256, "K": 128}),
    ("softmax", S.SOFTMAX, {"N": 64, "D": 1024}),
    ("conv2d", S.TC_CONV2D, {"N": 2, "H": 8, "W": 8, "C": 32, "R": 9 * 32, "K": 64}),
]


@pytest.mark.parametrize("name,src,sizes", CASES, ids=[c[0] for c in CASES])
def test_features_before_unrolling_are_those_of_the_whole_pipeline(name, src, sizes):
    space = Space(tcomp.op(src), sizes)
    rng = np.random.default_rng(3)
    compared = 0
    for _ in range(12):
        plan = space.sample_plan(rng)
        try:
            cand = space.build(plan)
        except tcomp.TcompError:
            continue
        part = validate(space.op, cand.schedule, sizes)
        whole = validate(space.op, cand.schedule, sizes, full=True)
        assert part.ok == whole.ok, plan
        if not part.ok:
            assert str(part) == str(whole)
            continue
        assert part.until == "unroll" and whole.until is None
        assert part.resources == whole.resources
        a, b = F.as_dict(F.extract(part, sizes)), F.as_dict(F.extract(whole, sizes))
        for k in F.NAMES:
            if k not in DIFFERENT:
                assert a[k] == pytest.approx(b[k], rel=1e-9), (k, cand.sketch, plan)
        assert a["unroll"] >= b["unroll"]
        compared += 1
    assert compared >= 6


def test_guards_that_unrolling_decides_count_in_the_copies_where_they_hold():
    """A row of 4096 reduced by 1024 threads in 8 unrolled steps: the last 4
    copies are dead (`d_o_i < 4`) and simplification after unrolling drops
    them; the features, read before, count 4 copies, not 8."""
    op = tcomp.op(S.SOFTMAX)
    sizes = {"N": 64, "D": 4096}
    space = Space(op, sizes)
    plan = {"inline": [], "stages": {
        "O": {"rule": "flat", "threads": 1024, "unroll": 1, "vec": 2},
        "mx": {"rows": 2, "rule": "cross_thread", "threads": 128, "unroll": 1},
        "sm": {"rows": 1, "rule": "cross_thread", "threads": 1024, "unroll": 8}}}
    cand = space.build(plan)
    part = validate(op, cand.schedule, sizes)
    assert "d_o_i < 4" in str(part.program)  # the guard, still there before unrolling
    whole = validate(op, cand.schedule, sizes, full=True)
    a, b = F.as_dict(F.extract(part, sizes)), F.as_dict(F.extract(whole, sizes))
    for k in ("flops", "special", "global_load_bytes", "stores"):
        assert a[k] == b[k], k


def test_the_unroll_checks_raise_what_the_pass_raises():
    op = tcomp.op(S.GEMM)
    sizes = {"M": 64, "N": 256, "K": 16}
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    C.unroll(n)  # 256 copies: more than the unroll pass makes
    part, whole = validate(op, s.to_json(), sizes), validate(op, s.to_json(), sizes, full=True)
    assert not part.ok and part.kind == "lowering"
    assert part.message == whole.message == "unrolled loop 'n' has 256 iterations (at most 128)"
    with pytest.raises(tcomp.LoweringError, match=r"^unrolled loop 'n' has 256 iterations"):
        unroll.check(lower(s, sizes, until="unroll").kernels[0])


def test_a_vectorized_loop_around_an_unrolled_one_is_innermost_once_expanded():
    """The unroll pass checks a vectorized loop after expanding the loops in
    it: an unrolled loop inside is no loop by then. The check before
    unrolling must see it the same way."""
    from tcomp.lower import ir
    body = ir.For("j", ir.const(0), ir.const(2), "unroll",
                  ir.Store("O", (ir.Var("i"), ir.Var("j")), ir.Imm(0.0, F32)))
    vec = ir.For("i", ir.const(0), ir.const(4), "vectorize", body)
    k = ir.Kernel("k", ("O",), (), (ir.const(1),) * 3, (ir.const(1),) * 3, vec)
    unroll.check(k)  # no error, as the pass
    expanded = unroll.run(k, None).body  # (the pass reads nothing from the program)
    assert isinstance(expanded, ir.For) and expanded.kind == "vectorize"
    assert len(expanded.body.stmts) == 2  # j expanded: two stores
    serial = ir.For("i", ir.const(0), ir.const(4), "vectorize",
                    ir.For("j", ir.const(0), ir.const(2), "serial", body.body))
    bad = ir.Kernel("k", ("O",), (), (ir.const(1),) * 3, (ir.const(1),) * 3, serial)
    with pytest.raises(tcomp.LoweringError, match="vectorized loop 'i' is not innermost: it "
                                                  "contains for"):
        unroll.check(bad)


def test_finish_completes_the_lowering():
    op, s = S.gemm({}, bm=64, bn=64, bk=8, tm=4, tn=4)
    sizes = {"M": 128, "N": 128, "K": 64}
    v = validate(op, s.to_json(), sizes)
    assert v.until == "unroll"
    assert str(v.finish()) == str(lower(s, sizes))
    whole = validate(op, s.to_json(), sizes, full=True)
    assert whole.finish() is whole.program


def test_space_analyses_each_schedule_once():
    op = tcomp.op(S.GEMM)
    sizes = {"M": 256, "N": 256, "K": 64}
    space = Space(op, sizes)
    cands = space.generate(3, np.random.default_rng(0))
    n = len(space.lower_ms)
    for c in cands:
        assert space.analyse(c) is space.lowered[c.schedule]
        assert space.features[c.schedule].shape == (len(F.NAMES),)
        assert space.validate(c) is space.lowered[c.schedule]  # the same analysis
    assert len(space.lower_ms) == n  # nothing analysed twice
    # a schedule's text analyses too (a resumed record's), and a bad one is counted
    text = json.dumps([{"kind": "Split", "stage": "C", "axis": "zz", "factor": 4,
                        "nparts": None}])
    assert not space.analyse(text).ok and space.rejected["schedule"] == 1
    assert space.errors[-1][0] is None
