"""The fusion rules of the search (tcomp/search/rules/fused.py, the heads of
row_regs in row_group.py): a GEMM whose result is a temporary feeding an
elementwise epilogue (GEMM + bias + GELU, SIMT and tensor cores), SwiGLU's
two GEMMs in one kernel, add + RMSNorm with the residual sum as an output in
one row kernel, and a GEMM followed by an in-place epilogue of its own
tensor. Every candidate the rules draw here is run on the sim at small
awkward sizes against tcomp.evaluate; bench/tc_gemm.py's fused GEMM + bias +
GELU kernels are points of the space; auto_schedule picks one fused kernel."""
from __future__ import annotations

import ast
import json

import numpy as np
import pytest

import tcomp
from tcomp.search import RULES, Space
from tcomp.search.oracle import random_inputs
from tcomp.search.rules import products
from tests.bench.common import BENCH, S

GBG = """def gbg(float(M,K) A, float(K,N) B, float(N) bias) -> (D) {
  C(m, n) +=! A(m, k) * B(k, n)
  D(m, n) = 0.5 * x * (1.0 + erf(x * 0.70710678118654752)) where x = C(m, n) + bias(n)
}"""
# the bias and the activation as temporaries of their own (inlined into D)
GBG_CHAIN = """def gbg2(float(M,K) A, float(K,N) B, float(N) bias) -> (D) {
  C(m, n) +=! A(m, k) * B(k, n)
  t(m, n) = C(m, n) + bias(n)
  D(m, n) = t(m, n) > 0.0 ? t(m, n) : 0.01 * t(m, n)
}"""
SWIGLU = """def swiglu(float(M,K) X, float(K,N) W1, float(K,N) W3) -> (O) {
  G(m, n) +=! X(m, k) * W1(k, n)
  U(m, n) +=! X(m, k) * W3(k, n)
  O(m, n) = G(m, n) / (1.0 + exp(-G(m, n))) * U(m, n)
}"""
ADD_RMSNORM = """def add_rmsnorm(float(N,D) X, float(N,D) R, float(D) w) -> (H, Y) {
  H(n, d) = X(n, d) + R(n, d)
  ss(n) +=! H(n, d) * H(n, d)
  Y(n, d) = H(n, d) * rsqrt(ss(n) / float(D) + 1e-6) * w(d)
}"""
ADD_RMSNORM_R = """def add_rmsnorm_r(float(N,D) X, float(N,D) R, float(D) w) -> (H, Y) {
  H(n, d) = X(n, d) + R(n, d)
  ss(n) +=! H(n, d) * H(n, d)
  r(n) = rsqrt(ss(n) / float(D) + 1e-6)
  Y(n, d) = H(n, d) * r(n) * w(d)
}"""
IN_PLACE = """def scaled(float(M,K) A, float(K,N) B, float s) -> (P) {
  P(i, j) +=! A(i, k) * B(k, j)
  P(i, j) = P(i, j) * s
}"""
GEMM_SMALL = {"M": 37, "N": 45, "K": 29}
ROW_SMALL = {"N": 5, "D": 300}

# (name, source, stage, rule, the products it claims, small sizes)
FUSED = [
    ("gemm+bias+gelu simt", GBG, "D", "simt_epilogue", ["C"], GEMM_SMALL),
    ("gemm+bias+leaky chain", GBG_CHAIN, "D", "simt_epilogue", ["C"], GEMM_SMALL),
    ("gemm+bias+gelu tensor cores", S.TC_GEMM_GELU, "D", "tc_epilogue", ["C"], GEMM_SMALL),
    ("gemm+bias+gelu bf16 simt", S.TC_GEMM_GELU, "D", "simt_epilogue", ["C"], GEMM_SMALL),
    ("swiglu", SWIGLU, "O", "simt_epilogue", ["G", "U"], GEMM_SMALL),
    ("gemm in-place scale", IN_PLACE, "P.1", "simt_epilogue", ["P"], GEMM_SMALL),
    ("add+rmsnorm", ADD_RMSNORM, "Y", "row_regs", ["ss", "H"], ROW_SMALL),
    ("add+rmsnorm rstd stage", ADD_RMSNORM_R, "Y", "row_regs", ["ss", "H"], ROW_SMALL),
]
IDS = [f[0] for f in FUSED]


