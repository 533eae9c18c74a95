"""Every program of the language tests (all dtypes, every builtin, ternaries,
gathers, half/bfloat16, integer floor division, multi-statement defs) through
the CUDA target with its default schedule: compiled by NVRTC here (no GPU
needed), and run on the GPU against the program's NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
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
