"""Loops whose extent depends on the sizes, bound to threads (block dimensions
known only at launch), and unroll hints for loops of runtime extent.

The block of such a kernel is a size expression in the IR, in the CUDA
sidecar and in the sim; `__launch_bounds__` is emitted only for constant
blocks; the sim and the CUDA runtime check each launch against the device's
limits (`launch_problem`, tested here with fake limits, since the GPU path
needs a GPU).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower import unroll
from tcomp.lower.launch import CUDA_LIMITS, LaunchLimits, launch_problem
from tcomp.target_cuda.kernel import check_launch, size_text

from .util import TWO_STAGES, inputs_for, run_sim

GOLDEN = Path(__file__).parent / "golden" / "runtime_launch"  # (not examples of test_golden_ir)

CONV = tcomp.op("""def conv(float(N,C,H,W) I, float(K,C,KH,KW) Wt) -> (O) {
  O(n, k, h, w) +=! I(n, c, h + r, w + s) * Wt(k, c, r, s)
}""")
SCALE = tcomp.op("def scale(float(M,N) A) -> (O) { O(i, j) = A(i, j) * 2.0 }")


def conv_rows_on_threads(split_w: int | None = 4):
    """One (n, k) per block; output rows h on threadIdx.y (H - KH + 1 of them,
    known only at launch); columns split by a constant onto threadIdx.x."""
    s = tcomp.Schedule(CONV)
    O = s["O"]
    n, k, h, w = O.axes
    O.bind(n, "blockIdx.y")
    O.bind(k, "blockIdx.x")
    O.bind(h, "threadIdx.y")
    if split_w is None:
        O.bind(w, "threadIdx.x")
    else:
        wo, wi = O.split(w, split_w)
        O.reorder(n, k, h, wi, wo)
        O.bind(wi, "threadIdx.x")
    return s


def golden(name: str, text: str, update: bool):
    path = GOLDEN / name
    if update:
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    else:
        assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
        assert text == path.read_text(), (f"{name} differs from {path} (rerun with "
                                          f"--update-golden if intended, and review the diff)")


# ------------------------------------------------------------------ golden IR / CUDA
def test_golden_ir_runtime_thread_extent(update_golden):
    """The block's y dimension is the loop's extent, H - KH + 1; the rows need no
    guard (the block has exactly that many), the split columns keep theirs."""
    text = str(tcomp.lower(conv_rows_on_threads(), sizes={"KW": 3}))
    golden("bind_runtime_extent.txt", text, update_golden)
    assert "grid=(K, N, 1) block=(4, H - KH + 1, 1)" in text
    assert "let h = threadIdx.y" in text
    assert "h < " not in text  # no guard on the rows: the block has exactly H - KH + 1


def test_golden_cuda_runtime_thread_extent(update_golden):
    """No `__launch_bounds__` (the block size is not known when compiling), and the
    same kernel built with every size bound has them."""
    k = tcomp.build(conv_rows_on_threads(), target="cuda:sm_90a", sizes={"KW": 3})
    golden("bind_runtime_extent.cu", k.source, update_golden)
    assert "__launch_bounds__" not in k.source
    assert 'extern "C" __global__ void conv_O(' in k.source
    bound = tcomp.build(conv_rows_on_threads(), target="cuda:sm_90a",
                        sizes={"KW": 3, "H": 10, "KH": 3})
    assert "__launch_bounds__(32)" in bound.source  # 4 x (10 - 3 + 1)


def test_sidecar_block_is_a_size_expression(tmp_path):
    """The exported sidecar describes the block like the grid: JSON size
    expressions that `tcomp.load` evaluates."""
    k = tcomp.build(conv_rows_on_threads(), target="cuda:sm_90a", sizes={"KW": 3})
    (kd,) = k.meta["kernels"]
    assert kd["block"] == [4, ["+", ["-", "H", "KH"], 1], 1]
    assert kd["grid"] == ["K", "N", 1]
    assert k.meta["format"] == 3
    k.export(str(tmp_path / "conv.cubin"))
    loaded = tcomp.load(str(tmp_path / "conv.cubin"))
    assert loaded.meta["kernels"][0]["block"] == kd["block"]
    assert size_text(kd["block"][1]) == "(H - KH) + 1"


# ------------------------------------------------------------------ sim correctness
@pytest.mark.parametrize("split_w", [4, None])
@pytest.mark.parametrize("hw", [(3, 3), (4, 5), (7, 4), (9, 11), (2, 6)])
def test_sim_conv_rows_on_threads(split_w, hw):
    """Several sizes from one build: 1, 2, 5, 7 rows of threads; (2, 6) has
    H < KH, no rows at all: the launch runs nothing and the output is empty."""
    H, W = hw
    s = conv_rows_on_threads(split_w)
    k = tcomp.build(s, target="sim")
    args = inputs_for(CONV, {"N": 2, "C": 2, "H": H, "W": W, "K": 3, "KH": 3, "KW": 2})
    got = k(*args)
    want = tcomp.evaluate(CONV, *args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sim_conv_rows_on_threads_bound_kernel_sizes():
    """KH, KW bound, H and W at run time (the usual case: a fixed filter)."""
    s = conv_rows_on_threads(4)
    sizes = {"N": 1, "C": 3, "H": 8, "W": 9, "K": 2, "KH": 3, "KW": 3}
    run_sim(s, inputs_for(CONV, sizes), sizes={"KH": 3, "KW": 3})


def test_sim_checks_threads_per_block():
    """4 x (H - KH + 1) threads: H = 260 with KH = 3 gives 4 x 258 = 1032 > 1024."""
    k = tcomp.build(conv_rows_on_threads(4), target="sim")
    args = inputs_for(CONV, {"N": 1, "C": 1, "H": 260, "W": 4, "K": 1, "KH": 3, "KW": 1})
    with pytest.raises(tcomp.SimError, match=r"kernel conv_O: a block of 4x258x1 = 1032 threads "
                                             r"\(blockDim.y: H - KH \+ 1 = 258\) exceeds the "
                                             r"device's 1024 threads per block; split the loops "
                                             r"bound to threads by constant factors"):
        k(*args)


def test_sim_checks_block_dimension_z():
    """A runtime extent on threadIdx.z above CUDA's 64."""
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "threadIdx.z")
    k = tcomp.build(s, target="sim")
    k(np.ones((64, 3), np.float32))
    with pytest.raises(tcomp.SimError, match=r"kernel scale_O: block dimension z is 65 "
                                             r"\(blockDim.z: M = 65\), but the device allows at "
                                             r"most 64"):
        k(np.ones((65, 3), np.float32))


