"""The search's tensor-core rule (tc_tile) on batched products and transposed
operands: issue 24 measured the search giving batched fp16 GEMM 0.28x
torch.bmm because no tensor-core plan was ever drawn for it (the rule took
only the exact 2-D C[m, n] += A[m, k] * B[k, n])."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.search import RULES, Space
from tests.bench.common import S
from tests.lower.util import inputs_for

BMM16 = S.TC_BMM.replace("bfloat16", "float16")
SCORES = ("def scores(float16(H,I,D) Q, float16(H,J,D) K) -> (S) "
          "{ S(h, i, j) +=! Q(h, i, d) * K(h, j, d) }")


@pytest.mark.parametrize("src, sizes, stage", [
    (BMM16, {"NB": 64, "M": 512, "N": 512, "K": 64}, "C"),
    (S.TC_LAYOUTS["NT"], {"M": 4096, "N": 4096, "K": 4096}, "C"),
    (S.TC_LAYOUTS["TT"], {"M": 4096, "N": 4096, "K": 4096}, "C"),
    (SCORES, {"H": 32, "I": 1024, "J": 1024, "D": 128}, "S"),
])
def test_tensor_core_plans_are_drawn_and_valid(src, sizes, stage):
    space = Space(tcomp.op(src), sizes)
    assert RULES["tc_tile"].applies(space.ctx, stage)
    rng = np.random.default_rng(3)
    plans = [space.sample_plan(rng) for _ in range(30)]
    tc = [p for p in plans if p["stages"][stage]["rule"] == "tc_tile"]
    assert len(tc) >= 5, [p["stages"][stage]["rule"] for p in plans]
    small = next(p for p in tc if p["stages"][stage]["bm"] * p["stages"][stage]["bn"] <= 128 * 128)
    cand = space.build(small)
    assert space.validate(cand).ok, space.errors
    directives = json.loads(cand.schedule)
    assert '"Tensorize"' in cand.schedule and "mma_m16n8k16" in cand.schedule, directives


def test_batched_tensor_core_candidate_runs_on_the_sim():
    op = tcomp.op(BMM16)
    sizes = {"NB": 3, "M": 40, "N": 48, "K": 40}
    space = Space(op, sizes)
    params = {"rule": "tc_tile", "bm": 32, "bn": 32, "wm": 16, "wn": 16, "bk": 16, "pad": False,
              "vector": True, "pipeline": 3, "unroll_k": False, "swizzle": True,
              "pair_stores": True, "smem_epilogue": False, "fragment_pipeline": 0}
    assert RULES["tc_tile"].feasible(space.ctx, "C", {k: v for k, v in params.items()
                                                       if k != "rule"})
    cand = space.build({"inline": [], "stages": {"C": params}})
    assert space.validate(cand).ok, space.errors
    s = tcomp.Schedule.from_json(op, cand.schedule)
    xs = inputs_for(op, sizes)
    got = tcomp.build(s, target="sim", sizes=sizes)(*xs).astype(np.float64)
    want = tcomp.evaluate(op, *xs).astype(np.float64)
    assert (np.abs(got - want) <= np.abs(want) * 2.0 ** -10 + 1e-3).all()


def test_the_exact_matmul_draws_are_unchanged():
    """The 2-D NN GEMM's tc_tile draws do not depend on the new batched path
    (records and seeds of earlier tunes stay reproducible)."""
    space = Space(tcomp.op(S.TC_GEMM), {"M": 4096, "N": 4096, "K": 4096})
    rng = np.random.default_rng(7)
    got = [RULES["tc_tile"].sample(space.ctx, "C", rng) for _ in range(2)]
    # (drawn by the rule before batched products and transposed operands were added)
    assert got == [
        {"bk": 32, "bm": 256, "bn": 128, "fragment_pipeline": 2, "pad": True,
         "pair_stores": True, "pipeline": 5, "smem_epilogue": False, "swizzle": False,
         "unroll_k": False, "vector": True, "wm": 64, "wn": 64},
        {"bk": 16, "bm": 256, "bn": 16, "fragment_pipeline": 0, "pad": False,
         "pair_stores": True, "pipeline": 0, "smem_epilogue": False, "swizzle": True,
         "unroll_k": False, "vector": True, "wm": 32, "wn": 16}]


def test_auto_schedule_puts_a_batched_half_product_on_tensor_cores():
    """tcomp.auto_schedule (no measuring) picks a tensor-core plan for the
    fp16 bmm, and it computes the product."""
    op = tcomp.op(BMM16)
    sizes = {"NB": 4, "M": 128, "N": 128, "K": 64}
    s = tcomp.auto_schedule(op, sizes=sizes)
    assert '"Tensorize"' in s.to_json()
    xs = inputs_for(op, sizes)
    got = tcomp.build(s, target="sim", sizes=sizes)(*xs).astype(np.float64)
    want = tcomp.evaluate(op, *xs).astype(np.float64)
    assert (np.abs(got - want) <= np.abs(want) * 2.0 ** -10 + 1e-3).all()
