"""Which CUDA stream a kernel call runs on.

A tcomp call queues its zero-fills, launches (and, for NumPy data, copies) on
one stream, chosen in this order:

  1. the `stream=` argument of the call: an int handle (`CUstream` value; 0
     is the legacy default stream), a `torch.cuda.Stream`, a CuPy stream, a
     cuda.bindings `CUstream`, or any object with `__cuda_stream__` (the CUDA
     Python stream protocol: a `(version, handle)` pair);
  2. else the first input on the GPU decides: torch's current stream on
     device 0 for a torch tensor, CuPy's current stream for a CuPy array, the
     stream named in the `__cuda_array_interface__` (version 3 "stream" key)
     of any other such array;
  3. else (NumPy or DLPack-only inputs, or a producer that names no stream)
     the legacy default stream.

Handles are kept as ints. The legacy default stream has two spellings (0, the
driver's default, and 1, `CU_STREAM_LEGACY`, which the array-interchange
protocols use because 0 is ambiguous there): `canonical` maps 1 to 0.
"""
from __future__ import annotations

from ..errors import CudaError

LEGACY = 0  # the legacy default stream, as the driver API spells it
PER_THREAD = 2  # CU_STREAM_PER_THREAD


def canonical(handle: int) -> int:
    """One spelling per stream: CU_STREAM_LEGACY (1) is the legacy default stream (0)."""
    return LEGACY if handle == 1 else handle


def for_interchange(handle: int) -> int:
    """The handle as `__cuda_array_interface__` and DLPack spell it (0 is
    ambiguous there: the legacy default stream is 1)."""
    return 1 if handle == LEGACY else handle


def from_argument(stream) -> int:
    """The int handle of a `stream=` argument (see the module docstring)."""
    if isinstance(stream, bool):
        raise CudaError(_bad_stream(stream))
    if isinstance(stream, int):
        if stream < 0:
            raise CudaError(_bad_stream(stream))
        return canonical(stream)
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream, ExternalStream
    if handle is None and type(stream).__module__.startswith("cupy"):
        handle = getattr(stream, "ptr", None)  # cupy.cuda.Stream, ExternalStream
    if handle is None and hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        value = proto() if callable(proto) else proto
        if isinstance(value, tuple) and len(value) == 2:
            handle = value[1]
    if handle is None and type(stream).__name__ == "CUstream":  # cuda.bindings
        handle = int(stream)
    if isinstance(handle, int) and not isinstance(handle, bool) and handle >= 0:
        return canonical(handle)
    raise CudaError(_bad_stream(stream))


def _bad_stream(stream) -> str:
    what = repr(stream) if isinstance(stream, int) else type(stream).__name__
    return (f"stream= must be a CUDA stream: an int handle (0 for the legacy default stream), a "
            f"torch.cuda.Stream, a CuPy stream or an object with __cuda_stream__; got {what}")


_torch_raw_stream = None


def torch_raw_stream():
    """A function device -> the raw handle of torch's current stream there
    (1 may mean the legacy default stream: see `torch_current`), looked up once."""
    global _torch_raw_stream
    if _torch_raw_stream is None:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton calls, too
        _torch_raw_stream = raw if raw is not None else (
            lambda dev: torch.cuda.current_stream(dev).cuda_stream)
    return _torch_raw_stream


def torch_current() -> int:
    """torch's current stream on device 0 (tcomp runs on device 0)."""
    h = (_torch_raw_stream or torch_raw_stream())(0)
    return LEGACY if h == 1 else h


def cupy_current() -> int:
    import cupy
    return canonical(cupy.cuda.get_current_stream().ptr)


def cai_stream(cai: dict) -> int | None:
    """The stream a `__cuda_array_interface__` names (None: none named; the
    producer's data is ready for any stream)."""
    s = cai.get("stream") if cai.get("version", 0) >= 3 else None
    if isinstance(s, int) and not isinstance(s, bool) and s > 0:
        return canonical(s)
    return None
