"""The search rule `row_regs` (tcomp/search/rules.py): templates.row_in_registers
on the stages of `row` (softmax, layernorm): where it applies, what it samples
(whole 16-byte pieces per thread, awkward rows guarded), its feasibility
checks, the hand parameters of bench/row_schedules.py as a point of it, its
candidates on the sim, and `generate` drawing it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.schedule import templates
from tcomp.search import RULES, Space, generate
from tcomp.search.rules import row_producers
from tests.bench.common import BENCH, S, _load
from tests.lower.util import assert_matches, inputs_for

R = _load("bench_row_schedules", BENCH / "row_schedules.py")
RULE = RULES["row_regs"]
SIZES = [{"N": 32768, "D": 4096}, {"N": 4096, "D": 32768}]
OPS = [("softmax", S.SOFTMAX, "O"), ("layernorm", S.LAYERNORM, "Y")]

BATCHED = """def bsoftmax(float(B, N, D) X) -> (O) {
  mx(b, n) max=! X(b, n, d)
  sm(b, n) +=! exp(X(b, n, d) - mx(b, n))
  O(b, n, d) = exp(X(b, n, d) - mx(b, n)) / sm(b, n)
}"""

RMS_BF16 = """def rms(bfloat16(N, D) X, bfloat16(D) w) -> (Y) {
  ss(n) +=! float(X(n, d)) * float(X(n, d))
  Y(n, d) = bfloat16(float(X(n, d)) * rsqrt(ss(n) / float(D) + 1e-6) * float(w(d)))
}"""

MEAN_OUT = """def rowmean(float(N, D) X) -> (O, mu) {
  mu(n) +=! X(n, d) / float(D)
  O(n, d) = X(n, d) - mu(n)
}"""


def _space(src, sizes, target="cuda"):
    return Space(tcomp.op(src), sizes, target=target)


def _plan(stage, **p):
    return {"inline": [], "stages": {stage: {"rule": "row_regs", **p}}}


@pytest.mark.parametrize("sizes", SIZES, ids=lambda z: f"{z['N']}x{z['D']}")
@pytest.mark.parametrize("name,src,stage", OPS, ids=[o[0] for o in OPS])
def test_applies_and_its_candidates_validate(name, src, stage, sizes):
    space = _space(src, sizes)
    ctx = space.ctx
    assert RULE.applies(ctx, stage)
    assert RULE.claims(ctx, stage) == row_producers(ctx, stage)
    assert not any(RULE.applies(ctx, p) for p in row_producers(ctx, stage))
    rng = np.random.default_rng(0)
    pieces = sizes["D"] // 4
    seen = set()
    for _ in range(12):
        p = RULE.sample(ctx, stage, rng)
        assert p["vec"] == 4 and pieces % p["threads"] == 0 and p["threads"] % 32 == 0
        assert RULE.feasible(ctx, stage, p)
        v = space.validate(space.build(_plan(stage, **p)))
        assert v.ok, str(v)
        (r,) = v.resources
        assert r.block == (p["threads"], 1, 1) and r.grid == (sizes["N"], 1, 1)
        assert r.registers <= 255
        seen.add(p["threads"])
    assert len(seen) >= 2


def _row_threads(d):
    return R.default_threads(d, "float32")


HAND = [(f"{name} {z['N']}x{z['D']}", src, stage, local, False, z)
        for name, src, stage, local in (("softmax", S.SOFTMAX, "O", ("mx", "sm")),
                                        ("layernorm", S.LAYERNORM, "Y", ("mean", "var")))
        for z in SIZES]
# gamma and beta in shared memory: 2 x 16 KiB at D = 4096 (at 32768, 256 KiB: too much)
HAND.append(("layernorm shared weights 32768x4096", S.LAYERNORM, "Y", ("mean", "var"), True,
             SIZES[0]))


@pytest.mark.parametrize("name,src,stage,local,weights,sizes", HAND, ids=[h[0] for h in HAND])
def test_the_hand_parameters_are_a_point_of_the_rule(name, src, stage, local, weights, sizes):
    """bench/row_schedules.py's parameters (its default thread count, 16-byte
    pieces, X cached, the statistics local, gamma and beta in shared memory
    with shared_weights) applied by hand with row_in_registers to the same op
    (bench/row_schedules.py's own ops keep more temporaries: `e`, `rstd`):
    the plan gives exactly those directives, and the sampler draws each
    parameter value."""
    op = tcomp.op(src)
    threads = _row_threads(sizes["D"])
    hand = tcomp.Schedule(op)
    templates.row_in_registers(hand, stage, threads, R.vec_of("float32"), cache=("X",),
                               local=local, shared=("gamma", "beta") if weights else ())
    space = Space(op, sizes)
    params = {"threads": threads, "vec": 4, "shared_weights": weights}
    assert RULE.applies(space.ctx, stage) and RULE.feasible(space.ctx, stage, params)
    cand = space.build(_plan(stage, **params))
    assert json.loads(cand.schedule) == json.loads(hand.to_json())
    assert space.validate(cand).ok
    rng = np.random.default_rng(0)
    drawn = [RULE.sample(space.ctx, stage, rng) for _ in range(200)]
    for k, v in params.items():
        assert v in [d[k] for d in drawn], f"{k}={v!r} never drawn"


def test_thread_counts_give_whole_pieces_or_guard_the_tail():
    def threads(d, n=3):
        space = _space(S.SOFTMAX, {"N": n, "D": d})
        rng = np.random.default_rng(1)
        return sorted({RULE.sample(space.ctx, "O", rng)["threads"] for _ in range(200)})
    # 768 pieces of 4 floats: every count of whole warps that divides them
    assert threads(3072) == [32, 64, 96, 128, 192, 256, 384, 768]
    # 65 pieces (the last one float): powers of two up to one piece per thread
    assert threads(257) == [32, 64, 128]
    assert threads(1000) == [32, 64, 128, 256]  # 250 pieces, no multiple of 32 divides them
    assert threads(64) == [32]  # 16 pieces: one warp, half of it idle


def test_feasibility_keeps_the_row_in_registers():
    ctx = _space(S.SOFTMAX, {"N": 4, "D": 32768}).ctx
    ok = {"vec": 4, "shared_weights": False}
    assert RULE.feasible(ctx, "O", {"threads": 256, **ok})  # 128 floats a thread
    assert not RULE.feasible(ctx, "O", {"threads": 128, **ok})  # 256: past 255 registers
    assert not RULE.feasible(ctx, "O", {"threads": 96, **ok})  # 86 pieces a thread: too many
    assert not RULE.feasible(ctx, "O", {"threads": 48, **ok})  # not whole warps
    assert not RULE.feasible(ctx, "O", {"threads": 2048, **ok})  # past the block limit
    assert not RULE.feasible(ctx, "O", {"threads": 1024, "vec": 8, "shared_weights": False})
    # no weights to stage in softmax
    assert not RULE.feasible(ctx, "O", {"threads": 1024, "vec": 4, "shared_weights": True})
    # 65536 floats over 1024 threads: 64 a thread, the whole of a thread's share of the
    # block's 65536 registers (at most half for the row)
    ctx = _space(S.SOFTMAX, {"N": 4, "D": 65536}).ctx
    assert not RULE.feasible(ctx, "O", {"threads": 1024, **ok})
    # layernorm's gamma and beta of 32768 floats: 256 KiB, past shared memory
    ctx = _space(S.LAYERNORM, {"N": 4, "D": 32768}).ctx
    assert RULE.feasible(ctx, "Y", {"threads": 1024, "vec": 4, "shared_weights": False})
    assert not RULE.feasible(ctx, "Y", {"threads": 1024, "vec": 4, "shared_weights": True})
    rng = np.random.default_rng(0)
    assert not any(RULE.sample(ctx, "Y", rng)["shared_weights"] for _ in range(50))


def test_a_row_too_long_for_registers_is_left_to_the_other_rules():
    space = _space(S.SOFTMAX, {"N": 4, "D": 1 << 20})
    rng = np.random.default_rng(0)
    assert RULE.applies(space.ctx, "O") and RULE.sample(space.ctx, "O", rng) is None
    rules = {space.sample_plan(rng)["stages"].get("O", {}).get("rule") for _ in range(40)}
    assert "row_regs" not in rules and "row" in rules


def test_applies_only_where_there_is_a_row_to_hold():
    """A statistic that reads no input the output reads: no row input, so
    `row` applies but `row_regs` does not."""
    src = """def f(float(N, D) X, float(N, D) Z) -> (O) {
  s(n) +=! Z(n, d)
  O(n, d) = X(n, d) * s(n)
}"""
    ctx = _space(src, {"N": 4, "D": 256}).ctx
    assert RULES["row"].applies(ctx, "O") and not RULE.applies(ctx, "O")


SIM_CASES = [
    ("softmax", S.SOFTMAX, "O", {"N": 3, "D": 257}),
    ("softmax", S.SOFTMAX, "O", {"N": 2, "D": 1000}),
    ("layernorm", S.LAYERNORM, "Y", {"N": 3, "D": 257}),
    ("layernorm", S.LAYERNORM, "Y", {"N": 2, "D": 1000}),
    ("batched softmax", BATCHED, "O", {"B": 2, "N": 3, "D": 257}),
    ("bfloat16 rms norm", RMS_BF16, "Y", {"N": 3, "D": 1000}),
    ("mean as an output", MEAN_OUT, "O", {"N": 3, "D": 257}),
]


@pytest.mark.parametrize("name,src,stage,sizes", SIM_CASES,
                         ids=[f"{c[0]} {'x'.join(map(str, c[3].values()))}" for c in SIM_CASES])
def test_candidates_compute_the_right_answer_on_the_sim(name, src, stage, sizes):
    space = _space(src, sizes, target="sim")
    op = space.op
    assert RULE.applies(space.ctx, stage)
    vec = 8 if "bfloat16" in src else 4
    args = inputs_for(op, sizes, seed=sizes["D"])
    want = tcomp.evaluate(op, *args)
    weights = [False, True] if RULE.feasible(
        space.ctx, stage, {"threads": 32, "vec": vec, "shared_weights": True}) else [False]
    checked = 0
    for threads in (32, 64, 128, 256):
        for w in weights:
            p = {"threads": threads, "vec": vec, "shared_weights": w}
            assert RULE.feasible(space.ctx, stage, p)
            cand = space.build(_plan(stage, **p))
            assert space.validate(cand).ok, space.errors[-1:]
            got = tcomp.build(cand.replay(op), target="sim", sizes=sizes)(*args)
            assert_matches(op, got, want)
            checked += 1
    assert checked >= 4


def test_the_row_stays_in_registers_after_lowering():
    """A candidate's row: 16-byte loads of X into a compact per-thread array
    (32768 / 1024 threads = 32 floats), the statistics from it."""
    sizes = {"N": 4, "D": 32768}
    space = _space(S.SOFTMAX, sizes)
    cand = space.build(_plan("O", threads=1024, vec=4, shared_weights=False))
    text = str(tcomp.lower(cand.replay(space.op), sizes=sizes))
    assert "alloc local float32 X_local[32]" in text
    assert text.count("@vectorize(16 bytes: load X[") == 8
    assert text.count("@vectorize(16 bytes: store O[") == 8


def test_generate_draws_row_regs_for_softmax():
    op = tcomp.op(S.SOFTMAX)
    cands = generate(op, {"N": 4096, "D": 32768}, n=12, rng=np.random.default_rng(0))
    regs = [c for c in cands if c.sketch == "O:row_regs"]
    assert regs, [c.sketch for c in cands]
    assert all(json.loads(c.plan)["stages"]["O"]["vec"] == 4 for c in regs)


def test_row_in_registers_needs_a_row():
    op = tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) * 2.0 }")
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError) as e:
        templates.row_in_registers(s, "O", 32, 4)
    assert str(e.value) == ("row_in_registers: stage 'O' needs two or more axes (out(n, d): "
                            "the rows, then a row's elements); it has 1")


PTX_CASES = [("softmax", S.SOFTMAX, "O", {"N": 4096, "D": 32768}, 1024, False, 8),
             ("softmax", S.SOFTMAX, "O", {"N": 4096, "D": 32768}, 256, False, 32),
             ("layernorm", S.LAYERNORM, "Y", {"N": 32768, "D": 4096}, 256, True, 4 + 2 * 4)]


@pytest.mark.parametrize("name,src,stage,sizes,threads,weights,loads", PTX_CASES,
                         ids=[f"{c[0]} {c[4]}t" for c in PTX_CASES])
def test_candidates_compile_to_16_byte_accesses_without_local_memory(
        name, src, stage, sizes, threads, weights, loads):
    """Through NVRTC (no GPU needed): the row's loads (and gamma's, beta's)
    and the output's stores are 16-byte vectors, and nothing is in local
    memory (the row is in registers)."""
    import re
    space = _space(src, sizes)
    cand = space.build(_plan(stage, threads=threads, vec=4, shared_weights=weights))
    k = tcomp.build(cand.replay(space.op), target="cuda", sizes=sizes)
    assert ".local" not in k.ptx
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.\w32", k.ptx)) == loads
    assert len(re.findall(r"st\.global\.v4", k.ptx)) == sizes["D"] // (4 * threads)
