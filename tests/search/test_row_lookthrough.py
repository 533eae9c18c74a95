"""The row rules on the ops of bench/row_schedules.py, whose statistics sit
behind elementwise temporaries the search inlines (softmax's e and rs,
layernorm's mu and rstd, RMSNorm's r, the fused add + layernorm's h):
`row_producers` finds them through the inlined temporaries
(tcomp/search/row_group.py), `row_regs` keeps the per-row scalars and, with
`keep_rows`, the row-shaped temporaries as stages in registers and computes
the fused kernel's second output at the row, so the hand schedules of
bench/row_schedules.py are points of the space."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.search import RULES, Space, generate
from tcomp.search.rules import row_producers
from tests.bench.common import BENCH, _load
from tests.lower.util import assert_matches, inputs_for

R = _load("bench_row_schedules", BENCH / "row_schedules.py")
RR = RULES["row_regs"]
SIZES = [{"N": 4096, "D": 32768}, {"N": 32768, "D": 4096}]

# (name, bench/row_schedules.py maker, its keyword arguments, source, row stage,
#  statistics, sibling outputs, per-row scalars, row-shaped temporaries)
OPS = [
    ("softmax fp32", R.softmax, {"dtype": "float32"}, R.softmax_src("float32"), "O",
     ["mx", "sm"], [], ["rs"], ["e"]),
    ("softmax bf16", R.softmax, {"dtype": "bfloat16"}, R.softmax_src("bfloat16"), "O",
     ["mx", "sm"], [], ["rs"], ["e"]),
    ("softmax bf16 exp2", R.softmax, {"dtype": "bfloat16", "exp2": True},
     R.softmax_src("bfloat16", exp2=True), "O", ["mx", "sm"], [], ["rs"], ["e"]),
    ("layernorm fp32", R.layernorm, {"dtype": "float32"}, R.layernorm_src("float32"), "Y",
     ["sx", "sq"], [], ["mu", "rstd"], []),
    ("layernorm bf16", R.layernorm, {"dtype": "bfloat16"}, R.layernorm_src("bfloat16"), "Y",
     ["sx", "sq"], [], ["mu", "rstd"], []),
    ("rmsnorm fp32", R.rmsnorm, {"dtype": "float32"}, R.rmsnorm_src("float32"), "Y",
     ["ss"], [], ["r"], []),
    ("rmsnorm bf16", R.rmsnorm, {"dtype": "bfloat16"}, R.rmsnorm_src("bfloat16"), "Y",
     ["ss"], [], ["r"], []),
    ("add_layernorm bf16", R.add_layernorm, {"dtype": "bfloat16"},
     R.add_layernorm_src("bfloat16"), "Y", ["sx", "sq"], ["S"], ["mu", "rstd"], ["h"]),
    ("add_layernorm fp32", R.add_layernorm, {"dtype": "float32"},
     R.add_layernorm_src("float32"), "Y", ["sx", "sq"], ["S"], ["mu", "rstd"], ["h"]),
]
IDS = [o[0] for o in OPS]


def _plan(space, stage, rule="row_regs", **p):
    """A plan as Space.sample_plan makes it: every inlinable temporary in
    `inline` (the rule's `keeps` decides which stay stages)."""
    return {"inline": sorted(space.ctx.inlined, key=space.order.index),
            "stages": {stage: {"rule": rule, **p}}}


@pytest.mark.parametrize("name,make,kw,src,stage,stats,sibs,scalars,rows", OPS, ids=IDS)
def test_statistics_are_found_through_inlined_temporaries(name, make, kw, src, stage, stats,
                                                          sibs, scalars, rows):
    space = Space(tcomp.op(src), SIZES[0])
    ctx = space.ctx
    assert set(scalars + rows) <= ctx.inlined
    assert row_producers(ctx, stage) == stats
    assert RULES["row"].applies(ctx, stage) and RR.applies(ctx, stage)
    assert RULES["row"].claims(ctx, stage) == stats
    assert RR.claims(ctx, stage) == stats + sibs
    assert RR.keeps(ctx, stage, {"keep_rows": False}) == set(scalars)
    assert RR.keeps(ctx, stage, {"keep_rows": True}) == set(scalars + rows)
    # no statistic or sibling is left to a rule of its own
    rng = np.random.default_rng(0)
    for _ in range(10):
        plan = space.sample_plan(rng)
        if plan["stages"][stage]["rule"] in ("row", "row_regs"):
            assert list(plan["stages"]) == [s for s in space.order if s in plan["stages"]]
            assert not set(plan["stages"]) & set(stats)
            if plan["stages"][stage]["rule"] == "row_regs":
                assert list(plan["stages"]) == [stage]


def _hand_cases():
    out = []
    for name, make, kw, src, stage, stats, sibs, scalars, rows in OPS:
        for z in SIZES:
            dt = kw["dtype"]
            weights = [False]
            # gamma, beta / w in shared memory: bf16 fits at both lengths (2 x 64 KiB at
            # 32768), float32 only at 4096 (2 x 128 KiB at 32768: past 227 KiB)
            if make is not R.softmax and make is not R.add_layernorm and (
                    dt == "bfloat16" or z["D"] == 4096):
                weights.append(True)
            for w in weights:
                extra = {"shared_weights": w} if w else {}
                out.append((f"{name} {z['N']}x{z['D']}" + (" shared weights" if w else ""),
                            make, {**kw, **extra}, stage, rows, z, w))
    return out


HAND = _hand_cases()


@pytest.mark.parametrize("name,make,kw,stage,rows,sizes,weights", HAND, ids=[h[0] for h in HAND])
def test_hand_row_kernels_are_points_of_row_regs(name, make, kw, stage, rows, sizes, weights):
    """bench/row_schedules.py's schedule (its default thread count, 16-byte
    pieces, the temporaries in registers, the weights in shared memory with
    `shared_weights`) is what the plan with its parameters gives, directive
    for directive; the plan is one the sampler draws (each value), and it
    validates."""
    op, hand = make(sizes["D"], **kw)
    space = Space(op, sizes)
    params = {"threads": R.default_threads(sizes["D"], kw["dtype"]),
              "vec": R.vec_of(kw["dtype"]), "shared_weights": weights}
    if rows:
        params["keep_rows"] = True
    assert RR.applies(space.ctx, stage) and RR.feasible(space.ctx, stage, params)
    cand = space.build(_plan(space, stage, **params))
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    assert space.validate(cand).ok, space.errors[-1:]
    rng = np.random.default_rng(0)
    drawn = [RR.sample(space.ctx, stage, rng) for _ in range(300)]
    for k, v in params.items():
        assert v in [d.get(k) for d in drawn], f"{k}={v!r} never drawn"


def test_keep_rows_false_inlines_the_row_temporary_and_caches_the_row():
    """softmax without `keep_rows`: e inlined into sm and O (which then read
    X through it, from the row's registers), rs still kept; no e buffer."""
    sizes = SIZES[0]
    space = Space(tcomp.op(R.softmax_src("float32")), sizes)
    p = {"threads": 1024, "vec": 4, "shared_weights": False}
    off = space.build(_plan(space, "O", keep_rows=False, **p))
    on = space.build(_plan(space, "O", keep_rows=True, **p))
    assert off.schedule != on.schedule
    inlined = [d["stage"] for d in json.loads(off.schedule)["directives"]
               if d["kind"] == "ComputeInline"]
    assert inlined == ["e"]
    low = str(tcomp.lower(off.replay(space.op), sizes=sizes))
    assert "alloc local float32 X_local[32]" in low and "alloc local float32 e[" not in low
    assert "alloc local float32 rs[1]" in low
    assert low.count("@vectorize(16 bytes: load X[") == 8
    low = str(tcomp.lower(on.replay(space.op), sizes=sizes))
    assert "alloc local float32 X_local[32]" in low and "alloc local float32 e[32]" in low


def test_add_layernorm_computes_its_sum_output_at_the_row():
    """The fused kernel's S is claimed by row_regs (no rule of its own) and
    stored from the row's registers: one kernel. With `keep_rows`, h holds
    the row (X and R loaded once into it, no caches); without, X and R are
    both cached and h is inlined into S, the statistics and Y."""
    sizes = SIZES[0]
    space = Space(tcomp.op(R.add_layernorm_src("bfloat16")), sizes)
    p = {"threads": 1024, "vec": 8, "shared_weights": False}
    for keep, allocs in ((True, ["float32 h[32]"]),
                         (False, ["bfloat16 X_local[32]", "bfloat16 R_local[32]"])):
        cand = space.build(_plan(space, "Y", keep_rows=keep, **p))
        v = space.validate(cand)
        assert v.ok, space.errors[-1:]
        assert len(v.resources) == 1  # one kernel: S, the statistics and Y
        low = str(tcomp.lower(cand.replay(space.op), sizes=sizes))
        for a in allocs:
            assert f"alloc local {a}" in low
        vectors = [ln for ln in low.splitlines() if "@vectorize(16 bytes:" in ln]
        assert sum("store S[" in ln for ln in vectors) == 4  # 32 elements a thread: 4 pieces
        assert sum("store Y[" in ln for ln in vectors) == 4


def test_register_estimate_counts_the_larger_of_the_held_rows():
    """float32 add + layernorm at 32768: with h inlined both X and R are
    cached (64 registers a thread at 1024 threads: past half of a thread's
    64), with h kept only h is held (32), so the sampler keeps h there."""
    space = Space(tcomp.op(R.add_layernorm_src("float32")), SIZES[0])
    ctx = space.ctx
    p = {"threads": 1024, "vec": 4, "shared_weights": False}
    assert not RR.feasible(ctx, "Y", {**p, "keep_rows": False})
    assert RR.feasible(ctx, "Y", {**p, "keep_rows": True})
    rng = np.random.default_rng(0)
    assert all(RR.sample(ctx, "Y", rng)["keep_rows"] for _ in range(30))
    # softmax: e replaces X (computed from it), so keeping it costs no more rows
    ctx = Space(tcomp.op(R.softmax_src("float32")), SIZES[0]).ctx
    assert RR.feasible(ctx, "O", {**p, "keep_rows": True})


LOOK = """def f(float(N, D) X, float(N, D) Z) -> ({outs}) {{
  s(n) +=! X(n, d)
  t(n) = s(n) * 2.0
  O(n, d) = X(n, d) * t(n)
  {extra}
}}"""


def test_a_temporary_read_outside_the_row_is_neither_looked_through_nor_kept():
    """t inlined into O and into an output P outside the row: s feeds P
    through t, so s is no statistic of O (the existing check, now through
    the temporary) and no row rule applies to O."""
    op = tcomp.op(LOOK.format(outs="O, P", extra="P(n) = t(n) + 1.0"))
    ctx = Space(op, {"N": 4, "D": 256}).ctx
    assert "t" in ctx.inlined
    assert row_producers(ctx, "O") == []
    assert not RULES["row"].applies(ctx, "O") and not RR.applies(ctx, "O")


def test_a_sibling_output_needs_a_shared_row():
    """An output over the row's shape that reads only Z (no row O reads) is
    left to its own rule; one reading X is computed at O's row."""
    sizes = {"N": 4, "D": 256}
    apart = Space(tcomp.op(LOOK.format(outs="P, O", extra="")
                           .replace("  s(n)", "  P(n, d) = Z(n, d) * 3.0\n  s(n)")), sizes).ctx
    assert RR.claims(apart, "O") == ["s"]
    fused = Space(tcomp.op(LOOK.format(outs="P, O", extra="")
                           .replace("  s(n)", "  P(n, d) = X(n, d) * 3.0\n  s(n)")), sizes).ctx
    assert RR.claims(fused, "O") == ["s", "P"]
    # a sibling written after the row stage is not taken (the plan visits it first)
    late = Space(tcomp.op(LOOK.format(outs="O, P", extra="P(n, d) = X(n, d) * 3.0")), sizes).ctx
    assert RR.claims(late, "O") == ["s"]


def test_a_row_read_at_other_elements_is_not_held_in_registers():
    """O reads the row reversed: a thread would need elements another thread
    holds, so row_regs does not apply (`row` still does). The same read in
    an inlined temporary makes it injective: the walk does not look through
    it, so mx is no statistic of O."""
    src = """def f(float(N, D) X) -> (O) {
  mx(n) max=! X(n, d)
  O(n, d) = X(n, D - 1 - d) - mx(n)
}"""
    ctx = Space(tcomp.op(src), {"N": 4, "D": 256}).ctx
    assert row_producers(ctx, "O") == ["mx"]
    assert RULES["row"].applies(ctx, "O") and not RR.applies(ctx, "O")
    src = """def f(float(N, D) X) -> (O) {
  mx(n) max=! X(n, d)
  e(n, d) = X(n, D - 1 - d) - mx(n)
  O(n, d) = e(n, d) * 2.0
}"""
    ctx = Space(tcomp.op(src), {"N": 4, "D": 256}).ctx
    assert "e" in ctx.inlined and row_producers(ctx, "O") == []


SIM = [(o[0], o[3], o[4], d) for o in OPS if o[0] in (
    "softmax fp32", "softmax bf16 exp2", "layernorm fp32", "rmsnorm bf16", "add_layernorm bf16",
    "add_layernorm fp32") for d in (257, 1000)]


@pytest.mark.parametrize("name,src,stage,d", SIM, ids=[f"{s[0]} D={s[3]}" for s in SIM])
def test_candidates_compute_the_right_answer_on_the_sim(name, src, stage, d):
    """row_regs at two thread counts, with and without keep_rows and staged
    weights where they apply, and a `row` candidate of each `shared_row`,
    against tcomp.evaluate, at row lengths whose last pieces are partial."""
    sizes = {"N": 3, "D": d}
    op = tcomp.op(src)
    space = Space(op, sizes, target="sim")
    args = inputs_for(op, sizes, seed=d)
    want = tcomp.evaluate(op, *args)
    vec = R.vec_of("bfloat16" if "bf16" in name else "float32")
    rows = bool(RR.keeps(space.ctx, stage, {"keep_rows": True}) -
                RR.keeps(space.ctx, stage, {}))
    plans = []
    for threads in (32, 128):
        for keep in ([False, True] if rows else [None]):
            for w in (False, True):
                p = {"threads": threads, "vec": vec, "shared_weights": w}
                if keep is not None:
                    p["keep_rows"] = keep
                if RR.feasible(space.ctx, stage, p):
                    plans.append(_plan(space, stage, **p))
    for shared in (False, True):
        p = {"threads": 64, "vec": 2, "shared_row": shared, "local": True}
        if RULES["row"].feasible(space.ctx, stage, p):
            plans.append(_plan(space, stage, rule="row", **p))
    assert len(plans) >= 5
    for plan in plans:
        cand = space.build(plan)
        assert space.validate(cand).ok, (plan, space.errors[-1:])
        got = tcomp.build(cand.replay(op), target="sim", sizes=sizes)(*args)
        assert_matches(op, got, want)


@pytest.mark.parametrize("name,src,stage", [(o[0], o[3], o[4]) for o in OPS],
                         ids=IDS)
def test_generate_draws_row_regs_candidates_that_validate(name, src, stage):
    op = tcomp.op(src)
    for sizes in SIZES:
        cands = generate(op, sizes, n=12, rng=np.random.default_rng(1))
        regs = [c for c in cands if c.sketch == f"{stage}:row_regs"]
        assert regs, [c.sketch for c in cands]
        space = Space(op, sizes)
        assert all(space.validate(c).ok for c in regs)


@pytest.mark.parametrize("sizes", SIZES, ids=lambda z: f"{z['N']}x{z['D']}")
def test_the_register_estimate_is_the_validators(sizes):
    """Every thread count the rule finds feasible, with and without
    keep_rows, validates, and the rule's estimate is validate.resources'
    (so the sampler proposes nothing the checks then reject: at 256 threads
    and 32768 floats, X and e of 128 floats each are past 255 registers)."""
    from tcomp.search.rules import _rr_registers, _rr_threads
    for src, stage, dt in ((R.softmax_src("float32"), "O", "float32"),
                           (R.add_layernorm_src("bfloat16"), "Y", "bfloat16"),
                           (R.layernorm_src("bfloat16"), "Y", "bfloat16")):
        space = Space(tcomp.op(src), sizes)
        ctx, vec = space.ctx, R.vec_of(dt)
        checked = 0
        for t in _rr_threads(ctx, stage, vec):
            for keep in (False, True):
                p = {"threads": t, "vec": vec, "shared_weights": False, "keep_rows": keep}
                if not RR.feasible(ctx, stage, p):
                    continue
                v = space.validate(space.build(_plan(space, stage, **p)))
                assert v.ok, (src, p, v)
                assert v.resources[0].registers == _rr_registers(ctx, stage, p)[1], p
                checked += 1
        assert checked >= 4
    ctx = Space(tcomp.op(R.softmax_src("float32")), {"N": 4, "D": 32768}).ctx
    p = {"threads": 256, "vec": 4, "shared_weights": False}
    assert RR.feasible(ctx, "O", {**p, "keep_rows": False})
    assert not RR.feasible(ctx, "O", {**p, "keep_rows": True})
