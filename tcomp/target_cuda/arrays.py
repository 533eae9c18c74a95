"""Arrays crossing into CUDA kernels: NumPy (copied to the device and back)
and device arrays taken without copies (torch tensors, any object with
`__cuda_array_interface__` such as CuPy arrays, and any object with only
`__dlpack__`, such as JAX arrays).

Outputs take the kind of the first device input: torch tensors for torch,
CuPy arrays for CuPy, JAX arrays for JAX (imported zero-copy through
`jax.dlpack.from_dlpack`), and a `CudaArray` (cuda_array.py: DLPack and
`__cuda_array_interface__` exporter) for any other DLPack producer. With only
host inputs (NumPy, or DLPack tensors on the CPU, which are copied like NumPy
arrays) outputs are NumPy arrays."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..errors import CudaError
from ..lang import dtypes
from . import cuda_api, dlpack, streams


@dataclass(slots=True)
class DeviceArray:
    ptr: int
    shape: tuple[int, ...]
    dtype: str  # canonical tcomp dtype name
    kind: str  # 'numpy', 'torch', 'cai', 'cupy', 'dlpack'
    obj: object = None  # the user's object (kept alive), or the host array
    owned: bool = False  # we allocated ptr and must free it
    imported: dlpack.Imported | None = None  # a DLPack tensor to hand back after the launches
    as_jax: bool = False  # an output to return as a JAX array


def _torch_like(x) -> bool:
    return kind_of(x) == "torch"


def describe(x) -> str:
    return type(x).__module__.split(".")[0] + "." + type(x).__name__


def kind_of(x) -> str:
    """'torch', 'cupy', 'jax' or 'other', cached per type (the call's hot path
    asks this for every argument)."""
    t = type(x)
    k = _KINDS.get(t)
    if k is None:
        top = t.__module__.split(".")[0]
        k = ("torch" if top == "torch" and hasattr(t, "data_ptr") and hasattr(t, "is_cuda") else
             "cupy" if top == "cupy" and hasattr(t, "__cuda_array_interface__") else
             "jax" if top in ("jax", "jaxlib") else "other")
        _KINDS[t] = k
        if k == "torch":
            TORCH_TYPES.add(t)
    return k


_KINDS: dict[type, str] = {}
TORCH_TYPES: set[type] = set()  # the torch tensor types seen so far (a set lookup per input)
_torch_allocators = None


def torch_allocators():
    """(torch.empty, torch.zeros, the device object of cuda:0), looked up once."""
    global _torch_allocators
    if _torch_allocators is None:
        import torch
        _torch_allocators = (torch.empty, torch.zeros, torch.device("cuda", 0))
    return _torch_allocators


def stream_of(args) -> int:
    """The stream the first input on the GPU names (see streams.py), or the
    legacy default stream."""
    for x in args:
        k = kind_of(x)
        if k == "torch":
            if x.is_cuda:
                return streams.torch_current()
        elif k == "cupy":
            return streams.cupy_current()
        elif k == "other" and not isinstance(x, (np.ndarray, np.generic)):
            cai = _cai_or_none(x)
            if cai is not None:
                named = streams.cai_stream(cai)
                if named is not None:
                    return named
    return streams.LEGACY


def _cai_or_none(x):
    try:
        cai = getattr(x, "__cuda_array_interface__", None)
    except Exception:
        return None  # wrap_input reports it, naming the input
    return cai if isinstance(cai, dict) else None


def wrap_input(name: str, x, want, stream: int = streams.LEGACY) -> DeviceArray:
    """Device view of input `name` (dtype `want`), copying NumPy arrays over on
    `stream`, and making `stream` wait for the stream a producer names."""
    if _torch_like(x):
        if not x.is_cuda:
            raise CudaError(f"input '{name}' is a torch tensor on {x.device}; pass a CUDA tensor or "
                            f"a NumPy array")
        dt = str(x.dtype).split(".")[-1]
        if dt != want.name:
            raise CudaError(f"input '{name}' is {dt} but the kernel takes {want.name}")
        if not x.is_contiguous():
            raise CudaError(f"input '{name}' is not contiguous (strides {tuple(x.stride())}); "
                            f"call .contiguous() first")
        dev = x.get_device()
        if dev != 0:
            raise CudaError(f"input '{name}' is on device {dev}, but tcomp runs on device 0")
        return DeviceArray(x.data_ptr(), x.shape, dt, "torch", x)
    # JAX arrays go through DLPack: their __cuda_array_interface__ has no bfloat16,
    # and DLPack inputs give JAX arrays back.
    cai = None if _is_jax(x) else _cuda_array_interface(name, x)
    if cai is not None:
        dt = dtypes.from_numpy(np.dtype(cai["typestr"]))
        if dt is None or dt != want:
            raise CudaError(f"input '{name}' is {np.dtype(cai['typestr'])} but the kernel takes "
                            f"{want.name}")
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is not None:
            expect, acc = [], np.dtype(cai["typestr"]).itemsize
            for n in reversed(shape):
                expect.append(acc)
                acc *= n
            if tuple(reversed(expect)) != tuple(strides) and np.prod(shape) > 1:
                raise CudaError(f"input '{name}' is not contiguous (strides {tuple(strides)})")
        ptr = int(cai["data"][0])
        _same_device(name, ptr if np.prod(shape) else None)
        named = streams.cai_stream(cai)
        if named is not None and named != stream:
            # CAI v3: the producer's writes are ordered on `named`; ours run on `stream`
            cuda_api.order_after(stream, named)
        kind = "cupy" if kind_of(x) == "cupy" else "cai"
        return DeviceArray(ptr, shape, dt.name, kind, x)
    if isinstance(x, DLPackArg) or (hasattr(x, "__dlpack__")
                                    and not isinstance(x, (np.ndarray, np.generic))):
        t = x.take() if isinstance(x, DLPackArg) else dlpack.consume(name, x, stream)
        x = x.obj if isinstance(x, DLPackArg) else x
        try:
            if t.device[0] != dlpack.kDLCPU:
                check_device_tensor(name, t, want)
                return DeviceArray(t.ptr, t.shape, want.name, "dlpack", x, imported=t)
            x = host_copy(name, t)
        except BaseException:
            t.release()
            raise
        t.release()
    try:
        a = np.asarray(x)
    except Exception:
        raise CudaError(f"input '{name}': cannot use a {describe(x)} (pass NumPy, torch, or an "
                        f"object with __cuda_array_interface__ or __dlpack__)") from None
    if a.dtype != want.numpy:  # CudaKernel converted Python data already: never cast arrays
        raise CudaError(f"input '{name}' is {a.dtype} but the kernel takes {want.name}")
    a = np.require(a, requirements="C")  # keeps 0-d arrays 0-d
    ptr = cuda_api.mem_alloc(a.nbytes)
    try:
        cuda_api.memcpy_htod(ptr, a.ctypes.data, a.nbytes, stream)
    except BaseException:
        cuda_api.mem_free(ptr)
        raise
    return DeviceArray(ptr, a.shape, want.name, "numpy", a, owned=True)


class DLPackArg:
    """An argument that speaks only DLPack (no `.shape`/`.dtype` of its own),
    imported before the call-time checks so that they see its shape and dtype.
    `wrap_input` takes the import over; `release()` hands back one it did not.
    `stream`: the stream the call will run on, named to the producer."""

    def __init__(self, name: str, obj, stream: int = streams.LEGACY):
        self.obj, self._t = obj, dlpack.consume(name, obj, stream)
        self.shape = self._t.shape
        self.dtype = self._t.dtype_name()

    def take(self) -> dlpack.Imported:
        t, self._t = self._t, None
        return t

    def release(self) -> None:
        if self._t is not None:
            self.take().release()


def has_dlpack_only(args) -> bool:
    """Whether an argument may speak only DLPack (cheap for torch/CuPy/JAX/NumPy)."""
    for x in args:
        if type(x) in TORCH_TYPES:
            continue
        if kind_of(x) == "other" and hasattr(x, "__dlpack__") and not hasattr(x, "dtype"):
            return True
    return False


def import_dlpack_only(names, args, stream: int = streams.LEGACY) -> list:
    """`args` with each DLPack-only object replaced by a `DLPackArg` (imported
    for `stream`)."""
    out = []
    try:
        for i, x in enumerate(args):
            name = names[i] if i < len(names) else f"#{i}"
            if i < len(names) and (hasattr(x, "__dlpack__") and not hasattr(x, "dtype")
                    and _cuda_array_interface(name, x) is None):
                x = DLPackArg(name, x, stream)
            out.append(x)
    except BaseException:
        release_args(out)
        raise
    return out


def release_args(args) -> None:
    for x in args:
        if isinstance(x, DLPackArg):
            x.release()


def _cuda_array_interface(name: str, x):
    """x's __cuda_array_interface__, or None (absent, or failing for an object
    that also speaks DLPack)."""
    try:
        return getattr(x, "__cuda_array_interface__", None)
    except Exception as e:
        if hasattr(x, "__dlpack__"):
            return None
        raise CudaError(f"input '{name}': {describe(x)}.__cuda_array_interface__ failed: "
                        f"{e}") from None


def check_device_tensor(name: str, t: dlpack.Imported, want) -> None:
    """A DLPack tensor a kernel may read in place: on CUDA device 0, of the
    kernel's dtype, C-contiguous."""
    if t.device[0] not in (dlpack.kDLCUDA, dlpack.kDLCUDAManaged):
        raise CudaError(f"input '{name}' is a DLPack tensor on {dlpack.describe_device(t.device)}; "
                        f"tcomp reads CUDA device memory (or copies CPU arrays)")
    if t.device[1] != 0:
        raise CudaError(f"input '{name}' is on device {t.device[1]}, but tcomp runs on device 0")
    if t.dtype is None:
        raise CudaError(f"input '{name}' has DLPack dtype {t.dtype_name()}, which tcomp does not "
                        f"support; the kernel takes {want.name}")
    if t.dtype != want:
        raise CudaError(f"input '{name}' is {t.dtype.name} but the kernel takes {want.name}")
    if not t.is_contiguous():
        raise CudaError(f"input '{name}' is not contiguous (strides {t.strides} in elements); "
                        f"make a contiguous copy first")


