"""Attention reached from a schedule (lower/hopper_attention_plan.py): the
plain comprehension, `online_softmax`, and the Hopper primitives on O.online
lower to the FlashAttention kernel; on the sim against tcomp.evaluate at
awkward sizes; the JSON of the schedule replays to the same kernel; every
refusal of the primitives and of the plan names what is missing."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.errors import LoweringError, ScheduleError
from tcomp.kernels.attention_sm90 import (AttentionConfig, attention_program,
                                          attention_schedule, source)

from .attention_ops import data, reference

ATOL = 2e-2


def schedule(src=None, bm=128, bn=128, stages=2, persistent=True, skip=(), **change):
    """The tutorial's schedule of `src` (default: bf16 attention, D = E = 64),
    written out step by step; `skip` leaves steps out, `change` replaces one
    (a function of the schedule's pieces)."""
    s = tcomp.Schedule(tcomp.op(src or source("bfloat16", d=64)))
    s.online_softmax("mx", "l", ["O"])
    on, sc = s["O.online"], s["Sc"]
    z, i, e = on.axes
    (j,) = on.reduce_axes
    io, ii = on.split(i, bm)
    w, iw = on.split(ii, 64)
    jo, ji = on.split(j, bn)
    ax = dict(s=s, on=on, sc=sc, z=z, io=io, w=w, iw=iw, e=e, jo=jo, ji=ji)
    steps = {
        "reorder": lambda: on.reorder(z, io, w, jo, iw, e, ji),
        "copies": lambda: [_copy(s, t, r, a) for t, r, a in
                           (("Q", sc, io), ("K", sc, jo), ("V", on, jo))],
        "scores_at": lambda: sc.compute_at(on, jo),
        "scores": lambda: sc.tensorize(sc.axes[1], f"wgmma_m64n{bn}k16"),
        "pipeline": lambda: on.pipeline(jo, stages=stages),
        "roles": lambda: on.warp_specialize(w, producer_regs=24, consumer_regs=240),
        "grid": lambda: on.persistent(z, io, group_m=1) if persistent else
        (on.bind(io, "blockIdx.x"), on.bind(z, "blockIdx.y")),
        "epilogue": lambda: on.epilogue(s["O"]),
        "pv": lambda: on.tensorize(iw, "wgmma_rs_m64n64k16"),
    }
    for name, step in steps.items():
        if name in change:
            change[name](**ax)
        elif name not in skip:
            step()
    return s


def _copy(s, t, reader, at, tma=True):
    c = s.cache_read(t, "shared", [reader])
    c.compute_at(s["O.online"], at)
    if tma:
        c.tma()
    return c


SIZES = {"D": 64, "E": 64}


@pytest.mark.parametrize("Z, S, T, causal, persistent", [
    (2, 150, 77, False, True),
    (1, 200, 200, True, False),
    (1, 1, 130, False, True),
])
def test_the_tutorial_schedule_runs_on_the_sim(Z, S, T, causal, persistent):
    src = source("bfloat16", causal=causal, d=64)
    s = schedule(src, persistent=persistent)
    prog = tcomp.lower(s, sizes=SIZES)
    (k,) = prog.kernels
    assert k.plan.startswith("hopper_attention: 128 queries x 128 keys per step, D=64, E=64")
    assert ("causal" in k.plan) == causal
    assert ("persistent" in k.plan) == persistent
    assert [b.name for b in prog.buffers] == ["Q", "K", "V", "O"]  # no temporaries left
    Q, K, V = data(Z, S, T, 64, 64)
    got = tcomp.build(s, target="sim", sizes=SIZES)(Q, K, V).astype(np.float64)
    want = tcomp.evaluate(tcomp.op(src), Q, K, V).astype(np.float64)
    assert np.abs(got - want).max() < ATOL
    assert np.abs(got - reference(Q, K, V, causal)).max() < ATOL


def test_grouped_query_attention_from_the_schedule():
    src = source("float16", d=64, kv_group=2)
    s = schedule(src)
    assert "K and V shared by 2 query matrices" in tcomp.lower(s, sizes=SIZES).kernels[0].plan
    Q, K, V = data(4, 70, 90, 64, 64, "float16")
    K, V = K[::2].copy(), V[::2].copy()
    got = tcomp.build(s, target="sim", sizes=SIZES)(Q, K, V).astype(np.float64)
    want = tcomp.evaluate(tcomp.op(src), Q, K, V).astype(np.float64)
    assert np.abs(got - want).max() < ATOL


def test_attention_sm90_is_its_schedule_lowered():
    cfg = AttentionConfig(causal=True, bn=176)
    sizes = {"D": 128, "E": 128}
    a = attention_program(cfg, sizes)
    b = tcomp.lower(attention_schedule(cfg, sizes), sizes=sizes)
    assert a.kernels == b.kernels
    assert "176 keys per step" in a.kernels[0].plan


def test_the_schedule_round_trips_through_json():
    s = schedule()
    again = tcomp.Schedule.from_json(s.op, s.to_json())
    assert tcomp.lower(again, sizes=SIZES).kernels == tcomp.lower(s, sizes=SIZES).kernels


def _lse_schedule(src=None, causal=False, **kw):
    """schedule() of the comprehension with the log-sum-exp output L, L computed
    from O.online's running max and sum (epilogue(L) before the scores' tensorize)."""
    src = src or source("bfloat16", d=64, causal=causal, lse=True)

    def scores_at(s, on, sc, jo, **_):
        on.epilogue(s["L"])
        sc.compute_at(on, jo)
    return schedule(src, scores_at=scores_at, **kw)


@pytest.mark.parametrize("Z,S,T,causal", [(2, 150, 77, False), (1, 200, 200, True),
                                          (2, 130, 0, False)])
def test_lse_from_the_schedule_on_the_sim(Z, S, T, causal):
    """One kernel computes O and L = mx + log(l) (T = 0: the empty rows' -inf)."""
    s = _lse_schedule(causal=causal)
    prog = tcomp.lower(s, sizes=SIZES)
    assert [k.buffers for k in prog.kernels] == [("L",)]
    Q, K, V = data(Z, S, T, 64, 64, seed=3)
    O, L = tcomp.build(s, target="sim", sizes=SIZES)(Q, K, V)
    wO, wL = tcomp.evaluate(s.op, Q, K, V)
    assert np.abs(np.asarray(O, np.float32) - np.asarray(wO, np.float32)).max() < ATOL
    fin = np.isfinite(wL)
    assert np.array_equal(fin, np.isfinite(L)) and (T > 0) == fin.all()
    if fin.any():
        assert np.abs(np.asarray(L)[fin] - wL[fin]).max() < 1e-4
    assert np.array_equal(np.asarray(L)[~fin], wL[~fin])


def test_attention_schedule_with_lse_is_that_schedule():
    s = attention_schedule(AttentionConfig(lse=True), SIZES)
    assert tcomp.lower(s, sizes=SIZES).kernels == \
        attention_program(AttentionConfig(lse=True), SIZES).kernels
    again = tcomp.Schedule.from_json(s.op, s.to_json())
    assert tcomp.lower(again, sizes=SIZES).kernels == tcomp.lower(s, sizes=SIZES).kernels


LSE = source("bfloat16", d=64, lse=True)


def test_lse_of_another_form_is_refused():
    with pytest.raises(LoweringError, match=r"its statistics epilogue 'L' must be mx \+ "
                                            r"log\(l\)"):
        tcomp.lower(_lse_schedule(LSE.replace("mx(z, i) + log(l(z, i))",
                                              "mx(z, i) + l(z, i)")), sizes=SIZES)


def test_lse_in_another_type_is_refused():
    src = LSE.replace("float32(Z, S) L", "bfloat16(Z, S) L").replace(
        "L(z, i) = mx(z, i) + log(l(z, i))", "L(z, i) = bfloat16(mx(z, i) + log(l(z, i)))")
    with pytest.raises(LoweringError, match="log-sum-exp output 'L' is bfloat16; the kernel "
                                            "writes float32"):
        tcomp.lower(_lse_schedule(src), sizes=SIZES)


def test_a_statistics_epilogue_twice_is_refused():
    s = tcomp.Schedule(tcomp.op(LSE))
    s.online_softmax("mx", "l", ["O"])
    s["O.online"].epilogue(s["L"])
    with pytest.raises(ScheduleError, match="has the statistics epilogue 'L' already"):
        s["O.online"].epilogue(s["L"])


def test_statistics_read_by_another_stage_are_refused():
    src = LSE.replace("-> (bfloat16(Z, S, E) O, float32(Z, S) L)",
                      "-> (bfloat16(Z, S, E) O, float32(Z, S) L, float32(Z, S) M)").replace(
        "    L(z, i) = mx(z, i) + log(l(z, i))\n",
        "    L(z, i) = mx(z, i) + log(l(z, i))\n    M(z, i) = mx(z, i)\n")
    s = tcomp.Schedule(tcomp.op(src))
    s.online_softmax("mx", "l", ["O"])
    with pytest.raises(ScheduleError, match="'mx' is also read by stage 'M'; the statistics "
                                            "of 'O.online' can feed its epilogue only"):
        s["O.online"].epilogue(s["L"])


def test_the_scores_read_by_the_statistics_need_the_epilogue_first():
    """epilogue(L) left out: the (mx, l) stage reads the scores kept in registers."""
    with pytest.raises(ScheduleError, match=r"'Sc' is also read by stage 'mx'; .* \(or its "
                                            r"statistics: epilogue\(...\) of a stage over them "
                                            r"first\)"):
        schedule(LSE)


def _lowered(**kw):
    return lambda: tcomp.lower(schedule(**kw), sizes=SIZES)


PLAN_ERRORS = [
    (dict(skip=("pipeline",)), "pipeline('j_o', stages=N) is needed"),
    (dict(skip=("roles",)), "warp_specialize('i_i_o') is needed"),
    (dict(skip=("grid",)), "need persistent(z, i_o, group_m=1) or binding to block indices"),
    (dict(grid=lambda on, z, io, **_: on.persistent(z, io)), "give group_m=1"),
    (dict(skip=("epilogue",)), "epilogue(...) is needed"),
    (dict(bn=64, scores=lambda sc, **_: sc.tensorize(sc.axes[1], "wgmma_m64n128k16")),
     "its scores are tensorized with wgmma_m64n128k16, but 'j' is split by 64"),
    (dict(persistent=False,
          reorder=lambda on, z, io, w, jo, iw, e, ji, **_: on.reorder(io, z, w, jo, iw, e, ji)),
     "its loops must be z, i_o, then i_i_o and j_o (either order)"),
    (dict(copies=lambda s, sc, on, io, jo, **_: [_copy(s, t, r, a) for t, r, a in
                                                (("Q", sc, jo), ("K", sc, jo), ("V", on, jo))]),
     "Q's tile stays for the whole query tile: compute it at 'i_o'"),
    (dict(copies=lambda s, sc, on, io, jo, **_: [_copy(s, t, r, a) for t, r, a in
                                                (("Q", sc, io), ("K", sc, jo))]),
     "its weights must be read as V(z, j, e) through a TMA copy"),
    (dict(copies=lambda s, sc, on, io, jo, **_: [_copy(s, t, r, a) for t, r, a in
                                                (("Q", sc, io), ("V", on, jo))]),
     "its scores read 'K' from global memory"),
    (dict(copies=lambda s, sc, on, io, jo, **_: [
        _copy(s, "Q", sc, io), _copy(s, "K", sc, jo, tma=False), _copy(s, "V", on, jo)]),
     "the copy 'K.shared' must be filled by TMA"),
    (dict(bm=256), "the block's queries (256) must be split by 64 into 2 or 3 consumer"),
    (dict(bn=96, scores=lambda **_: None), "'j' is split by 96; the kernel takes 64, 128, 176"),
    (dict(bn=176, stages=5), "need 259248 bytes of shared memory; a block may have 232448"),
]


@pytest.mark.parametrize("kw, msg", PLAN_ERRORS, ids=[m[:40] for _, m in PLAN_ERRORS])
def test_plan_errors(kw, msg):
    with pytest.raises(LoweringError, match=None) as err:
        _lowered(**kw)()
    assert msg in str(err.value), str(err.value)
    assert str(err.value).startswith("tensorize wgmma_rs: stage 'O.online': ")


def test_scores_computed_elsewhere_are_refused_before_the_plan():
    with pytest.raises(LoweringError, match="stage 'Sc' reads 'Q_shared', which is computed "
                                            "inside 'O.online'"):
        _lowered(skip=("scores", "scores_at"))()


def test_the_head_size_must_be_fixed_at_build():
    with pytest.raises(LoweringError, match="the head size D is D; the kernel takes D = 64 or "
                                            "128, fixed at build"):
        tcomp.lower(schedule())


def test_the_masks_the_kernel_does_not_know_are_refused():
    src = source("bfloat16", d=64, causal=True).replace("j > i ?", "j >= i ?")
    with pytest.raises(LoweringError, match="masked by another condition than the causal"):
        tcomp.lower(schedule(src), sizes=SIZES)


PRIMITIVE_ERRORS = [
    (lambda s: s["Sc"].tensorize(s["Sc"].axes[1], "wgmma_m64n128k16"),
     "the loops from 'i' inward must be the inner loops of splits of i, j, d, one each; 'i' is "
     "not (or compute the stage at a consumer's loop first"),
    (lambda s: (s["Sc"].compute_at(s["O.online"], s["O.online"].reduce_axes[0]),
                s["Sc"].tensorize(s["Sc"].axes[0], "wgmma_m64n128k16")),
     "its own i, j, d, unsplit and innermost; they are z, i, j, d"),
    (lambda s: (s["Sc"].compute_at(s["O.online"], s["O.online"].reduce_axes[0]),
                s["Sc"].tensorize(s["Sc"].axes[1], "wgmma_m64n256k16")),
     "unknown intrinsic 'wgmma_m64n256k16'; the Hopper path takes wgmma_m64n64k16, "
     "wgmma_m64n128k16, wgmma_m64n176k16 for a stage computed at another's loop"),
    (lambda s: s["O"].tensorize(s["O"].axes[1], "wgmma_rs_m64n64k16"),
     "computes the weighted sum of an online softmax (P . V with P in registers)"),
    (lambda s: s["O.online"].tensorize(s["O.online"].axes[1], "wgmma_rs_m64n64k16"),
     "the loops from 'i' inward must be 64 rows (the inner loop of a split of 'i' by 64)"),
    (lambda s: s["O.online"].tensorize(s["O.online"].axes[1], "wgmma_rs_m64n256k16"),
     "unknown intrinsic 'wgmma_rs_m64n256k16'; the register-A form takes wgmma_rs_m64n64k16, "
     "wgmma_rs_m64n128k16"),
]


@pytest.mark.parametrize("fn, msg", PRIMITIVE_ERRORS, ids=[m[:40] for _, m in PRIMITIVE_ERRORS])
def test_primitive_errors(fn, msg):
    s = tcomp.Schedule(tcomp.op(source("bfloat16", d=64)))
    s.online_softmax("mx", "l", ["O"])
    with pytest.raises(ScheduleError) as err:
        fn(s)
    assert msg in str(err.value), str(err.value)


def test_scores_read_by_another_stage_cannot_stay_in_registers():
    src = source("bfloat16", d=64).replace("-> (bfloat16(Z, S, E) O)",
                                           "-> (bfloat16(Z, S, E) O, float32(Z, S) R)")
    src = src.replace("}", "    R(z, i) +=! Sc(z, i, j)\n}")
    s = tcomp.Schedule(tcomp.op(src))
    s.online_softmax("mx", "l", ["O"])
    on, sc = s["O.online"], s["Sc"]
    sc.compute_at(on, on.reduce_axes[0])
    with pytest.raises(ScheduleError, match="'Sc' is also read by stage 'R'; its tile stays in "
                                            "the registers of 'O.online'"):
        sc.tensorize(sc.axes[1], "wgmma_m64n128k16")


def test_the_epilogue_of_a_tuple_stage_keeps_every_component_in_registers():
    s = tcomp.Schedule(tcomp.op(source("bfloat16", d=64)))
    s.online_softmax("mx", "l", ["O"])
    s["O.online"].epilogue(s["O"])
    assert [s.tensors[t][2] for t in ("O_max", "O_sum", "O_acc")] == ["local"] * 3
    assert s["O.online"]._s.epilogue == "O" and s["O"]._s.attach == ("epilogue", "O.online")


def test_a_statistics_epilogue_without_the_hopper_kernel_is_refused():
    """epilogue(L) alone, O.online not tensorized: nothing would compute mx and L (the
    ordinary builder built O and left L unwritten, a silent wrong answer: found in review)."""
    s = tcomp.Schedule(tcomp.op(LSE))
    s.online_softmax("mx", "l", ["O"])
    s["O.online"].epilogue(s["L"])
    with pytest.raises(LoweringError, match="stage\\(s\\) 'mx', 'L' are computed from the "
                                            "registers of 'O.online' \\(epilogue\\), which only "
                                            "its Hopper kernel does"):
        tcomp.build(s, target="sim", sizes=SIZES)


@pytest.mark.parametrize("how", ["compute_root", "compute_inline"])
def test_an_epilogue_placed_again_is_refused(how):
    """L moved after epilogue(L): a second kernel recomputed L from statistics no
    kernel wrote (L came out -inf: found in review)."""
    s = tcomp.Schedule(tcomp.op(LSE))
    s.online_softmax("mx", "l", ["O"])
    s["O.online"].epilogue(s["L"])
    with pytest.raises(ScheduleError, match=f"{how}: stage 'L' is computed by the kernel of "
                                            f"'O.online' from its registers \\(epilogue\\)"):
        getattr(s["L"], how)()
    with pytest.raises(ScheduleError, match="compute_root: stage 'mx' is computed by the kernel"):
        s["mx"].compute_root()
