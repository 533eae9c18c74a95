"""The ctypes DLPack consumer and producer, on the CPU: capsules made by NumPy's
own `__dlpack__` (legacy and versioned), fake producers wrapping NumPy memory,
and the checks a CUDA kernel applies to a DLPack input (no GPU needed: the
driver is never called for a tensor that is rejected or only described)."""
from __future__ import annotations

import ctypes
import sys
import re

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.target_cuda import arrays as A
from tcomp.target_cuda import cuda_api
from tcomp.target_cuda import dlpack as D


class Producer:
    """An object with only the DLPack protocol, handing out NumPy's capsules
    (or `capsule()` when given); it records the arguments it was called with."""

    def __init__(self, array, device=(D.kDLCPU, 0), versioned=True, capsule=None):
        self.array, self.device, self.versioned, self.capsule = array, device, versioned, capsule
        self.calls = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if not self.versioned and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append({"stream": stream, "max_version": max_version})
        if self.capsule is not None:
            return self.capsule()
        return self.array.__dlpack__(stream=stream, max_version=max_version)


def fake_device_capsule(array, device=(D.kDLCUDA, 0), dt=None, strides=None, byte_offset=0,
                        versioned=True):
    """A capsule claiming `array`'s memory lives on `device` (never dereferenced)."""
    dt = dt or dtypes.from_numpy(array.dtype)
    return lambda: D.make_capsule(array.ctypes.data, array.shape, dt, device, array, versioned,
                                  byte_offset=byte_offset, strides=strides)


def capsule_named(cap, name: bytes) -> bool:
    return bool(D._is_valid(cap, name))


# ------------------------------------------------------------------ capsules
@pytest.mark.parametrize("versioned", [False, True])
def test_numpy_capsule_parsed_renamed_and_deleter_called(versioned):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    before = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    assert sys.getrefcount(a) == before + 1  # the capsule's manager context holds the array
    t = D.import_capsule(cap)
    assert t.versioned is versioned
    assert t.ptr == a.ctypes.data and t.shape == (2, 3, 4)
    assert t.dtype == dtypes.float32 and t.dl_dtype == (2, 32, 1)
    assert t.device == (D.kDLCPU, 0) and t.is_contiguous()
    used = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    assert capsule_named(cap, used)
    assert sys.getrefcount(a) == before + 1  # still ours until release
    t.release()
    assert sys.getrefcount(a) == before  # NumPy's deleter ran
    t.release()  # a second release does nothing
    del cap  # the renamed capsule's destructor must not call the deleter again
    assert sys.getrefcount(a) == before


def test_strided_view_offset_and_read_only_flag():
    a = np.arange(20, dtype=np.int16).reshape(4, 5)
    v = a[1:, ::2].T  # shape (3, 3), strides (2, 5) elements, data at element 5
    v.flags.writeable = False
    t = D.import_capsule(v.__dlpack__(max_version=(1, 0)))
    assert t.shape == (3, 3) and t.strides == (2, 5)
    assert t.ptr == a.ctypes.data + 5 * 2
    assert t.dtype == dtypes.int16 and t.read_only and not t.is_contiguous()
    np.testing.assert_array_equal(A.host_copy("X", t), v)
    t.release()


def test_byte_offset_is_added_to_the_data_pointer():
    a = np.arange(8, dtype=np.float32)
    cap = D.make_capsule(a.ctypes.data, (2, 3), dtypes.float32, (D.kDLCPU, 0), a, False,
                         byte_offset=8)
    t = D.import_capsule(cap)
    assert t.ptr == a.ctypes.data + 8 and t.strides == (3, 1) and not t.versioned
    np.testing.assert_array_equal(A.host_copy("X", t), a[2:8].reshape(2, 3))
    t.release()
    assert not D._LIVE