def check_on_sim(op, schedule, sizes, seed=0):
    """Build `schedule` (or take a built sim kernel) and compare it with
    tcomp.evaluate on random inputs at `sizes`."""
    arrays = random_inputs(op, sizes, np.random.default_rng(seed))
    k = tcomp.build(schedule, target="sim", sizes=sizes) if isinstance(
        schedule, tcomp.Schedule) else schedule
    got, want = k(*arrays), tcomp.evaluate(op, *arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    half = any(t.dtype.bits < 32 for t in op.outputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=2e-2 if half else 2e-5, atol=2e-2 if half else 2e-5)
    return k


@pytest.mark.parametrize("name,src,stage,rule,claimed,small", FUSED, ids=IDS)
def test_every_drawn_fused_candidate_is_one_kernel_and_right_on_the_sim(name, src, stage, rule,
                                                                        claimed, small):
    """The rule applies, claims the products (or the row group), and each of
    four parameter draws at the small sizes gives a valid candidate of one
    kernel that computes what tcomp.evaluate computes."""
    op = tcomp.op(src)
    space = Space(op, small, target="sim")
    r = RULES[rule]
    assert r.applies(space.ctx, stage)
    assert sorted(r.claims(space.ctx, stage)) == sorted(claimed)
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(4):
        params = r.sample(space.ctx, stage, rng)
        assert params is not None and r.feasible(space.ctx, stage, params)
        plan = {"inline": sorted(space.ctx.inlined, key=space.order.index),
                "stages": {stage: {"rule": rule, **json.loads(json.dumps(params))}}}
        cand = space.build(plan)
        if cand.schedule in seen:
            continue
        seen.add(cand.schedule)
        v = space.validate(cand)
        assert v.ok, (params, space.errors[-1:])
        assert len(v.program.kernels) == 1
        check_on_sim(op, cand.replay(op), small)


def test_sample_plan_uses_the_fusion_rules_and_leaves_the_products_unscheduled():
    op = tcomp.op(SWIGLU)
    space = Space(op, {"M": 1024, "N": 1024, "K": 1024})
    rng = np.random.default_rng(0)
    plans = [space.sample_plan(rng) for _ in range(20)]
    fused = [p for p in plans if p["stages"].get("O", {}).get("rule") == "simt_epilogue"]
    assert len(fused) >= 10
    assert all(list(p["stages"]) == ["O"] for p in fused)
    # a plan where O is not fused schedules G and U on their own (two more kernels)
    other = [p for p in plans if p not in fused]
    assert all({"G", "U"} <= set(p["stages"]) for p in other)


def test_epilogue_rules_do_not_apply_where_fusing_would_be_wrong():
    sizes = {"M": 64, "N": 64, "K": 64}
    cases = [
        # C is an output: stored anyway, the plain GEMM rules tile it
        ("def a(float(M,K) A, float(K,N) B) -> (C, D) { C(m, n) +=! A(m, k) * B(k, n)\n"
         " D(m, n) = C(m, n) * 2.0 }", "D"),
        # D reads C transposed: another thread's accumulator
        ("def b(float(M,K) A, float(K,N) B) -> (D) { C(m, n) +=! A(m, k) * B(k, n)\n"
         " D(n, m) = C(m, n) * 2.0 }", "D"),
        # C read by a second stage: computing it inside D's tiles would not serve E
        ("def c(float(M,K) A, float(K,N) B) -> (D, E) { C(m, n) +=! A(m, k) * B(k, n)\n"
         " D(m, n) = C(m, n) * 2.0\n E(m, n) = C(m, n) + 1.0 }", "D"),
        # the in-place update reads a neighbour (a snapshot stage)
        ("def d(float(M,K) A, float(K,N) B) -> (P) { P(i, j) +=! A(i, k) * B(k, j)\n"
         " P(i, j) = P(i, j) + P(i, j - 1) where j in 1:N }", "P.1"),
    ]
    for src, stage in cases:
        space = Space(tcomp.op(src), sizes)
        assert not products(space.ctx, stage), src
        assert not RULES["simt_epilogue"].applies(space.ctx, stage)
        assert not RULES["tc_epilogue"].applies(space.ctx, stage)


def _epilogue_variants() -> dict:
    """bench/tc_gemm.py's EPILOGUE_VARIANTS (the fused GEMM + bias + GELU
    schedules it times), read from its source: the module imports torch."""
    tree = ast.parse((BENCH / "tc_gemm.py").read_text())
    env = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in (
                "BEST", "BEST_SWZ", "EPILOGUE_VARIANTS"):
            exec(compile(ast.Module([node], []), "tc_gemm.py", "exec"), env)
    return env["EPILOGUE_VARIANTS"]


TC_DEFAULTS = dict(bm=128, bn=128, wm=64, wn=64, bk=32, pad=True, vector=True, pipeline=0,
                   unroll_k=False, swizzle=False, pair_stores=False, smem_epilogue=False,
                   fragment_pipeline=0)  # bench/schedules.py tc_gemm's defaults


@pytest.mark.parametrize("variant", sorted(_epilogue_variants()))
def test_bench_fused_gemm_bias_gelu_kernels_are_points_of_tc_epilogue(variant):
    """bench/tc_gemm.py times the fused GEMM + bias + GELU with each of
    EPILOGUE_VARIANTS (S.tc_gemm on TC_GEMM_GELU); the tc_epilogue plan with
    the same parameters gives its directives exactly, every value is one
    the sampler draws, and it validates at the benchmark's size."""
    kw = _epilogue_variants()[variant]
    op, hand = S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), **kw)
    sizes = {"M": 8192, "N": 8192, "K": 4096}
    space = Space(op, sizes)
    params = {**TC_DEFAULTS, **kw}
    if params["swizzle"]:
        params["pad"] = False  # tc_gemm's pad=None: padded unless swizzled
    rule = RULES["tc_epilogue"]
    assert rule.applies(space.ctx, "D") and rule.feasible(space.ctx, "D", params)
    cand = space.build({"inline": [], "stages": {"D": {"rule": "tc_epilogue", **params}}})
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    assert cand.sketch == "D:tc_epilogue"
    rng = np.random.default_rng(0)
    drawn = [rule.sample(space.ctx, "D", rng) for _ in range(400)]
    for k, v in params.items():
        assert v in [d[k] for d in drawn], f"{variant}: {k}={v!r} never drawn"


