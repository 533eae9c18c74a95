"""tcomp kernels as good citizens of a PyTorch/CuPy program, on the GPU: they run
on the caller's stream (torch's current one, CuPy's, an explicit `stream=`),
overlap with work on other streams, order after work queued before them on
their stream, are captured by CUDA graphs and replay with the inputs changed
in place, and run under torch.compile(mode="reduce-overhead").

Ordering is proven without timing assumptions: a flag kernel spins on device
memory until another kernel sets it (or a cycle budget of about a second runs
out, then it records that it never saw the flag): a wait that completes proves
two kernels ran at the same time; `torch.cuda._sleep` before an in-place
change proves a kernel waited for the work queued before it on its stream
(launched anywhere else, it would read the old values). torch and CuPy run in
fresh interpreters, as in test_gpu_interop."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tcomp
from tests.bench.common import S
from tests.target_cuda.test_gpu_interop import run_script

pytestmark = pytest.mark.cuda

FMA = S.FMA
ROWSUM = "def rowsum(float(M, K) A) -> (S) { S(m) +=! A(m, k) }"

SPIN_SRC = r"""
extern "C" __global__ void tc_wait_flag(volatile int* flag, int* seen, long long max_cycles) {
  long long start = clock64();
  while (flag[0] == 0 && clock64() - start < max_cycles) { }
  seen[0] = flag[0];
}
extern "C" __global__ void tc_set_flag(volatile int* flag) {
  flag[0] = 1;
  __threadfence_system();
}
"""
SECOND = 2_000_000_000  # clock cycles: about a second at the H200's clocks


def fma_kernel(sizes=None):
    return tcomp.build(S.fma()[1], target="cuda", sizes=sizes)


def rowsum_kernel():
    s = tcomp.Schedule(tcomp.op(ROWSUM))
    S = s["S"]
    (m,) = S.axes
    mo, mi = S.split(m, 64)
    S.bind(mo, "blockIdx.x")
    S.bind(mi, "threadIdx.x")
    return tcomp.build(s, target="cuda")


class Spin:
    """The flag kernels, launched on any stream (a CUstream handle)."""

    def __init__(self):
        from tcomp.target_cuda import cuda_api
        from tcomp.target_cuda.compile import CompileOptions, compile_source
        self.api = cuda_api
        c = compile_source(SPIN_SRC, "spin", CompileOptions(cuda_api.device().arch))
        self.module = cuda_api.Module(c.cubin)
        self._wait = self.module.function("tc_wait_flag")
        self._set = self.module.function("tc_set_flag")

    def wait(self, flag: int, seen: int, stream: int, cycles: int = SECOND):
        self.api.launch(self._wait, (1, 1, 1), (1, 1, 1), 0,
                        [(ctypes.c_void_p, flag), (ctypes.c_void_p, seen),
                         (ctypes.c_longlong, cycles)], stream)

    def set(self, flag: int, stream: int):
        self.api.launch(self._set, (1, 1, 1), (1, 1, 1), 0, [(ctypes.c_void_p, flag)], stream)


def test_numpy_path_is_synchronous_and_right():
    k = fma_kernel()
    rng = np.random.default_rng(0)
    # (atol: the kernel fuses a * b + a into one FMA, NumPy rounds twice)
    for n in (1, 1000, 4096):
        a, b = rng.standard_normal((2, n), dtype=np.float32)
        np.testing.assert_allclose(k(a, b), a * b + a, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(k(a, b, stream=0), a * b + a, rtol=1e-6, atol=1e-5)
    k2 = rowsum_kernel()
    x = rng.standard_normal((100, 33), dtype=np.float32)
    np.testing.assert_allclose(k2(x), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


TORCH_STREAMS = r"""
import numpy as np, torch, tcomp
from tests.target_cuda.test_gpu_streams import Spin, fma_kernel, rowsum_kernel, SECOND