@pytest.mark.parametrize("dt", [t for t in dtypes.ALL])
def test_every_tcomp_dtype_round_trips(dt):
    a = np.zeros(3, dt.numpy)
    t = D.import_capsule(D.make_capsule(a.ctypes.data, (3,), dt, (D.kDLCPU, 0), a, True))
    assert t.dtype == dt and t.dtype_name() == dt.name
    t.release()


def test_numpy_dtype_codes():
    for npdt, want in ((np.int8, (0, 8)), (np.uint32, (1, 32)), (np.float16, (2, 16)),
                       (np.float64, (2, 64)), (np.bool_, (6, 8))):
        t = D.import_capsule(np.zeros(2, npdt).__dlpack__())
        assert t.dl_dtype[:2] == want and t.dtype == dtypes.from_numpy(npdt)
        t.release()


def test_zero_dim_and_empty_tensors():
    t = D.import_capsule(np.array(2.5).__dlpack__())
    assert t.shape == () and A.host_copy("X", t).item() == 2.5
    t.release()
    t = D.import_capsule(np.zeros((0, 3), np.float32).__dlpack__())
    assert A.host_copy("X", t).shape == (0, 3)
    t.release()


def test_consumed_capsule_is_an_error():
    cap = np.zeros(2, np.float32).__dlpack__()
    D.import_capsule(cap).release()
    with pytest.raises(tcomp.CudaError, match="already consumed"):
        D.import_capsule(cap)


def test_not_a_capsule_is_an_error():
    with pytest.raises(tcomp.CudaError, match=r"expected a DLPack capsule \('dltensor' or "
                                              r"'dltensor_versioned'\), got list"):
        D.import_capsule([1, 2])


def test_unknown_major_version_is_refused_and_handed_back():
    a = np.zeros(2, np.float32)
    cap = D.make_capsule(a.ctypes.data, (2,), dtypes.float32, (D.kDLCPU, 0), a, True)
    (m, *_), = D._LIVE.values()
    m.version.major = 2
    with pytest.raises(tcomp.CudaError, match=r"DLPack tensor of version 2\.0: tcomp understands "
                                              r"DLPack 1\.x"):
        D.import_capsule(cap)
    assert not D._LIVE  # the deleter ran


def test_vector_lanes_and_complex_are_named_in_errors():
    a = np.zeros(4, np.float32)
    cap = D.make_capsule(a.ctypes.data, (4,), dtypes.float32, (D.kDLCUDA, 0), a, True)
    (m, *_), = D._LIVE.values()
    m.dl_tensor.dtype.lanes = 4
    t = D.import_capsule(cap)
    assert t.dtype is None and t.dtype_name() == "float32x4"
    with pytest.raises(tcomp.CudaError, match="input 'A' has DLPack dtype float32x4, which tcomp "
                                              "does not support; the kernel takes float32"):
        A.check_device_tensor("A", t, dtypes.float32)
    t.release()
    t = D.import_capsule(np.zeros(2, np.complex64).__dlpack__())
    with pytest.raises(tcomp.CudaError, match="input 'Z' has DLPack dtype complex64, which tcomp "
                                              "does not support"):
        A.host_copy("Z", t)
    t.release()


# ------------------------------------------------------------------ producers
def test_consume_asks_for_a_versioned_capsule_with_the_default_stream():
    p = Producer(np.ones((2, 2), np.float32))
    t = D.consume("A", p)
    assert t.versioned and p.calls == [{"stream": None, "max_version": (1, 0)}]
    t.release()


def test_consume_falls_back_for_producers_before_dlpack_1():
    p = Producer(np.ones(3, np.int32), versioned=False)
    t = D.consume("A", p)
    assert not t.versioned and t.dtype == dtypes.int32
    assert p.calls == [{"stream": None, "max_version": None}]
    t.release()


def test_producer_stream_is_the_launch_stream():
    assert D.producer_stream(D.kDLCUDA) is None and D.producer_stream(D.kDLCPU) is None
    assert D.producer_stream(D.kDLCUDA, 1) is None  # the legacy default stream, as None
    assert D.producer_stream(D.kDLCUDA, 0x5000) == 0x5000
    assert D.producer_stream(D.kDLCUDAManaged, 2) == 2  # the per-thread default stream
    assert D.producer_stream(D.kDLCPU, 0x5000) is None  # CPU producers take only None


