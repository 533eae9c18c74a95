"""Launch plans, parameter packing and stream choice on a machine without a GPU:
the driver is mocked at tcomp's own boundary (cuda_api), and each launch's
kernelParams are decoded from memory at the moment cuLaunchKernel is called."""
from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

import tcomp
from tcomp.lang.signature import Signature
from tcomp.lower.launch import LaunchLimits
from tcomp.target_cuda import arrays as A
from tcomp.target_cuda import cuda_api, launch_plan, streams
from tcomp.target_cuda.index_width import index_bits_for
from tcomp.target_cuda.kernel import eval_size

from tests.target_cuda.test_call_checks import BAD_CALLS
from tests.target_cuda.test_gpu_streams import FMA, fma_kernel



# ------------------------------------------------------------------ packing
def test_param_slots_hold_pointers_ints_and_long_longs():
    slots = launch_plan.ParamSlots(4)
    address = slots.fill((0x7F0012345600, 0x7F0000000010, 4096, 2**40 + 3))
    pointers = (ctypes.c_void_p * 4).from_address(address)
    assert ctypes.c_void_p.from_address(pointers[0]).value == 0x7F0012345600
    assert ctypes.c_void_p.from_address(pointers[1]).value == 0x7F0000000010
    assert ctypes.c_int.from_address(pointers[2]).value == 4096  # a C int reads 4 bytes
    assert ctypes.c_longlong.from_address(pointers[3]).value == 2**40 + 3
    assert slots.fill((1, 2, 3, 4)) == address  # the same memory every call
    assert launch_plan.ParamSlots(0).address == 0  # no parameters: kernelParams NULL


@pytest.mark.parametrize("j", [
    5, "N", ["+", "N", 3], ["/", ["+", "N", 255], 256], ["%", "M", 7], ["-", "H", "KH"],
    ["min", "N", ["*", "M", 2]], ["max", 0, ["-", "N", 100]], ["/", ["-", 0, "N"], 3]])
def test_compiled_size_expressions_agree_with_eval_size(j):
    f = launch_plan.compile_sizes([j])
    for n, m, h, kh in itertools.product((0, 1, 37, 4096), (1, 8), (5, 9), (3,)):
        sizes = {"N": n, "M": m, "H": h, "KH": kh}
        assert f(sizes) == (eval_size(j, sizes),)


def test_compiled_division_by_zero_is_the_same_error():
    f = launch_plan.compile_sizes([["/", "N", "M"], ["%", "N", "M"]])
    for g in (f, lambda s: (eval_size(["/", "N", "M"], s),)):
        with pytest.raises(tcomp.CudaError, match="size expression divides by zero"):
            g({"N": 3, "M": 0})


def test_malformed_sidecar_size_expression():
    with pytest.raises(tcomp.CudaError, match=r"malformed size expression \['\^', 'N', 2\] in "
                                              r"the sidecar"):
        launch_plan.size_code(["^", "N", 2])


def test_compiled_width_agrees_with_index_bits_for():
    k = fma_kernel()
    width = launch_plan.compile_width(k.meta)
    for n in (1, 4096, 2**31 - 1, 2**31, 2**33):
        sizes = {"N": n}
        shapes = {"A": (n,), "B": (n,), "C": (n,)}
        kd = k.meta["kernels"][0]
        launches = [(kd["name"], [eval_size(g, sizes) for g in kd["grid"]], kd["block"])]
        assert width(sizes) == index_bits_for(shapes, launches, sizes)[0], n


# ------------------------------------------------------------------ signature checker
@pytest.mark.parametrize("src,args,message", BAD_CALLS)
def test_compiled_checker_refuses_what_check_call_refuses(src, args, message):
    sig = Signature.from_op(tcomp.op(src))
    with pytest.raises(tcomp.TcompError) as general:
        sig.check_call(args)
    with pytest.raises(tcomp.TcompError) as compiled:
        sig.checker()(tuple(args))
    assert type(compiled.value) is type(general.value)
    assert compiled.value.message == general.value.message
    assert compiled.value.__context__ is None  # not raised "during handling" of the miss


