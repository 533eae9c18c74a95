"""Every call into cuda-python (NVRTC and the driver API) lives here.

Errors come back as `CudaError` with the NVRTC log or the driver's error
name; nothing from cuda-python's internals reaches the user.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
import threading

from ..errors import CudaError


# ------------------------------------------------------------------- NVRTC
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except Exception as e:  # pragma: no cover - depends on the install
        raise CudaError(f"NVRTC is not available (pip install cuda-bindings nvidia-cuda-nvrtc): "
                        f"{e}") from None
    return nvrtc


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:
        raise CudaError(f"NVRTC library could not be loaded: {e}") from None
    _check_nvrtc(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def nvrtc_archs() -> tuple[int, ...] | None:
    """The compute capabilities this NVRTC compiles for (75, 80, ... for sm_75,
    sm_80, ...); None where the NVRTC is too old to tell."""
    nvrtc = _nvrtc()
    try:
        err, archs = nvrtc.nvrtcGetSupportedArchs()
    except Exception:
        return None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None
    return tuple(int(a) for a in archs)


@functools.lru_cache(maxsize=None)
def include_dir() -> str | None:
    """The CUDA runtime headers (cuda_fp16.h, ...) from the pip wheel or a toolkit."""
    try:
        from cuda import pathfinder
        d = pathfinder.find_nvidia_header_directory("cudart")
        if d and os.path.exists(os.path.join(d, "cuda_fp16.h")):
            return d
    except Exception:
        pass
    for base in sys.path:
        for d in sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "include")), reverse=True):
            if os.path.exists(os.path.join(d, "cuda_fp16.h")):
                return d
        d = os.path.join(base, "nvidia", "cuda_runtime", "include")
        if os.path.exists(os.path.join(d, "cuda_fp16.h")):
            return d
    for d in ("/usr/local/cuda/include",):
        if os.path.exists(os.path.join(d, "cuda_fp16.h")):
            return d
    return None


def _check_nvrtc(err, what):
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaError(f"{what} failed: {err.name}")


def nvrtc_compile(source: str, name: str, options: list[str]) -> tuple[str, bytes, str]:
    """(ptx, cubin, log). Raises CudaError with the log on a compile error."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err_log, size = nvrtc.nvrtcGetProgramLogSize(prog)
        # Output buffers are bytearrays: NVRTC writes into them, and `b" " * 1` would
        # be CPython's shared one-byte object (an empty log has size 1), which the
        # write would corrupt for the whole process (every b" " then reads b"\x00",
        # and code compiled afterwards loses the spaces of its f-strings).
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.decode(errors="replace").rstrip("\x00").strip()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _CompileFailed(log)
        _, n = nvrtc.nvrtcGetPTXSize(prog)
        ptx = bytearray(n)
        nvrtc.nvrtcGetPTX(prog, ptx)
        cubin = b""
        if any(o.startswith("--gpu-architecture=sm_") for o in options):
            _, n = nvrtc.nvrtcGetCUBINSize(prog)
            cubin = bytearray(n)
            nvrtc.nvrtcGetCUBIN(prog, cubin)
        return ptx.decode().rstrip("\x00"), bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


class _CompileFailed(Exception):
    def __init__(self, log):
        self.log = log


# ------------------------------------------------------------------ driver
def _driver():
    try:
        from cuda.bindings import driver
    except Exception as e:  # pragma: no cover
        raise CudaError(f"no CUDA driver found (cuda-bindings is not installed: {e})") from None
    return driver


def check(result, what: str):
    """Unpack a driver call's (err, *values) and raise CudaError on failure."""
    driver = _driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != driver.CUresult.CUDA_SUCCESS:
        raise CudaError(error_text(driver, err, what))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


CAPTURE_REMEDY = ("; a CUDA graph is being captured: pass device arrays (torch tensors, CuPy "
                  "arrays), which tcomp allocates and launches on the capturing stream; NumPy "
                  "inputs and outputs are copied synchronously and cannot be captured")


def error_text(driver, err, what: str) -> str:
    _, text = driver.cuGetErrorString(err)
    msg = text.decode() if isinstance(text, bytes) else str(text)
    out = f"{what} failed: {err.name} ({msg})"
    if err.name.startswith("CUDA_ERROR_STREAM_CAPTURE"):
        out += CAPTURE_REMEDY
    return out