def test_consume_names_the_launch_stream_to_the_producer():
    p = Producer(np.ones(3, np.int32), device=(D.kDLCUDA, 0),
                 capsule=fake_device_capsule(np.ones(3, np.int32)))
    D.consume("A", p, 0x5000).release()
    assert p.calls == [{"stream": 0x5000, "max_version": (1, 0)}]


def test_device_disagreement_is_an_error():
    a = np.ones(2, np.float32)
    p = Producer(a, device=(D.kDLCUDA, 0))  # but NumPy's capsule says CPU
    with pytest.raises(tcomp.CudaError, match=r"input 'A': __dlpack_device__\(\) says \(2, 0\) but "
                                              r"the DLPack tensor is on \(1, 0\)"):
        D.consume("A", p)


def test_failing_producer_is_a_cuda_error():
    class Broken:
        def __dlpack_device__(self):
            return (D.kDLCUDA, 0)

        def __dlpack__(self, **kw):
            raise BufferError("no memory")
    with pytest.raises(tcomp.CudaError, match=r"input 'X': Broken.__dlpack__\(\) failed: "
                                              r"BufferError: no memory"):
        D.consume("X", Broken())

    class NoDevice:
        def __dlpack__(self, **kw):
            return None
    with pytest.raises(tcomp.CudaError, match=r"input 'X': NoDevice.__dlpack_device__\(\) failed"):
        D.consume("X", NoDevice())


# ------------------------------------------------------------------ kernel inputs
def test_device_tensor_taken_in_place(monkeypatch):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = Producer(a, device=(D.kDLCUDA, 0), capsule=fake_device_capsule(a, byte_offset=0))
    w = A.wrap_input("A", p, dtypes.float32)
    assert (w.kind, w.ptr, w.shape, w.dtype, w.owned) == ("dlpack", a.ctypes.data, (2, 3),
                                                        "float32", False)
    assert len(D._LIVE) == 1
    live_at_sync = []
    monkeypatch.setattr(cuda_api, "stream_synchronize",
                        lambda stream: live_at_sync.append((stream, len(D._LIVE))))
    A.release([w], 0x5000)
    # the kernel may still read the tensor: synchronize its stream before handing it back
    assert live_at_sync == [(0x5000, 1)] and not D._LIVE and w.imported is None


@pytest.mark.parametrize("bad, message", [
    (dict(device=(D.kDLCUDA, 1)), "input 'A' is on device 1, but tcomp runs on device 0"),
    (dict(device=(10, 0)), r"input 'A' is a DLPack tensor on ROCm device 0; tcomp reads CUDA "
                           "device memory \\(or copies CPU arrays\\)"),
    (dict(dt=dtypes.bfloat16), "input 'A' is bfloat16 but the kernel takes float32"),
    (dict(strides=(1, 2)), r"input 'A' is not contiguous \(strides \(1, 2\) in elements\); make "
                           r"a contiguous copy first"),
])
def test_device_tensor_errors(bad, message):
    a = np.zeros((2, 3), np.float32)
    device = bad.pop("device", (D.kDLCUDA, 0))
    p = Producer(a, device=device, capsule=fake_device_capsule(a, device=device, **bad))
    with pytest.raises(tcomp.CudaError, match=message):
        A.wrap_input("A", p, dtypes.float32)
    assert not D._LIVE  # the rejected tensor was handed back


def test_contiguity_ignores_strides_of_unit_dimensions():
    a = np.zeros((1, 3), np.float32)
    t = D.import_capsule(fake_device_capsule(a, strides=(7, 1))())
    assert t.is_contiguous()
    A.check_device_tensor("A", t, dtypes.float32)
    t.release()


