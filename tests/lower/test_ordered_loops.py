"""Ordered recurrences lowered (`where ordered t`; schedule/ordered.py): a
serial loop along the ordered axis, no snapshot, the independent axes spread
over blocks and threads; on the sim at sizes that are not a multiple of the
block, through NVRTC, on the CPU emulator of the generated CUDA, and (marked
cuda) on a GPU against torch."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from tcomp.lang import dtypes

from ..target_cuda.emulator import HAVE_CXX, run_emulated

BF16 = dtypes.bfloat16.numpy

CUMSUM = tcomp.op("""def cumsum(float(B, T) X) -> (O) {
    O(b, t) = X(b, t)
    O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t
}""")
CUMMAX = tcomp.op("""def cummax(float(B, T) X) -> (O) {
    O(b, t) = X(b, t)
    O(b, t) = max(O(b, t - 1), X(b, t)) where t in 1:T, ordered t
}""")
# h(t) = a(t) h(t - 1) + x(t): bfloat16 inputs, a float32 state
LINEAR = tcomp.op("""def linear(bfloat16(B, T, D) A, bfloat16(B, T, D) X) -> (float32(B, T, D) H) {
    H(b, t, d) = X(b, t, d)
    H(b, t, d) = A(b, t, d) * H(b, t - 1, d) + X(b, t, d) where t in 1:T, ordered t
}""")


def rows(op, threads=16):
    """Every stage: the independent axes fused, over blocks of `threads` threads."""
    s = tcomp.Schedule(op)
    for st in s.stages:
        d = s.states[st.name].definition
        axes = [a for a in st.axes if a.name in d.independent] if d.ordered else \
            [a for a in st.axes if a.name != "t"]
        if not d.ordered and "t" in d.spatial:
            st.reorder(*axes, st.axes[d.spatial.index("t")])
        f = axes[0]
        for a in axes[1:]:
            f = st.fuse(f, a)
        fo, fi = st.split(f, threads)
        st.bind(fo, "blockIdx.x")
        st.bind(fi, "threadIdx.x")
    return s


def linear_reference(A, X):
    A, X = A.astype(np.float32), X.astype(np.float32)
    H = np.zeros(X.shape, np.float32)
    H[:, 0] = X[:, 0]
    for t in range(1, X.shape[1]):
        H[:, t] = A[:, t] * H[:, t - 1] + X[:, t]
    return H


def test_the_ordered_loop_is_serial_and_has_no_snapshot():
    s = rows(CUMSUM)
    assert [st.name for st in s.stages] == ["O", "O.1"]
    text = str(tcomp.lower(s, sizes={"B": 37, "T": 23}))
    kernel = text[text.index("kernel cumsum_O_1"):]
    assert "let b_o = blockIdx.x" in kernel and "let b_i = threadIdx.x" in kernel
    assert "for t in 0:22" in kernel and "_snap" not in text


@pytest.mark.parametrize("B, T", [(37, 23), (1, 1), (5, 2), (16, 64)])
def test_sim_prefix_sums_and_running_max(B, T):
    X = np.random.default_rng(B * T).standard_normal((B, T)).astype(np.float32)
    np.testing.assert_array_equal(tcomp.build(rows(CUMSUM), target="sim")(X),
                                  tcomp.evaluate(CUMSUM, X))
    np.testing.assert_allclose(tcomp.build(rows(CUMSUM), target="sim")(X), np.cumsum(X, 1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(tcomp.build(rows(CUMMAX), target="sim")(X),
                                  np.maximum.accumulate(X, 1))


def test_sim_linear_recurrence():
    rng = np.random.default_rng(3)
    B, T, D = 3, 19, 7  # b and d fused: 21 rows over blocks of 16 threads
    A = rng.uniform(0.5, 1.0, (B, T, D)).astype(BF16)
    X = rng.standard_normal((B, T, D)).astype(BF16)
    got = tcomp.build(rows(LINEAR), target="sim")(A, X)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, tcomp.evaluate(LINEAR, A, X))
    np.testing.assert_allclose(got, linear_reference(A, X), rtol=1e-5, atol=1e-5)


def test_default_and_auto_schedules():
    """The default schedule (one thread) and tcomp.build's own choice agree with evaluate."""
    X = np.random.default_rng(5).standard_normal((6, 9)).astype(np.float32)
    want = tcomp.evaluate(CUMSUM, X)
    np.testing.assert_array_equal(tcomp.build(tcomp.Schedule(CUMSUM), target="sim")(X), want)
    # (tcomp.build's choice may be a scan: a tree's float order)
    np.testing.assert_allclose(tcomp.build(CUMSUM, target="sim")(X), want, rtol=1e-5, atol=1e-5)


def test_nvrtc_compiles_the_ordered_loop():
    k = tcomp.build(rows(LINEAR), target="cuda")
    assert k.cubin and "for (int t = 0; t < T - 1; ++t)" in k.source


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulator needs g++")
def test_emulated_cuda_prefix_sums():
    X = np.random.default_rng(7).standard_normal((37, 23)).astype(np.float32)
    k = tcomp.build(rows(CUMSUM), target="cuda")
    np.testing.assert_array_equal(run_emulated(k, X), tcomp.evaluate(CUMSUM, X))


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(37, 23), (256, 1000), (1, 1)])
def test_gpu_against_torch(B, T):
    import torch
    x = torch.randn(B, T, device="cuda")
    torch.testing.assert_close(torch.as_tensor(tcomp.build(rows(CUMSUM, 128), target="cuda")(x)),
                               torch.cumsum(x, 1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.as_tensor(tcomp.build(rows(CUMMAX, 128), target="cuda")(x)),
                               torch.cummax(x, 1).values, rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_linear_recurrence():
    import torch
    a = torch.rand(2, 300, 65, device="cuda").mul(0.5).add(0.5).to(torch.bfloat16)
    x = torch.randn(2, 300, 65, device="cuda").to(torch.bfloat16)
    got = torch.as_tensor(tcomp.build(rows(LINEAR, 64), target="cuda")(a, x))
    want = linear_reference(a.float().cpu().numpy(), x.float().cpu().numpy())
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
