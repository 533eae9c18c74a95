"""DLPack in ctypes, with no dependency: consume capsules from any producer
(JAX, torch, CuPy, NumPy, ...) and produce them for tcomp's own device arrays.

Consumer, following the Python array API's DLPack protocol:
  1. `x.__dlpack_device__()` tells where the data lives;
  2. `x.__dlpack__(stream=..., max_version=(1, 0))` hands over a PyCapsule named
     "dltensor_versioned" (DLPack >= 1.0) or "dltensor" (older producers,
     which reject `max_version` with a TypeError; then we ask again without it);
  3. we read the `DLTensor` (data + byte_offset, shape, strides in elements,
     dtype code/bits/lanes), rename the capsule to "used_dltensor[_versioned]"
     (so its destructor no longer frees it) and call the tensor's deleter
     ourselves once the data is no longer used (`Imported.release`).

Which stream the producer must order its work against is chosen in one place,
`producer_stream`: the stream the kernel call runs on (streams.py), as the
protocol spells it (None for the legacy default stream).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ..errors import CudaError
from ..lang import dtypes

# DLDeviceType values
kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                9: "VPI", 10: "ROCm", 11: "ROCm host", 12: "ext_dev", 13: "CUDA managed",
                14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA", 18: "Trainium"}
FLAG_READ_ONLY = 1 << 0
VERSION = (1, 0)  # the highest DLPack version this consumer understands


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Producers' deleters are called with the GIL held, as their capsule destructors
# would be (some touch Python objects, e.g. NumPy's).
_CALL_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# DLDataType (code, bits) -> tcomp dtype; code 0 int, 1 uint, 2 float, 4 bfloat, 6 bool,
# 10 float8_e4m3fn, 12 float8_e5m2 (DLPack 1.1's kDLFloat8_e4m3fn, kDLFloat8_e5m2)
_CODES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex",
          6: "bool", 10: "float8_e4m3fn", 12: "float8_e5m2"}
_DTYPES = {(0, 8): dtypes.int8, (0, 16): dtypes.int16, (0, 32): dtypes.int32,
           (0, 64): dtypes.int64, (1, 8): dtypes.uint8, (1, 16): dtypes.uint16,
           (1, 32): dtypes.uint32, (1, 64): dtypes.uint64, (2, 16): dtypes.float16,
           (2, 32): dtypes.float32, (2, 64): dtypes.float64, (4, 16): dtypes.bfloat16,
           (6, 8): dtypes.bool_, (10, 8): dtypes.float8_e4m3fn, (12, 8): dtypes.float8_e5m2}
_DL_OF = {v.name: k for k, v in _DTYPES.items()}

# The Python C API's capsule functions, through our own prototypes (setting
# argtypes on ctypes.pythonapi's shared function objects would change them for
# every other user in the process).
_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_set_name_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", _api))
# A capsule keeps the name *pointer* it is given: these buffers live as long as the module.
_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"dltensor", b"used_dltensor", b"dltensor_versioned", b"used_dltensor_versioned")}


def _set_name(capsule, name: bytes) -> None:
    _set_name_raw(capsule, ctypes.addressof(_NAMES[name]))


def producer_stream(device_type: int, stream: int = 0):
    """The `stream` argument for `__dlpack__`: the stream tcomp's kernels of
    this call run on (`stream`, a CUstream handle), so that the producer makes
    it wait for its pending writes. CUDA: None for the legacy default stream
    (the protocol's meaning of None, which every producer accepts), else the
    handle (2 is the per-thread default stream). CPU producers accept only None."""
    if device_type in (kDLCUDA, kDLCUDAManaged) and stream not in (0, 1):
        return stream
    return None


@dataclass
class Imported:
    """A DLPack tensor taken from a capsule. `ptr` already includes
    `byte_offset`; `strides` are in elements (None: C-contiguous). Call
    `release()` exactly once when the data is no longer used (it calls the
    producer's deleter)."""
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dl_dtype: tuple[int, int, int]  # code, bits, lanes
    device: tuple[int, int]  # DLDeviceType, device id
    versioned: bool
    read_only: bool = False
    _managed: int = field(default=0, repr=False)
    _deleter: int = field(default=0, repr=False)  # function address, 0 for none
    _capsule: object = field(default=None, repr=False)

    @property
    def dtype(self):
        """The tcomp dtype, or None when tcomp has no such type."""
        code, bits, lanes = self.dl_dtype
        return _DTYPES.get((code, bits)) if lanes == 1 else None

    def dtype_name(self) -> str:
        code, bits, lanes = self.dl_dtype
        t = self.dtype
        if t is not None:
            return t.name
        text = f"{_CODES.get(code, f'type code {code}')}{bits}"
        return text + (f"x{lanes}" if lanes != 1 else "")

    def is_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expect = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    def release(self) -> None:
        if self._managed:
            managed, deleter = self._managed, self._deleter
            self._managed, self._deleter = 0, 0
            if deleter:
                _CALL_DELETER(deleter)(managed)
        self._capsule = None


def import_capsule(capsule) -> Imported:
    """Parse a DLPack capsule and take ownership of it (it is renamed
    "used_..."; the returned object's `release()` calls the deleter)."""
    if _is_valid(capsule, b"dltensor_versioned"):
        versioned, name = True, b"dltensor_versioned"
    elif _is_valid(capsule, b"dltensor"):
        versioned, name = False, b"dltensor"
    elif _is_valid(capsule, b"used_dltensor") or _is_valid(capsule, b"used_dltensor_versioned"):
        raise CudaError("this DLPack capsule was already consumed (each capsule can be used once; "
                        "call __dlpack__() again for a new one)")
    else:
        raise CudaError(f"expected a DLPack capsule ('dltensor' or 'dltensor_versioned'), got "
                        f"{type(capsule).__name__}")
    addr = _get_pointer(capsule, name)
    if versioned:
        m = DLManagedTensorVersioned.from_address(addr)
        version = (m.version.major, m.version.minor)
        if version[0] != VERSION[0]:
            # Per the protocol we must not read a tensor of another major version; we
            # still own the capsule, so hand it back through its deleter.
            _set_name(capsule, b"used_" + name)
            if _address(m.deleter):
                _CALL_DELETER(_address(m.deleter))(addr)
            raise CudaError(f"DLPack tensor of version {version[0]}.{version[1]}: tcomp "
                            f"understands DLPack {VERSION[0]}.x")
        read_only = bool(m.flags & FLAG_READ_ONLY)
    else:
        m = DLManagedTensor.from_address(addr)
        read_only = False
    t = m.dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if (ndim and t.strides) else None
    out = Imported(ptr=int(t.data or 0) + int(t.byte_offset), shape=shape, strides=strides,
                   dl_dtype=(int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)),
                   device=(int(t.device.device_type), int(t.device.device_id)),
                   versioned=versioned, read_only=read_only, _managed=addr,
                   _deleter=_address(m.deleter), _capsule=capsule)
    _set_name(capsule, b"used_" + name)
    return out


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def consume(name: str, x, stream: int = 0) -> Imported:
    """Ask `x` for a DLPack capsule (a versioned one when it can) and import it.
    `name` is the kernel parameter, for messages; `stream` the stream that
    will read it (a CUstream handle, 0 for the legacy default stream)."""
    try:
        dev_type, dev_id = (int(v) for v in x.__dlpack_device__())
    except Exception as e:
        raise CudaError(f"input '{name}': {type(x).__name__}.__dlpack_device__() failed: "
                        f"{e}") from None
    stream = producer_stream(dev_type, stream)
    try:
        try:
            capsule = x.__dlpack__(stream=stream, max_version=VERSION)
        except TypeError:
            capsule = x.__dlpack__(stream=stream)  # a producer from before DLPack 1.0
    except Exception as e:
        raise CudaError(f"input '{name}': {type(x).__name__}.__dlpack__() failed: "
                        f"{type(e).__name__}: {e}") from None
    t = import_capsule(capsule)
    if t.device != (dev_type, dev_id):
        t.release()
        raise CudaError(f"input '{name}': __dlpack_device__() says {(dev_type, dev_id)} but the "
                        f"DLPack tensor is on {t.device}")
    return t


def describe_device(device: tuple[int, int]) -> str:
    return f"{DEVICE_NAMES.get(device[0], f'device type {device[0]}')} device {device[1]}"


def dl_dtype_of(dt) -> tuple[int, int, int]:
    code, bits = _DL_OF[dt.name]
    return code, bits, 1


# ------------------------------------------------------------------ producer
# Capsules we made, by the address of their managed tensor: the structure, its
# shape/strides arrays and the owner of the memory stay alive until the consumer
# (or the capsule's destructor, when nobody consumed it) calls the deleter.
_LIVE: dict[int, tuple] = {}


def _delete(addr, _live=_LIVE):
    # Consumers may call this late (a JAX array freed at interpreter exit): it
    # uses only what it was given, not module globals that teardown clears.
    _live.pop(addr, None)


_DELETE = DELETER(_delete)
# The capsule destructor runs while the capsule is being freed: it takes the raw
# pointer (no Python reference may be made to a dying object).
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))


