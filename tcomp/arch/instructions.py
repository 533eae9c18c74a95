"""The one table of tensor-core instructions: for each, its shape, the
threads that issue it together, where each operand comes from, the register
layouts of its fragments (fragments.py), its PTX spelling and the target
feature it needs (target.py).

    mma_m16n8k16          mma.sync, a warp; A, B, C/D in registers     (mma_sync, sm_80)
    wgmma_m64n{N}k16      wgmma, a warpgroup; A in registers or shared
                          memory (descriptor), B in shared memory, D in
                          registers; N in 8..256 step 8, bf16/f16 -> f32   (wgmma, sm_90a)
    wgmma_m64n{N}k32_fp8  the same for e4m3/e5m2 inputs, K = 32         (wgmma, sm_90a)

`TENSOR_CORE[name]` is the entry; `for_shape(m, n, k, input_dtype)` finds one.
A schedule's `tensorize` checks against this table once it names wgmma
(today schedule/tensor_intrinsics.py lists mma_m16n8k16 with the same shape).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import fragments as F
from .hierarchy import Uniformity
from .layout import Fragment

REGISTERS = "registers"
SHARED = "shared_descriptor"  # a 64-bit wgmma matrix descriptor of a shared-memory tile

_16BIT = ("bfloat16", "float16")
_FP8 = ("float8_e4m3fn", "float8_e5m2")  # (the names of ml_dtypes and torch)
_PTX_TYPE = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3",
             "float8_e5m2": "e5m2", "float32": "f32"}


@dataclass(frozen=True)
class Operand:
    """One operand: where it may come from, and its register layout when it
    is in registers (None when it never is)."""
    sources: tuple[str, ...]
    fragment: Fragment | None = None


@dataclass(frozen=True)
class TensorCoreInstruction:
    name: str
    m: int
    n: int
    k: int
    inputs: tuple[str, ...]  # dtype names A and B may have (both the same)
    accumulator: str  # dtype name of C and D
    issued_by: Uniformity  # the group that executes it together (WARP, WARPGROUP)
    a: Operand
    b: Operand
    d: Operand  # (C, the addend, is laid out as D)
    ptx: str  # the mnemonic with {a} / {b} where the input type goes
    feature: str

    def spelling(self, dtype: str) -> str:
        """The PTX mnemonic for inputs of `dtype`."""
        if dtype not in self.inputs:
            raise ValueError(f"{self.name} takes {', '.join(self.inputs)}, not {dtype}")
        return self.ptx.format(a=_PTX_TYPE[dtype], b=_PTX_TYPE[dtype])

    @property
    def threads(self) -> int:
        return self.issued_by.threads


def _mma_m16n8k16() -> TensorCoreInstruction:
    return TensorCoreInstruction(
        "mma_m16n8k16", 16, 8, 16, _16BIT, "float32", Uniformity.WARP,
        a=Operand((REGISTERS,), F.MMA_M16N8K16_A), b=Operand((REGISTERS,), F.MMA_M16N8K16_B),
        d=Operand((REGISTERS,), F.MMA_M16N8K16_C),
        ptx="mma.sync.aligned.m16n8k16.row.col.f32.{a}.{b}.f32", feature="mma_sync")


def _wgmma(n: int, k: int, inputs, a_layout: Fragment, suffix: str) -> TensorCoreInstruction:
    return TensorCoreInstruction(
        f"wgmma_m64n{n}k{k}{suffix}", 64, n, k, inputs, "float32", Uniformity.WARPGROUP,
        a=Operand((REGISTERS, SHARED), a_layout), b=Operand((SHARED,)),
        d=Operand((REGISTERS,), F.wgmma_d(n)),
        ptx=f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{{a}}.{{b}}", feature="wgmma")


TENSOR_CORE = {i.name: i for i in (
    _mma_m16n8k16(),
    *(_wgmma(n, 16, _16BIT, F.WGMMA_A_K16, "") for n in F.WGMMA_N),
    *(_wgmma(n, 32, _FP8, F.WGMMA_A_K32, "_fp8") for n in F.WGMMA_N),
)}


def for_shape(m: int, n: int, k: int, dtype: str) -> TensorCoreInstruction | None:
    """The instruction of shape m x n x k taking `dtype` inputs, or None."""
    for i in TENSOR_CORE.values():
        if (i.m, i.n, i.k) == (m, n, k) and dtype in i.inputs:
            return i
    return None
