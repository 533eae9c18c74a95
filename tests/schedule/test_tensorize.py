"""`Stage.tensorize` (schedule/primitives.py) and the tensor-core lowering
(lower/tensor_cores.py): every error message, and tensorized GEMM schedules
run by the sim against the NumPy oracle at several shapes and tilings."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from ..bench.common import S as _S

tc_gemm = _S.tc_gemm

BF = "def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def _frag(src=BF):
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    C = s["C"]
    CF = s.cache_write(C, "fragment")
    return s, C, CF


def _err(fn, *parts):
    with pytest.raises(tcomp.ScheduleError) as e:
        fn()
    for p in parts:
        assert p in str(e.value), str(e.value)


def test_intrinsics_lists_mma():
    assert set(tcomp.intrinsics()) == {"mma_m16n8k16", "wgmma_m64n64k16", "wgmma_m64n128k16",
                                       "wgmma_m64n256k16", "wgmma_m64n64k32",
                                       "wgmma_m64n128k32", "wgmma_m64n256k32"}
    assert "fp8 inputs" in tcomp.intrinsics()["wgmma_m64n128k32"]
    assert "mma.sync" in tcomp.intrinsics()["mma_m16n8k16"]
    assert "wgmma, sm_90a" in tcomp.intrinsics()["wgmma_m64n256k16"]


def test_accumulator_must_be_a_fragment():
    op = tcomp.op(BF)
    s = tcomp.Schedule(op)
    C = s["C"]
    _err(lambda: C.tensorize(C.axes[0], "mma_m16n8k16"),
         "tensorize: stage 'C' writes a global buffer; mma_m16n8k16 accumulates in registers: "
         "tensorize the stage made by cache_write(..., 'fragment')")


def test_not_a_matmul():
    s, C, CF = _frag("def f(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                     "{ C(m, n) +=! A(m, k) + B(k, n) }")
    _err(lambda: CF.tensorize(CF.axes[0], "mma_m16n8k16"),
         "tensorize: stage 'C.fragment' is not a product mma_m16n8k16 can compute: its value "
         "is not a product of two tensors (mma_m16n8k16 computes C[..., m, n] += "
         "A[..., m, k] * B[..., k, n]: batch variables first, either operand in either major "
         "order)")


def test_not_a_reduction_over_one_axis():
    s, C, CF = _frag("def f(bfloat16(M,K) A) -> (C) { C(m) +=! A(m, k) * A(m, k) }")
    _err(lambda: CF.tensorize(CF.axes[0], "mma_m16n8k16"),
         "is not a product mma_m16n8k16 can compute: it is not a sum over one reduction "
         "variable into two or more output dimensions")


def test_input_types():
    s, C, CF = _frag(BF.replace("bfloat16", "float"))
    _err(lambda: CF.tensorize(CF.axes[0], "mma_m16n8k16"),
         "mma_m16n8k16 takes bfloat16 or float16 inputs (both the same), but 'A' and 'B' are "
         "float32 and float32")


def _split(CF, m=16, n=8, k=16):
    fm, fn = CF.axes
    (fk,) = CF.reduce_axes
    mo, mi = CF.split(fm, m)
    no, ni = CF.split(fn, n)
    ko, ki = CF.split(fk, k)
    CF.reorder(ko, mo, no, mi, ni, ki)
    return mi, ni, ki, ko


def test_wrong_tile_extent():
    s, C, CF = _frag()
    mi, ni, ki, _ = _split(CF, n=16)
    _err(lambda: CF.tensorize(mi, "mma_m16n8k16"),
         "loop 'n_i' (of 'n') has 16 iterations; mma_m16n8k16 needs 8 (split 'n' by 8)")


def test_missing_loop():
    s, C, CF = _frag()
    mi, ni, ki, _ = _split(CF)
    _err(lambda: CF.tensorize(ni, "mma_m16n8k16"),
         "no loop of 'm' from Axis(C.fragment.n_i) inward")


def test_extra_loop_of_the_same_axis():
    s, C, CF = _frag()
    mi, ni, ki, ko = _split(CF)
    CF.reorder(mi, ni, ko, ki)
    _err(lambda: CF.tensorize(mi, "mma_m16n8k16"), "must be one loop of each of m, n, k; 'm_o' is a "
                                                   "second loop of 'm'")


def test_fused_loop_inside():
    s, C, CF = _frag()
    mi, ni, ki, _ = _split(CF)
    f = CF.fuse(mi, ni)
    _err(lambda: CF.tensorize(f, "mma_m16n8k16"), "is a fused loop")


def test_bound_loop_inside():
    s, C, CF = _frag()
    mi, ni, ki, _ = _split(CF)
    CF.unroll(ni)
    CF.bind(ki, "threadIdx.x")
    _err(lambda: CF.tensorize(mi, "mma_m16n8k16"),
         "loop 'k_i' inside Axis(C.fragment.m_i) is bound, vectorized or tensorized already")


def test_tensorize_replays_from_json():
    op, s = tc_gemm(tcomp.op(BF), bm=32, bn=32, wm=16, wn=16, bk=16)
    again = tcomp.Schedule.from_json(op, s.to_json())
    assert again.to_json() == s.to_json()
    assert "Tensorize" in s.to_json()


# ------------------------------------------------------------------ the sim
CASES = [  # (sizes, schedule arguments)
    ({"M": 64, "N": 64, "K": 32}, dict(bm=64, bn=64, wm=32, wn=32, bk=32)),
    ({"M": 32, "N": 48, "K": 64}, dict(bm=32, bn=16, wm=16, wn=16, bk=16)),
    ({"M": 128, "N": 64, "K": 48}, dict(bm=64, bn=64, wm=64, wn=32, bk=16)),
    ({"M": 64, "N": 128, "K": 64}, dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=True)),
    ({"M": 32, "N": 32, "K": 32}, dict(bm=32, bn=32, wm=16, wn=16, bk=16, pad=False)),
    ({"M": 64, "N": 64, "K": 96}, dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=3)),
    ({"M": 64, "N": 128, "K": 64}, dict(bm=64, bn=64, wm=32, wn=64, bk=32, pipeline=4)),
    ({"M": 32, "N": 32, "K": 32}, dict(bm=32, bn=32, wm=16, wn=16, bk=16, pipeline=5)),
    # sizes the tiles do not divide: zero-filled shared tiles, guarded stores
    ({"M": 40, "N": 24, "K": 40}, dict(bm=32, bn=32, wm=16, wn=32, bk=16)),
    ({"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)),
    ({"M": 100, "N": 72, "K": 56}, dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=4)),
    ({"M": 45, "N": 70, "K": 33}, dict(bm=32, bn=32, wm=16, wn=16, bk=16, pipeline=True)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("sizes, kw", CASES)
def test_sim_matches_evaluate(dtype, sizes, kw):
    op = tcomp.op(BF.replace("bfloat16", dtype))
    op, s = tc_gemm(op, **kw)
    k = tcomp.build(s, target="sim", sizes=sizes)
    rng = np.random.default_rng(1)
    npdt = tcomp.lang.dtypes.BY_NAME[dtype].numpy
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    got = k(A, B)
    want = tcomp.evaluate(op, A, B)
    assert got.dtype == want.dtype
    exact = A.astype(np.float64) @ B.astype(np.float64)
    # both round a float32 sum once to the output type: 1 ulp apart, plus what two float32
    # summation orders may differ by (NumPy's BLAS picks its order by CPU: on a result that
    # cancels, K * 2^-24 of the terms' magnitudes exceeds the result's ulp)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=1e-2, atol=1e-2)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    ulp = np.abs(want.astype(np.float64)) * (2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10)
    order = 2 * sizes["K"] * 2.0 ** -24 * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))
    assert (diff <= ulp + order + 1e-6).all()


def test_lowering_needs_32_lanes():
    op = tcomp.op(BF)
    op, s = tc_gemm(op, bm=32, bn=32, wm=16, wn=16, bk=16, lanes=16)
    with pytest.raises(tcomp.LoweringError, match=r"tensor-core fragments need blockDim.x == 32 "
                                                  r"\(the lanes of a warp\), but it is 16"):
        tcomp.lower(s, sizes={"M": 32, "N": 32, "K": 16})


def test_pipelined_copies_are_cp_async_and_a_missing_wait_is_caught():
    """The ring's copies are cp.async; dropping the loop's cp_async_wait (a
    pipelining bug) makes the sim report the read of a tile still in flight."""
    import dataclasses

    from tcomp.lower import ir
    from tcomp.lower.pipeline import lower, run_passes
    from tcomp.lower.rewriter import Rewriter
    from tcomp.target_sim.executor import run_program

    op, s = tc_gemm(tcomp.op(BF), bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)
    sizes = {"M": 32, "N": 32, "K": 64}
    text = str(tcomp.lower(s, sizes=sizes))
    assert text.count("cp_async(") >= 3 and "cp_async_wait(1)" in text

    class NoWait(Rewriter):
        def stmt_Evaluate(self, e):
            if e.call.fn == "cp_async_wait" and e.call.args[0] == ir.const(1):
                return ir.Seq(())
            return e
    before = lower(s, sizes=sizes, until="insert_barriers")
    broken = dataclasses.replace(before, kernels=tuple(
        dataclasses.replace(k, body=NoWait().stmt(k.body)) for k in before.kernels))
    prog = run_passes(broken, start="insert_barriers")
    rng = np.random.default_rng(0)
    npdt = tcomp.lang.dtypes.bfloat16.numpy
    env = {"A": rng.standard_normal((32, 64)).astype(npdt),
           "B": rng.standard_normal((64, 32)).astype(npdt), "C": np.zeros((32, 32), npdt)}
    with pytest.raises(tcomp.SimError, match="before the asynchronous copy to it completed"):
        run_program(prog, env, {})


def test_zero_filled_tail_copies_are_cp_async():
    """K = 56 (not a multiple of the K tile, but of 8): the tail pieces are
    cp.async with 0 source bytes outside the tensor (zero-fill)."""
    op, s = tc_gemm(tcomp.op(BF), bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=4)
    text = str(tcomp.lower(s, sizes={"M": 100, "N": 72, "K": 56}))
    assert "cp_async(" in text and "? 16 : 0)" in text


def test_warp_tile_not_a_multiple_of_the_intrinsic():
    op, s = tc_gemm(tcomp.op(BF), bm=48, bn=32, wm=24, wn=32, bk=16)
    with pytest.raises(tcomp.LoweringError, match=r"tensorize mma_m16n8k16: the loops from "
                                                  r"'m_i' inward are not a perfect nest of three "
                                                  r"loops around one update \(a guard inside "
                                                  r"them"):
        tcomp.lower(s, sizes={"M": 48, "N": 32, "K": 16})


@pytest.mark.parametrize("sizes", [{"M": 64, "N": 64, "K": 32}, {"M": 70, "N": 72, "K": 40}])
def test_fused_bias_gelu_epilogue_from_the_fragments(sizes):
    """GEMM + bias + GELU as one comprehension: the accumulator stays in
    fragments and the epilogue runs over each lane's own elements."""
    op, s = tc_gemm(tcomp.op(_S.TC_GEMM_GELU), bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=3)
    text = str(tcomp.lower(s, sizes=sizes))
    assert "alloc fragment float32 C[" in text and "erf(" in text
    assert "buffer temp" not in text  # C never reaches global memory
    rng = np.random.default_rng(4)
    npdt = tcomp.lang.dtypes.bfloat16.numpy
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(npdt)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(npdt)
    bias = rng.standard_normal(sizes["N"]).astype(np.float32)
    got = tcomp.build(s, target="sim", sizes=sizes)(A, B, bias).astype(np.float64)
    want = tcomp.evaluate(op, A, B, bias).astype(np.float64)
    # the float32 accumulator is rounded after each k16 step (evaluate: once), so
    # results may differ by a rounding of the bfloat16 output
    assert (np.abs(got - want) <= np.abs(want) * 2.0 ** -7 + 1e-6).all()