@pytest.mark.parametrize("args", [
    (np.zeros((3, 3), np.float32), np.zeros(3, np.float32)),
    ([[1.0, 2.0], [3.0, 4.0]], [1, 2, 3]),  # Python data: converted by the general check
    (np.zeros((0, 0), np.float32), np.float32([1, 2, 3])),
])
def test_compiled_checker_accepts_what_check_call_accepts(args):
    sig = Signature.from_op(tcomp.op("def t(float(N, N) A, float(3) v) -> (B) { "
                                     "B(i, j) = A(j, i) * v(1) }"))
    got_args, got_sizes = sig.checker()(args)
    want_args, want_sizes = sig.check_call(args)
    assert got_sizes == want_sizes
    for g, w in zip(got_args, want_args):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_compiled_checker_with_fixed_sizes():
    sig = Signature.from_op(tcomp.op(FMA))
    check = sig.checker({"N": 8})
    a = np.zeros(8, np.float32)
    assert check((a, a))[1] == {"N": 8}
    with pytest.raises(tcomp.LoweringError, match="'fma' was compiled for N=8, but the inputs "
                                                  "have N=9"):
        check((np.zeros(9, np.float32), np.zeros(9, np.float32)))


# ------------------------------------------------------------------ a mocked driver
class FakeModule:
    limits_of = LaunchLimits(kernel_threads=1024)

    def __init__(self, cubin):
        self.limits = {}
        self.loaded = []

    def function(self, name, smem=0):
        self.loaded.append(name)
        self.limits[name] = self.limits_of
        return f"<function {name}>"


class Driver:
    """cuda_api's functions, recorded: launches with their kernelParams decoded."""

    def __init__(self, monkeypatch, param_types):
        self.calls, self.launches, self.param_types = [], [], param_types
        self.next_ptr = 0x100000
        rec = self._record
        for name in ("ensure_context", "synchronize", "stream_synchronize", "memset_zero",
                     "memcpy_htod", "memcpy_dtoh", "mem_free", "order_after"):
            monkeypatch.setattr(cuda_api, name, (lambda n: lambda *a: rec(n, *a))(name))
        monkeypatch.setattr(cuda_api, "mem_alloc", self._alloc)
        monkeypatch.setattr(cuda_api, "pointer_device", lambda ptr: 0)
        monkeypatch.setattr(cuda_api, "Module", FakeModule)
        monkeypatch.setattr(cuda_api, "kernel_launcher", lambda: self._launch)

    def _record(self, name, *args):
        self.calls.append((name, *args))

    def _alloc(self, n):
        self.next_ptr += 0x10000
        self.calls.append(("mem_alloc", n))
        return self.next_ptr

    def _launch(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_void_p * len(self.param_types)).from_address(params)
        values = [t.from_address(pointers[i]).value for i, t in enumerate(self.param_types)]
        self.launches.append(dict(func=func, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem,
                                  stream=stream, params=values))
        return (Ok(),)

    def names(self):
        return [c[0] for c in self.calls]


class Ok:
    name = "CUDA_SUCCESS"

    def __bool__(self):
        return False


class DeviceArrayLike:
    """An array known by __cuda_array_interface__ (version 3, naming a stream)."""

    def __init__(self, n, ptr, stream=None):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": stream}


VOID, INT = ctypes.c_void_p, ctypes.c_int


def test_symbolic_kernel_launch_is_packed_and_on_the_named_stream(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID, INT])
    k = fma_kernel()
    a, b = DeviceArrayLike(1000, 0xA000, stream=0x5000), DeviceArrayLike(1000, 0xB000)
    out = k(a, b)
    assert isinstance(out, np.ndarray) and out.shape == (1000,)  # array-interface in: NumPy out
    (launch,) = d.launches
    dtoh = [c for c in d.calls if c[0] == "memcpy_dtoh"]
    assert launch["grid"] == (4, 1, 1) and launch["block"] == (256, 1, 1)
    assert launch["stream"] == 0x5000
    assert launch["params"][:2] == [0xA000, 0xB000] and launch["params"][3] == 1000
    assert dtoh[0][2] == launch["params"][2] and dtoh[0][4] == 0x5000  # C, copied back there
    assert ("stream_synchronize", 0x5000) in d.calls  # NumPy out: wait for that stream only
    assert "synchronize" not in d.names()  # never the whole device


