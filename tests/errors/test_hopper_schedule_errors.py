"""Every error of the Hopper schedule primitives (schedule/primitives_hopper.py)
and of the Hopper plan (lower/hopper_plan.py), each naming the loop or
stage and the remedy (issue 24)."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.errors import LoweringError, ScheduleError
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule

from ..kernels.hopper_ops import op


def _tiled(layout="NT", bm=128, bn=256, order=None):
    s = tcomp.Schedule(op(layout))
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, bm, bn)
    w, mw = C.split(mi, 64)
    ko, ki = C.split(k, 64)
    ax = dict(mo=mo, no=no, w=w, mw=mw, ni=ni, ko=ko, ki=ki)
    C.reorder(*[ax[a] for a in (order or ("mo", "no", "w", "ko", "mw", "ni", "ki"))])
    return s, C, ax


def _copies(s, C, ko, tma=True, tensors=("A", "B")):
    for t in tensors:
        c = s.cache_read(t, "shared", [C])
        c.compute_at(C, ko)
        if tma:
            c.tma()


def _full(s, C, ax, skip=()):
    if "copies" not in skip:
        _copies(s, C, ax["ko"])
    if "pipeline" not in skip:
        C.pipeline(ax["ko"], 4)
    if "roles" not in skip:
        C.warp_specialize(ax["w"], 40, 232)
    if "persistent" not in skip:
        C.persistent(ax["mo"], ax["no"], 8)
    C.tensorize(ax["mw"], "wgmma_m64n256k16")
    return s


def err(fn, cls, text):
    with pytest.raises(cls) as e:
        fn()
    assert text in str(e.value), str(e.value)


# ------------------------------------------------------------------ primitives
def test_tma_needs_a_shared_copy():
    s, C, ax = _tiled()
    err(lambda: C.tma(), ScheduleError, "tma: stage 'C' is not a shared copy; the TMA engine "
        "fills copies made by cache_read(tensor, 'shared', readers)")


def test_tma_swizzle():
    s, C, ax = _tiled()
    c = s.cache_read("A", "shared", [C])
    err(lambda: c.tma(64), ScheduleError, "tma: swizzle must be 128 (the 128-byte swizzle wgmma "
        "reads), got 64")


def test_tma_on_a_transformed_copy():
    s, C, ax = _tiled()
    c = s.cache_read("A", "shared", [C])
    c.split(c.axes[0], 8)
    err(lambda: c.tma(), ScheduleError, "has loop or storage transformations; the TMA engine "
        "copies the tile in its own order and layout")


def test_persistent_errors():
    s, C, ax = _tiled()
    err(lambda: C.persistent(ax["mo"], ax["no"], 0), ScheduleError,
        "persistent: group_m must be an int from 1 to 64, got 0")
    err(lambda: C.persistent(ax["mo"], ax["w"]), ScheduleError,
        "persistent: 'm_i_o' must be the loop right inside 'm_o'")
    C.persistent(ax["mo"], ax["no"])
    err(lambda: C.persistent(ax["mo"], ax["no"]), ScheduleError,
        "persistent: stage 'C' is persistent already")
    s, C, ax = _tiled()
    C.bind(ax["mo"], "blockIdx.y")
    err(lambda: C.persistent(ax["mo"], ax["no"]), ScheduleError,
        "persistent: loop 'm_o' must be a spatial loop that is not bound")


def test_warp_specialize_errors():
    s, C, ax = _tiled()
    err(lambda: C.warp_specialize(ax["w"], 30, 232), ScheduleError,
        "warp_specialize: producer_regs must be a multiple of 8 from 24 to 256, got 30")
    err(lambda: C.warp_specialize(ax["w"], 40, 264), ScheduleError,
        "warp_specialize: consumer_regs must be a multiple of 8 from 24 to 256, got 264")
    err(lambda: C.warp_specialize(ax["mw"]), ScheduleError,
        "warp_specialize: loop 'm_i_i' must be the outer loop of a split of a spatial loop")
    C.warp_specialize(ax["w"])
    err(lambda: C.warp_specialize(ax["w"]), ScheduleError,
        "warp_specialize: stage 'C' is warp-specialised already")
    s, C, ax = _tiled()
    C.unroll(ax["w"])
    err(lambda: C.warp_specialize(ax["w"]), ScheduleError,
        "warp_specialize: loop 'm_i_o' is bound, unrolled or vectorized")


def test_tensorize_wgmma_errors():
    s, C, ax = _tiled()
    err(lambda: C.tensorize(ax["mw"], "wgmma_m64n96k16"), ScheduleError,
        "tensorize: unknown intrinsic 'wgmma_m64n96k16'; the Hopper path takes "
        "wgmma_m64n64k16, wgmma_m64n128k16, wgmma_m64n256k16")
    err(lambda: C.tensorize(ax["mw"], "wgmma_m64n128k16"), ScheduleError,
        "tensorize: loop 'n_i' (of 'n') has 256 iterations; wgmma_m64n128k16 needs 128 "
        "(split 'n' by 128)")
    err(lambda: C.tensorize(ax["ko"], "wgmma_m64n256k16"), ScheduleError,
        "tensorize: the loops from 'k_o' inward must be the inner loops of splits of "
        "m, n, k, one each; 'k_o' is not")
    s, C, ax = _tiled(order=("mo", "no", "w", "mw", "ko", "ni", "ki"))
    err(lambda: C.tensorize(ax["mw"], "wgmma_m64n256k16"), ScheduleError, "'k_o' is not")


def test_tensorize_wgmma_refuses_what_it_does_not_compute():
    f32 = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
    s = tcomp.Schedule(f32)
    C = s["C"]
    err(lambda: C.tensorize(C.axes[0], "wgmma_m64n64k16"), ScheduleError,
        "tensorize: wgmma_m64n64k16 takes bfloat16 or float16 inputs (both the same), but 'A' "
        "and 'B' are float32 and float32")
    add = tcomp.op("def f(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                   "{ C(m, n) +=! A(m, k) + B(k, n) }")
    s = tcomp.Schedule(add)
    err(lambda: s["C"].tensorize(s["C"].axes[0], "wgmma_m64n64k16"), ScheduleError,
        "its value is not a product of two tensor reads")
    s = tcomp.Schedule(op("NT"))
    cw = s.cache_write("C", "local")
    err(lambda: cw.tensorize(cw.axes[0], "wgmma_m64n64k16"), ScheduleError,
        "wgmma_m64n64k16 accumulates in the warpgroup's registers and stores the tile itself")


# ------------------------------------------------------------------ the plan (at lowering)
@pytest.mark.parametrize("skip,text", [
    ("roles", "warp_specialize('m_i_o') is needed: a producer warpgroup issues the TMA copies"),
    ("persistent", "its tile loops 'm_o', 'n_o' need persistent(m_o, n_o) or binding to block "
                   "indices"),
    ("pipeline", "pipeline('k_o', stages=N) is needed (the ring of shared slots"),
])
def test_plan_names_the_missing_primitive(skip, text):
    s, C, ax = _tiled()
    _full(s, C, ax, skip=(skip,))
    err(lambda: tcomp.lower(s), LoweringError, "tensorize wgmma: stage 'C': " + text)


def test_plan_needs_tma_copies():
    s, C, ax = _tiled()
    _copies(s, C, ax["ko"], tensors=("A",))
    _full(s, C, ax, skip=("copies",))
    err(lambda: tcomp.lower(s), LoweringError, "'B' is read from global memory; read it through "
        "a TMA copy: s.cache_read('B', 'shared', [C]) computed at 'k_o', then .tma()")
    s, C, ax = _tiled()
    _copies(s, C, ax["ko"], tma=False)
    _full(s, C, ax, skip=("copies",))
    err(lambda: tcomp.lower(s), LoweringError, "only the TMA copies of A and B")


def test_plan_loop_order_and_tile_rows():
    s, C, ax = _tiled(order=("no", "mo", "w", "ko", "mw", "ni", "ki"))
    _copies(s, C, ax["ko"])
    C.pipeline(ax["ko"], 4)
    C.warp_specialize(ax["w"], 40, 232)
    C.bind(ax["mo"], "blockIdx.y")
    C.bind(ax["no"], "blockIdx.x")
    C.tensorize(ax["mw"], "wgmma_m64n256k16")
    err(lambda: tcomp.lower(s), LoweringError, "its loops must be m_o, n_o, then m_i_o and k_o "
        "(either order), then the tensorized m_i_i, n_i, k_i")
    s, C, ax = _tiled(bm=192)
    _full(s, C, ax)
    err(lambda: tcomp.lower(s), LoweringError, "the block's rows (192) must be 64 or 128: 64 per "
        "consumer warpgroup, one or two consumers")


def test_plan_registers_that_do_not_fit():
    s, C, ax = _tiled()
    _copies(s, C, ax["ko"])
    C.pipeline(ax["ko"], 4)
    C.warp_specialize(ax["w"], 40, 256)
    C.persistent(ax["mo"], ax["no"])
    C.tensorize(ax["mw"], "wgmma_m64n256k16")
    err(lambda: tcomp.lower(s), LoweringError, "warp_specialize: 40 + 2 x 256 registers per "
        "thread of 128-thread warpgroups need 70656; a multiprocessor has 65536 (lower "
        "consumer_regs)")


def test_plan_rows_the_tma_engine_cannot_move_at_fixed_sizes():
    s = hopper_schedule(op("NT"))
    err(lambda: tcomp.lower(s, sizes={"K": 100}), LoweringError, "'A' has rows of 100 elements "
        "(200 bytes); the TMA engine needs rows of a multiple of 16 bytes")


def test_plan_output_type():
    o = tcomp.op("def mm(bfloat16(M,K) A, bfloat16(N,K) B) -> (int32(M, N) C) "
                 "{ C(m, n) +=! int32(A(m, k) * B(n, k)) }")
    with pytest.raises(ScheduleError, match="accumulates in float32"):
        hopper_schedule(o, GemmConfig())


EPI = """def f(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D, E) {
  T(m, n) +=! float(A(m, k)) * float(B(k, n))
  D(m, n) = T(m, n) + bias(n)
  E(m, n) = T(n, m) * 2.0
}"""


def test_epilogue_errors():
    s = tcomp.Schedule(tcomp.op(EPI))
    T, D, E = s["T"], s["D"], s["E"]
    err(lambda: T.epilogue("D"), ScheduleError, "epilogue: stage must be a Stage of the same "
        "schedule, got 'D'")
    err(lambda: T.epilogue(T), ScheduleError, "epilogue: stage 'T' cannot be its own epilogue")
    err(lambda: T.epilogue(D), ScheduleError, "epilogue: 'T' is also read by stage 'E'; an "
        "epilogue must be its only use")
    D.split(D.axes[0], 8)
    err(lambda: T.epilogue(D), ScheduleError, "epilogue: stage 'D' must be unscheduled "
        "(computed at root, no loop transformations)")
    one = tcomp.op("""def g(bfloat16(M,K) A, bfloat16(K,N) B) -> (E) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      E(m, n) = T(n, m) * 2.0
    }""")
    s = tcomp.Schedule(one)
    err(lambda: s["T"].epilogue(s["E"]), ScheduleError, "epilogue: stage 'E' reads 'T' at (n, m), "
        "not at its own indices (m, n)")
    s = tcomp.Schedule(op("NN"))
    out = tcomp.op("""def h(bfloat16(M,K) A, bfloat16(K,N) B) -> (T, E) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      E(m, n) = T(m, n) * 2.0
    }""")
    s = tcomp.Schedule(out)
    err(lambda: s["T"].epilogue(s["E"]), ScheduleError, "epilogue: 'T' is an output of 'h'; only "
        "a temporary's values can stay in the accumulators")
    red = tcomp.op("""def r(bfloat16(M,K) A, bfloat16(K,N) B) -> (E) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      E(m) +=! T(m, n)
    }""")
    s = tcomp.Schedule(red)
    err(lambda: s["T"].epilogue(s["E"]), ScheduleError, "epilogue: stage 'E' must be elementwise "
        "over the indices of 'T' (no reduction)")


def test_plan_epilogue_reads_other_tensors_at_its_own_indices():
    o = tcomp.op("""def q(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      D(m, n) = bfloat16(T(m, n) + bias(n / 2))
    }""")
    s = hopper_schedule(o, stage="T")
    s["T"].epilogue(s["D"])
    err(lambda: tcomp.lower(s), LoweringError, "its epilogue 'D' reads 'bias' at (an expression); "
        "the Hopper "
        "epilogue reads other tensors at its own indices, over their whole extent")
    o = tcomp.op("""def q(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      D(m, n) = bfloat16(T(m, n) + bias(m))
    }""")  # D's shape inferred as (min(M, N), N)
    s = hopper_schedule(o, stage="T")
    s["T"].epilogue(s["D"])
    err(lambda: tcomp.lower(s), LoweringError, "'D' has a dimension of min(M, N) where loop 'm' "
        "runs over M; the tiles cover whole tensors")


def test_pingpong_errors():
    s, C, ax = _tiled()
    err(lambda: C.warp_specialize(ax["w"], 40, 232, pingpong=1), ScheduleError,
        "warp_specialize: pingpong must be True or False, got 1")
    s, C, ax = _tiled()  # 128 x 256 tiles: 256 accumulators per ping-pong consumer
    _copies(s, C, ax["ko"])
    C.pipeline(ax["ko"], 4)
    C.warp_specialize(ax["w"], 40, 232, pingpong=True)
    C.persistent(ax["mo"], ax["no"])
    C.tensorize(ax["mw"], "wgmma_m64n256k16")
    err(lambda: tcomp.lower(s), LoweringError, "ping-pong consumers each hold a whole 128 x 256 "
        "tile: 256 float32 accumulators per thread, more than 128 (take 64 rows with N = 256, "
        "or 128 rows with N = 128)")
    with pytest.raises(LoweringError, match="ping-pong: two consumers, each a whole tile"):
        GemmConfig(bm=128, bn=256, pingpong=True).check()


def test_batched_errors():
    bmm = tcomp.op("def bmm(bfloat16(Z,M,K) A, bfloat16(Z,K,N) B) -> (C) "
                   "{ C(z, m, n) +=! A(z, m, k) * B(z, k, n) }")
    s = hopper_schedule(bmm)
    C = s["C"]
    C.reorder(*[a for a in C.leaf_axes if a.name != "z"][:2], C.leaf_axes[0],
              *[a for a in C.leaf_axes if a.name != "z"][2:])
    err(lambda: tcomp.lower(s), LoweringError, "its batch loop 'z' must be the outermost loop, "
        "unsplit")
    two = tcomp.op("def b2(bfloat16(Y,Z,M,K) A, bfloat16(Y,Z,K,N) B) -> (C) "
                   "{ C(y, z, m, n) +=! A(y, z, m, k) * B(y, z, k, n) }")
    s = tcomp.Schedule(two)
    err(lambda: s["C"].tensorize(s["C"].axes[2], "wgmma_m64n64k16"), ScheduleError,
        "it is a product batched over y, z; the Hopper path takes one batch axis")
    shared = tcomp.op("def b3(float(Z) w, bfloat16(M,K) A, bfloat16(K,N) B) -> (bfloat16(Z, M, N) C) "
                      "{ C(z, m, n) +=! A(m, k) * B(k, n) where z in 0:Z }")
    s = tcomp.Schedule(shared)
    err(lambda: s["C"].tensorize(s["C"].axes[1], "wgmma_m64n64k16"), ScheduleError,
        "neither factor is read at the batch axis z")
