"""In-place updates through the CUDA target (the same lowering as the sim):
the generated source shows the snapshot kernel and the statement reading it
(compiled by NVRTC here, no GPU needed); on a GPU, the README's reproducer
with its index bound to threads and blocks gives the old-values result."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.lower.test_inplace import (A7, DIAG, HOWS, INIT, REDUCE, SHIFT, SHIFT_WANT,
                                      reduce_schedules, shift_schedule)

from .test_cpu_cuda import elf_symbols

SNAPSHOT_KERNELS = """\
extern "C" __global__ void __launch_bounds__(1) f_O_1_snap(const float* __restrict__ O, float* O_snap, int N) {
  for (int ax0 = 0; ax0 < N; ++ax0) {
    O_snap[ax0] = O[ax0];
  }
}
extern "C" __global__ void __launch_bounds__(4) f_O_1(float* O, const float* __restrict__ O_snap, int N) {
  const int i_o = blockIdx.x;
  const int i_i = threadIdx.x;
  if (i_o * 4 + i_i < N - 1) {
    O[i_o * 4 + i_i + 1] = O_snap[i_o * 4 + i_i + 1] + O_snap[i_o * 4 + i_i];
  }
}
"""


def test_source_shows_the_snapshot():
    """The statement reads only O_snap, copied from O by the kernel before it."""
    k = tcomp.build(shift_schedule("blocks_threads"), target="cuda")
    assert k.source.endswith(SNAPSHOT_KERNELS), k.source
    assert [kd["name"] for kd in k.meta["kernels"]] == ["f_O", "f_O_1_snap", "f_O_1"]
    assert {"f_O", "f_O_1_snap", "f_O_1"} <= elf_symbols(k.cubin)
    assert ".entry f_O_1_snap" in k.ptx


def test_free_in_place_update_has_no_snapshot():
    op = tcomp.op("def g(float(N) A) -> (O) { O(i) = A(i) O(i) = O(i) * O(i) + 1.0 }")
    k = tcomp.build(tcomp.Schedule(op), target="cuda")
    assert [kd["name"] for kd in k.meta["kernels"]] == ["g_O", "g_O_1"]
    assert "snap" not in k.source


# ----------------------------------------------------------------- on the GPU
def _gpu_check(op, s, arrays, sizes=None):
    got = tcomp.build(s, target="cuda", sizes=sizes)(*arrays)
    want = tcomp.evaluate(op, *arrays)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-4, atol=1e-4)  # (float32 sums, FMA on the GPU)


@pytest.mark.cuda
@pytest.mark.parametrize("how", HOWS)
def test_reproducer_on_gpu(how):
    sizes = {"N": 7} if how == "threads" else None
    got = tcomp.build(shift_schedule(how), target="cuda", sizes=sizes)(A7)
    np.testing.assert_array_equal(np.asarray(got), SHIFT_WANT)


@pytest.mark.cuda
def test_reproducer_with_many_threads_on_gpu():
    """A million elements over 256-thread blocks, the snapshot copied by the
    same grid: any thread that saw a neighbour's new value would show up."""
    s = tcomp.Schedule(SHIFT)
    for name in ("O.1.snap", "O.1"):
        st = s[name]
        (ax,) = st.axes
        o, i = st.split(ax, 256)
        st.bind(o, "blockIdx.x")
        st.bind(i, "threadIdx.x")
    A = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    got = np.asarray(tcomp.build(s, target="cuda")(A))
    want = A.copy()
    want[1:] = A[1:] + A[:-1]
    np.testing.assert_array_equal(got, want)


@pytest.mark.cuda
@pytest.mark.parametrize("opname", ["REDUCE", "INIT"])
@pytest.mark.parametrize("which", range(4))
def test_reductions_reading_their_own_tensor_on_gpu(opname, which):
    op = {"REDUCE": REDUCE, "INIT": INIT}[opname]
    name, s = reduce_schedules(op)[which]
    sizes = {"M": 37, "N": 53}
    A = np.random.default_rng(which).standard_normal((37, 53)).astype(np.float32)
    _gpu_check(op, s, [A], sizes if name == "rfactor" else None)


@pytest.mark.cuda
def test_diagonal_shift_on_gpu():
    s = tcomp.Schedule(DIAG)
    O1 = s["O.1"]
    i, j = O1.axes
    io, jo, ii, ji = O1.tile(i, j, 8, 32)
    O1.bind(io, "blockIdx.y")
    O1.bind(jo, "blockIdx.x")
    O1.bind(ii, "threadIdx.y")
    O1.bind(ji, "threadIdx.x")
    A = np.random.default_rng(5).standard_normal((61, 97)).astype(np.float32)
    _gpu_check(DIAG, s, [A])