def test_simt_epilogue_is_the_gemm_template_with_the_epilogue_as_its_output():
    """One product: the plan gives templates.simt_gemm(..., out="D"), the
    bench GEMM's template with D tiled and C as the register tile."""
    from tcomp.schedule import templates
    op = tcomp.op(GBG)
    space = Space(op, {"M": 4096, "N": 4096, "K": 4096})
    p = dict(bm=128, bn=128, bk=8, tm=8, tn=8, fragments=True, pipeline=True, vector=True,
             lanes=[4, 8], group=None, pad=True)
    cand = space.build({"inline": [], "stages": {"D": {"rule": "simt_epilogue", **p}}})
    hand = tcomp.Schedule(op)
    templates.simt_gemm(hand, "C", "A", "B", 128, 128, 8, 8, 8, fragments=True, pipeline=True,
                        vector=True, lanes=(4, 8), pad=True, out="D")
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    v = space.validate(cand)
    assert v.ok and len(v.program.kernels) == 1
    (r,) = v.resources
    assert r.block == (256, 1, 1) and r.grid == (32, 32, 1)


# (name, source, sizes of the choice)
AUTO = [
    ("gemm+bias+gelu", GBG, {"M": 1024, "N": 1024, "K": 1024}),
    ("gemm+bias+gelu bf16", S.TC_GEMM_GELU, {"M": 1024, "N": 1024, "K": 1024}),
    ("swiglu", SWIGLU, {"M": 1024, "N": 1024, "K": 1024}),
    ("add+rmsnorm", ADD_RMSNORM, {"N": 4096, "D": 4096}),
    ("gemm in-place scale", IN_PLACE, {"M": 1024, "N": 1024, "K": 1024}),
]