# ------------------------------------------------------------------ lowering errors
def test_constant_threads_already_too_many():
    """The constant part of the block is checked when building: 64 x 32 x N."""
    s = tcomp.Schedule(tcomp.op("def t(float(A,B,C) X) -> (Y) { Y(a, b, c) = X(a, b, c) }"))
    Y = s["Y"]
    a, b, c = Y.axes
    Y.bind(a, "threadIdx.z")
    Y.bind(b, "threadIdx.y")
    Y.bind(c, "threadIdx.x")
    with pytest.raises(tcomp.LoweringError, match=r"stage 'Y': 64x32x\(A\) threads per block "
                                                  r"exceed 1024"):
        tcomp.lower(s, sizes={"B": 32, "C": 64})
    tcomp.lower(s, sizes={"B": 32, "C": 32})  # 1024 x A: fine when A = 1


def test_constant_z_extent_above_64():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "threadIdx.z")
    with pytest.raises(tcomp.LoweringError, match=r"stage 'O': 65 threads along threadIdx.z "
                                                  r"exceed CUDA's limit of 64 for that "
                                                  r"dimension; bind a loop of at most 64 "
                                                  r"iterations there"):
        tcomp.lower(s, sizes={"M": 65})


def test_runtime_extents_of_one_tag_must_match():
    two = TWO_STAGES
    s = tcomp.Schedule(two)
    D = s["D"]
    i, j = D.axes
    D.bind(i, "blockIdx.x")
    D.bind(j, "threadIdx.x")
    C = s["C"]
    C.compute_at(D, i)
    C.bind(C.axes[1], "threadIdx.x")  # the same extent N: one block size
    run_sim(s, inputs_for(two, {"M": 3, "N": 5}))
    s2 = tcomp.Schedule(two)
    D = s2["D"]
    i, j = D.axes
    D.bind(i, "blockIdx.x")
    D.bind(j, "threadIdx.x")
    C = s2["C"]
    C.compute_at(D, i)
    ci, cj = C.axes
    C.bind(ci, "threadIdx.x")  # extent 1 (the region of row i) against N
    with pytest.raises(tcomp.LoweringError, match=r"threadIdx.x is bound to loops of different "
                                                  r"extents in one kernel: 'C_i' \(1\) and 'j' "
                                                  r"\(N\); give them the same extent"):
        tcomp.lower(s2)