def test_element_access_off_the_tile_grid_is_refused():
    """A fragment read at an offset that is not a whole tile (as a buggy
    earlier pass could leave it) is an error, never a read of another lane's
    register."""
    import dataclasses

    from tcomp.lower import ir
    from tcomp.lower.pipeline import lower, run_passes
    from tcomp.lower.rewriter import Rewriter

    op, s = tc_gemm(tcomp.op(BF), bm=32, bn=32, wm=16, wn=32, bk=16)
    sizes = {"M": 32, "N": 32, "K": 16}
    before = lower(s, sizes=sizes, until="tensor_cores")

    class Shift(Rewriter):  # the epilogue's reads of the accumulator, not the mma's
        def stmt_For(self, f):
            return f if f.kind == "tensorize" else self.generic_stmt(f)

        def expr_Load(self, e):
            if e.buffer == "C_fragment":
                i0, i1 = e.indices
                return dataclasses.replace(e, indices=(ir.Bin("+", i0, ir.const(8), ir.int32),
                                                       i1))
            return self.generic_expr(e)
    broken = dataclasses.replace(before, kernels=tuple(
        dataclasses.replace(k, body=Shift().stmt(k.body)) for k in before.kernels))
    with pytest.raises(tcomp.LoweringError, match=r"fragment 'C_fragment': element access "
                                                  r"C_fragment\[.* \+ 8, .*\] does not start a "
                                                  r"16 x 8 tile"):
        run_passes(broken, start="tensor_cores")
