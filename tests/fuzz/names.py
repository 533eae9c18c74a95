"""Identifier pools for the differential fuzzer: names a TC program may use
that the generated code could capture or clash with.

- C++ keywords and alternative tokens (`class`, `for`, `and`, ...): a name the
  language accepts must compile, so the CUDA emitter has to mangle them.
- CUDA builtins and what the generated source declares itself (`threadIdx`,
  `__syncthreads`, `min`, `tc_floordiv`, vector types, macros of <cmath>).
- Generated-looking names, made from the program's own names in the shapes
  lowering generates (`split` makes `k_o`/`k_i`, `fuse` makes
  `m_o_n_o_f`, `cache_read` makes `A_shared`, `cache_write` `C_local` and
  `C_local_acc`, `rfactor` `C_rf`, in-place snapshots `O_snap`, copy stages
  loop over `ax0`, kernels are named `<def>_<tensor>`, warp reductions use
  `<v>_part`/`<v>_lane`, vector loads `<v>_piece`): those are the captures.

`inf` and `nan` are left out: they are literals on another branch (issue 22,
defect 10).
"""
from __future__ import annotations

CPP_KEYWORDS = (
    "alignas alignof and and_eq asm auto bitand bitor break case catch char char8_t char16_t "
    "char32_t class compl concept const consteval constexpr constinit const_cast continue "
    "co_await co_return co_yield decltype default delete do dynamic_cast else enum explicit "
    "export extern false for friend goto if inline int long mutable namespace new noexcept not "
    "not_eq nullptr operator or or_eq private protected public register reinterpret_cast "
    "requires return short signed sizeof static static_assert static_cast struct switch "
    "template this thread_local throw true try typedef typeid typename union unsigned using "
    "virtual void volatile wchar_t while xor xor_eq restrict").split()

CUDA_NAMES = (
    "threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __global__ "
    "__device__ __shared__ __restrict__ __forceinline__ __launch_bounds__ __align__ atomicAdd "
    "__shfl_sync __shfl_xor_sync __shfl_down_sync dim3 float2 float4 int4 half2 __half "
    "__nv_bfloat16 __float2half __half2float __int_as_float printf malloc memcpy size_t int32_t "
    "uint8_t INFINITY NAN NULL HUGE_VALF M_PI assert std main min max expf sqrtf fmaxf "
    "rsqrtf __expf __fdividef isnan signbit tc_floordiv tc_floormod tc_red0 tc_vec1_0 "
    "tc_out1 tc_dim3 tc_run").split()

PLAIN = {
    "def": ["f", "prog", "kern", "fn"],
    "input": ["A", "B", "X", "Y", "W", "G", "P"],
    "written": ["O", "C", "R", "S", "T", "U", "Z", "E"],
    "size": ["N", "M", "K", "L", "H"],
    "index": ["i", "j", "k", "m", "n", "x", "y", "r_k", "r_j"],
    "let": ["a", "t", "w", "v"],
}


def derived(kind: str, base: str, other: str = "x") -> list[str]:
    """Names that lowering generates from `base` (an index variable for
    kind "index", a tensor or def name for kind "tensor")."""
    if kind == "index":
        return [f"{base}_o", f"{base}_i", f"{base}_o_i", f"{base}_i_o", f"{base}_o_{other}_o_f",
                f"{base}_{other}_f", f"{base}_part", f"{base}_lane", f"{base}_piece", "ax0",
                "ax1"]
    return [f"{base}_shared", f"{base}_local", f"{base}_local_acc", f"{base}_acc", f"{base}_rf",
            f"{base}_snap", f"{base}_piece", f"{other}_{base}", f"{base}_{other}"]
