"""Cross-thread reductions (`AllReduce`) over any number of threads: 1 to 1024,
odd counts, counts that are not multiples of 32 (a group of threads then
starts mid-warp and spans warps), several groups per block (threadIdx.y), and
counts known only at launch.

Each case runs on the sim and, compiled, three ways: NVRTC must accept it (PTX
and cubin, here); the generated CUDA runs on the CPU through the emulator in
emulator.py (std::thread per CUDA thread, shuffles and barriers emulated, the
shuffle masks checked), when a host C++ compiler is present; and on the GPU
(tests marked `cuda`). Two shapes of kernel: a row reduction (every thread of
a group stores the same value), and a row normalisation whose reduced value
lives in each thread's registers and is used by that thread (so every thread,
not just one, must end with the total).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp

from .emulator import HAVE_CXX, run_emulated

COUNTS = [1, 3, 24, 32, 33, 96, 100, 1000, None]  # None: bind the axis itself (N threads)
ARCH = "cuda:sm_90a"

ROWRED = {
    ("+", "float32"): "def rs(float(M,N) A) -> (O) { O(i) +=! A(i, j) }",
    ("max", "int32"): "def rmax(int32(M,N) A) -> (O) { O(i) max=! A(i, j) }",
    ("min", "float64"): "def rmin(double(M,N) A) -> (O) { O(i) min=! A(i, j) }",
    ("*", "float32"): "def rprod(float(M,N) A) -> (O) { O(i) *=! A(i, j) }",
    ("max", "int8"): "def rmax8(int8(M,N) A) -> (O) { O(i) max=! A(i, j) }",
    ("+", "int64"): "def rsum64(int64(M,N) A) -> (O) { O(i) +=! A(i, j) }",
    ("max", "bool"): "def rany(float(M,N) A) -> (O) { O(i) max=! A(i, j) > 2.0 }",
    ("min", "bool"): "def rall(float(M,N) A) -> (O) { O(i) min=! A(i, j) > -2.0 }",
}
NRM = tcomp.op("""def nrm(float(M,N) A) -> (O) {
  S(i) +=! A(i, j)
  O(i, j) = A(i, j) - S(i)
}""")


def _threads(stage, axis, n):
    if n is None:
        stage.bind(axis, "threadIdx.x")
    else:
        stage.bind(stage.split(axis, n)[1], "threadIdx.x")


def row_reduction(src: str, n, rows: int | None = None):
    """One block per `rows` rows (threadIdx.y), the row's reduction over n threads."""
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    (j,) = O.reduce_axes
    if rows is None:
        O.bind(i, "blockIdx.x")
    else:
        io, ii = O.split(i, rows)
        O.bind(io, "blockIdx.x")
        O.bind(ii, "threadIdx.y")
    _threads(O, j, n)
    return s


def row_normalisation(n, rows: int | None = None):
    """S(i) in each thread's registers (local, computed at O's row loop) and
    read back by the same thread: every thread must hold the whole sum."""
    s = tcomp.Schedule(NRM)
    O = s["O"]
    i, j = O.axes
    if rows is None:
        O.bind(i, "blockIdx.x")
        row = i
    else:
        io, row = O.split(i, rows)
        O.bind(io, "blockIdx.x")
        O.bind(row, "threadIdx.y")
    S = s["S"]
    S.set_scope("local")
    S.compute_at(O, row)
    _threads(S, S.reduce_axes[0], n)
    _threads(O, j, n)
    return s


