"""Every program of the language tests (all dtypes, every builtin, ternaries,
gathers, half/bfloat16, integer floor division, multi-statement defs) through
the CUDA target with its default schedule: compiled by NVRTC here (no GPU
needed), and run on the GPU against the program's NumPy reference."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.target_cuda.codegen import program_source
from tcomp.target_cuda.compile import compile_source
from tests.lang.programs import CASES

from .test_cpu_cuda import elf_symbols

NAMES = [c.name for c in CASES]
BY = {c.name: c for c in CASES}


def ops(case):
    return list(case.program())


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm90a(name):
    for op in ops(BY[name]):
        k = tcomp.build(tcomp.Schedule(op), target="cuda:sm_90a")
        syms = elf_symbols(k.cubin)
        assert all(kd["name"] in syms for kd in k.meta["kernels"])


def _one_thread_program(dtype, values):
    """Hand-built: one thread stores constant `values[i]` (of `dtype`) to O[i]."""
    body = ir.seq(*(ir.Store("O", (ir.const(i),), ir.Imm(v, dtype)) for i, v in enumerate(values)))
    one = ir.ONE
    k = ir.Kernel("k", ("O",), (), (one, one, one), (one, one, one), body)
    out = ir.Buffer("O", dtype, (ir.const(len(values)),), "global", "output")
    return ir.Program("p", (out,), (k,), (), ("O",), ())


def test_float64_constants_print_as_valid_cuda_literals():
    """A float64 constant whose repr has an exponent and no dot (1e-07) is a
    valid C++ literal as it is; `1e-07.0` would not compile. (No language
    literal produces one today: literals are float32, widened; later passes
    and hand-built IR may.) Each printed literal reads back as the value."""
    values = [1e-07, 1e+20, -2e-09, 1.5e+300, 0.1, 3.0, -0.0]
    src, _ = program_source(_one_thread_program(dtypes.float64, values))
    lits = re.findall(r"O\[\d+\] = (\S+);", src)
    assert lits == ["1e-07", "1e+20", "-2e-09", "1.5e+300", "0.1", "3.0", "-0.0"]
    assert [float(x) for x in lits] == values
    assert ".visible .entry k(" in compile_source(src).ptx


def test_loops_that_do_not_start_at_zero_end_at_lo_plus_extent():
    """The passes build loops from 0; hand-built IR (and later passes) may
    not: `for v in lo:extent` runs v from lo to lo + extent - 1."""
    f32 = dtypes.float32
    i, j, n = ir.Var("i"), ir.Var("j"), ir.Var("N")
    body = ir.seq(
        ir.For("i", ir.const(2), ir.const(3), "serial", ir.Store("O", (i,), ir.Imm(1.0, f32))),
        ir.For("j", n, ir.const(4), "serial", ir.Store("O", (j,), ir.Imm(2.0, f32))))
    one = ir.ONE
    k = ir.Kernel("k", ("O",), ("N",), (one, one, one), (one, one, one), body)
    out = ir.Buffer("O", f32, (ir.Bin("+", n, ir.const(4), ir.int32),), "global", "output")
    src, _ = program_source(ir.Program("p", (out,), (k,), (), ("O",), ()))
    assert "for (int i = 2; i < 2 + 3; ++i) {" in src
    assert "for (int j = N; j < N + 4; ++j) {" in src
    assert ".visible .entry k(" in compile_source(src).ptx


@pytest.mark.parametrize("dt,header", [("half", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h")])
def test_low_precision_only_in_a_conversion_includes_its_header(dt, header):
    """float32 buffers only; the low-precision type appears in a conversion
    (round to half and back): the header is still included, and NVRTC compiles it."""
    op = tcomp.op(f"def c(float(N) A) -> (O) {{ O(i) = float({dt}(A(i))) }}")
    assert {t.dtype.name for t in (*op.inputs, *op.outputs)} == {"float32"}
    k = tcomp.build(tcomp.Schedule(op), target="cuda:sm_90a")
    assert f"#include <{header}>" in k.source
    assert "cvt.rn." in k.ptx  # the rounding conversion is there


def _check(case, got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (case.name, i, g.shape, w.shape)
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} output {i}")
        else:
            rtol, atol = case.tol(i)
            if g.dtype.itemsize == 2:  # half / bfloat16 outputs: their own precision
                eps = 1e-2 if g.dtype == np.float16 else 8e-2
                rtol, atol = max(rtol, eps), max(atol, eps)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"{case.name} output {i}")


@pytest.mark.cuda
@pytest.mark.parametrize("name", NAMES)
def test_runs_on_gpu(name):
    case = BY[name]
    rng = np.random.default_rng()
    arrays = case.inputs(rng, False)
    if case.run is not None:
        # Multi-def sources chain their defs: run each op on the GPU in turn.
        kernels = {op.name: tcomp.build(tcomp.Schedule(op), target="cuda") for op in ops(case)}

        class GPUProgram:
            def __init__(self, prog):
                self.prog = prog

            def __getitem__(self, n):
                return self.prog[n]

        import tcomp as tc
        real = tc.evaluate
        try:
            tc.evaluate = lambda op, *a: kernels[op.name](*a)
            got = case.run(GPUProgram(case.program()), *arrays)
        finally:
            tc.evaluate = real
    else:
        (op,) = ops(case)
        got = tcomp.build(tcomp.Schedule(op), target="cuda")(*arrays)
    _check(case, got, case.ref(*arrays))


@pytest.mark.parametrize("dt", ["uint8", "uint16", "uint32", "uint64", "int8", "int32", "int64"])
def test_abs_of_every_integer_type_compiles(dt):
    """The long fuzz run of issue 22 (seed 3 pair 2314): `abs` of an unsigned int was
    printed as CUDA's `abs`, which NVRTC refuses as ambiguous; an unsigned abs is the
    value itself. Same result on the sim as evaluate."""
    op = tcomp.op(f"def f({dt}(N) X) -> (O) {{ O(i) = abs(X(i)) - X(i) }}")
    k = tcomp.build(tcomp.Schedule(op), target="cuda", sizes={"N": 4})
    assert k.ptx
    X = np.array([0, 1, 2, 3], dtype=dtypes.BY_NAME[dt].numpy)
    np.testing.assert_array_equal(tcomp.build(tcomp.Schedule(op), "sim")(X),
                                  tcomp.evaluate(op, X))
