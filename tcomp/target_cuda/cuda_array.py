"""`CudaArray`: device memory that tcomp allocated for a kernel's output when
the inputs came in through DLPack only (no torch, no CuPy to allocate with).

It is an ordinary array-interchange citizen: `__cuda_array_interface__`
(version 3) for Numba/CuPy and `__dlpack__`/`__dlpack_device__` for
`jax.dlpack.from_dlpack`, `torch.from_dlpack`, `cupy.from_dlpack` and
`np.asarray` (via `__array__`, a host copy). The memory is freed when the
object and every DLPack consumer of it are gone.

It remembers the stream the kernel call that made it ran on (`stream`): the
array-interface export names that stream, a DLPack export to another stream
makes that stream wait for it, and `numpy()` synchronizes it.
"""
from __future__ import annotations

import numpy as np

from ..errors import CudaError
from . import cuda_api, dlpack, streams


class CudaArray:
    """A C-contiguous array in the memory of CUDA device 0 (see module docstring)."""

    stream = streams.LEGACY  # the stream its contents are written on (a CUstream handle)

    def __init__(self, shape, dt, zero: bool = True, stream: int = streams.LEGACY):
        self.shape = tuple(int(n) for n in shape)
        self._dt = dt
        self.size = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        self.nbytes = self.size * dt.numpy.itemsize
        self.ptr = 0
        self.stream = stream
        self.ptr = cuda_api.mem_alloc(self.nbytes)
        if zero:
            cuda_api.memset_zero(self.ptr, self.nbytes, stream)

    @property
    def dtype(self) -> np.dtype:
        return self._dt.numpy

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<tcomp.CudaArray {self._dt.name}{list(self.shape)} at {self.ptr:#x} on cuda:0>"

    def __del__(self):
        if self.ptr:
            try:
                # a DLPack consumer may drop the last reference from a thread of its own,
                # where tcomp's context is not current yet
                cuda_api.device().activate()
                cuda_api.mem_free(self.ptr)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
            self.ptr = 0

    # ------------------------------------------------------------ host copies
    def numpy(self) -> np.ndarray:
        """A host copy (waits for the kernels that write this array)."""
        out = np.empty(self.shape, self.dtype)
        cuda_api.memcpy_dtoh(out.ctypes.data, self.ptr, self.nbytes, self.stream)
        cuda_api.stream_synchronize(self.stream)
        return out

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a tcomp.CudaArray lives on the GPU: converting it to NumPy copies")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    # ------------------------------------------------------------ interchange
    @property
    def __cuda_array_interface__(self) -> dict:
        # the stream tcomp's kernels write this array on (1: the legacy default stream)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": streams.for_interchange(self.stream)}

    def __dlpack_device__(self):
        return (dlpack.kDLCUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export. `stream` is the consumer's stream (None and 1: the
        legacy default stream; -1: no ordering wanted): unless it is the
        stream this array is written on, it is made to wait for the work
        queued there so far."""
        if dl_device is not None and tuple(dl_device) != (dlpack.kDLCUDA, 0):
            raise BufferError(f"a tcomp.CudaArray lives on CUDA device 0; it cannot be exported "
                              f"to {dlpack.describe_device(tuple(dl_device))}")
        if copy:
            raise BufferError("a tcomp.CudaArray is exported without copying (copy=True is not "
                              "supported)")
        if stream is not None and not isinstance(stream, int):
            raise TypeError(f"stream must be an int or None, got {type(stream).__name__}")
        if stream == 0:
            raise BufferError("stream=0 is ambiguous for CUDA in the DLPack protocol; pass 1 "
                              "for the legacy default stream or 2 for the per-thread one")
        consumer = streams.LEGACY if stream is None else streams.canonical(stream)
        if stream != -1 and consumer != self.stream:
            try:
                cuda_api.order_after(consumer, self.stream)
            except CudaError as e:
                raise BufferError(str(e)) from None
        return dlpack.make_capsule(self.ptr, self.shape, self._dt, (dlpack.kDLCUDA, 0), self,
                                   dlpack.wants_versioned(max_version))