def host_copy(name: str, t: dlpack.Imported) -> np.ndarray:
    """A NumPy copy of a DLPack tensor in host memory (any strides)."""
    if t.dtype is None:
        raise CudaError(f"input '{name}' has DLPack dtype {t.dtype_name()}, which tcomp does not "
                        f"support")
    dt = t.dtype.numpy
    if 0 in t.shape:
        return np.empty(t.shape, dt)
    strides = t.strides
    if strides is None:
        strides, acc = [], 1
        for n in reversed(t.shape):
            strides.insert(0, acc)
            acc *= n
    bstrides = [s * dt.itemsize for s in strides]
    lo = sum(min(0, (n - 1) * s) for n, s in zip(t.shape, bstrides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(t.shape, bstrides)) + dt.itemsize
    buf = (ctypes.c_char * (hi - lo)).from_address(t.ptr + lo)
    return np.array(np.ndarray(t.shape, dt, buffer=buf, offset=-lo, strides=bstrides), order="C")


def _same_device(name, ptr):
    if ptr is None:
        return
    dev = cuda_api.pointer_device(ptr)
    if dev is None:
        raise CudaError(f"input '{name}' is not in device memory")
    if dev != 0:
        raise CudaError(f"input '{name}' is on device {dev}, but tcomp runs on device 0")


def new_output(shape, dt, like: DeviceArray | None, zero: bool = True,
               stream: int = streams.LEGACY, explicit: bool = False) -> DeviceArray:
    """An output of the same kind as the inputs, allocated (and zero-filled
    unless `zero` is False: the program writes every element) on `stream`.
    `explicit`: the stream came from the call's `stream=` argument, so it may
    differ from torch's or CuPy's current stream."""
    if like is not None and like.kind == "torch":
        torch = _torch()
        make = torch.zeros if zero else torch.empty
        tdt = _TORCH_DTYPES.get(dt.name) or _torch_dtype(torch, dt.name)
        if explicit and stream != streams.torch_current():
            with torch.cuda.stream(_torch_stream(torch, stream)):
                t = make(shape, dtype=tdt, device=_DEVICE0)
        else:
            t = make(shape, dtype=tdt, device=_DEVICE0)
        return DeviceArray(t.data_ptr(), shape, dt.name, "torch", t)
    if like is not None and like.kind == "cupy":
        import cupy
        make = cupy.zeros if zero else cupy.empty
        if explicit and stream != streams.cupy_current():
            ext = cupy.cuda.Stream.null if stream == streams.LEGACY else \
                cupy.cuda.ExternalStream(stream)
            with ext:
                c = make(shape, dtype=dt.numpy)
        else:
            c = make(shape, dtype=dt.numpy)
        return DeviceArray(int(c.data.ptr), tuple(shape), dt.name, "cupy", c)
    if like is not None and like.kind == "dlpack":
        from .cuda_array import CudaArray
        c = CudaArray(shape, dt, zero=zero, stream=stream)
        return DeviceArray(c.ptr, tuple(shape), dt.name, "dlpack", c, as_jax=_is_jax(like.obj))
    n = int(np.prod(shape)) * dt.numpy.itemsize
    ptr = cuda_api.mem_alloc(n)
    if zero:
        try:
            cuda_api.memset_zero(ptr, n, stream)
        except BaseException:
            cuda_api.mem_free(ptr)
            raise
    host = np.empty(shape, dt.numpy)
    return DeviceArray(ptr, tuple(shape), dt.name, "numpy", host, owned=True)


def new_temp(shape, dt, like: DeviceArray | None, stream: int = streams.LEGACY,
             explicit: bool = False) -> DeviceArray:
    """A zero-filled temporary of the call: from torch's or CuPy's pool when the
    outputs come from there (freed into the pool after the call, stream-ordered),
    else device memory that `release` frees."""
    if like is not None and like.kind in ("torch", "cupy"):
        return new_output(shape, dt, like, True, stream, explicit)
    n = int(np.prod(shape)) * dt.numpy.itemsize
    ptr = cuda_api.mem_alloc(n)
    a = DeviceArray(ptr, tuple(shape), dt.name, "temp", None, owned=True)
    try:
        cuda_api.memset_zero(ptr, n, stream)
    except BaseException:
        release([a], stream, quiet=True)
        raise
    return a


_DEVICE0 = "cuda:0"
_TORCH_DTYPES: dict = {}


def _torch():
    import torch
    return torch


def _torch_dtype(torch, name: str):
    _TORCH_DTYPES[name] = getattr(torch, name)
    return _TORCH_DTYPES[name]


def _torch_stream(torch, handle: int):
    """A torch stream object for a handle (for allocating on it)."""
    if handle == streams.LEGACY:
        return torch.cuda.default_stream(0)
    return torch.cuda.ExternalStream(handle, device=_DEVICE0)


def _is_jax(x) -> bool:
    return type(x).__module__.split(".")[0] in ("jax", "jaxlib")


def finish_output(a: DeviceArray, stream: int = streams.LEGACY):
    """The user's object for output `a`; a NumPy output's copy back is queued
    on `stream` (it is there once the caller synchronizes that stream)."""
    if a.kind == "numpy":
        cuda_api.memcpy_dtoh(a.obj.ctypes.data, a.ptr, a.obj.nbytes, stream)
        return a.obj
    if a.as_jax:
        import jax.dlpack
        return jax.dlpack.from_dlpack(a.obj)
    return a.obj


def release(arrays, stream: int = streams.LEGACY, quiet: bool = False):
    """Free what tcomp allocated and hand DLPack inputs back to their producers.
    A producer may free or reuse a buffer as soon as its deleter runs, and our
    launches are asynchronous: so `stream`, where they run, is synchronized
    first (that stream only, not the device). `quiet`: an error is already on
    its way, do not replace it with one from here."""
    error = None
    if any(a.owned or a.imported is not None for a in arrays):
        try:
            cuda_api.stream_synchronize(stream)
        except CudaError as e:
            error = e
    for a in arrays:
        if a.owned:
            a.owned = False
            try:
                cuda_api.mem_free(a.ptr)
            except CudaError as e:
                # After a fault every call on the context fails (a free with
                # CUDA_ERROR_INVALID_ADDRESS_SPACE, say): the first error is the
                # one that says what happened, so a later one never replaces it.
                error = error or e
        if a.imported is not None:
            a.imported.release()
            a.imported = None
    if error is not None and not quiet:
        raise error