def test_shared_buffer_under_runtime_threads():
    """A shared copy covers what every thread of the block reads: with rows on
    threads of runtime extent, its size is not constant. The message names the
    loop and the remedy."""
    s = conv_rows_on_threads(4)
    O = s["O"]
    IS = s.cache_read("I", "shared", [O])
    IS.compute_at(O, O.leaf_axes[1])  # at k (blockIdx.x), outside the thread loops
    with pytest.raises(tcomp.LoweringError) as info:
        tcomp.lower(s, sizes={"KH": 3, "KW": 3, "C": 2})
    msg = str(info.value)
    assert "stage 'I.shared' (shared) computed at 'O.k' needs a region of non-constant " \
           "extent" in msg, msg
    assert "('h' bound to threadIdx.y runs H - 2 threads, known only at launch, and a shared " \
           "buffer needs a constant size for the threads it serves: split that loop by a " \
           "constant and bind the inner part)" in msg, msg


def test_local_buffer_ignores_runtime_threads_outside():
    """A local (per-thread) copy does not cover the other threads: rows of
    runtime extent on threads leave it constant."""
    s = conv_rows_on_threads(4)
    O = s["O"]
    WL = s.cache_read("Wt", "local", [O])
    WL.compute_at(O, O.leaf_axes[-1])
    sizes = {"N": 1, "C": 2, "H": 6, "W": 7, "K": 2, "KH": 3, "KW": 3}
    run_sim(s, inputs_for(CONV, sizes), sizes={"KH": 3, "KW": 3, "C": 2})


# ------------------------------------------------------------------ launch checks
def test_launch_problem_accepts_limits():
    assert launch_problem("k", [2**31 - 1, 65535, 65535], [1024, 1, 1]) is None
    assert launch_problem("k", [1, 1, 1], [1, 1, 64]) is None
    assert launch_problem("k", [1, 1, 1], [32, 32, 1]) is None


@pytest.mark.parametrize("grid, block, exprs, limits, text", [
    ([1, 1, 1], [33, 1, 32], ["W", "1", "D"], CUDA_LIMITS,
     "kernel k: a block of 33x1x32 = 1056 threads (blockDim.x: W = 33, blockDim.z: D = 32) "
     "exceeds the device's 1024 threads per block; split the loops bound to threads by "
     "constant factors"),
    ([1, 1, 1], [512, 1, 1], ["W", "1", "1"], LaunchLimits(kernel_threads=384),
     "kernel k: a block of 512x1x1 = 512 threads (blockDim.x: W = 512) exceeds the 384 threads "
     "per block this compiled kernel can run (its register use limits it)"),
    ([1, 1, 1], [1, 1, 65], ["1", "1", "D"], CUDA_LIMITS,
     "kernel k: block dimension z is 65 (blockDim.z: D = 65), but the device allows at most 64"),
    ([1, 1, 1], [16, 1, 1], ["W", "1", "1"], LaunchLimits(threads_per_block=8),
     "a block of 16x1x1 = 16 threads (blockDim.x: W = 16) exceeds the device's 8 threads "
     "per block"),
    ([1, 70000, 1], [32, 1, 1], ["32", "1", "1"], CUDA_LIMITS,
     "kernel k: grid dimension y is 70000 blocks, but the device allows at most 65535; bind a "
     "larger loop to blockIdx.x"),
    ([2**31, 1, 1], [32, 1, 1], None, CUDA_LIMITS,
     "kernel k: grid dimension x is 2147483648 blocks, but the device allows at most "
     "2147483647"),
])
def test_launch_problem_messages(grid, block, exprs, limits, text):
    msg = launch_problem("k", grid, block, limits, block_exprs=exprs)
    assert msg is not None and text in msg, msg