def test_fixed_size_plan_is_made_once(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID])
    k = fma_kernel({"N": 4096})
    x = DeviceArrayLike(4096, 0xA000)
    for _ in range(3):
        k(x, x)
    assert len(k._bound) == 1 and len(k._plans) == 1
    assert [launch["grid"] for launch in d.launches] == [(16, 1, 1)] * 3
    assert d.launches[0]["stream"] == streams.LEGACY  # no stream named: the legacy default one


def test_symbolic_bindings_are_kept_per_sizes(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID, INT])
    k = fma_kernel()
    for n in (10, 300, 10, 300):
        k(DeviceArrayLike(n, 0xA000), DeviceArrayLike(n, 0xB000))
    assert sorted(k._bound) == [(("N", 10),), (("N", 300),)]
    assert [(la["grid"][0], la["params"][3]) for la in d.launches] == [(1, 10), (2, 300)] * 2


def test_numpy_inputs_are_copied_on_the_explicit_stream(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID, INT])
    k = fma_kernel()
    a = np.arange(5, dtype=np.float32)
    k(a, a, stream=0x7000)
    copies = [c for c in d.calls if c[0] in ("memcpy_htod", "memcpy_dtoh")]
    assert [c[4] for c in copies] == [0x7000] * 3
    assert d.launches[0]["stream"] == 0x7000
    names = d.names()
    assert names.index("stream_synchronize") > names.index("memcpy_dtoh")
    assert names.count("mem_free") == 3 and "synchronize" not in names


def test_array_interface_stream_other_than_the_launch_stream_is_waited_for(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID, INT])
    k = fma_kernel()
    k(DeviceArrayLike(8, 0xA000, stream=0x5000), DeviceArrayLike(8, 0xB000, stream=0x6000))
    assert ("order_after", 0x5000, 0x6000) in d.calls  # B's producer stream, before the launch
    assert d.launches[0]["stream"] == 0x5000


def test_launch_problem_of_constant_dims_is_found_at_the_first_call(monkeypatch):
    Driver(monkeypatch, [VOID, VOID, VOID])
    monkeypatch.setattr(FakeModule, "limits_of", LaunchLimits(kernel_threads=128))
    k = fma_kernel({"N": 4096})
    x = DeviceArrayLike(4096, 0xA000)
    with pytest.raises(tcomp.CudaError, match="kernel fma_C: a block of 256x1x1 = 256 threads "
                                              "exceeds the 128 threads per block this compiled "
                                              "kernel can run"):
        k(x, x)


def test_misaligned_vector_buffer(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID])
    k = fma_kernel({"N": 4096})
    k.meta["kernels"][0]["aligned_buffers"] = ["B"]
    with pytest.raises(tcomp.CudaError, match="kernel fma_C accesses 'B' with 16-byte vectors, "
                                              "but its pointer is not 16-byte aligned"):
        k(DeviceArrayLike(4096, 0xA000), DeviceArrayLike(4096, 0xB004))
    assert not d.launches


# ------------------------------------------------------------------ the torch fast path
class FakeCudaTensor:
    """What the fast path reads from a torch CUDA tensor."""
    is_cuda = True

    def __init__(self, n, ptr, dtype="float32", device=0, contiguous=True):
        self.shape, self.dtype, self._ptr = (n,), np.dtype(dtype), ptr
        self._device, self._contiguous = device, contiguous

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._ptr


FakeCudaTensor.__module__ = "torch.fake"  # what kind_of recognises as torch


