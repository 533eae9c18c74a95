"""The schedule space (tcomp/search/space.py, rules.py, validate.py): every
program of tests/lang/programs.py gets valid candidates that compute the right
answer on the sim; the best hand schedules of bench/schedules.py are points of
the space; tensor-core candidates for bf16 GEMM; mutation; the error kinds."""
from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

import tcomp
from tcomp.lang.evaluate import bind_inputs
from tcomp.search import RULES, Limits, SearchError, Space, generate, mutate, validate
from tests.bench.common import S
from tests.lower.util import assert_matches, inputs_for
from tests.lang.programs import CASES

GEMM_SIZES = {"M": 4096, "N": 4096, "K": 4096}


def op_inputs(case, op, first, rng):
    """The case's inputs for its first def; random ones of the right shapes
    (sizes shared by name with the first def) for later defs."""
    arrays = case.inputs(np.random.default_rng(0), False)
    if op is first:
        return arrays
    _, sizes = bind_inputs(first, arrays, {})
    out = []
    for t in op.inputs:
        shape = tuple(int(sizes.get(d.name, 5)) for d in t.shape)
        out.append(rng.standard_normal(shape).astype(t.dtype.numpy))
    return tuple(out)


def close(got, want, case, i):
    got, want = np.asarray(got), np.asarray(want)
    rtol, atol = case.tol(i)
    if got.dtype.itemsize < 4 and got.dtype.kind == "f" or want.dtype.itemsize < 4 and \
            want.dtype.kind == "f":
        rtol, atol = max(rtol, 2e-2), max(atol, 2e-2)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_program_gets_valid_parallel_candidates_that_compute_the_right_answer(case):
    prog = case.program()
    ops = list(prog)
    rng = np.random.default_rng(7)
    for op in ops:
        arrays = op_inputs(case, op, ops[0], rng)
        _, sizes = bind_inputs(op, arrays, {})
        space = Space(op, sizes, target="sim")
        cands = space.generate(3, rng, attempts=10)
        assert cands, f"{op.name}: no valid candidate; rejected {dict(space.rejected)}"
        # a real schedule (threads bound), not the serial default
        assert any(c.sketch != "default" for c in cands)
        assert len({c.schedule for c in cands}) == len(cands)
        want = tcomp.evaluate(op, *arrays)
        want = want if isinstance(want, tuple) else (want,)
        for cand in cands[:2]:
            s = tcomp.Schedule.from_json(op, cand.schedule)
            got = tcomp.build(s, target="sim", sizes=sizes)(*arrays)
            got = got if isinstance(got, tuple) else (got,)
            for i, (g, w) in enumerate(zip(got, want)):
                close(g, w, case, i)


# The best hand schedules of bench/schedules.py (BENCHMARKS.md) as plans of the space.
GEMM_BEST = dict(bm=128, bn=128, bk=8, tm=8, tn=8, fragments=True, pipeline=True, vector=True,
                 lanes=[4, 8], group=None, pad=True)  # frag+warp+pad+pipe: 0.90x cuBLAS
TC_BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pad=True, vector=True, pipeline=3,
               unroll_k=False, swizzle=False)  # the cp.async ring of 3, 0.50x torch.matmul
TC_SWZ = dict(TC_BEST, pad=False, swizzle=True)  # the same swizzled: 0.59x (H200, one run)
TC_PAIRS = dict(TC_SWZ, pair_stores=True)  # and paired stores: 404 TFLOP/s (the best, 0.55x)
CONV_SIZES = {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "R": 2304}


