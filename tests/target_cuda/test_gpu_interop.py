"""GPU interop: JAX arrays and DLPack-only objects in (zero-copy), torch custom
ops inside torch.compile graphs, and 64-bit indexing at 32768 x 131072.

The torch and JAX parts run in fresh interpreters (see test_gpu_runtime's
test_torch_zero_copy: torch once failed to import inside pytest on a new GPU
machine; and JAX must not preallocate most of the GPU before other tests run)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tcomp
from tests.lang.programs import CASES

pytestmark = pytest.mark.cuda

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(code: str, needs: str, timeout: int = 600) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
               XLA_PYTHON_CLIENT_PREALLOCATE="false")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=timeout)
    if f"No module named '{needs}'" in r.stderr:
        pytest.skip(f"{needs} is not installed")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-6000:]
    return r.stdout


# ------------------------------------------------------------------ DLPack
JAX_SCRIPT = r"""
import numpy as np, jax, jax.numpy as jnp, tcomp
from tcomp.target_cuda import dlpack as D
from tests.target_cuda.test_gpu_runtime import MM, tiled_matmul
gpu = jax.devices("gpu")[0]
op = tcomp.op(MM)
k = tcomp.build(tiled_matmul(op), target="cuda")
rng = np.random.default_rng(0)
a_np = rng.standard_normal((45, 31)).astype(np.float32)
b_np = rng.standard_normal((31, 27)).astype(np.float32)
a, b = jax.device_put(a_np, gpu), jax.device_put(b_np, gpu)

# zero-copy: the consumer reads JAX's own buffer
t = D.consume("A", a)
assert t.ptr == a.unsafe_buffer_pointer(), (hex(t.ptr), hex(a.unsafe_buffer_pointer()))
assert t.device == (D.kDLCUDA, 0) and t.shape == (45, 31) and t.dtype.name == "float32"
t.release()
assert not D._LIVE

c = k(a, b)
assert isinstance(c, jax.Array) and c.shape == (45, 27) and c.dtype == jnp.float32, type(c)
want = tcomp.evaluate(op, a_np, b_np)
np.testing.assert_allclose(np.asarray(c), want, rtol=1e-4, atol=1e-4)
# the result is an ordinary JAX array on the GPU: JAX computes with it
np.testing.assert_allclose(np.asarray(jnp.tanh(c) + 1), np.tanh(want) + 1, rtol=1e-4, atol=1e-4)
assert list(c.devices())[0] == gpu

# repeated calls neither leak nor disturb the inputs
for _ in range(20):
    c = k(a, b)
np.testing.assert_allclose(np.asarray(c), want, rtol=1e-4, atol=1e-4)
np.testing.assert_array_equal(np.asarray(a), a_np)

try:
    k(a.astype(jnp.float16), b)
    raise AssertionError("no error for a float16 input")
except tcomp.LangError as e:
    assert "input 'A' is float32, but the array passed for it is float16" in str(e), str(e)
del c
import gc
gc.collect()
print("jax dlpack ok")
"""


def test_jax_arrays_zero_copy():
    out = run_script(JAX_SCRIPT, "jax")
    assert "jax dlpack ok" in out


TORCH_DLPACK_SCRIPT = r"""
import numpy as np, torch, tcomp
from tcomp.target_cuda import dlpack as D
from tcomp.target_cuda.cuda_array import CudaArray
from tests.target_cuda.test_gpu_runtime import MM, tiled_matmul

class Capsuled:
    # only the DLPack protocol, as torch.utils.dlpack-style producers offer
    def __init__(self, t):
        self.t = t
    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)
    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

op = tcomp.op(MM)
k = tcomp.build(tiled_matmul(op), target="cuda")
a = torch.randn(45, 31, device="cuda"); b = torch.randn(31, 27, device="cuda")
want = tcomp.evaluate(op, a.cpu().numpy(), b.cpu().numpy())

t = D.consume("A", Capsuled(a))
assert t.ptr == a.data_ptr() and t.shape == (45, 31) and t.device == (D.kDLCUDA, 0), t
t.release()