def data(op, m: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    dt = op.inputs[0].dtype.numpy
    if np.issubdtype(dt, np.integer):
        most = min(1000, np.iinfo(dt).max)  # (int8 values travel through int shuffles)
        return rng.integers(-most, most, (m, n)).astype(dt)
    if op.name == "rprod":
        return rng.uniform(0.9, 1.1, (m, n)).astype(dt)
    return rng.standard_normal((m, n)).astype(dt)


def width(n) -> int:
    """A row length that leaves the last thread group partly idle (or, for a
    runtime count, that is the count)."""
    return 45 if n is None else 2 * n + max(1, n // 3)


def check(op, got, want):
    if np.issubdtype(want.dtype, np.integer) or want.dtype == bool:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# (kernel maker, op, rows per block, count) for the compiled runs
CASES = [pytest.param(("rowred", ("+", "float32"), None, n), id=f"sum-{n or 'N'}") for n in COUNTS]
CASES += [
    pytest.param(("rowred", ("+", "float32"), 3, 24), id="sum-24x3rows"),
    pytest.param(("rowred", ("+", "float32"), 5, 8), id="sum-8x5rows"),
    pytest.param(("rowred", ("+", "float32"), 3, 64), id="sum-64x3rows"),
    pytest.param(("rowred", ("+", "float32"), 2, 96), id="sum-96x2rows"),
    pytest.param(("rowred", ("+", "float32"), 2, None), id="sum-Nx2rows"),
    pytest.param(("rowred", ("max", "int32"), None, 24), id="max-int32-24"),
    pytest.param(("rowred", ("min", "float64"), None, 100), id="min-float64-100"),
    pytest.param(("rowred", ("*", "float32"), None, 33), id="prod-33"),
    pytest.param(("rowred", ("max", "int8"), None, 24), id="max-int8-24"),
    pytest.param(("rowred", ("+", "int64"), 3, 33), id="sum-int64-33x3rows"),
    pytest.param(("rowred", ("max", "bool"), None, 24), id="any-bool-24"),
    pytest.param(("rowred", ("min", "bool"), 3, 100), id="all-bool-100x3rows"),
    pytest.param(("rowred", ("max", "bool"), None, None), id="any-bool-N"),
    pytest.param(("nrm", None, None, 24), id="nrm-24"),
    pytest.param(("nrm", None, None, 100), id="nrm-100"),
    pytest.param(("nrm", None, None, None), id="nrm-N"),
    pytest.param(("nrm", None, 3, 24), id="nrm-24x3rows"),
    pytest.param(("nrm", None, 2, 64), id="nrm-64x2rows"),
]


def make(case):
    kind, key, rows, n = case
    if kind == "rowred":
        s = row_reduction(ROWRED[key], n, rows)
    else:
        s = row_normalisation(n, rows)
    m = 3 if rows is None else 2 * rows + 1  # a partial last block of rows
    return s, data(s.op, m, width(n))


# ------------------------------------------------------------------ sim
@pytest.mark.parametrize("case", CASES)
def test_allreduce_sim(case):
    s, a = make(case)
    check(s.op, tcomp.build(s, target="sim")(a), tcomp.evaluate(s.op, a))


@pytest.mark.parametrize("n", [0, 1, 2, 31, 33])
def test_allreduce_runtime_count_sim(n):
    """One build, the count from the input: N = 0 still launches one thread per
    row, which stores the identity (-inf for max)."""
    s = row_reduction("def rm(float(M,N) A) -> (O) { O(i) max=! A(i, j) }", None)
    a = data(s.op, 3, n)
    got = tcomp.build(s, target="sim")(a)
    np.testing.assert_array_equal(got, tcomp.evaluate(s.op, a))


# ------------------------------------------------------------------ NVRTC
@pytest.mark.parametrize("n", COUNTS)
def test_allreduce_compiles(n):
    """Every count compiles to PTX and a cubin; the shape of the code follows the
    count: a butterfly alone for powers of two up to 32, warp partials through
    shared memory for multiples of 32, the segmented tree otherwise."""
    k = tcomp.build(row_reduction(ROWRED[("+", "float32")], n), target=ARCH)
    assert k.ptx and k.cubin[:4] == b"\x7fELF"
    src = k.source
    if n == 1:
        assert "shfl" not in src
    elif n == 32:
        assert "__shfl_xor_sync(0xffffffffu" in src and "__shared__" not in src
    elif n == 96:
        assert "__shared__ float tc_red" in src and "_part[3];" in src
        assert "(threadIdx.x & 31) < 3 ?" in src  # lanes past the 3 warps hold the identity
    else:
        assert "__shfl_down_sync" in src and "__shfl_sync" in src
    if n is None:
        assert "__launch_bounds__" not in src and "(int)blockDim.x" in src
    else:
        assert f"__launch_bounds__({n})" in src


@pytest.mark.parametrize("case", CASES)
def test_allreduce_compiles_every_case(case):
    s, _ = make(case)
    assert tcomp.build(s, target=ARCH).cubin[:4] == b"\x7fELF"


# ------------------------------------------------------------------ emulated CUDA
@pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++) to emulate CUDA with")
@pytest.mark.parametrize("case", CASES)
def test_allreduce_emulated(case):
    s, a = make(case)
    k = tcomp.build(s, target=ARCH)
    check(s.op, run_emulated(k, a), tcomp.evaluate(s.op, a))


@pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++) to emulate CUDA with")
def test_allreduce_emulated_runtime_counts():
    """One build, several counts at run time, including 0 (the identity) and
    counts above 32 that are not multiples of it."""
    s = row_reduction("def rm(float(M,N) A) -> (O) { O(i) max=! A(i, j) }", None)
    k = tcomp.build(s, target=ARCH)
    for n in (0, 7, 32, 77):
        a = data(s.op, 2, n)
        np.testing.assert_array_equal(run_emulated(k, a), tcomp.evaluate(s.op, a))


def test_emulator_checks_masks():
    """The emulator is only useful if it rejects a wrong mask: a butterfly over a
    partial warp with the full mask must fail there."""
    if not HAVE_CXX:
        pytest.skip("no host C++ compiler (g++)")
    s = row_reduction(ROWRED[("+", "float32")], 8, rows=5)  # 40 threads: a partial warp
    k = tcomp.build(s, target=ARCH)
    broken = re.sub(r"__shfl_xor_sync\(\w+_mask,", "__shfl_xor_sync(0xffffffffu,", k.source)
    assert broken != k.source
    k.source = broken
    with pytest.raises(AssertionError,
                       match="shuffle mask 0xffffffff, but the warp has lanes 0xff"):
        run_emulated(k, data(s.op, 11, 8))


# ------------------------------------------------------------------ GPU
@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES)
def test_allreduce_gpu(case):
    s, a = make(case)
    k = tcomp.build(s, target="cuda")
    check(s.op, k(a), tcomp.evaluate(s.op, a))


@pytest.mark.cuda
def test_allreduce_gpu_runtime_counts():
    s = row_reduction("def rm(float(M,N) A) -> (O) { O(i) max=! A(i, j) }", None)
    k = tcomp.build(s, target="cuda")
    for n in (0, 1, 7, 32, 77, 1000, 1024):
        a = data(s.op, 5, n)
        np.testing.assert_array_equal(k(a), tcomp.evaluate(s.op, a))
    with pytest.raises(tcomp.CudaError, match=r"kernel rm_O: a block of 1025x1x1 = 1025 threads "
                                              r"\(blockDim.x: max\(N, 1\) = 1025\) exceeds the "
                                              r"device's 1024 threads per block"):
        k(data(s.op, 2, 1025))