def hand_cases():
    gemm_kw = S.gemm_variant("frag+warp+pad+pipe")
    return [
        ("gemm frag+warp+pad+pipe", lambda: S.gemm({}, **gemm_kw), GEMM_SIZES, "C",
         {"rule": "simt_tile", **GEMM_BEST}),
        ("gemm shared+warp+pad+pipe+g8", lambda: S.gemm({}, **S.gemm_variant(
            "shared+warp+pad+pipe+g8")), GEMM_SIZES, "C",
         {"rule": "simt_tile", **GEMM_BEST, "fragments": False, "group": 8}),
        ("gemm frag+scalar", lambda: S.gemm({}, **S.gemm_variant("frag+scalar")), GEMM_SIZES,
         "C", {"rule": "simt_tile", **GEMM_BEST, "pipeline": False, "vector": False,
               "lanes": None, "pad": False}),
        ("tc_gemm 128x128 w64x64 k64 ring of 3", lambda: S.tc_gemm(bk=64, pipeline=3),
         GEMM_SIZES, "C", {"rule": "tc_tile", **TC_BEST}),
        ("tc_gemm 128x128 w64x64 k64 ring of 3 swizzled",
         lambda: S.tc_gemm(bk=64, pipeline=3, swizzle=True), GEMM_SIZES, "C",
         {"rule": "tc_tile", **TC_SWZ}),
        ("tc_gemm swizzled, paired stores",
         lambda: S.tc_gemm(bk=64, pipeline=3, swizzle=True, pair_stores=True), GEMM_SIZES, "C",
         {"rule": "tc_tile", **TC_PAIRS}),
        ("tc_gemm k32 ring of 4, swizzled, pairs, epilogue through shared memory",
         lambda: S.tc_gemm(bk=32, pipeline=4, swizzle=True, pair_stores=True,
                           smem_epilogue=True), GEMM_SIZES, "C",
         {"rule": "tc_tile", **TC_PAIRS, "bk": 32, "pipeline": 4, "smem_epilogue": True}),
        # conv2d: the im2col temporary kept as its own stage in shared memory (a_stage)
        ("tc_conv2d swizzled, pairs", lambda: S.tc_conv2d(bk=64, pipeline=3, swizzle=True,
                                                          pair_stores=True), CONV_SIZES, "O",
         {"rule": "tc_tile", **TC_PAIRS, "a_stage": True}),
        ("softmax 512 threads shared row vec4", lambda: S.softmax({}, threads=512, vec=4),
         {"N": 32768, "D": 4096}, "O",
         {"rule": "row", "threads": 512, "vec": 4, "shared_row": True, "local": True}),
        ("layernorm 512 threads shared row vec4", lambda: S.layernorm({}, threads=512, vec=4),
         {"N": 32768, "D": 4096}, "Y",
         {"rule": "row", "threads": 512, "vec": 4, "shared_row": True, "local": True}),
        ("rowsum 256 threads unroll 8", lambda: S.rowsum({}), {"N": 32768, "D": 4096}, "S",
         {"rule": "cross_thread", "threads": 256, "rows": 1, "unroll": 8}),
    ]


@pytest.mark.parametrize("name,make,sizes,stage,params", hand_cases(),
                         ids=[c[0] for c in hand_cases()])
def test_hand_schedules_are_points_of_the_space(name, make, sizes, stage, params):
    """The plan with the hand parameters gives the hand schedule's directives
    exactly; every parameter value is one the rule's sampler draws at these
    sizes; the resource checks accept it."""
    op, hand = make()
    space = Space(op, sizes)
    rule = RULES[params["rule"]]
    assert rule.applies(space.ctx, stage)
    args = {k: v for k, v in params.items() if k != "rule"}
    assert rule.feasible(space.ctx, stage, args)
    cand = space.build({"inline": [], "stages": {stage: params}})
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    rng = np.random.default_rng(0)
    drawn = [rule.sample(space.ctx, stage, rng) for _ in range(300)]
    for k, v in args.items():
        assert v in [d[k] if not isinstance(d[k], tuple) else list(d[k]) for d in drawn], \
            f"{name}: {k}={v!r} never drawn"


