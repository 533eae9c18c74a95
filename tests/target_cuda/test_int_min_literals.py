"""The most negative int32 / int64 constants as C++ (issue 22, fuzz seed 11 pair
72673): `-2147483648` is unary minus on a `long` literal in C++, so
max(int, -2147483648) matched four overloads and NVRTC refused the kernel of
`k max=! (!(B(0)) - j_piece(j))` rfactored (its identity, INT_MIN, inside max).
They are printed as (-2147483647 - 1) and (-9223372036854775807LL - 1)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.target_cuda.codegen import _Kernel

SRC = """def f(float(M, M) j_part, float(M) A, int32(N) B, uint8(M) j_piece) -> (k_local_acc) {
    k_local_acc max=! (!(B(0)) - j_piece(j))
}"""


SCHEDULE = """{"tcomp_schedule": 1, "directives": [
  {"kind": "Split", "stage": "k_local_acc", "axis": "j", "factor": 8, "nparts": null},
  {"kind": "Rfactor", "stage": "k_local_acc", "axis": "j_i"},
  {"kind": "Tile", "stage": "k_local_acc.rf", "x": "j_i", "y": "j_o", "x_factor": 5,
   "y_factor": 4},
  {"kind": "ComputeAt", "stage": "k_local_acc.rf", "target": "k_local_acc", "axis": "j_i"}]}"""


def _schedule():
    return tcomp.Schedule.from_json(tcomp.op(SRC), SCHEDULE)


def test_the_rfactored_max_reduction_compiles():
    k = tcomp.build(_schedule(), target="cuda", sizes={"N": 2, "M": 3})
    assert "(-2147483647 - 1)" in k.source and "-2147483648" not in k.source


def test_and_computes_what_evaluate_does_on_the_sim():
    s = _schedule()
    rng = np.random.default_rng(0)
    args = (rng.random((3, 3), dtype=np.float32), rng.random(3, dtype=np.float32),
            np.array([0, 1], np.int32), rng.integers(0, 200, 3).astype(np.uint8))
    got = tcomp.build(s, target="sim", sizes={"N": 2, "M": 3})(*args)
    assert np.array_equal(np.asarray(got), np.asarray(tcomp.evaluate(s.op, *args)))


@pytest.mark.parametrize("dt,value,text", [("int32", -2 ** 31, "(-2147483647 - 1)"),
                                           ("int64", -2 ** 63, "(-9223372036854775807LL - 1)"),
                                           ("int32", -2 ** 31 + 1, "-2147483647")])
def test_literals(dt, value, text):
    assert _Kernel.imm(None, ir.Imm(value, getattr(dtypes, dt))) == text


@pytest.mark.cuda
def test_on_the_gpu():
    s = _schedule()
    args = (np.zeros((3, 3), np.float32), np.zeros(3, np.float32), np.array([0, 1], np.int32),
            np.array([3, 250, 7], np.uint8))
    got = tcomp.build(s, target="cuda", sizes={"N": 2, "M": 3})(*args)
    assert np.array_equal(np.asarray(got), np.asarray(tcomp.evaluate(s.op, *args)))