c = k(Capsuled(a), Capsuled(b))
assert isinstance(c, CudaArray) and c.shape == (45, 27), type(c)
np.testing.assert_allclose(np.asarray(c), want, rtol=1e-4, atol=1e-4)
ct = torch.from_dlpack(c)                     # DLPack export, zero-copy
assert ct.is_cuda and ct.data_ptr() == c.ptr and ct.shape == (45, 27)
np.testing.assert_allclose(ct.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
cai = torch.as_tensor(c, device="cuda")       # __cuda_array_interface__, zero-copy
assert cai.data_ptr() == c.ptr
del c                                          # torch still holds the memory
torch.cuda.synchronize()
np.testing.assert_allclose(ct.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
# a consumer on another stream is ordered after tcomp's kernels
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    c2 = k(Capsuled(a), Capsuled(b))
    on_s = torch.from_dlpack(c2) * 1.0
s.synchronize()
np.testing.assert_allclose(on_s.cpu().numpy(), want, rtol=1e-4, atol=1e-4)

# CPU tensors through DLPack are copied like NumPy arrays; the results are NumPy
h = k(Capsuled(a.cpu()), Capsuled(b.cpu()))
assert isinstance(h, np.ndarray)
np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-4)

for bad, msg, err in (
        (lambda: k(Capsuled(a.t().contiguous().t()), b), "not contiguous", tcomp.CudaError),
        (lambda: k(Capsuled(a.double()), b), "float32, but the array passed for it is float64",
         tcomp.LangError),
        (lambda: k(Capsuled(a[:, :30].contiguous()), b), "dimension 0 is 31, but size K is 30",
         tcomp.LangError)):
    try:
        bad()
        raise AssertionError("no error for " + msg)
    except err as e:
        assert msg in str(e), str(e)
del ct, cai, c2, on_s
import gc
gc.collect()
torch.cuda.synchronize()
print("torch dlpack ok")
"""


def test_dlpack_only_objects_from_torch():
    out = run_script(TORCH_DLPACK_SCRIPT, "torch")
    assert "torch dlpack ok" in out


# ------------------------------------------------------------------ torch.compile
COMPILE_SCRIPT = r"""
import numpy as np, torch, tcomp
from torch._dynamo.testing import CompileCounterWithBackend
from tests.target_cuda.test_gpu_runtime import MM, tiled_matmul
op = tcomp.op(MM)
mm = tcomp.build(tiled_matmul(op), target="cuda").torch_op()

def f(x, b):
    # torch ops around the tcomp op; x.t() hands the op a non-contiguous view
    return torch.relu(mm(x.t() * 2, b)) + 1

cnt = CompileCounterWithBackend("inductor")
cf = torch.compile(f, backend=cnt, fullgraph=True, dynamic=True)
for m, kk, n in ((45, 31, 27), (64, 16, 40), (33, 7, 9)):
    x = torch.randn(kk, m, device="cuda"); b = torch.randn(kk, n, device="cuda")
    got = cf(x, b)
    ref = np.maximum(2 * tcomp.evaluate(op, x.t().contiguous().cpu().numpy(), b.cpu().numpy()),
                     0) + 1
    assert got.shape == (m, n) and got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-4, atol=1e-4)
assert cnt.frame_count == 1, cnt.frame_count  # one graph, no break, no recompile

# the operator passes torch's own consistency checks (schema, fake vs real, AOT)
a = torch.randn(12, 5, device="cuda"); b = torch.randn(5, 7, device="cuda")
torch.library.opcheck(mm, (a, b), test_utils=("test_schema", "test_faketensor",
                                              "test_aot_dispatch_dynamic"))
print("torch compile ok")
"""


def test_torch_op_in_compiled_graph():
    out = run_script(COMPILE_SCRIPT, "torch")
    assert "torch compile ok" in out


# ------------------------------------------------------------------ 64-bit indexing
BIG_SCRIPT = r"""
import os, tempfile, time, torch, tcomp
from tests.target_cuda.test_index_width import rowsum_schedule, scale_schedule
N, D = 32768, 131072                      # 2^32 elements of bfloat16: 8.6 GB
t0 = time.time()
x = torch.rand(N, D, device="cuda", dtype=torch.bfloat16)

