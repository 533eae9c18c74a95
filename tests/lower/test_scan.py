"""Stage.scan (schedule/scan.py, lower/scan.py): ordered recurrences with an
associative combine computed by block-parallel scans, on the sim at sizes
that are not a multiple of the block (and a range of 0, 1 and threads + 1
elements), replayed from JSON, through NVRTC, on the CPU emulator of the
generated CUDA (warp shuffles and shared memory), and (marked cuda) on a GPU
against torch."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from ..target_cuda.emulator import HAVE_CXX, run_emulated


def recurrence(rhs: str, dtype: str = "float", out: str = "O") -> tcomp.Op:
    return tcomp.op(f"""def f({dtype}(B, T) X, {dtype}(B, T) A) -> ({out}) {{
    O(b, t) = X(b, t)
    O(b, t) = {rhs} where t in 1:T, ordered t
}}""")


CASES = {  # rhs -> the reference along axis 1
    "O(b, t - 1) + X(b, t)": lambda X, A: np.cumsum(X, 1),
    "X(b, t) + O(b, t - 1)": lambda X, A: np.cumsum(X, 1),
    "max(O(b, t - 1), X(b, t))": lambda X, A: np.maximum.accumulate(X, 1),
    "fmin(X(b, t), O(b, t - 1))": lambda X, A: np.minimum.accumulate(X, 1),
    "O(b, t - 1) * A(b, t)": None,
    "A(b, t) * O(b, t - 1) + X(b, t)": None,
    "X(b, t) + O(b, t - 1) * A(b, t)": None,
}


def scanned(op, threads=64):
    s = tcomp.Schedule(op)
    st = s["O.1"]
    b, t = st.axes
    st.scan(t, threads=threads)
    st.bind(b, "blockIdx.x")
    return s


def loop_reference(op, X, A):
    """The recurrence as the C loop runs it, in float64."""
    return tcomp.evaluate(tcomp.op(op.to_text(notes=False).replace("float(", "double(")),
                          X.astype(np.float64), A.astype(np.float64))


@pytest.mark.parametrize("rhs", list(CASES))
@pytest.mark.parametrize("T", [1, 2, 65, 150])
def test_sim_against_the_loop(rhs, T):
    op = recurrence(rhs)
    rng = np.random.default_rng(T)
    X = rng.standard_normal((3, T)).astype(np.float32)
    A = rng.uniform(0.9, 1.1, (3, T)).astype(np.float32)
    got = tcomp.build(scanned(op), target="sim")(X, A)
    np.testing.assert_allclose(got, loop_reference(op, X, A), rtol=1e-5, atol=1e-5)
    if CASES[rhs] is not None:
        np.testing.assert_allclose(got, CASES[rhs](X, A), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [32, 96])
def test_integer_scans_are_exact(threads):
    rng = np.random.default_rng(threads)
    X = rng.integers(-1000, 1000, (2, 200)).astype(np.int32)
    for rhs, ref in (("O(b, t - 1) + X(b, t)", np.cumsum(X, 1)),
                     ("min(O(b, t - 1), X(b, t))", np.minimum.accumulate(X, 1))):
        op = recurrence(rhs, "int32")
        got = tcomp.build(scanned(op, threads), target="sim")(X, X)
        np.testing.assert_array_equal(got, ref)


def test_the_lowered_scan():
    text = str(tcomp.lower(scanned(recurrence("O(b, t - 1) + X(b, t)")),
                           sizes={"B": 3, "T": 150}))
    kernel = text[text.index("kernel f_O_1"):]
    assert "block=(64, 1, 1)" in kernel and "let t_i = threadIdx.x" in kernel
    assert "O_1_carry[0] = O[b * 150]" in kernel
    assert "scan_add(&O_1_scan[0], &O_1_carry[0], 64)" in kernel
    linear = str(tcomp.lower(scanned(recurrence("A(b, t) * O(b, t - 1) + X(b, t)")),
                             sizes={"B": 3, "T": 150}))
    assert "scan_linear(&O_1_coef[0], &O_1_scan[0], &O_1_carry[0], 64)" in linear


def test_json_replays_the_scan():
    op = recurrence("A(b, t) * O(b, t - 1) + X(b, t)")
    s = scanned(op)
    again = tcomp.Schedule.from_json(op, s.to_json())
    assert again.to_json() == s.to_json() and '"kind": "Scan"' in s.to_json()
    assert [a.name for a in again["O.1"].leaf_axes] == ["t_i", "b", "t_o"]


def test_nvrtc_compiles_the_scans():
    for rhs in CASES:
        k = tcomp.build(scanned(recurrence(rhs, "double")), target="cuda")
        assert k.cubin and "__shfl_up_sync" in k.source
    # bfloat16 inputs, a float32 state (the selective-scan case)
    op = tcomp.op("""def f(bfloat16(B, T) A, bfloat16(B, T) X) -> (float32(B, T) O) {
        O(b, t) = X(b, t)
        O(b, t) = A(b, t) * O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    }""")
    assert tcomp.build(scanned(op, 1024), target="cuda").cubin


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulator needs g++")
def test_emulated_cuda_scans():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((3, 150)).astype(np.float32)
    A = rng.uniform(0.9, 1.1, (3, 150)).astype(np.float32)
    op = recurrence("A(b, t) * O(b, t - 1) + X(b, t)")  # (the sums: on the GPU, below)
    np.testing.assert_allclose(run_emulated(tcomp.build(scanned(op), target="cuda"), X, A),
                               loop_reference(op, X, A), rtol=1e-5, atol=1e-5)
    I = rng.integers(-1000, 1000, (2, 77)).astype(np.int32)
    k = tcomp.build(scanned(recurrence("max(X(b, t), O(b, t - 1))", "int32"), 32), "cuda")
    np.testing.assert_array_equal(run_emulated(k, I, I), np.maximum.accumulate(I, 1))


@pytest.mark.cuda
@pytest.mark.parametrize("B, T", [(3, 150), (64, 32768), (1, 1)])
def test_gpu_scans_against_torch(B, T):
    import torch
    x = torch.randn(B, T, device="cuda")
    a = torch.rand(B, T, device="cuda") * 0.2 + 0.9
    k = tcomp.build(scanned(recurrence("O(b, t - 1) + X(b, t)"), 1024), target="cuda")
    torch.testing.assert_close(torch.as_tensor(k(x, a)), torch.cumsum(x, 1), rtol=1e-4,
                               atol=1e-3)
    k = tcomp.build(scanned(recurrence("max(O(b, t - 1), X(b, t))"), 256), target="cuda")
    torch.testing.assert_close(torch.as_tensor(k(x, a)), torch.cummax(x, 1).values, rtol=0,
                               atol=0)


@pytest.mark.cuda
def test_gpu_linear_recurrence_scan():
    import torch
    op = tcomp.op("""def f(bfloat16(B, T) A, bfloat16(B, T) X) -> (float32(B, T) O) {
        O(b, t) = X(b, t)
        O(b, t) = A(b, t) * O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    }""")
    a = (torch.rand(8, 4096, device="cuda") * 0.5 + 0.5).to(torch.bfloat16)
    x = torch.randn(8, 4096, device="cuda").to(torch.bfloat16)
    got = torch.as_tensor(tcomp.build(scanned(op, 512), target="cuda")(a, x)).cpu().numpy()
    A, X = a.float().cpu().numpy().astype(np.float64), x.float().cpu().numpy().astype(np.float64)
    want = X.copy()
    for t in range(1, 4096):
        want[:, t] = A[:, t] * want[:, t - 1] + X[:, t]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_search_draws_scans():
    """The `scan` rule (search/rules/simple.py) next to `flat` (one thread per row);
    every candidate lowers, and the auto choice computes the loop's values."""
    from tcomp.search import Space
    op = recurrence("A(b, t) * O(b, t - 1) + X(b, t)")
    space = Space(op, {"B": 8, "T": 4096}, target="cuda")
    sketches = {c.sketch for c in space.generate(12, np.random.default_rng(0))}
    assert "O:flat, O.1:scan" in sketches and "O:flat, O.1:flat" in sketches
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3, 300)).astype(np.float32)
    A = rng.uniform(0.9, 1.1, (3, 300)).astype(np.float32)
    np.testing.assert_allclose(tcomp.build(op, target="sim", sizes={"B": 3, "T": 300})(X, A),
                               loop_reference(op, X, A), rtol=1e-5, atol=1e-5)


def test_a_long_vector_in_chunks():
    """The chunked prefix sum of docs/schedules.md ("scan"): rows scanned by blocks, the
    rows' totals by an ordered loop, the offsets added; at a size that is not a multiple of
    the block (5 rows of 100, blocks of 64)."""
    op = tcomp.op("""def chunked_cumsum(float(C, L) X) -> (O) {
        R(c, l) = X(c, l) where l in 0:1
        R(c, l) = R(c, l - 1) + X(c, l) where l in 1:L, ordered l
        S(c) = 0.0 where c in 0:1
        S(c) = S(c - 1) + R(c - 1, L - 1) where c in 1:C, ordered c
        O(c, l) = R(c, l) + S(c)
    }""")
    s = tcomp.Schedule(op)
    c, l = s["R.1"].axes
    s["R.1"].scan(l, threads=64)
    s["R.1"].bind(c, "blockIdx.x")
    x = np.random.default_rng(4).standard_normal(500).astype(np.float32)
    got = tcomp.build(s, target="sim")(x.reshape(5, 100)).reshape(-1)
    np.testing.assert_allclose(got, np.cumsum(x), rtol=1e-5, atol=1e-5)
