"""TMA descriptors (ir.TensorMap) at launch: the encoding's parameters from
a buffer's shape, and the 128-byte `CUtensorMap` from the driver.

A kernel parameter `{"tensor_map": {...}}` of the sidecar names its
buffer, element type, box (elements per dimension, outermost first) and
swizzle. At a call the buffer's dimensions are known: `spec` turns them
into cuTensorMapEncodeTiled's arguments (innermost dimension first, byte
strides of the outer dimensions) and checks what the driver would refuse,
with a message that says which size is at fault; `encode` asks the driver
for the descriptor. Descriptors are kept per (pointer, dimensions): a model
calling with the same tensors pays for the encoding once.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..errors import CudaError

SWIZZLES = (0, 32, 64, 128)
MAP_BYTES = 128
_DTYPES = {"bfloat16": ("BFLOAT16", 2), "float16": ("FLOAT16", 2), "float32": ("FLOAT32", 4),
           "uint8": ("UINT8", 1), "int32": ("INT32", 4), "float64": ("FLOAT64", 8),
           # fp8: the TMA engine has no 8-bit float type; it moves bytes (as CUTLASS maps fp8)
           "float8_e4m3fn": ("UINT8", 1), "float8_e5m2": ("UINT8", 1)}


@dataclass(frozen=True)
class MapSpec:
    """cuTensorMapEncodeTiled's arguments but the address."""
    dtype: str
    dims: tuple[int, ...]     # innermost first
    strides: tuple[int, ...]  # bytes, of dims[1:]
    box: tuple[int, ...]      # innermost first
    swizzle: int
    # the buffer has no elements: the map is encoded over a small zero-filled
    # allocation of one element per dimension (a load reads zeros, as it would
    # past the end of the buffer; nothing is written that belongs to a tensor)
    empty: bool = False
    # im2col mode (ir.Im2col): the bounding box's corners, innermost spatial dimension
    # first; `box` is then (channels per pixel, pixels per column)
    lower: tuple[int, ...] | None = None
    upper: tuple[int, ...] | None = None


def spec(name: str, buffer: str, dtype: str, shape, box, swizzle: int,
         im2col: dict | None = None) -> MapSpec:
    """The encoding of tensor map `name` over `buffer` (of `shape`, outermost
    first) at a call, or a CudaError saying why the TMA engine cannot move it.
    `im2col`: {"lower": [...], "upper": [...]} (spatial dimensions outermost
    first) for an im2col map, whose box is (pixels, channels)."""
    _check_type(name, dtype, swizzle)
    if im2col is not None:
        return _im2col_spec(name, buffer, dtype, shape, box, swizzle, im2col)
    if len(shape) != len(box) or not 1 <= len(shape) <= 5:
        raise CudaError(f"tensor map {name}: a box of rank {len(box)} over '{buffer}' of rank "
                        f"{len(shape)} (TMA moves ranks 1 to 5)")
    size = _DTYPES[dtype][1]
    dims = tuple(int(d) for d in reversed(shape))
    if min(dims) < 0:
        raise CudaError(f"tensor map {name}: '{buffer}' has a negative dimension {list(shape)}")
    empty = min(dims) == 0
    if empty:
        dims = (1,) * len(dims)
    strides = _strides(name, buffer, shape, dims, size, size if not empty else 16)
    box_in = tuple(int(b) for b in reversed(box))
    if any(not 1 <= b <= 256 for b in box_in):
        raise CudaError(f"tensor map {name}: box {list(box)} has a dimension outside 1..256")
    if (box_in[0] * size) % 16:
        raise CudaError(f"tensor map {name}: the box's rows are {box_in[0] * size} bytes, "
                        f"not a multiple of 16")
    if swizzle and box_in[0] * size > swizzle:
        raise CudaError(f"tensor map {name}: the box's rows are {box_in[0] * size} bytes, more "
                        f"than its {swizzle}-byte swizzle span")
    return MapSpec(dtype, dims, tuple(strides), box_in, swizzle, empty)


# im2col corners: signed fields whose width shrinks with the spatial rank (the driver's
# cuTensorMapEncodeIm2col: 16 bits for one spatial dimension, 8 for two, 4 for three)
_CORNER_BITS = {3: 16, 4: 8, 5: 4}


def _check_type(name, dtype, swizzle) -> None:
    if dtype not in _DTYPES:
        raise CudaError(f"tensor map {name}: TMA has no element type for {dtype}")
    if swizzle not in SWIZZLES:
        raise CudaError(f"tensor map {name}: swizzle must be one of {SWIZZLES}, got {swizzle}")


def _strides(name, buffer, shape, dims, size, first) -> list:
    """The byte strides of dims[1:] (innermost first; `first` the innermost
    element's bytes), or a CudaError for a row that is not whole 16-byte units."""
    strides, st = [], first
    for i, d in enumerate(dims[:-1]):
        st *= d
        if st % 16:
            raise CudaError(
                f"tensor map {name}: a row of '{buffer}' is {st} bytes (dimension "
                f"{len(shape) - 2 - i} of shape {list(shape)}), but the TMA engine needs rows "
                f"that are a multiple of 16 bytes; pad the innermost dimension to a multiple "
                f"of {16 // size} elements")
        strides.append(st)
    return strides