def test_hand_gemm_validates_with_its_resources():
    op, hand = S.gemm({}, **S.gemm_variant("frag+warp+pad+pipe"))
    v = validate(op, hand.to_json(), GEMM_SIZES)
    assert v.ok
    (r,) = v.resources
    assert r.grid == (32, 32, 1) and r.block == (256, 1, 1)
    # two 8 x (128 + 4) and 8 x 128 float tiles (double-buffered)
    assert r.shared_bytes == 2 * (8 * 132 + 8 * 128) * 4
    assert r.registers < 255


def test_bf16_gemm_space_has_tensor_core_candidates():
    op = tcomp.op(S.TC_GEMM)
    space = Space(op, GEMM_SIZES)
    rng = np.random.default_rng(3)
    plans = [space.sample_plan(rng) for _ in range(40)]
    assert sum(p["stages"]["C"]["rule"] == "tc_tile" for p in plans) >= 10
    tc = next(p for p in plans if p["stages"]["C"]["rule"] == "tc_tile"
              and p["stages"]["C"]["bm"] * p["stages"]["C"]["bn"] <= 128 * 128)
    cand = space.build(tc)
    assert space.validate(cand).ok, space.errors
    assert '"Tensorize"' in cand.schedule and "mma_m16n8k16" in cand.schedule
    assert cand.sketch == "C:tc_tile"
    # the fp32 GEMM never gets a tensor-core plan
    fp32 = Space(tcomp.op(S.GEMM), GEMM_SIZES)
    assert all(fp32.sample_plan(rng)["stages"]["C"]["rule"] != "tc_tile" for _ in range(40))


def test_generate_bench_gemm_every_candidate_replays_and_lowering_time():
    """A few candidates of the bench GEMM at 4096^3; each replays and lowers.
    The median time of replay + lowering + checks per candidate is printed
    (docs/search.md has the measured figure for 100 candidates)."""
    op = tcomp.op(S.GEMM)
    space = Space(op, GEMM_SIZES)
    cands = space.generate(4, np.random.default_rng(11), attempts=20)
    assert len(cands) == 4
    for c in cands:
        assert tcomp.Schedule.from_json(op, c.schedule).to_json() == c.schedule
        assert space.lowered[c.schedule].program.kernels
    ms = statistics.median(space.lower_ms)
    print(f"median validate (replay + lower + checks): {ms:.1f} ms")
    assert ms < 5000


def test_mutate_changes_one_parameter_and_stays_valid():
    op = tcomp.op(S.GEMM)
    space = Space(op, GEMM_SIZES)
    parent = space.build({"inline": [], "stages": {"C": {"rule": "simt_tile", **GEMM_BEST}}})
    rng = np.random.default_rng(5)
    child = space.mutate(parent, rng)
    assert child.schedule != parent.schedule
    assert space.validate(child).ok
    a, b = parent.plan_dict()["stages"]["C"], child.plan_dict()["stages"]["C"]
    if a["rule"] == b["rule"]:
        assert sum(a[k] != b[k] for k in a) == 1
    # the module-level form: the same first mutation from the same seed
    again = mutate(op, parent, np.random.default_rng(5), GEMM_SIZES)
    assert again == child


def test_mutate_the_default_schedule_returns_it():
    op = tcomp.op(S.ROWSUM)
    space = Space(op, {"N": 8, "D": 64})
    d = space.default()
    assert space.mutate(d, np.random.default_rng(0)) is d


def test_generate_is_deterministic_for_a_seed():
    op = tcomp.op(S.SOFTMAX)
    a = generate(op, {"N": 16, "D": 256}, "sim", n=4, rng=np.random.default_rng(9))
    b = generate(op, {"N": 16, "D": 256}, "sim", n=4, rng=np.random.default_rng(9))
    assert [c.schedule for c in a] == [c.schedule for c in b]


