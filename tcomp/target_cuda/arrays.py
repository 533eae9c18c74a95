"""Arrays crossing into CUDA kernels: NumPy (copied to the device and back)
and device arrays taken without copies (torch tensors, and any object with
`__cuda_array_interface__` such as CuPy arrays)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CudaError
from ..lang import dtypes
from . import cuda_api


@dataclass
class DeviceArray:
    ptr: int
    shape: tuple[int, ...]
    dtype: str  # canonical tcomp dtype name
    kind: str  # 'numpy', 'torch', 'cai'
    obj: object = None  # the user's object (kept alive), or the host array
    owned: bool = False  # we allocated ptr and must free it


def _torch_like(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def describe(x) -> str:
    return type(x).__module__.split(".")[0] + "." + type(x).__name__


def wrap_input(name: str, x, want) -> DeviceArray:
    """Device view of input `name` (dtype `want`), copying NumPy arrays over."""
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
        _same_device(name, x.data_ptr() if x.numel() else None)
        return DeviceArray(int(x.data_ptr()), tuple(x.shape), dt, "torch", x)
    cai = getattr(x, "__cuda_array_interface__", None)
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
        return DeviceArray(ptr, shape, dt.name, "cai", x)
    try:
        a = np.asarray(x)
    except Exception:
        raise CudaError(f"input '{name}': cannot use a {describe(x)} (pass NumPy, torch or an "
                        f"object with __cuda_array_interface__)") from None
    if a.dtype != want.numpy:  # CudaKernel converted Python data already: never cast arrays
        raise CudaError(f"input '{name}' is {a.dtype} but the kernel takes {want.name}")
    a = np.require(a, requirements="C")  # keeps 0-d arrays 0-d
    ptr = cuda_api.mem_alloc(a.nbytes)
    cuda_api.memcpy_htod(ptr, a.ctypes.data, a.nbytes)
    return DeviceArray(ptr, a.shape, want.name, "numpy", a, owned=True)


def _same_device(name, ptr):
    if ptr is None:
        return
    dev = cuda_api.pointer_device(ptr)
    if dev is None:
        raise CudaError(f"input '{name}' is not in device memory")
    if dev != 0:
        raise CudaError(f"input '{name}' is on device {dev}, but tcomp runs on device 0")


def new_output(shape, dt, like: DeviceArray | None, zero: bool = True) -> DeviceArray:
    """An output of the same kind as the inputs; zero-filled unless `zero` is
    False (the program writes every element)."""
    if like is not None and like.kind == "torch":
        import torch
        make = torch.zeros if zero else torch.empty
        t = make(shape, dtype=getattr(torch, dt.name if dt.name != "bool" else "bool"),
                 device=like.obj.device)
        return DeviceArray(int(t.data_ptr()), tuple(shape), dt.name, "torch", t)
    if like is not None and like.kind == "cai" and type(like.obj).__module__.startswith("cupy"):
        import cupy
        c = (cupy.zeros if zero else cupy.empty)(shape, dtype=dt.numpy)
        return DeviceArray(int(c.data.ptr), tuple(shape), dt.name, "cai", c)
    n = int(np.prod(shape)) * dt.numpy.itemsize
    ptr = cuda_api.mem_alloc(n)
    if zero:
        cuda_api.memset_zero(ptr, n)
    host = np.zeros(shape, dt.numpy)
    return DeviceArray(ptr, tuple(shape), dt.name, "numpy", host, owned=True)


def finish_output(a: DeviceArray):
    if a.kind == "numpy":
        cuda_api.memcpy_dtoh(a.obj.ctypes.data, a.ptr, a.obj.nbytes)
        return a.obj
    return a.obj


def release(arrays):
    for a in arrays:
        if a.owned:
            cuda_api.mem_free(a.ptr)
            a.owned = False