def _im2col_spec(name, buffer, dtype, shape, box, swizzle, im2col) -> MapSpec:
    rank = len(shape)
    lower, upper = tuple(im2col["lower"]), tuple(im2col["upper"])
    if rank not in _CORNER_BITS or len(lower) != rank - 2 or len(upper) != rank - 2 or \
            len(box) != 2:
        raise CudaError(f"tensor map {name}: an im2col map needs a buffer of rank 3 to 5 (N, "
                        f"spatial, C), a corner per spatial dimension and a box of (pixels, "
                        f"channels); got '{buffer}' of rank {rank}, corners {list(lower)}, "
                        f"{list(upper)} and box {list(box)}")
    bits = _CORNER_BITS[rank]
    for c in lower + upper:
        if not -(1 << (bits - 1)) <= c < (1 << (bits - 1)):
            raise CudaError(f"tensor map {name}: im2col corner {c} is outside the "
                            f"{bits}-bit range the TMA engine encodes for rank {rank}")
    size = _DTYPES[dtype][1]
    dims = tuple(int(d) for d in reversed(shape))
    if min(dims) <= 0:
        raise CudaError(f"tensor map {name}: '{buffer}' has an empty dimension {list(shape)}; "
                        f"an im2col copy needs at least one pixel")
    strides = _strides(name, buffer, shape, dims, size, size)
    pixels, channels = (int(b) for b in box)
    if not 1 <= channels <= 256 or (channels * size) % 16 or not 1 <= pixels <= 1024:
        raise CudaError(f"tensor map {name}: an im2col box of {pixels} pixels x {channels} "
                        f"channels; the TMA engine moves 1..1024 pixels of 1..256 channels "
                        f"in whole 16-byte units")
    if swizzle and channels * size > swizzle:
        raise CudaError(f"tensor map {name}: the box's rows are {channels * size} bytes, more "
                        f"than its {swizzle}-byte swizzle span")
    return MapSpec(dtype, dims, tuple(strides), (channels, pixels), swizzle, False,
                   tuple(reversed(lower)), tuple(reversed(upper)))


_ZEROS: dict = {}
ZEROS_BYTES = 1 << 16  # one element per dimension, boxes past it read as zeros


def zeros_address() -> int:
    """A zero-filled device allocation for the maps of empty buffers (one per
    process and current context)."""
    from cuda.bindings import driver as drv
    from . import cuda_api
    cur = cuda_api.check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    ctx = int(cur.getPtr()) if hasattr(cur, "getPtr") else 0
    ptr = _ZEROS.get(ctx)
    if ptr is None:
        ptr = int(cuda_api.check(drv.cuMemAlloc(ZEROS_BYTES), "cuMemAlloc"))
        cuda_api.check(drv.cuMemsetD8(ptr, 0, ZEROS_BYTES), "cuMemsetD8")
        _ZEROS[ctx] = ptr
    return ptr


def encode(ptr: int, s: MapSpec) -> bytes:
    """The 128-byte descriptor of `s` at global address `ptr` (the driver's
    cuTensorMapEncodeTiled)."""
    from cuda.bindings import driver as drv
    from . import cuda_api
    if ptr % 16:
        raise CudaError(f"a TMA tensor's address must be 16-byte aligned, got {ptr:#x}")
    dt = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_DTYPES[s.dtype][0]}")
    swz = getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" +
                  ("NONE" if not s.swizzle else f"{s.swizzle}B"))
    if s.lower is not None:
        res = drv.cuTensorMapEncodeIm2col(
            dt, len(s.dims), ptr, [drv.cuuint64_t(d) for d in s.dims],
            [drv.cuuint64_t(x) for x in s.strides], list(s.lower), list(s.upper),
            s.box[0], s.box[1], [drv.cuuint32_t(1)] * len(s.dims),
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        return _bytes(cuda_api.check(res, "cuTensorMapEncodeIm2col"))
    res = drv.cuTensorMapEncodeTiled(
        dt, len(s.dims), ptr, [drv.cuuint64_t(d) for d in s.dims],
        [drv.cuuint64_t(x) for x in s.strides], [drv.cuuint32_t(b) for b in s.box],
        [drv.cuuint32_t(1)] * len(s.dims), drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        # L2 promotion of 128 bytes: the same speed as 256 for rows of 128-byte multiples, 15%
        # faster where rows are not (bf16 3000 x 5000 x 7000: 508 against 440 TFLOP/s, H200)
        swz, drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return _bytes(cuda_api.check(res, "cuTensorMapEncodeTiled"))


def _bytes(m) -> bytes:
    """A CUtensorMap's 128 bytes."""
    return b"".join(int(w).to_bytes(8, "little") for w in m.opaque)


class MapParams:
    """The 128-byte, 64-aligned storage of a launch's tensor-map parameters
    (`address(i)`: where map i lives) and a per-(pointer, dims) cache of
    encodings."""

    def __init__(self, n: int):
        self.raw = ctypes.create_string_buffer(MAP_BYTES * n + 64)
        base = ctypes.addressof(self.raw)
        self.base = (base + 63) // 64 * 64
        self.n = n
        self.cache: dict = {}

    def address(self, i: int) -> int:
        return self.base + MAP_BYTES * i

    def fill(self, i: int, ptr: int, s: MapSpec) -> None:
        key = (i, ptr, s)
        data = self.cache.get(key)
        if data is None:
            if len(self.cache) >= 256:
                self.cache.clear()
            data = self.cache[key] = encode(zeros_address() if s.empty else ptr, s)
        ctypes.memmove(self.address(i), data, MAP_BYTES)
