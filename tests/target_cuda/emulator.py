"""Run generated CUDA C++ on the CPU, for tests of warp-level code on a machine
without a GPU: the kernel source is compiled with the host C++ compiler, one
std::thread per CUDA thread, `__syncthreads` a barrier of the block,
`__shfl_*_sync` an exchange through a per-warp barrier, and `__shared__`
arrays static (blocks run one after another). A shuffle whose mask is not
exactly the lanes that exist in the warp aborts the run: the masks are part of
what is tested.

Only what the generated kernels of these tests use is provided (float32,
float64, integer and bool buffers, the shuffle intrinsics, the math of <cmath>,
__int_as_float, __longlong_as_double, __double_as_longlong, __float_as_uint,
__uint_as_float, the float -> integer `_rz` conversions
with PTX cvt.rzi's saturation, float2/float4 vector casts, the status words
of multi-block scans as relaxed C++ atomics, __ballot_sync, __ffs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from tcomp.lang import dtypes
from tcomp.target_cuda.kernel import eval_size, launch_dims
from tcomp.target_cuda.scan_lookback import PRELUDE as LOOKBACK_FLAGS

# The flags of a multi-block scan (target_cuda/scan_lookback.py's PRELUDE, PTX
# st.release / ld.acquire at gpu scope) as C++ atomics of the same order.
EMULATED_FLAGS = r"""
template <int N> inline void tc_store_words(unsigned long long* p, unsigned flag,
                                            const unsigned* v) {
  for (int k = 0; k < N; ++k)
    __atomic_store_n(p + k, (unsigned long long)flag << 32 | v[k], __ATOMIC_RELAXED);
}
template <int N> inline unsigned tc_load_words(const unsigned long long* p, unsigned* v) {
  for (;;) {
    unsigned long long w[N];
    for (int k = 0; k < N; ++k) w[k] = __atomic_load_n(p + k, __ATOMIC_RELAXED);
    unsigned f = (unsigned)(w[0] >> 32);
    bool one = f != 0;
    for (int k = 1; k < N; ++k) one = one && (unsigned)(w[k] >> 32) == f;
    if (one) { for (int k = 0; k < N; ++k) v[k] = (unsigned)w[k]; return f; }
  }
}"""

# The same, but a tile's prefix (flag 2) is published only by every `every`-th tile
# to publish one; the others stay at flag 1 (their aggregates stand), so a
# look-back walks back up to `every` tiles (blocks run in order here: otherwise
# it always finds its predecessor's prefix). Tile 0 of a row (no flag 1 before
# its 2) always publishes.
SPARSE_FLAGS = EMULATED_FLAGS.replace("""template <int N> inline void tc_store_words(unsigned long long* p, unsigned flag,
                                            const unsigned* v) {
  for (int k = 0; k < N; ++k)""", """static int tc_prefixes = 0;
template <int N> inline void tc_store_words(unsigned long long* p, unsigned flag,
                                            const unsigned* v) {
  if (flag == 2 && (__atomic_load_n(p, __ATOMIC_RELAXED) >> 32) == 1 &&
      ++tc_prefixes % EVERY != 0) return;  // (the aggregate's words stay)
  for (int k = 0; k < N; ++k)""")

HAVE_CXX = shutil.which("g++") is not None

PRELUDE = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>
#include <vector>
using std::min; using std::max; using std::isnan;
// The GPU's max.f32 / min.f32 order signed zeros (-0 < +0), as tcomp defines max and min
// (lang/minmax.py); glibc's fmaxf may return either zero: the emulator orders them.
template <class F> inline F tc_emu_max(F a, F b) {
  return (a == 0 && b == 0) ? (std::signbit(a) ? b : a) : std::fmax(a, b);
}
template <class F> inline F tc_emu_min(F a, F b) {
  return (a == 0 && b == 0) ? (std::signbit(a) ? a : b) : std::fmin(a, b);
}
inline float tc_emu_fmaxf(float a, float b) { return tc_emu_max(a, b); }
inline float tc_emu_fminf(float a, float b) { return tc_emu_min(a, b); }
inline double tc_emu_fmax(double a, double b) { return tc_emu_max(a, b); }
inline double tc_emu_fmin(double a, double b) { return tc_emu_min(a, b); }
#define fmaxf tc_emu_fmaxf
#define fminf tc_emu_fminf
#define fmax tc_emu_fmax
#define fmin tc_emu_fmin
struct tc_dim3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
static thread_local tc_dim3 threadIdx, blockIdx;
static tc_dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
struct tc_warp { std::barrier<>* bar; unsigned lanes; unsigned long long vals[32]; };
static std::barrier<>* tc_block_barrier;
static thread_local tc_warp* tc_my_warp;
static thread_local int tc_my_lane;
inline void __syncthreads() { tc_block_barrier->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
inline long long __double_as_longlong(double f) { long long i; std::memcpy(&i, &f, 8); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
// PTX cvt.rzi: toward zero, clamped to the type's range, NaN -> 0 (lo: the
// smallest value, hi: one past the largest, both exact in float and double)
template <class I, class F> I tc_cvt_rzi(F x, F lo, F hi, I min, I max, I nan) {
  return x != x ? nan : x < lo ? min : x >= hi ? max : I(x);
}
// NaN: 0 from the float -> 32-bit intrinsics only; the others give what the
// H200 gave (INT64_MIN, INT_MIN) or, where unmeasured, the sign bit alone, so
// generated code that does not guard NaN (target_cuda/casts.py) fails here.
#define TC_CVT(name, F, I, lo, hi, nan) inline I name(F x) { \
  return tc_cvt_rzi<I, F>(x, F(lo), F(hi), std::numeric_limits<I>::min(), \
                          std::numeric_limits<I>::max(), static_cast<I>(nan)); }
TC_CVT(__float2int_rz, float, int, -0x1p31, 0x1p31, 0)
TC_CVT(__float2uint_rz, float, unsigned, 0, 0x1p32, 0)
TC_CVT(__float2ll_rz, float, long long, -0x1p63, 0x1p63, 0x8000000000000000ull)
TC_CVT(__float2ull_rz, float, unsigned long long, 0, 0x1p64, 0x8000000000000000ull)
TC_CVT(__double2int_rz, double, int, -0x1p31, 0x1p31, 0x80000000u)
TC_CVT(__double2uint_rz, double, unsigned, 0, 0x1p32, 0x80000000u)
TC_CVT(__double2ll_rz, double, long long, -0x1p63, 0x1p63, 0x8000000000000000ull)
TC_CVT(__double2ull_rz, double, unsigned long long, 0, 0x1p64, 0x8000000000000000ull)
static void tc_check_mask(unsigned mask) {
  unsigned want = tc_my_warp->lanes >= 32 ? 0xffffffffu : ((1u << tc_my_warp->lanes) - 1u);
  if (mask != want) {
    std::fprintf(stderr, "shuffle mask %#x, but the warp has lanes %#x\n", mask, want);
    std::abort();
  }
}
template <class T> static T tc_exchange(T v, int src) {
  tc_warp& w = *tc_my_warp;
  std::memcpy(&w.vals[tc_my_lane], &v, sizeof(T));
  w.bar->arrive_and_wait();
  T out = v;
  if (src >= 0 && src < (int)w.lanes) std::memcpy(&out, &w.vals[src], sizeof(T));
  w.bar->arrive_and_wait();
  return out;
}
inline unsigned __ballot_sync(unsigned m, int p) {
  tc_check_mask(m);
  tc_warp& w = *tc_my_warp;
  w.vals[tc_my_lane] = p != 0;
  w.bar->arrive_and_wait();
  unsigned out = 0;
  for (unsigned i = 0; i < w.lanes; ++i) out |= w.vals[i] ? 1u << i : 0u;
  w.bar->arrive_and_wait();
  return out;
}
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <class T> T __shfl_sync(unsigned m, T v, int src) {
  tc_check_mask(m); return tc_exchange(v, src);
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int off) {
  tc_check_mask(m); return tc_exchange(v, tc_my_lane ^ off);
}
template <class T> T __shfl_up_sync(unsigned m, T v, int off) {
  tc_check_mask(m); return tc_exchange(v, tc_my_lane - off >= 0 ? tc_my_lane - off : tc_my_lane);
}
template <class T> T __shfl_down_sync(unsigned m, T v, int off) {
  tc_check_mask(m); return tc_exchange(v, tc_my_lane + off < 32 ? tc_my_lane + off : tc_my_lane);
}
static void tc_run(int gx, int gy, int gz, int bx, int by, int bz, std::function<void()> body) {
  blockDim = {(unsigned)bx, (unsigned)by, (unsigned)bz};
  gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
  int t = bx * by * bz;
  for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) for (int x = 0; x < gx; ++x) {
    std::barrier<> bar(t);
    tc_block_barrier = &bar;
    std::vector<tc_warp> warps((t + 31) / 32);
    std::vector<std::barrier<>*> bars;
    for (size_t w = 0; w < warps.size(); ++w) {
      warps[w].lanes = std::min(32, t - 32 * (int)w);
      warps[w].bar = new std::barrier<>(warps[w].lanes);
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < t; ++i) {
      threads.emplace_back([&, i] {
        threadIdx = {(unsigned)(i % bx), (unsigned)((i / bx) % by), (unsigned)(i / (bx * by))};
        blockIdx = {(unsigned)x, (unsigned)y, (unsigned)z};
        tc_my_warp = &warps[i / 32];
        tc_my_lane = i % 32;
        body();
      });
    }
    for (auto& th : threads) th.join();
    for (auto& w : warps) delete w.bar;
  }
}
"""

_CTYPES = {"float32": "float", "float64": "double", "int8": "signed char", "int16": "short",
           "int32": "int", "int64": "long long", "uint8": "unsigned char",
           "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
           "bool": "bool"}


def _launcher(kd: dict, meta: dict) -> str:
    bufs = {b["name"]: b for b in meta["inputs"] + meta["outputs"] + meta["temps"]}
    params, args = [], []
    for p in kd["params"]:
        if "buffer" in p:
            b = bufs[p["buffer"]]
            params.append(f"{_CTYPES[b['dtype']]}* {p['buffer']}")
            args.append(p["buffer"])
        else:
            params.append(f"int {p['size']}")
            args.append(p["size"])
    head = ", ".join(["int gx, int gy, int gz, int bx, int by, int bz"] + params)
    return (f'extern "C" void tc_launch_{kd["name"]}({head}) {{\n'
            f'  tc_run(gx, gy, gz, bx, by, bz, [&] {{ {kd["name"]}({", ".join(args)}); }});\n}}\n')


_RUNNER = r"""
import ctypes, json, sys
import numpy as np
d = sys.argv[1]
plan = json.load(open(d + "/plan.json"))
env = {n: np.load(d + "/" + n + ".npy") for n in plan["buffers"]}
so = ctypes.CDLL(sys.argv[2])
for symbol, dims, params in plan["launches"]:
    args = [ctypes.c_int(v) for v in dims]
    for kind, v in params:
        args.append(ctypes.c_void_p(env[v].ctypes.data) if kind == "buffer" else ctypes.c_int(v))
    getattr(so, symbol)(*args)
for n in plan["outputs"]:
    np.save(d + "/" + n + ".npy", env[n])
"""


_BUILT: dict[str, str] = {}  # source -> shared library (one build per source and process)
_BUILD_DIR = None


def _compile(source: str) -> str:
    global _BUILD_DIR
    if source not in _BUILT:
        if _BUILD_DIR is None:
            _BUILD_DIR = tempfile.TemporaryDirectory(prefix="tcomp_emulator_")
        base = os.path.join(_BUILD_DIR.name, f"k{len(_BUILT)}")
        with open(base + ".cpp", "w") as f:
            f.write(source)
        r = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                            "-o", base + ".so", base + ".cpp"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
        _BUILT[source] = base + ".so"
    return _BUILT[source]


def run_emulated(kernel, *arrays, timeout: int = 300, prefix_every: int | None = None):
    """Run a tcomp CUDA kernel (from `tcomp.build(..., target="cuda")`) on the
    CPU in a separate process (a failed mask check aborts it, a barrier not
    every thread reaches hangs it); returns its outputs like calling it on a
    GPU would. `prefix_every`: multi-block scans publish only every n-th
    tile's prefix (SPARSE_FLAGS), to exercise long look-backs."""
    meta = kernel.meta
    flags = EMULATED_FLAGS if prefix_every is None else \
        SPARSE_FLAGS.replace("EVERY", str(int(prefix_every)))
    lib = _compile(PRELUDE + kernel.source.replace(LOOKBACK_FLAGS, flags) +
                   "".join(_launcher(kd, meta) for kd in meta["kernels"]))
    with tempfile.TemporaryDirectory() as d:
        sizes = dict(meta["bound_sizes"])
        env = {}
        for spec, a in zip(meta["inputs"], arrays):
            a = np.ascontiguousarray(a, dtypes.BY_NAME[spec["dtype"]].numpy)
            env[spec["name"]] = a
            for j, n in zip(spec["shape"], a.shape):
                if isinstance(j, str):
                    sizes.setdefault(j, int(n))
        for spec in meta["outputs"] + meta["temps"]:
            shape = tuple(max(0, eval_size(j, sizes)) for j in spec["shape"])
            env[spec["name"]] = np.zeros(shape, dtypes.BY_NAME[spec["dtype"]].numpy)
        launches = []
        for kd in meta["kernels"]:
            grid, block = launch_dims(kd, sizes)
            if min(grid) <= 0 or min(block) <= 0:
                continue
            params = [("buffer", p["buffer"]) if "buffer" in p else ("size", sizes[p["size"]])
                      for p in kd["params"]]
            launches.append((f"tc_launch_{kd['name']}", grid + block, params))
        for n, a in env.items():
            np.save(os.path.join(d, n + ".npy"), a)
        outputs = [spec["name"] for spec in meta["outputs"]]
        with open(os.path.join(d, "plan.json"), "w") as f:
            json.dump({"buffers": list(env), "launches": launches, "outputs": outputs}, f)
        r = subprocess.run([sys.executable, "-c", _RUNNER, d, lib], capture_output=True, text=True,
                           timeout=timeout)
        assert r.returncode == 0, f"emulated kernel failed ({r.returncode}): {r.stderr[-4000:]}"
        outs = tuple(np.load(os.path.join(d, n + ".npy")) for n in outputs)
    return outs[0] if len(outs) == 1 else outs