def test_torch_fast_path_launches_on_torch_current_stream(monkeypatch):
    d = Driver(monkeypatch, [VOID, VOID, VOID, INT])
    made = []

    def empty(shape, dtype, device):
        made.append((shape, dtype, device))
        return FakeCudaTensor(shape[0], 0xC000 + 0x1000 * len(made))
    monkeypatch.setattr(A, "_torch_allocators", (empty, None, "cuda:0"))
    monkeypatch.setattr(streams, "_torch_raw_stream", lambda device: 0x9000)
    k = fma_kernel()
    k.__dict__["_torch_made"] = [("torch.float32", False, True)]  # (no torch here)
    a, b = FakeCudaTensor(100, 0xA000), FakeCudaTensor(100, 0xB000)
    assert A.kind_of(a) == "torch"
    k(a, b)  # (the general path, the first time a type is seen; it registers the type)
    c = k(a, b)
    assert isinstance(c, FakeCudaTensor) and made[-1] == ((100,), "torch.float32", "cuda:0")
    assert [la["stream"] for la in d.launches] == [0x9000, 0x9000]
    assert d.launches[-1]["params"] == [0xA000, 0xB000, c.data_ptr(), 100]
    assert "synchronize" not in d.names() and "stream_synchronize" not in d.names()
    # a tensor the fast path does not take goes the general way, which names the problem
    with pytest.raises(tcomp.CudaError, match="input 'B' is on device 1, but tcomp runs on "
                                              "device 0"):
        k(a, FakeCudaTensor(100, 0xB000, device=1))


# ------------------------------------------------------------------ stream arguments
class TorchStreamLike:
    cuda_stream = 0x1234


class CupyStreamLike:
    ptr = 0x2345


CupyStreamLike.__module__ = "cupy.cuda.stream"


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x3456)


@pytest.mark.parametrize("given, handle", [
    (0, 0), (1, 0), (2, 2), (0x5000, 0x5000), (TorchStreamLike(), 0x1234),
    (CupyStreamLike(), 0x2345), (ProtocolStream(), 0x3456)])
def test_stream_arguments(given, handle):
    assert streams.from_argument(given) == handle


@pytest.mark.parametrize("given, what", [(-1, "-1"), (True, "True"), ("s", "str"),
                                         (1.5, "float")])
def test_bad_stream_argument(given, what):
    with pytest.raises(tcomp.CudaError) as e:
        streams.from_argument(given)
    assert str(e.value) == (
        f"stream= must be a CUDA stream: an int handle (0 for the legacy default stream), a "
        f"torch.cuda.Stream, a CuPy stream or an object with __cuda_stream__; got {what}")


def test_array_interface_streams():
    assert streams.cai_stream({"version": 3, "stream": 1}) == streams.LEGACY
    assert streams.cai_stream({"version": 3, "stream": 0x5000}) == 0x5000
    assert streams.cai_stream({"version": 3, "stream": None}) is None
    assert streams.cai_stream({"version": 2, "stream": 0x5000}) is None  # before v3: no key
    assert streams.for_interchange(0) == 1 and streams.for_interchange(0x5000) == 0x5000


# ------------------------------------------------------------------ driver errors
class FakeErr:
    def __init__(self, name):
        self.name = name

    def __bool__(self):
        return True


class FakeDriver:
    class CUresult:
        CUDA_SUCCESS = object()

    @staticmethod
    def cuGetErrorString(err):
        return (None, b"operation not permitted when stream is capturing")


def test_capture_error_names_the_remedy():
    text = cuda_api.error_text(FakeDriver, FakeErr("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
                               "cuMemAlloc")
    assert text == (
        "cuMemAlloc failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (operation not permitted when "
        "stream is capturing); a CUDA graph is being captured: pass device arrays (torch "
        "tensors, CuPy arrays), which tcomp allocates and launches on the capturing stream; "
        "NumPy inputs and outputs are copied synchronously and cannot be captured")


def test_launch_without_tcomp_context_is_retried_once_after_activating(monkeypatch):
    results = [(FakeErr("CUDA_ERROR_INVALID_CONTEXT"),), (Ok(),)]
    launched, activated = [], []
    monkeypatch.setattr(cuda_api, "kernel_launcher",
                        lambda: lambda *a: (launched.append(a), results.pop(0))[1])

    class Dev:
        def activate(self):
            activated.append(True)
    monkeypatch.setattr(cuda_api, "device", lambda: Dev())
    cuda_api.launch_packed("f", 1, 1, 1, 32, 1, 1, 0, 0x5000, 0)
    assert len(launched) == 2 and activated == [True] and not results
