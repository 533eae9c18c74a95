"""Every error of the fp8 Hopper GEMM (schedule/wgmma_inputs.py, the plan, the
schedule helper, the sim's wgmma), each naming the remedy."""
from __future__ import annotations

import dataclasses

import pytest

import tcomp
from tcomp.build import SimKernel
from tcomp.errors import LoweringError, ScheduleError, SimError
from tcomp.kernels.gemm_fp8_sm90 import source
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule
from tcomp.lower import ir

from ..kernels.test_hopper_fp8 import fp8_data
from ..target_sim.hopper import _Edit
from .test_hopper_schedule_errors import err

E4 = "float8_e4m3fn"


def _tiled(a_shape="M,K", a_read="m, k", b_shape="N,K", b_read="n, k", a=E4, b=E4, bk=128,
           out="float32(M, N) C"):
    o = tcomp.op(f"def mm({a}({a_shape}) A, {b}({b_shape}) B) -> ({out}) "
                 f"{{ C(m, n) +=! A({a_read}) * B({b_read}) }}")
    s = tcomp.Schedule(o)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 128, 128)
    w, mw = C.split(mi, 64)
    ko, ki = C.split(k, bk)
    C.reorder(mo, no, w, ko, mw, ni, ki)
    return s, C, mw


def test_k32_takes_fp8_inputs():
    _, C, mw = _tiled(a="bfloat16", b="bfloat16")
    err(lambda: C.tensorize(mw, "wgmma_m64n128k32"), ScheduleError,
        "tensorize: wgmma_m64n128k32 takes fp8 inputs (float8_e4m3fn or float8_e5m2, either "
        "for either operand), but 'A' and 'B' are bfloat16 and bfloat16; bfloat16 and float16 "
        "take wgmma_m64nNk16")
    _, C, mw = _tiled(b="bfloat16")
    err(lambda: C.tensorize(mw, "wgmma_m64n128k32"), ScheduleError,
        "but 'A' and 'B' are float8_e4m3fn and bfloat16")


def test_k16_on_fp8_inputs_names_k32():
    _, C, mw = _tiled(bk=64)
    err(lambda: C.tensorize(mw, "wgmma_m64n128k16"), ScheduleError,
        "tensorize: wgmma_m64n128k16 takes bfloat16 or float16 inputs (both the same), but 'A' "
        "and 'B' are float8_e4m3fn and float8_e4m3fn; fp8 inputs take wgmma_m64nNk32")


def test_k32_needs_the_128_value_k_tile():
    _, C, mw = _tiled(bk=64)
    err(lambda: C.tensorize(mw, "wgmma_m64n128k32"), ScheduleError,
        "tensorize: loop 'k_i' (of 'k') has 64 iterations; wgmma_m64n128k32 needs 128 (split "
        "'k' by 128)")


@pytest.mark.parametrize("which", ["A", "B"])
def test_mn_major_fp8_operands_are_refused_with_the_remedy(which):
    if which == "A":
        _, C, mw = _tiled(a_shape="K,M", a_read="k, m")
        text = "'A' is read at (k, m), m-major"
    else:
        _, C, mw = _tiled(b_shape="K,N", b_read="k, n")
        text = "'B' is read at (k, n), n-major"
    err(lambda: C.tensorize(mw, "wgmma_m64n128k32"), ScheduleError,
        f"tensorize: wgmma_m64n128k32: {text}; wgmma reads fp8 operands K-major only (A(m, k), "
        f"B(n, k)): pass '{which}' with its reduction axis innermost (a transposed copy, e.g. a "
        f"stage {which}T computed first)")
    o = tcomp.op(f"def mm({E4}(K,M) A, {E4}(N,K) B) -> (float32(M, N) C) "
                 f"{{ C(m, n) +=! A(k, m) * B(n, k) }}")
    with pytest.raises(ScheduleError, match="wgmma reads fp8 operands K-major only"):
        hopper_schedule(o)


def test_fp8_wgmma_at_a_consumers_loop_is_refused():
    o = tcomp.op(f"def f({E4}(M,K) A, {E4}(N,K) B) -> (D) {{ T(m, n) +=! float(A(m, k)) * "
                 f"float(B(n, k))  D(m, n) = bfloat16(T(m, n)) }}")
    s = tcomp.Schedule(o)
    s["T"].compute_at(s["D"], s["D"].axes[0])
    T = s["T"]
    err(lambda: T.tensorize(T.axes[0], "wgmma_m64n64k32"), ScheduleError,
        "tensorize: wgmma_m64n64k32 (fp8) is built for the Hopper GEMM; a stage computed at "
        "another's loop takes wgmma_m64nNk16 (bfloat16 or float16)")


def test_hopper_schedule_bk_must_match_the_inputs():
    o = tcomp.op(source())
    with pytest.raises(LoweringError, match=r"gemm_sm90: bk must be 128 for float8_e4m3fn "
                                            r"inputs \(one 128-byte swizzled row\), got 64"):
        hopper_schedule(o, GemmConfig(bk=64), stage="T")


def test_an_fp8_output_is_refused_with_the_type_to_declare():
    o = tcomp.op(f"def mm({E4}(M,K) A, {E4}(N,K) B) -> (C) {{ C(m, n) +=! A(m, k) * B(n, k) }}")
    err(lambda: tcomp.lower(hopper_schedule(o)), LoweringError,
        "its output 'C' is float8_e4m3fn; the TMA-store epilogue writes bfloat16, float16 or "
        "float32 (a product of fp8 values is fp8: declare the output's type, e.g. -> "
        "(bfloat16(M, N) C))")


def test_sim_refuses_an_mn_major_fp8_wgmma():
    """Hand-edited IR (the schedule refuses it): trans_a = 1 on an fp8 wgmma."""
    o = tcomp.op(source())
    prog = tcomp.lower(_scaled(o), sizes={"M": 64, "N": 64, "K": 128})
    (k,) = prog.kernels

    def trans(s, role):
        if s.call.fn.startswith("wgmma_m64n"):
            args = s.call.args
            return ir.Evaluate(dataclasses.replace(
                s.call, args=args[:4] + (ir.Imm(1, ir.int32),) + args[5:]))
        return s
    k = dataclasses.replace(k, body=_Edit(trans).stmt(k.body))
    sim = SimKernel.from_program(dataclasses.replace(prog, kernels=(k,)))
    with pytest.raises(SimError, match="an fp8 wgmma operand is K-major only"):
        sim(*fp8_data(64, 64, 128))


def _scaled(o):
    from tcomp.kernels.gemm_fp8_sm90 import fp8_schedule
    return fp8_schedule(o, GemmConfig(bm=64, bn=64, consumers=1, stages=2))


def test_unknown_k32_intrinsic_lists_the_k32_names():
    _, C, mw = _tiled()
    err(lambda: C.tensorize(mw, "wgmma_m64n96k32"), ScheduleError,
        "tensorize: unknown intrinsic 'wgmma_m64n96k32'; the Hopper path takes wgmma_m64n64k32, "
        "wgmma_m64n128k32, wgmma_m64n256k32")
