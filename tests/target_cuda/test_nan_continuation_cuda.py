"""The continuing float `max=`/`min=` on a NaN current value
(tests/lower/test_nan_continuation.py) as CUDA: the generated C++ on the CPU
emulator (fminf/fmaxf and the identity literal as emitted), and on a GPU
(marked `cuda`). Every schedule must give the documented answer: the row's
reduction from the identity, then fmin/fmax with the current value."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.lower.test_nan_continuation import SCHEDULES, assert_same, data, expected, program, \
    schedule

from .emulator import HAVE_CXX, run_emulated

needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++)")


def test_generated_source_starts_from_the_identity():
    """The register accumulator of the default schedule starts at
    fminf(current, +inf) (the identity's bit pattern): a NaN start becomes
    +inf before the row's values meet it."""
    src = tcomp.build(schedule(program("min"), "default"), target="cuda").source
    assert "S_acc[0] = fminf(S[m], __int_as_float(0x7f800000));" in src


@needs_cxx
@pytest.mark.parametrize("name", ["default", "memory", "allreduce", "rfactor_whole"])
@pytest.mark.parametrize("op", ["min", "max"])
def test_emulated_cuda_follows_the_rule(op, name):
    a, b = data()
    k = tcomp.build(schedule(program(op), name), target="cuda")
    assert_same(run_emulated(k, a, b), expected(op, a, b), f"emulated {op}, {name}")


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("ctype,dtype", [("float", np.float32), ("double", np.float64)])
def test_gpu_follows_the_rule(op, name, ctype, dtype):
    a, b = data(dtype)
    k = tcomp.build(schedule(program(op, ctype), name), target="cuda")
    assert_same(k(a, b), expected(op, a, b), f"GPU {op} {ctype}, schedule {name}")


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["min", "max"])
def test_gpu_empty_rows_give_the_identity_on_a_nan(op):
    a, b = data()
    a = a[:, :0]
    for name in ("default", "memory", "allreduce"):
        k = tcomp.build(schedule(program(op), name), target="cuda")
        assert_same(k(a, b), expected(op, a, b), f"GPU {op}, schedule {name}")