# sizes fixed at build: 64-bit from the start
k = tcomp.build(rowsum_schedule(), target="cuda", sizes={"N": N, "D": D})
assert k.index_bits == 64
s = k(x)
want = x.sum(dim=1, dtype=torch.float32)
torch.testing.assert_close(s, want, rtol=1e-4, atol=1e-2)

# symbolic sizes: the 32-bit kernel, exported and loaded; the 64-bit variant serves the
# big tensor and the 32-bit one small ones
ks = tcomp.build(scale_schedule(), target="cuda")
assert ks.index_bits == 32
path = os.path.join(tempfile.mkdtemp(), "scale.cubin")
ks.export(path)
kl = tcomp.load(path)
small = kl(x[:3, :1000].contiguous())
assert torch.equal(small, (x[:3, :1000].float() * 2 + 1).bfloat16())
o = kl(x)
torch.cuda.synchronize()
assert o.shape == (N, D) and o.dtype == torch.bfloat16
assert torch.equal(o[-2:], (x[-2:].float() * 2 + 1).bfloat16())            # the last rows
assert torch.equal(o[:, -1], (x[:, -1].float() * 2 + 1).bfloat16())        # the last column
assert torch.equal(o[::4093, ::4091], (x[::4093, ::4091].float() * 2 + 1).bfloat16())
del o
# the built kernel compiles its 64-bit variant at the call, once
o = ks(x)
assert sorted(ks._variants) == [32, 64]
assert torch.equal(o[-1], (x[-1].float() * 2 + 1).bfloat16())
print(f"big ok in {time.time() - t0:.1f}s")
"""


def test_64_bit_indexing_at_32768_by_131072():
    free = _free_gpu_memory()
    if free < 24 * 2 ** 30:
        pytest.skip("needs 24 GiB of free GPU memory")
    out = run_script(BIG_SCRIPT, "torch")
    assert "big ok" in out


def _free_gpu_memory() -> int:
    from cuda.bindings import driver
    from tcomp.target_cuda import cuda_api
    cuda_api.device().activate()
    err, free, _ = driver.cuMemGetInfo()
    return int(free)


def _force_64_bit(monkeypatch):
    """Kernels made from now on choose 64-bit indices for every call (the width
    function of their launch plans, launch_plan.compile_width, says 64)."""
    from tcomp.target_cuda import launch_plan
    monkeypatch.setattr(launch_plan, "compile_width", lambda meta: lambda sizes: 64)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_every_language_program_runs_with_64_bit_indices(name, monkeypatch):
    """The widened kernels compute what the 32-bit ones do (on small inputs)."""
    from tests.target_cuda import test_lang_programs_cuda as L
    _force_64_bit(monkeypatch)
    L.test_runs_on_gpu(name)


def test_64_bit_shared_memory_matmul(monkeypatch):
    from tests.target_cuda.test_index_width import data_schedule, tiled_matmul
    _force_64_bit(monkeypatch)
    k = tcomp.build(tiled_matmul(), target="cuda")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 19)).astype(np.float32)
    b = rng.standard_normal((19, 23)).astype(np.float32)
    np.testing.assert_allclose(k(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert sorted(k._variants) == [32, 64]
    s = data_schedule()
    k = tcomp.build(s, target="cuda")
    bidx = rng.integers(0, 50, 300).astype(np.int32)
    av = rng.standard_normal(50).astype(np.float32)
    got = k(bidx, av)
    want = tcomp.evaluate(s.op, bidx, av)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_64_bit_vectorized_tiles(monkeypatch):
    """float4 global and shared accesses keep working in 64-bit mode."""
    from tests.target_cuda import test_codegen_vectors as V
    _force_64_bit(monkeypatch)
    V.test_gpu_agrees()