@pytest.mark.parametrize("name,src,sizes", AUTO, ids=[a[0] for a in AUTO])
def test_auto_schedule_fuses_into_one_kernel_and_is_right_on_the_sim(name, src, sizes):
    """tcomp.build(op, target="sim", sizes=...) with no schedule: the choice
    is one fused kernel (estimated faster than every unfused candidate
    drawn), and its result equals tcomp.evaluate at the given sizes scaled
    down (the sim) and at awkward small ones."""
    op = tcomp.op(src)
    c = tcomp.search.auto.choose(op, sizes, target="sim")
    assert c.source == "estimate"
    assert len(tcomp.lower(c.schedule, sizes).kernels) == 1, c.sketch
    small = GEMM_SMALL if "M" in sizes else ROW_SMALL
    k = tcomp.build(op, target="sim", sizes=small)
    assert len(k.program.kernels) == 1, k.remarks
    check_on_sim(op, k, small, seed=3)


def test_row_regs_with_a_head_is_the_row_template_with_the_sum_stored_and_read_back():
    """add + RMSNorm with H an output: row_regs computes H at the row loop
    (an output of templates.row_in_registers), caches it back into registers
    for ss and Y (cache), ss in registers (local): one kernel, X and R read
    once, H written once."""
    from tcomp.schedule import templates
    op = tcomp.op(ADD_RMSNORM)
    sizes = {"N": 4096, "D": 4096}
    space = Space(op, sizes)
    p = {"threads": 512, "vec": 4, "shared_weights": False}
    cand = space.build({"inline": [], "stages": {"Y": {"rule": "row_regs", **p}}})
    hand = tcomp.Schedule(op)
    templates.row_in_registers(hand, "Y", 512, 4, cache=("H",), local=("ss",), outputs=("H",))
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    v = space.validate(cand)
    assert v.ok and len(v.program.kernels) == 1
    text = str(tcomp.lower(cand.replay(op), sizes))
    # each thread: 2 pieces of 4 of X and of R loaded, of H stored
    assert text.count("load X[") == text.count("load R[") == text.count("store H[") == 2


EMULATED = [("swiglu", SWIGLU, "O", GEMM_SMALL),
            ("gemm in-place scale", IN_PLACE, "P.1", GEMM_SMALL),
            ("add+rmsnorm", ADD_RMSNORM, "Y", {"N": 3, "D": 264})]


@pytest.mark.parametrize("name,src,stage,small", EMULATED, ids=[e[0] for e in EMULATED])
def test_fused_kernels_as_cuda_cpp_on_the_emulator(name, src, stage, small):
    """The CUDA C++ NVRTC compiles for a fused candidate (one draw of the
    rule), run by the g++ emulator at awkward sizes, equals tcomp.evaluate."""
    from tests.target_cuda.emulator import HAVE_CXX, run_emulated
    if not HAVE_CXX:
        pytest.skip("no host C++ compiler (g++)")
    op = tcomp.op(src)
    space = Space(op, small)
    rule = "row_regs" if stage == "Y" else "simt_epilogue"
    params = RULES[rule].sample(space.ctx, stage, np.random.default_rng(5))
    plan = {"inline": sorted(space.ctx.inlined, key=space.order.index),
            "stages": {stage: {"rule": rule, **json.loads(json.dumps(params))}}}
    s = space.build(plan).replay(op)
    k = tcomp.build(s, target="cuda:sm_90a", sizes=small)
    arrays = random_inputs(op, small, np.random.default_rng(2))
    got, want = run_emulated(k, *arrays), tcomp.evaluate(op, *arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-4, atol=1e-4)
