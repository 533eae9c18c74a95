"""Scatters on CUDA (lower/scatter_store.py, target_cuda/atomics.py): NVRTC
compiles every atomic update here; the `cuda` tests run them against torch
(index_add_, scatter_reduce) on a GPU."""
import numpy as np
import pytest

import tcomp

ADD = """def f(T(N, D) X, int32(N) I, T(M, D) B) -> (O) {
    O(m, d) = B(m, d)
    O(I(i), d) OP X(i, d)
}"""


def scatter(op_text, dtype, rows=4):
    """The scatter with its gathered loop over blocks and threads (atomics)."""
    s = tcomp.Schedule(tcomp.op(ADD.replace("OP", op_text).replace("T(", f"{dtype}(")))
    st = s["O.1"]
    i, d = st.axes
    io, ii = st.split(i, rows)
    st.bind(io, "blockIdx.x")
    st.bind(ii, "threadIdx.y")
    st.bind(d, "threadIdx.x")
    fill = s["O"]
    m, d0 = fill.axes
    fill.bind(m, "blockIdx.x")
    fill.bind(d0, "threadIdx.x")
    return s


@pytest.mark.parametrize("op_text, dtype, call", [
    ("+=", "float", "atomicAdd(p, v)"),
    ("+=", "bfloat16", "atomicAdd(p, v)"),
    ("+=", "int64", "atomicAdd(reinterpret_cast<unsigned long long*>(p)"),
    ("max=", "float", "old = atomicCAS(a, assumed, next)"),
    ("min=", "float16", "__half_as_ushort(__float2half(fminf("),
    ("max=", "int32", "atomicMax(p, v)"),
])
def test_nvrtc_compiles_the_atomics(op_text, dtype, call):
    k = tcomp.build(scatter(op_text, dtype), target="cuda")
    assert call in k.source
    assert "__trap();  // scatter into 'O(I(i), d)'" in k.source
    assert len(k.cubin) > 0


def test_serial_gathered_loop_has_no_atomics():
    s = tcomp.Schedule(tcomp.op(ADD.replace("OP", "+=").replace("T(", "float(")))
    st = s["O.1"]
    st.bind(st.axes[1], "threadIdx.x")
    src = tcomp.build(s, target="cuda").source
    assert "atomic" not in src.split("extern")[-1]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, tol", [("float", 1e-4), ("double", 1e-10),
                                        ("bfloat16", 0.125)])
def test_index_add_matches_torch(dtype, tol):
    torch = pytest.importorskip("torch")
    tt = {"float": torch.float32, "double": torch.float64, "bfloat16": torch.bfloat16}[dtype]
    n, d, m = 4099, 67, 129  # duplicates, sizes that do not divide the blocks
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).to(tt)
    idx = torch.randint(0, m, (n,), generator=g, dtype=torch.int32)
    b = torch.randn(m, d, generator=g).to(tt)
    want = b.clone().double().index_add_(0, idx.long(), x.double())
    k = tcomp.build(scatter("+=", dtype), target="cuda")
    got = k(x.cuda(), idx.cuda(), b.cuda())
    got = torch.as_tensor(np.asarray(got)) if not isinstance(got, torch.Tensor) else got
    torch.testing.assert_close(got.double().cpu(), want, rtol=tol, atol=tol * 8)


@pytest.mark.cuda
@pytest.mark.parametrize("op_text, reduce", [("max=", "amax"), ("min=", "amin")])
@pytest.mark.parametrize("dtype", ["float", "float16", "int32", "int64"])
def test_scatter_reduce_matches_torch(op_text, reduce, dtype):
    torch = pytest.importorskip("torch")
    tt = {"float": torch.float32, "float16": torch.float16, "int32": torch.int32,
          "int64": torch.int64}[dtype]
    n, d, m = 1000, 33, 17
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(n, d, generator=g) * 100).to(tt)
    idx = torch.randint(0, m, (n,), generator=g, dtype=torch.int32)
    b = (torch.randn(m, d, generator=g) * 100).to(tt)
    want = b.clone().scatter_reduce_(0, idx.long()[:, None].expand(n, d), x, reduce=reduce)
    k = tcomp.build(scatter(op_text, dtype), target="cuda")
    got = k(x.cuda(), idx.cuda(), b.cuda())
    got = torch.as_tensor(np.asarray(got)) if not isinstance(got, torch.Tensor) else got
    assert torch.equal(got.cpu(), want)  # max and min are exact in any order


@pytest.mark.cuda
def test_histogram_counts_match_bincount():
    op = tcomp.op("def hist(int32(N) I, int32(M) Z) -> (int32(M) H) { H(I(i)) +=! 1 }")
    s = tcomp.Schedule(op)
    io, ii = s["H.1"].split(s["H.1"].axes[0], 256)
    s["H.1"].bind(io, "blockIdx.x")
    s["H.1"].bind(ii, "threadIdx.x")
    idx = np.random.default_rng(2).integers(0, 10, 100_003).astype(np.int32)
    got = tcomp.build(s, target="cuda")(idx, np.zeros(10, np.int32))
    np.testing.assert_array_equal(got, np.bincount(idx, minlength=10))
