"""How the identifiers of the Kernel IR are spelled in the generated CUDA C++.

The language takes any `[A-Za-z_][A-Za-z_0-9]*` (lang/lexer.py) as a name,
so a tensor, size, index or let may be called `class`, `threadIdx`, `float4`,
`min` or `__half`, and lowering builds its own names from those (`class_o`,
`min_shared`). The CUDA emitter prints every such name through `cuda_name`:

- a name is printed as it is, unless it would clash;
- it clashes when it is a C++ keyword or alternative token (`CPP_KEYWORDS`),
  a name the CUDA compile environment declares (reserved_names.py, probed from
  NVRTC by tools/cuda_names.py: functions such as `exp`, `min`, `y0`, types
  such as `float4`, `half`, `dim3`, variables such as `threadIdx`, macros,
  enumerators, namespaces such as `std`), when it starts with `_` (reserved
  for the implementation: `__half`, `__syncthreads`, `_Float16`), or when it
  starts with `tc_` (the generated source's own names: `tc_floordiv`,
  `tc_smem`, `tc_red0`, ...);
- a clashing name is printed as `tc_u_` + name (`class` -> `tc_u_class`,
  `tc_smem` -> `tc_u_tc_smem`).

Collision-free: a name printed as it is never starts with `tc_`, and a
mangled one always does, so the two kinds never meet; two mangled names
differ by what follows the prefix; and the emitter's own names (`tc_vec3_0`,
`tc_red12`, `tc_smem`, ...) never start with `tc_u_`. The thread and block
indices (`threadIdx.x`) are CUDA's own and printed as they are; no other IR
name has a `.` (lower/construct.ident), and one that has (hand-built IR) is
printed as `tc_d_` + the name with `_` doubled and `.` as `_d`, which is
injective too.

Only the C++ spelling changes: an exported kernel's sidecar lists its
parameters by their TC names in launch order (a cubin keeps no parameter
names), and its entry point under its printed name (`kernels[].name`), which
is what cuModuleGetFunction is given.
"""
from __future__ import annotations

from ..arch import threads
from .reserved_names import RESERVED

PREFIX = "tc_u_"

CPP_KEYWORDS = frozenset((
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t "
    "char16_t char32_t class compl concept const consteval constexpr constinit const_cast "
    "continue co_await co_return co_yield decltype default delete do double dynamic_cast else "
    "enum explicit export extern false float for friend goto if inline int long mutable "
    "namespace new noexcept not not_eq nullptr operator or or_eq private protected public "
    "register reinterpret_cast requires return short signed sizeof static static_assert "
    "static_cast struct switch template this thread_local throw true try typedef typeid "
    "typename union unsigned using virtual void volatile wchar_t while xor xor_eq "
    # contextual in C++ (and C's restrict, which NVRTC knows): mangled to be safe
    "final override import module restrict").split())

_BUILTIN_VARS = threads.INDEX_VARS


def clashes(name: str) -> bool:
    """Whether `name` cannot be printed as it is (module docstring)."""
    return (name in CPP_KEYWORDS or name in RESERVED or name.startswith("_")
            or name.startswith("tc_"))


def cuda_name(name: str) -> str:
    """The C++ spelling of IR name `name`."""
    if name in _BUILTIN_VARS:
        return name
    if "." in name:
        return "tc_d_" + name.replace("_", "__").replace(".", "_d")
    return PREFIX + name if clashes(name) else name