def _destroy_capsule(cap, _valid=_raw_is_valid, _pointer=_raw_get_pointer, _delete=_delete):
    for name in (b"dltensor", b"dltensor_versioned"):
        if _valid(cap, name):  # never consumed: nobody else will call the deleter
            _delete(_pointer(cap, name))


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _api))


def make_capsule(ptr: int, shape, dt, device: tuple[int, int], owner, versioned: bool,
                 byte_offset: int = 0, strides=None, read_only: bool = False):
    """A DLPack capsule for memory at `ptr` (+ `byte_offset`) of tcomp dtype `dt`;
    `owner` is kept alive until the consumer calls the deleter. Strides (in
    elements) are always written: C-contiguous ones when not given."""
    ndim = len(shape)
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= max(int(n), 1)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    code, bits, lanes = dl_dtype_of(dt)
    t = m.dl_tensor
    t.data, t.ndim, t.byte_offset = ptr, ndim, byte_offset
    t.device = DLDevice(*device)
    t.dtype = DLDataType(code, bits, lanes)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    m.deleter = _DELETE
    if versioned:
        m.version = DLPackVersion(*VERSION)
        m.flags = FLAG_READ_ONLY if read_only else 0
    addr = ctypes.addressof(m)
    _LIVE[addr] = (m, shape_arr, strides_arr, owner)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    return _new_capsule(addr, ctypes.addressof(_NAMES[name]),
                        ctypes.cast(_DESTRUCTOR, ctypes.c_void_p))


def wants_versioned(max_version) -> bool:
    """Whether a consumer that passed `max_version` to `__dlpack__` takes a
    versioned capsule (it does from DLPack 1.0 on)."""
    return max_version is not None and tuple(max_version)[0] >= 1
