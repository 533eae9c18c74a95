"""Issue 22's long fuzz run, seed 6 pair 25243: a shared copy computed for an empty
range (`k in 1:ax0` at ax0 = 1, sizes bound at build) has a region of 0 elements.
The sim ran it; the CUDA source declared `__shared__ int f_o_i_snap_shared[0]`, which
NVRTC refuses ("the size of an array must be greater than zero"). A static shared or
local array is declared with at least one element now (nothing accesses it)."""
import json

import numpy as np

import tcomp

from .emulator import run_emulated

OP = tcomp.op("""def f(double(N, ax0) A) -> (f_o_i) {
    f_o_i(i, k) = (A(0, i) < A(0, i)) + ax1 where ax1 = 4, k in 0:ax0
    f_o_i(j, k) max= int32((int64(!(2) * 0.1) != !(0 ? f_o_i(0, k - 1) : ax0))) where k in 1:ax0, j in 0:ax0
}""")
DIRECTIVES = [
    {"kind": "CacheRead", "tensor": "f_o_i_snap", "scope": "shared", "readers": ["f_o_i.1"]},
    {"kind": "Bind", "stage": "f_o_i.1.snap", "axis": "ax0", "tag": "threadIdx.x"},
    {"kind": "ComputeAt", "stage": "f_o_i_snap.shared", "target": "f_o_i.1", "axis": "j"},
    {"kind": "CacheRead", "tensor": "f_o_i", "scope": "shared", "readers": ["f_o_i.1.snap"]},
    {"kind": "Split", "stage": "f_o_i_snap.shared", "axis": "ax1", "factor": None, "nparts": 16},
    {"kind": "CacheRead", "tensor": "f_o_i", "scope": "global", "readers": ["f_o_i.shared"]},
    {"kind": "ComputeAt", "stage": "f_o_i.shared", "target": "f_o_i.1.snap", "axis": "ax0"}]
SIZES = {"N": 3, "ax0": 1}


def test_a_shared_buffer_of_an_empty_region_compiles_and_runs():
    s = tcomp.Schedule.from_json(OP, json.dumps({"tcomp_schedule": 1,
                                                 "directives": DIRECTIVES}))
    assert "alloc shared int32 f_o_i_snap_shared[1, 0]" in str(tcomp.lower(s, sizes=SIZES))
    k = tcomp.build(s, "cuda", sizes=SIZES)
    assert "__shared__ __align__(16) int f_o_i_snap_shared[1];" in k.source
    A = np.linspace(-1.0, 1.0, 3).reshape(3, 1)
    want = tcomp.evaluate(OP, A)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=SIZES)(A), want)
    np.testing.assert_array_equal(run_emulated(k, A), want)