spin = Spin()
n = 1 << 20
for k in (fma_kernel(), fma_kernel({"N": n})):
    a = torch.randn(n, device="cuda"); b = torch.randn(n, device="cuda")
    a2 = torch.randn(n, device="cuda")
    want = a2 * b + a2

    # 1. ordered after the work queued before it on the caller's (side) stream
    s1 = torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        torch.cuda._sleep(200_000_000)        # ~0.1 s of spinning on s1, then
        a.copy_(a2)                           # the input changes, still on s1
        c = k(a, b)                           # must see the new values
        done = torch.cuda.Event()
        done.record()
    torch.cuda.current_stream().wait_event(done)
    torch.testing.assert_close(c, want)

    # 2. overlapping with another stream: s2 waits for a flag that s1 sets after the tcomp
    # kernel; the wait completes only if the kernel ran while s2's kernel was spinning
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    seen = torch.zeros(1, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    s2 = torch.cuda.Stream()
    spin.wait(flag.data_ptr(), seen.data_ptr(), s2.cuda_stream)
    with torch.cuda.stream(s1):
        c = k(a, b)
        after_k = torch.cuda.Event()
        after_k.record()
    spin.set(flag.data_ptr(), s1.cuda_stream)
    s2_done = torch.cuda.Event()
    s2_done.record(s2)
    torch.cuda.synchronize()
    assert seen.item() == 1, "the tcomp kernel on s1 did not run while s2 was busy"
    assert after_k.query() and s2_done.query()
    torch.testing.assert_close(c, want)

    # 3. an explicit stream= (torch stream object, int handle) while torch's current
    # stream is the default one: ordered after the work queued on that stream
    for as_arg in (lambda s: s, lambda s: s.cuda_stream):
        s3 = torch.cuda.Stream()
        a.copy_(torch.randn(n, device="cuda"))
        s3.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s3):
            torch.cuda._sleep(200_000_000)
            a.copy_(a2)
        c = k(a, b, stream=as_arg(s3))
        torch.cuda.current_stream().wait_stream(s3)
        torch.testing.assert_close(c, want)
        c.record_stream(torch.cuda.current_stream())

    # 4. NumPy data inside a torch stream context: copied on the legacy stream, synchronous
    with torch.cuda.stream(s1):
        out = k(a2.cpu().numpy(), b.cpu().numpy())
    np.testing.assert_allclose(out, want.cpu().numpy(), rtol=1e-6, atol=1e-5)

# 5. outputs that start zero-filled (a reduction) on a side stream
k2 = rowsum_kernel()
x = torch.randn(300, 77, device="cuda")
s4 = torch.cuda.Stream()
s4.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s4):
    for _ in range(3):
        r = k2(x)
torch.cuda.current_stream().wait_stream(s4)
torch.testing.assert_close(r, x.double().sum(1).float(), rtol=1e-5, atol=1e-5)

# 6. a DLPack-only input (a torch tensor behind the protocol) with stream=: the producer
# orders its pending writes before that stream
class Capsuled:
    def __init__(self, t): self.t = t
    def __dlpack__(self, **kw): return self.t.__dlpack__(**kw)
    def __dlpack_device__(self): return self.t.__dlpack_device__()
k = fma_kernel()
a = torch.zeros(n, device="cuda")
s5 = torch.cuda.Stream()
torch.cuda._sleep(200_000_000)   # on torch's current stream, then the input changes there
a.copy_(a2)
c = k(Capsuled(a), Capsuled(b), stream=s5)
np.testing.assert_allclose(np.asarray(c), want.cpu().numpy(), rtol=1e-6, atol=1e-5)
print("torch streams ok")
"""


def test_torch_streams_overlap_and_order():
    assert "torch streams ok" in run_script(TORCH_STREAMS, "torch")


TORCH_GRAPHS = r"""
import torch, tcomp
from tests.target_cuda.test_gpu_streams import fma_kernel, rowsum_kernel

n = 4096
cases = [(fma_kernel({"N": n}), lambda: (torch.randn(n, device="cuda"),
                                         torch.randn(n, device="cuda")),
          lambda a, b: a * b + a),
         (fma_kernel(), lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda")),
          lambda a, b: a * b + a),
         (rowsum_kernel(), lambda: (torch.randn(200, 65, device="cuda"),),
          lambda x: x.double().sum(1).float())]
