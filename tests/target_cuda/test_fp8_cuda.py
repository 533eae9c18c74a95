"""fp8 in CUDA C++: cuda_fp8.h's `__nv_fp8_e4m3` / `__nv_fp8_e5m2` buffers,
converted by their constructors (`__nv_cvt_float_to_fp8` /
`__nv_cvt_double_to_fp8` with __NV_SATFINITE: round to nearest even,
saturating, as `evaluate`; docs/language.md, "fp8").

Without a GPU: the source NVRTC compiles, and the SASS of a float -> fp8
conversion is the saturating hardware convert (F2FP.SATFINITE), that of a
double -> fp8 the header's software rounding (no F2FP from float: one
rounding). On the GPU (marked cuda): bit for bit with `evaluate` at the
awkward values of tests/lang/test_fp8.py."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.lang.test_fp8 import FP8, awkward
from tests.lower.test_sim_fp8 import SOURCES, same8
from tests.lower.test_sim_low_precision import threads

from .test_tc_epilogue_cuda import _sass


def _build(src, t, sizes=None):
    op = tcomp.op(f"def f({src}(N) X) -> (O) {{ O(i) = {t}(X(i)) }}")
    return op, tcomp.build(threads(op, "O", 64), target="cuda", sizes=sizes)


@pytest.mark.parametrize("t", list(FP8))
def test_source_uses_cuda_fp8_types_and_compiles(t):
    _, k = _build("float", t, {"N": 100})
    cls = {"float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}[t]
    assert "#include <cuda_fp8.h>" in k.source
    assert f"{cls}* O" in k.source and f"{cls}((float)(X[" in k.source
    assert k.cubin


@pytest.mark.parametrize("t", list(FP8))
def test_sass_float_conversion_is_the_saturating_convert(t):
    _, ops = _sass(_build("float", t, {"N": 100})[1].cubin)
    fmt = "E4M3" if t == "float8_e4m3fn" else "E5M2"
    assert any(o.startswith("F2FP.SATFINITE." + fmt) for o in ops), sorted(set(ops))
    _, ops = _sass(_build("double", t, {"N": 100})[1].cubin)
    assert not any(o.startswith("F2FP") for o in ops), sorted(set(ops))


@pytest.mark.cuda
@pytest.mark.parametrize("t", list(FP8))
@pytest.mark.parametrize("src", SOURCES)
def test_gpu_conversions_to_fp8_match_evaluate(t, src):
    op, k = _build(src, t)
    dt = op.inputs[0].dtype.numpy
    x = awkward(t).astype(np.float64)
    if op.inputs[0].dtype.is_int:
        info = np.iinfo(dt)
        x = np.clip(np.nan_to_num(np.trunc(x)), info.min, info.max)
    with np.errstate(over="ignore", invalid="ignore"):
        x = x.astype(dt)
    same8(k(x), tcomp.evaluate(op, x))


@pytest.mark.cuda
@pytest.mark.parametrize("t", list(FP8))
def test_gpu_arithmetic_and_casts_out_of_fp8_match_evaluate(t):
    x = np.arange(256, dtype=np.uint8).view(FP8[t])
    op = tcomp.op(f"def f({t}(N) X) -> (O, H, I) {{ O(i) = X(i) * 2.5 + X(i) "
                  f"H(i) = half(X(i))  I(i) = int8(X(i)) }}")
    s = tcomp.Schedule(op)
    for out in ("O", "H", "I"):
        o = s[out]
        (i,) = o.axes
        io, ii = o.split(i, 32)
        o.bind(io, "blockIdx.x")
        o.bind(ii, "threadIdx.x")
    got = tcomp.build(s, target="cuda")(x)
    want = tcomp.evaluate(op, x)
    # (X * 2.5 + X: one float32 rounding either way; a fused multiply-add rounds once
    # too, and the fp8 rounding after it sees the same float32 value: products of fp8
    # values by 2.5 are exact in float32)
    same8(got[0], want[0])
    for g, w in zip(got[1:], want[1:]):  # (NaN equals NaN here: a NaN's bits may differ)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g[~np.isnan(w)]), np.signbit(w[~np.isnan(w)]))


def _tiled_fp8_matmul(t):
    op = tcomp.op(f"def mm({t}(M, K) A, {t}(K, N) B) -> (float32(M, N) C, D) "
                  f"{{ C(m, n) +=! A(m, k) * B(k, n)  D(m, n) = {t}(C(m, n)) }}")
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 8, 4)
    ko, ki = C.split(k, 8)
    C.reorder(mo, no, ko, mi, ni, ki)
    for ax, tag in ((mo, "blockIdx.x"), (no, "blockIdx.y"), (mi, "threadIdx.y"),
                    (ni, "threadIdx.x")):
        C.bind(ax, tag)
    for name in ("A", "B"):
        s.cache_read(name, "shared", [C]).compute_at(C, ko)
    return op, s


@pytest.mark.parametrize("t", list(FP8))
def test_fp8_tiles_in_shared_memory_compile(t):
    _, s = _tiled_fp8_matmul(t)
    k = tcomp.build(s, target="cuda", sizes={"M": 64, "N": 64, "K": 64})
    cls = {"float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}[t]
    assert f"__shared__ __align__(16) {cls} A_shared[" in k.source and k.cubin


@pytest.mark.cuda
@pytest.mark.parametrize("t", list(FP8))
def test_gpu_fp8_tiles_in_shared_memory_match_evaluate(t):
    """Integer data: the float32 sums are exact in any order; D rounds them once."""
    op, s = _tiled_fp8_matmul(t)
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (40, 24)).astype(FP8[t])
    b = rng.integers(-4, 5, (24, 36)).astype(FP8[t])
    got = tcomp.build(s, target="cuda")(a, b)
    want = tcomp.evaluate(op, a, b)
    np.testing.assert_array_equal(got[0], want[0])
    same8(got[1], want[1])
