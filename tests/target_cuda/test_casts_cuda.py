"""Casts on the CUDA target: the generated C++ saturates float -> integer
conversions (target_cuda/casts.py) and gives the table of
tests/lang/cast_table.py exactly, through the CPU emulator (which models the
`_rz` intrinsics as PTX cvt.rzi) and, on a GPU, on the device itself."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes

from tests.lang.cast_table import (FLOATS, INT_VALUES, INTS, LITERALS, float_expected,
                                   float_program, float_values, int_expected, int_program,
                                   literal_program)
from tests.lang.test_casts import assert_same
from .emulator import HAVE_CXX, run_emulated

needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++) to emulate CUDA")


def schedules(op):
    """The default schedule, and every stage on blocks x threads."""
    yield "default", tcomp.Schedule(op)
    s = tcomp.Schedule(op)
    for t in op.outputs:
        (i,) = s[t.name].axes
        io, ii = s[t.name].split(i, 32)
        s[t.name].bind(io, "blockIdx.x")
        s[t.name].bind(ii, "threadIdx.x")
    yield "threads", s


def test_float_to_integer_casts_use_the_saturating_intrinsics():
    src = tcomp.build(tcomp.Schedule(float_program("float32")), target="cuda").source
    for t, text in [("int8", "((signed char)max(-128, min(127, __float2int_rz(X[i]))))"),
                    ("int16", "((short)max(-32768, min(32767, __float2int_rz(X[i]))))"),
                    ("uint8", "((unsigned char)min(255u, __float2uint_rz(X[i])))"),
                    ("uint16", "((unsigned short)min(65535u, __float2uint_rz(X[i])))"),
                    ("int32", "__float2int_rz(X[i])"), ("uint32", "__float2uint_rz(X[i])"),
                    ("int64", "(X[i] != X[i] ? 0 : __float2ll_rz(X[i]))"),
                    ("uint64", "(X[i] != X[i] ? 0 : __float2ull_rz(X[i]))")]:
        assert f"O_{t}[i] = {text};" in src, t
    assert "(signed char)(" not in src and "((int)(" not in src
    assert "O_bool[i] = X[i] != 0.0f;" in src
    double = tcomp.build(tcomp.Schedule(float_program("float64")), target="cuda")
    assert "O_int64[i] = (X[i] != X[i] ? 0 : __double2ll_rz(X[i]));" in double.source
    assert "O_uint8[i] = ((unsigned char)min(255u, (X[i] != X[i] ? 0 : __double2uint_rz(X[i]))));" \
        in double.source
    half = tcomp.build(tcomp.Schedule(float_program("float16")), target="cuda").source
    assert "O_int8[i] = ((signed char)max(-128, min(127, __float2int_rz(((float)(__half2float(" \
           "X[i])))))));" in half
    assert double.cubin[:4] == b"\x7fELF"  # NVRTC accepts it


def test_integer_casts_stay_c_casts():
    src = tcomp.build(tcomp.Schedule(int_program("int64")), target="cuda").source
    assert "O_int8[i] = ((signed char)(X[i]));" in src
    assert "O_uint32[i] = ((unsigned int)(X[i]));" in src


@needs_cxx
@pytest.mark.parametrize("src", ["float32", "float64"])  # the emulator has no half types
def test_emulated_cuda_gives_the_cast_table(src):
    op = float_program(src)
    x = float_values(src)
    want = float_expected(src, x)
    for name, s in schedules(op):
        assert_same(run_emulated(tcomp.build(s, target="cuda"), x), want, f"{src}, {name}")


@needs_cxx
@pytest.mark.parametrize("src", sorted(INT_VALUES))
def test_emulated_cuda_wraps_integers(src):
    op = int_program(src)
    x = np.array(INT_VALUES[src], dtypes.BY_NAME[src].numpy)
    assert_same(run_emulated(tcomp.build(tcomp.Schedule(op), target="cuda"), x),
                int_expected(x), src)


@needs_cxx
def test_emulated_cuda_gives_the_folded_literal_casts():
    got = run_emulated(tcomp.build(tcomp.Schedule(literal_program()), target="cuda"),
                       np.zeros(2, np.float32))
    for g, (text, dt, value) in zip(got, LITERALS):
        assert g.tolist() == [value, value], text


# ------------------------------------------------------------------ on a GPU
@pytest.mark.cuda
@pytest.mark.parametrize("src", FLOATS)
def test_gpu_gives_the_cast_table_for_every_integer_type(src):
    op = float_program(src)
    x = float_values(src)
    want = float_expected(src, x)
    assert len(want) == len(INTS) + 1
    for name, s in schedules(op):
        got = tcomp.build(s, target="cuda")(x)
        assert_same(got, want, f"GPU, {src}, {name}")
        assert_same(tcomp.evaluate(op, x), want, f"evaluate, {src}")


@pytest.mark.cuda
@pytest.mark.parametrize("src", sorted(INT_VALUES))
def test_gpu_wraps_integers(src):
    op = int_program(src)
    x = np.array(INT_VALUES[src], dtypes.BY_NAME[src].numpy)
    assert_same(tcomp.build(tcomp.Schedule(op), target="cuda")(x), int_expected(x), src)


@pytest.mark.cuda
def test_gpu_gives_the_folded_literal_casts():
    got = tcomp.build(tcomp.Schedule(literal_program()), target="cuda")(np.zeros(2, np.float32))
    for g, (text, dt, value) in zip(got, LITERALS):
        assert g.tolist() == [value, value], text


@needs_cxx
def test_a_guarded_cast_of_a_select_keeps_the_select_whole():
    """The NaN guard `x != x ? 0 : __double2int_rz(x)` printed x unbracketed: with x a
    select `c ? a : b` it read `c ? a : b != c ? a : b ? 0 : ...`, another expression
    (the long fuzz run of issue 22, seed 1 pair 1979: NVRTC refused an ambiguous min;
    here it computes -1 where the cast gives -3)."""
    op = tcomp.op("def f(double(N) X) -> (O) { O(i) = int32(X(i) > 0 ? X(i) : X(i) * 2) }")
    k = tcomp.build(tcomp.Schedule(op), target="cuda")
    x = np.array([-1.5, 2.5, float("nan")])
    want = tcomp.evaluate(op, x)
    assert want.tolist() == [-3, 2, 0]
    np.testing.assert_array_equal(run_emulated(k, x), want)  # before: [-1, 2, -2147483648]