for k, make, ref in cases:
    inputs = make()
    side = torch.cuda.Stream()                    # warm up on a side stream, as torch asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            k(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = k(*inputs)
    for step in range(3):
        fresh = make()
        for x, y in zip(inputs, fresh):
            x.copy_(y)                           # the inputs change in place
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, ref(*fresh), rtol=1e-5, atol=1e-5)
print("torch graphs ok")
"""


def test_cuda_graph_capture_and_replay_with_inputs_changed_in_place():
    assert "torch graphs ok" in run_script(TORCH_GRAPHS, "torch")


TORCH_COMPILE = r"""
import torch, tcomp
from torch._dynamo.utils import counters
from tests.target_cuda.test_gpu_streams import fma_kernel

for k in (fma_kernel({"N": 4096}), fma_kernel()):
    op = k.torch_op()

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def f(a, b):
        return op(a, b) * 2 + 1

    a = torch.randn(4096, device="cuda"); b = torch.randn(4096, device="cuda")
    for step in range(6):                        # warm-up, record, then replays
        a.copy_(torch.randn(4096, device="cuda"))
        b.copy_(torch.randn(4096, device="cuda"))
        got = f(a, b).clone()                    # (a replay overwrites its outputs)
        torch.testing.assert_close(got, (a * b + a) * 2 + 1)
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
print("torch.compile reduce-overhead ok")
"""


def test_torch_compile_reduce_overhead():
    assert "torch.compile reduce-overhead ok" in run_script(TORCH_COMPILE, "torch")


CUPY_STREAMS = r"""
import numpy as np, cupy, tcomp
from tests.target_cuda.test_gpu_streams import Spin, fma_kernel, SECOND

spin = Spin()
k = fma_kernel()
n = 1 << 20
a = cupy.random.standard_normal(n, dtype=cupy.float32)
b = cupy.random.standard_normal(n, dtype=cupy.float32)
a2 = cupy.random.standard_normal(n, dtype=cupy.float32)
want = cupy.asnumpy(a2 * b + a2)
never = cupy.zeros(1, dtype=cupy.int32)
seen = cupy.zeros(1, dtype=cupy.int32)
cupy.cuda.Device().synchronize()
# CuPy's current stream: ordered after a ~0.1 s spin and an in-place change queued there
with cupy.cuda.Stream(non_blocking=True) as cs:
    spin.wait(never.data.ptr, seen.data.ptr, cs.ptr, SECOND // 10)
    a[...] = a2
    c = k(a, b)
    assert type(c).__module__.startswith("cupy")
    cs.synchronize()
np.testing.assert_allclose(cupy.asnumpy(c), want, rtol=1e-6, atol=1e-5)
# an explicit CuPy stream while the current one is the null stream
a[...] = 0
cupy.cuda.Device().synchronize()
cs2 = cupy.cuda.Stream(non_blocking=True)
with cs2:
    spin.wait(never.data.ptr, seen.data.ptr, cs2.ptr, SECOND // 10)
    a[...] = a2
c = k(a, b, stream=cs2)
cs2.synchronize()
np.testing.assert_allclose(cupy.asnumpy(c), want, rtol=1e-6, atol=1e-5)
print("cupy streams ok")
"""


def test_cupy_current_and_explicit_streams():
    assert "cupy streams ok" in run_script(CUPY_STREAMS, "cupy")


BENCH = r"""
import runpy, sys
sys.argv = ["launch_overhead.py", "--calls", "20", "--repeats", "1"]
runpy.run_path("bench/launch_overhead.py", run_name="__main__")
"""


def test_launch_overhead_benchmark_runs():
    """bench/launch_overhead.py, briefly: every contender computes the right values."""
    out = run_script(BENCH, "triton")
    assert "| tcomp, CUDA graph replay (`g.replay()`)" in out