def test_cpu_tensor_is_copied_like_numpy(monkeypatch):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # strided: copied contiguous
    copies = []
    monkeypatch.setattr(cuda_api, "mem_alloc", lambda n: 4096)
    monkeypatch.setattr(cuda_api, "memcpy_htod", lambda dst, src, n, stream: copies.append(
        np.ctypeslib.as_array((ctypes.c_float * (n // 4)).from_address(src)).copy()))
    p = Producer(a)
    before = sys.getrefcount(a)
    w = A.wrap_input("A", p, dtypes.float32)
    assert (w.kind, w.ptr, w.shape, w.owned) == ("numpy", 4096, (3, 2), True)
    np.testing.assert_array_equal(copies[0].reshape(3, 2), a)
    assert sys.getrefcount(a) == before  # the capsule was handed back at once


def test_cpu_tensor_of_another_dtype_is_never_cast():
    with pytest.raises(tcomp.CudaError, match="input 'A' is float64 but the kernel takes float32"):
        A.wrap_input("A", Producer(np.ones(2, np.float64)), dtypes.float32)


def test_cpu_tensor_of_another_kind_is_refused():
    with pytest.raises(tcomp.CudaError, match="input 'A' is float32 but the kernel takes int32"):
        A.wrap_input("A", Producer(np.ones(2, np.float32)), dtypes.int32)


def test_failing_cuda_array_interface_falls_back_to_dlpack():
    class Both(Producer):
        @property
        def __cuda_array_interface__(self):
            raise ValueError("no bfloat16 here")
    a = np.ones(3, np.float32)
    w = A.wrap_input("A", Both(a, device=(D.kDLCUDA, 0), capsule=fake_device_capsule(a)),
                     dtypes.float32)
    assert w.kind == "dlpack" and w.ptr == a.ctypes.data
    w.imported.release()

    class OnlyCai:
        @property
        def __cuda_array_interface__(self):
            raise ValueError("broken")
    with pytest.raises(tcomp.CudaError, match=r"input 'A': tests.OnlyCai.__cuda_array_"
                                              r"interface__ failed: broken"):
        A.wrap_input("A", OnlyCai(), dtypes.float32)


def test_jax_like_objects_take_dlpack_even_with_cai():
    """JAX arrays expose __cuda_array_interface__ too; tcomp takes them through
    DLPack (bfloat16 works, and outputs come back as JAX arrays)."""
    a = np.ones(3, np.float32)
    JaxLike = type("ArrayImpl", (Producer,), {
        "__module__": "jaxlib.xla_extension",
        "__cuda_array_interface__": property(lambda self: {"shape": (3,), "typestr": "<f4",
                                                           "data": (self.array.ctypes.data, True),
                                                           "version": 3})})
    w = A.wrap_input("A", JaxLike(a, device=(D.kDLCUDA, 0), capsule=fake_device_capsule(a)),
                     dtypes.float32)
    assert w.kind == "dlpack"
    w.imported.release()
    assert A._is_jax(JaxLike(a)) and not D._LIVE


# ------------------------------------------------------------------ CudaArray export
def _fake_cuda_array(shape=(2, 3)):
    """A CudaArray over host memory (never dereferenced), without a driver."""
    from tcomp.target_cuda.cuda_array import CudaArray
    host = np.zeros(shape, np.float32)
    c = object.__new__(CudaArray)
    c.shape, c._dt, c.size, c.nbytes, c.ptr = shape, dtypes.float32, host.size, host.nbytes, 0
    c._host, c._addr = host, host.ctypes.data
    return c


def test_cuda_array_exports_capsules(monkeypatch):
    c = _fake_cuda_array()
    c.ptr = c._addr
    try:
        assert c.__dlpack_device__() == (D.kDLCUDA, 0)
        assert c.__cuda_array_interface__ == {"shape": (2, 3), "typestr": "<f4",
                                              "data": (c._addr, False), "version": 3,
                                              "strides": None, "stream": 1}
        for kw, versioned in (({}, False), ({"max_version": (1, 0)}, True),
                              ({"max_version": (0, 8)}, False), ({"stream": -1}, False)):
            t = D.import_capsule(c.__dlpack__(**kw))
            assert (t.ptr, t.shape, t.strides, t.device) == (c._addr, (2, 3), (3, 1), (2, 0))
            assert t.versioned is versioned and t.dtype == dtypes.float32
            assert len(D._LIVE) == 1  # the capsule keeps the array alive until the deleter
            t.release()
            assert not D._LIVE
        waited = []
        monkeypatch.setattr(cuda_api, "order_after", lambda w, p: waited.append((w, p)))
        D.import_capsule(c.__dlpack__(stream=0x5000)).release()
        assert waited == [(0x5000, 0)]  # another stream waits for tcomp's kernels
        D.import_capsule(c.__dlpack__(stream=1)).release()  # the stream it was written on
        D.import_capsule(c.__dlpack__()).release()
        assert waited == [(0x5000, 0)]
        c.stream = 0x7000  # written on a stream of the caller's
        assert c.__cuda_array_interface__["stream"] == 0x7000
        D.import_capsule(c.__dlpack__()).release()
        D.import_capsule(c.__dlpack__(stream=0x7000)).release()
        D.import_capsule(c.__dlpack__(stream=-1)).release()
        assert waited == [(0x5000, 0), (0, 0x7000)]
    finally:
        c.ptr = 0  # nothing to free


@pytest.mark.parametrize("kw, error, message", [
    ({"dl_device": (1, 0)}, BufferError, "a tcomp.CudaArray lives on CUDA device 0; it cannot be "
                                         "exported to CPU device 0"),
    ({"copy": True}, BufferError, r"a tcomp.CudaArray is exported without copying \(copy=True is "
                                  r"not supported\)"),
    ({"stream": "s"}, TypeError, "stream must be an int or None, got str"),
    ({"stream": 0}, BufferError, "stream=0 is ambiguous for CUDA in the DLPack protocol; pass 1 "
                                 "for the legacy default stream or 2 for the per-thread one"),
])
def test_cuda_array_export_errors(kw, error, message):
    c = _fake_cuda_array()
    with pytest.raises(error, match=message):
        c.__dlpack__(**kw)
    assert not D._LIVE


def test_cuda_array_host_copy_is_explicit():
    c = _fake_cuda_array()
    with pytest.raises(ValueError, match="a tcomp.CudaArray lives on the GPU: converting it to "
                                         "NumPy copies"):
        c.__array__(copy=False)
    assert repr(c) == "<tcomp.CudaArray float32[2, 3] at 0x0 on cuda:0>"


# ------------------------------------------------------- call-time checks of DLPack-only inputs
MM_SRC = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


@pytest.mark.parametrize("a, b, msg", [
    (np.ones((3, 4), np.float32), np.ones((5, 2), np.float32),
     "input 'B' dimension 0 is 5, but size K is 4 from input 'A' dimension 1"),
    (np.ones((3, 4), np.float64), np.ones((4, 2), np.float32),
     "input 'A' is float32, but the array passed for it is float64"),
    (np.ones(4, np.float32), np.ones((4, 2), np.float32),
     "input 'A' must have 2 dimension(s), got 1"),
])
def test_dlpack_only_inputs_get_the_shared_checks(a, b, msg):
    """A DLPack-only object has no .shape/.dtype: the kernel imports it before the
    call-time checks (which then see its shape and dtype, before any GPU work) and
    hands every capsule back when a check fails."""
    k = tcomp.build(tcomp.op(MM_SRC), target="cuda")
    pa, pb = Producer(a), Producer(b)
    before = sys.getrefcount(a), sys.getrefcount(b)
    with pytest.raises(tcomp.LangError, match=re.escape(msg)):
        k(pa, pb)
    assert len(pa.calls) == len(pb.calls) == 1
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before  # deleters ran