def test_cuda_check_launch_with_fake_limits():
    """The CUDA runtime's check (called before every non-empty launch with the
    device's and the kernel's limits) raises CudaError with the sidecar's
    expressions in the message."""
    kd = {"name": "conv_O", "block": [4, ["+", ["-", "H", "KH"], 1], 1]}
    check_launch(kd, [1, 1, 1], [4, 256, 1], CUDA_LIMITS)
    with pytest.raises(tcomp.CudaError, match=r"kernel conv_O: a block of 4x300x1 = 1200 threads "
                                              r"\(blockDim.y: \(H - KH\) \+ 1 = 300\) exceeds "
                                              r"the device's 1024 threads per block"):
        check_launch(kd, [1, 1, 1], [4, 300, 1], CUDA_LIMITS)
    with pytest.raises(tcomp.CudaError, match=r"exceeds the 512 threads per block this compiled "
                                              r"kernel can run"):
        check_launch(kd, [1, 1, 1], [4, 200, 1], LaunchLimits(kernel_threads=512))


# ------------------------------------------------------------------ unroll hints
def test_unroll_runtime_extent_is_kept_as_a_hinted_loop():
    """unroll(j) with N unknown: the loop stays, marked `@unroll`; CUDA gets
    `#pragma unroll` before it; the sim runs it as a loop. With N bound it is
    expanded as before."""
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "blockIdx.x")
    O.unroll(j)
    text = str(tcomp.lower(s))
    assert "for j in 0:N  @unroll" in text, text
    src = tcomp.build(s, target="cuda:sm_90a").source
    assert "#pragma unroll\n  for (int j = 0; j < N; ++j) {" in src, src
    run_sim(s, inputs_for(SCALE, {"M": 3, "N": 5}))
    assert "@unroll" not in str(tcomp.lower(s, sizes={"N": 4}))


def test_vectorize_runtime_extent_message():
    """Vectorizing needs a constant extent: the schedule primitive says so, and so
    does the lowering check (for IR built some other way)."""
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    with pytest.raises(tcomp.ScheduleError, match=r"vectorize: axis Axis\(O.j\) has a "
                                                  r"non-constant extent; split it by a constant "
                                                  r"factor first"):
        O.vectorize(j)
    f32 = tcomp.lang.dtypes.float32
    body = ir.For("j", ir.const(0), ir.Var("N"), "vectorize",
                  ir.Store("O", (ir.Var("j"),), ir.Imm(1.0, f32)))
    k = ir.Kernel("k", ("O",), ("N",), (ir.ONE,) * 3, (ir.ONE,) * 3, body)
    with pytest.raises(tcomp.LoweringError, match=r"vectorized loop 'j' has non-constant extent "
                                                  r"N; split it by a constant factor and "
                                                  r"vectorize the inner loop"):
        unroll.run(k, None)


# ------------------------------------------------------------------ compiled, emulated
@pytest.mark.parametrize("split_w", [4, None])
def test_runtime_block_compiled_and_emulated(split_w):
    """The CUDA kernel, compiled by NVRTC and run on the CPU by the emulator of
    tests/target_cuda/emulator.py, at sizes giving 1, 5 and 0 rows of threads."""
    from tests.target_cuda.emulator import HAVE_CXX, run_emulated
    k = tcomp.build(conv_rows_on_threads(split_w), target="cuda:sm_90a")
    assert k.cubin[:4] == b"\x7fELF"
    if not HAVE_CXX:
        pytest.skip("no host C++ compiler (g++) to emulate CUDA with")
    for H, W in ((3, 3), (7, 9), (2, 5)):
        args = inputs_for(CONV, {"N": 2, "C": 2, "H": H, "W": W, "K": 3, "KH": 3, "KW": 2})
        got = run_emulated(k, *args)
        want = tcomp.evaluate(CONV, *args)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
