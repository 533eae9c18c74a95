"""GPU: kernels whose block size is known only at launch (a loop of runtime
extent bound to threads): several sizes from one build, the launch-limit
error, empty launches, export -> load, the sidecar used by plain driver
calls, the limits read from the driver, and an unroll hint."""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import tcomp
from tests.lower.test_runtime_launch import CONV, SCALE, conv_rows_on_threads
from tests.lower.util import inputs_for

from .test_gpu_runtime import _eval

pytestmark = pytest.mark.cuda


def conv_args(H, W, seed=0):
    return inputs_for(CONV, {"N": 2, "C": 3, "H": H, "W": W, "K": 4, "KH": 3, "KW": 2}, seed=seed)


def check_conv(k, H, W):
    args = conv_args(H, W)
    got = k(*args)
    want = tcomp.evaluate(CONV, *args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("split_w", [4, None])
def test_runtime_block_several_sizes(split_w):
    """One build: 1, 5, 30 and 254 rows of threads (4 x 254 = 1016 threads)."""
    k = tcomp.build(conv_rows_on_threads(split_w), target="cuda")
    assert "__launch_bounds__" not in k.source
    for H, W in ((3, 3), (7, 9), (32, 5), (256, 4 if split_w else 3)):
        check_conv(k, H, W)


def test_runtime_block_too_many_threads():
    """4 x 258 threads: a clear CudaError before the launch, naming the size."""
    k = tcomp.build(conv_rows_on_threads(4), target="cuda")
    with pytest.raises(tcomp.CudaError, match=r"kernel conv_O: a block of 4x258x1 = 1032 threads "
                                              r"\(blockDim.y: \(H - KH\) \+ 1 = 258\) exceeds the "
                                              r"device's 1024 threads per block"):
        k(*conv_args(260, 5))
    check_conv(k, 9, 5)  # the kernel still runs at a size that fits


def test_runtime_block_empty_launch():
    """H < KH: no rows, no threads: nothing is launched, the output is empty."""
    k = tcomp.build(conv_rows_on_threads(4), target="cuda")
    out = k(*conv_args(2, 5))
    assert out.shape == (2, 4, 0, 4)


def test_runtime_block_export_load(tmp_path):
    k = tcomp.build(conv_rows_on_threads(4), target="cuda", sizes={"KH": 3, "KW": 2})
    path = str(tmp_path / "conv.cubin")
    k.export(path)
    k2 = tcomp.load(path)
    assert k2.meta["kernels"][0]["block"] == [4, ["-", "H", 2], 1]
    for H, W in ((3, 3), (12, 7)):
        check_conv(k2, H, W)
    with pytest.raises(tcomp.CudaError, match=r"a block of 4x298x1 = 1192 threads \(blockDim.y: "
                                              r"H - 2 = 298\)"):
        k2(*conv_args(300, 4))


def test_runtime_block_plain_driver_calls(tmp_path):
    """What a C++ or CuPy user does with the sidecar: evaluate the grid and block
    expressions from the sizes, then launch."""
    from cuda.bindings import driver as cu

    def ok(r):
        err = r[0] if isinstance(r, tuple) else r
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return r[1] if isinstance(r, tuple) and len(r) > 1 else None

    path = str(tmp_path / "conv.cubin")
    tcomp.build(conv_rows_on_threads(4), target="cuda").export(path)
    meta = json.load(open(str(tmp_path / "conv.json")))
    I, Wt = conv_args(9, 7)
    ok(cu.cuInit(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
    ok(cu.cuCtxSetCurrent(ctx))
    mod = ok(cu.cuModuleLoadData(open(path, "rb").read()))
    sizes = {}
    for spec, arr in zip(meta["inputs"], (I, Wt)):
        for j, n in zip(spec["shape"], arr.shape):
            if isinstance(j, str):
                sizes[j] = n
    ptrs = {}
    for spec, arr in zip(meta["inputs"], (I, Wt)):
        ptrs[spec["name"]] = ok(cu.cuMemAlloc(arr.nbytes))
        ok(cu.cuMemcpyHtoD(ptrs[spec["name"]], arr.ctypes.data, arr.nbytes))
    out = meta["outputs"][0]
    shape = tuple(_eval(j, sizes) for j in out["shape"])
    nbytes = int(np.prod(shape)) * 4
    ptrs[out["name"]] = ok(cu.cuMemAlloc(nbytes))
    (kd,) = meta["kernels"]
    f = ok(cu.cuModuleGetFunction(mod, kd["name"].encode()))
    vals = [ctypes.c_void_p(int(ptrs[p["buffer"]])) if "buffer" in p else
            ctypes.c_int(sizes[p["size"]]) for p in kd["params"]]
    arr = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
    grid = [_eval(g, sizes) for g in kd["grid"]]
    block = [_eval(b, sizes) for b in kd["block"]]
    assert block == [4, 7, 1]
    ok(cu.cuLaunchKernel(f, *grid, *block, kd["dynamic_smem"], 0, ctypes.addressof(arr), 0))
    ok(cu.cuCtxSynchronize())
    got = np.empty(shape, np.float32)
    ok(cu.cuMemcpyDtoH(got.ctypes.data, ptrs[out["name"]], nbytes))
    for p in ptrs.values():
        ok(cu.cuMemFree(p))
    np.testing.assert_allclose(got, tcomp.evaluate(CONV, I, Wt), rtol=1e-4, atol=1e-4)


def test_launch_limits_from_the_driver():
    """The limits the runtime checks against come from the device and the kernel."""
    from tcomp.target_cuda import cuda_api
    k = tcomp.build(conv_rows_on_threads(4), target="cuda")
    k(*conv_args(5, 5))  # loads the module
    module = k.variant(32).module
    limits = module.limits["conv_O"]
    assert limits.threads_per_block == 1024
    assert limits.block == (1024, 1024, 64)
    assert limits.grid == (2**31 - 1, 65535, 65535)
    assert 0 < limits.kernel_threads <= 1024
    assert cuda_api.launch_limits(module.function("conv_O")) == limits


def test_unroll_hint_runs():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "blockIdx.x")
    O.unroll(j)
    k = tcomp.build(s, target="cuda")
    assert "#pragma unroll" in k.source
    a = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    np.testing.assert_allclose(k(a), a * 2.0)