class Device:
    """The current device and its primary context (created once)."""

    def __init__(self, ordinal: int = 0):
        driver = _driver()
        try:
            res = driver.cuInit(0)
        except Exception as e:
            raise CudaError(f"no CUDA driver found: {e}") from None
        if res[0] != driver.CUresult.CUDA_SUCCESS:
            raise CudaError(f"no CUDA driver found: cuInit returned {res[0].name}")
        n = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if n == 0:
            raise CudaError("no CUDA device found")
        self.dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.ctx = check(driver.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        attr = driver.CUdevice_attribute
        major = check(driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "cuDeviceGetAttribute")
        minor = check(driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "cuDeviceGetAttribute")
        self.cc = (int(major), int(minor))
        self.name = check(driver.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        self.name = self.name.split(b"\x00")[0].decode()

    @property
    def arch(self) -> str:
        major, minor = self.cc
        return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")

    def activate(self):
        check(_driver().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")


@functools.lru_cache(maxsize=None)
def device() -> Device:
    return Device(0)


def have_device() -> bool:
    try:
        device()
        return True
    except CudaError:
        return False


class Module:
    def __init__(self, cubin: bytes):
        driver = _driver()
        device().activate()
        self.mod = check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.funcs = {}
        self.limits = {}  # name -> LaunchLimits of that function on this device

    def unload(self) -> None:
        """Free the module's device memory now (a tuning worker loads one
        module per candidate; its functions are unusable afterwards)."""
        if self.mod is not None:
            check(_driver().cuModuleUnload(self.mod), "cuModuleUnload")
            self.mod, self.funcs, self.limits = None, {}, {}

    def param_sizes(self, name: str) -> list[int] | None:
        """`param_sizes` of the function `name` (its handle is not kept: `function`
        fetches and sets it up for launches)."""
        f = check(_driver().cuModuleGetFunction(self.mod, name.encode()), "cuModuleGetFunction")
        return param_sizes(f)

    def function(self, name: str, dynamic_smem: int = 0):
        driver = _driver()
        if name not in self.funcs:
            f = check(driver.cuModuleGetFunction(self.mod, name.encode()), "cuModuleGetFunction")
            if dynamic_smem > 0:
                attr = driver.CUdevice_attribute
                limit = check(driver.cuDeviceGetAttribute(
                    attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device().dev),
                    "cuDeviceGetAttribute")
                if dynamic_smem > int(limit):
                    raise CudaError(f"kernel {name} needs {dynamic_smem} bytes of shared memory "
                                    f"per block, but {device().name} allows {int(limit)}; use "
                                    f"smaller shared tiles")
                check(driver.cuFuncSetAttribute(
                    f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic_smem), "cuFuncSetAttribute")
            self.funcs[name] = f
            self.limits[name] = launch_limits(f)
        return self.funcs[name]


@functools.lru_cache(maxsize=None)
def _device_limits():
    from ..lower.launch import LaunchLimits
    driver = _driver()
    attr = driver.CUdevice_attribute
    dev = device().dev

    def get(name):
        return int(check(driver.cuDeviceGetAttribute(getattr(attr, name), dev),
                         "cuDeviceGetAttribute"))
    return LaunchLimits(
        threads_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
        block=tuple(get(f"CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{a}") for a in "XYZ"),
        grid=tuple(get(f"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{a}") for a in "XYZ"))


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """The current device's multiprocessor count (a persistent grid's size:
    the size parameter ir.SM_COUNT)."""
    driver = _driver()
    return int(check(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device().dev),
        "cuDeviceGetAttribute"))


def launch_limits(func):
    """The device's launch limits, with `func`'s own threads-per-block limit
    (register use can lower it below the device's)."""
    import dataclasses
    driver = _driver()
    kernel = int(check(driver.cuFuncGetAttribute(
        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func),
        "cuFuncGetAttribute"))
    return dataclasses.replace(_device_limits(), kernel_threads=kernel)


def param_sizes(func) -> list[int] | None:
    """The size in bytes of each of `func`'s parameters, as the driver reports
    them (cuFuncGetParamInfo: CUDA 12.4 drivers and later); None where the
    driver or cuda-bindings cannot tell."""
    driver = _driver()
    get = getattr(driver, "cuFuncGetParamInfo", None)
    if get is None:
        return None
    sizes = []
    while len(sizes) <= 8192:  # (kernel parameters take at most 32764 bytes)
        try:
            err, _, size = get(func, len(sizes))
        except Exception:  # a driver older than the bindings: the function is missing
            return None
        if err == driver.CUresult.CUDA_SUCCESS:
            sizes.append(int(size))
        elif err == driver.CUresult.CUDA_ERROR_INVALID_VALUE:
            return sizes  # past the last parameter
        else:
            return None
    return None


def launch(func, grid, block, smem: int, args: list, stream=0):
    """args: list of (ctypes type, value). (The general form; kernel calls go
    through `launch_packed` with parameters packed once per launch plan.)"""
    holders = [t(v) for t, v in args]
    ptrs = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    launch_packed(func, *[int(g) for g in grid], *[int(b) for b in block], int(smem), stream,
                  ctypes.addressof(ptrs) if holders else 0)


_launch_kernel = None


def kernel_launcher():
    """cuda.bindings' cuLaunchKernel. Called with `kernelParams` the address
    of a ready `void*[]` (an int, 0 for none) it is the cheapest launch
    cuda.bindings offers (a (values, types) tuple is converted on every call;
    a ctypes prototype of libcuda's function costs twice as much per call).
    Check its result with `launch_failed`."""
    global _launch_kernel
    if _launch_kernel is None:
        _launch_kernel = _driver().cuLaunchKernel
    return _launch_kernel


def launch_packed(func, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
                  stream: int, params: int):
    """Launch `func` with `params` the address of a ready `void*[]` (0 for none)."""
    args = (func, gx, gy, gz, bx, by, bz, smem, stream, params, 0)
    err = kernel_launcher()(*args)[0]
    if err:
        launch_failed(err, args)


def launch_failed(err, args: tuple) -> None:
    """After cuLaunchKernel(*args) returned `err`: where this thread's current
    context is not tcomp's (none yet on this thread, or another library
    switched it; tcomp does not set it before each launch), make it current
    and launch once more; raise CudaError for any other error."""
    if err.name in ("CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE"):
        device().activate()
        err = kernel_launcher()(*args)[0]
    if err:
        raise CudaError(error_text(_driver(), err, "cuLaunchKernel"))


def synchronize():
    check(_driver().cuCtxSynchronize(), "cuCtxSynchronize")


def stream_synchronize(stream: int):
    check(_driver().cuStreamSynchronize(stream), "cuStreamSynchronize")


def mem_alloc(nbytes: int) -> int:
    return int(check(_driver().cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc"))


def mem_free(ptr: int):
    check(_driver().cuMemFree(ptr), "cuMemFree")


def memcpy_htod(dst: int, src_ptr: int, nbytes: int, stream: int = 0):
    """Host to device, queued on `stream` (the host buffer may change once this returns)."""
    if nbytes:
        check(_driver().cuMemcpyHtoDAsync(dst, src_ptr, nbytes, stream), "cuMemcpyHtoDAsync")


def memcpy_dtoh(dst_ptr: int, src: int, nbytes: int, stream: int = 0):
    """Device to host, queued on `stream`: the data is there after the stream synchronizes."""
    if nbytes:
        check(_driver().cuMemcpyDtoHAsync(dst_ptr, src, nbytes, stream), "cuMemcpyDtoHAsync")


def memset_zero(ptr: int, nbytes: int, stream: int = 0):
    if nbytes:
        check(_driver().cuMemsetD8Async(ptr, 0, nbytes, stream), "cuMemsetD8Async")


def pointer_device(ptr: int) -> int | None:
    """The device ordinal a pointer belongs to (None when it is not device memory)."""
    driver = _driver()
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    try:
        err, value = driver.cuPointerGetAttribute(attr, ptr)
    except Exception:
        return None
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    return int(value)


def order_after(waiting: int, producer: int):
    """Make stream `waiting` wait for the work queued so far on stream
    `producer` (CUstream handles as ints), without blocking the host."""
    driver = _driver()
    ev = check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)),
               "cuEventCreate")
    try:
        check(driver.cuEventRecord(ev, producer), "cuEventRecord")
        check(driver.cuStreamWaitEvent(waiting, ev, 0), "cuStreamWaitEvent")
    finally:
        check(driver.cuEventDestroy(ev), "cuEventDestroy")


_context = threading.local()


def ensure_context() -> Device:
    """The device, with its context made current on this thread (once per
    thread: a cuCtxSetCurrent per call costs more than the rest of a launch's
    bookkeeping; `launch_packed` re-activates if another library switched)."""
    dev = device()
    if getattr(_context, "device", None) is not dev:
        dev.activate()
        _context.device = dev
    return dev


# ------------------------------------------------------------------ timing (tcomp.search)
def l2_cache_bytes() -> int:
    """The current device's L2 cache size in bytes."""
    driver = _driver()
    return int(check(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device().dev),
        "cuDeviceGetAttribute"))


def event_create():
    driver = _driver()
    return check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DEFAULT)),
                 "cuEventCreate")


def event_record(ev, stream: int = 0):
    check(_driver().cuEventRecord(ev, stream), "cuEventRecord")


def event_synchronize(ev):
    check(_driver().cuEventSynchronize(ev), "cuEventSynchronize")


def event_elapsed_ms(start, stop) -> float:
    """Milliseconds between two recorded (and completed) events."""
    return float(check(_driver().cuEventElapsedTime(start, stop), "cuEventElapsedTime"))


def event_destroy(ev):
    check(_driver().cuEventDestroy(ev), "cuEventDestroy")


def memset_d32(ptr: int, value: int, words: int, stream: int = 0):
    """Write `value` to `words` 32-bit words at `ptr`, queued on `stream`."""
    if words:
        check(_driver().cuMemsetD32Async(ptr, value, words, stream), "cuMemsetD32Async")