def test_invalid_candidates_are_counted_with_their_reasons():
    op = tcomp.op(S.GEMM)
    small = Limits(threads=64, shared_bytes=4096)
    space = Space(op, GEMM_SIZES, limits=small)
    best = space.build({"inline": [], "stages": {"C": {"rule": "simt_tile", **GEMM_BEST}}})
    why = space.validate(best)
    assert not why.ok and why.kind == "resources"
    assert str(why) == "resources: kernel 'gemm_C' has 256 threads per block (limit 64)"
    assert space.rejected == {"resources": 1}
    assert space.errors[-1][1] is why
    # a plan a primitive refuses is counted as a schedule error
    bad = {"inline": [], "stages": {"C": {"rule": "simt_tile", **GEMM_BEST, "bk": 0}}}
    assert space._try(bad) is None
    assert space.rejected["schedule"] == 1
    assert "split: factor must be a positive int, got 0" in space.errors[-1][1].message


def test_validate_error_kinds():
    op = tcomp.op(S.GEMM)
    bad = json.dumps([{"kind": "Split", "stage": "C", "axis": "zz", "factor": 4, "nparts": None}])
    v = validate(op, bad, GEMM_SIZES)
    assert not v.ok and v.kind == "schedule"
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    C.bind(m, "threadIdx.x")  # 4096 threads per block: lowering refuses it
    v = validate(op, s.to_json(), GEMM_SIZES)
    assert not v.ok and v.kind == "lowering"
    assert v.message == "stage 'C': 4096x1x1 threads per block exceed 1024"
    # more shared memory than the device has: the resource check
    op, tc = S.tc_gemm(bm=256, bn=256, bk=64, pipeline=5)
    v = validate(op, tc.to_json(), GEMM_SIZES)
    assert not v.ok and v.kind == "resources"
    assert v.message == ("kernel 'gemm_C' uses 353280 bytes of shared memory (limit 232448)")


def test_space_needs_every_size():
    with pytest.raises(SearchError, match=r"Space: sizes must bind every size variable of "
                                          r"'gemm'; missing K \(e.g. sizes=\{'K': 1024\}\)"):
        Space(tcomp.op(S.GEMM), {"M": 64, "N": 64})


def test_a_tensor_core_plan_is_padded_or_swizzled_not_both():
    from tcomp.search.rules import _tc_feasible
    ctx = Space(tcomp.op(S.TC_GEMM), GEMM_SIZES).ctx
    assert _tc_feasible(ctx, "C", TC_BEST) and _tc_feasible(ctx, "C", TC_SWZ)
    assert not _tc_feasible(ctx, "C", dict(TC_SWZ, pad=True))


def test_a_kept_operand_is_not_inlined_and_the_default_inlines_it():
    """tc_tile on conv2d: with a_stage the im2col temporary stays a stage of
    its own, placed in shared memory (the hand schedule); without it, the
    plan's inline list applies and its expression is copied into shared
    memory by a cache_read. Both compute the convolution (sim, small sizes)."""
    op = tcomp.op(S.TC_CONV2D)
    space = Space(op, CONV_SIZES)
    assert "Acol" in space.ctx.inlined
    small = {"N": 2, "H": 6, "W": 5, "C": 16, "K": 24, "R": 144}
    args = inputs_for(op, small, seed=3)
    want = tcomp.evaluate(op, *args)
    texts = {}
    for kept in (True, False):
        params = {"rule": "tc_tile", **TC_PAIRS, "a_stage": kept}
        cand = space.build({"inline": ["Acol"], "stages": {"O": params}})
        sched = json.loads(cand.schedule)
        texts[kept] = cand.schedule
        assert space.validate(cand).ok
        assert_matches(op, tcomp.build(cand.replay(op), target="sim", sizes=small)(*args), want)
        inlined = "ComputeInline" in json.dumps(sched)
        assert inlined is (not kept), sched
    assert texts[True] != texts[False]
    hand = S.tc_conv2d(bk=64, pipeline=3, swizzle=True, pair_stores=True)[1]
    assert json.loads(texts[True]) == json.loads(hand.to_json())
