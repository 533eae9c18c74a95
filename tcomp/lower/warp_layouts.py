"""Where the elements of a warp's tensor-core operands live, for the
lowering and the sim: an adapter over the machine model's layout objects
(tcomp/arch/fragments.py holds the one definition, with the PTX ISA's
formulas; tests/arch/test_ptx_tables.py ties them to the ISA's tables).

A fragment is a per-thread register array; element `e` of lane `l`'s array
holds one element of the warp's matrix: `MMA_A.coords(l, e)` is its (row,
col), ints or NumPy arrays; `MMA_A.coords(LANE, e, ops=IR_OPS)` builds the
same map as Kernel IR expressions (lane = threadIdx.x), which is how
lower/tensor_cores.py places fragment accesses.
"""
from __future__ import annotations

from ..arch import fragments as _F
from ..arch.hierarchy import WARP_SIZE
from ..arch.layout import Fragment as FragmentLayout  # noqa: F401  (the type of MMA_A, ...)
from . import ir

WARP = WARP_SIZE

MMA_A = _F.MMA_M16N8K16_A
MMA_B = _F.MMA_M16N8K16_B
MMA_C = _F.MMA_M16N8K16_C
MMA_C_PAIRS = MMA_C.vectors(2)  # (lane, h) -> (row, pair of adjacent columns) of C


class _IrOps:
    """The layout evaluation protocol (arch/layout.PythonOps) on int32 Kernel
    IR expressions: `x + y`, `x * 8`, `x / 4`, `x % 4` as `ir.Bin` nodes."""

    def const(self, v: int):
        return ir.const(v)

    def _b(self, op, a, b):
        return ir.Bin(op, a, b if isinstance(b, ir.Expr) else ir.const(b), ir.int32)

    def add(self, a, b):
        return self._b("+", a, b)

    def mul(self, a, k):
        return self._b("*", a, k)

    def floordiv(self, a, k):
        return self._b("/", a, k)

    def mod(self, a, k):
        return self._b("%", a, k)

    def and_(self, a, k):
        return self._b("&", a, k)

    def xor(self, a, b):
        return self._b("^", a, b)

    def shr(self, a, k):
        return self._b(">>", a, k)

    def shl(self, a, k):
        return self._b("<<", a, k)


IR_OPS = _IrOps()


def ldmatrix_source(lane: int, e: int, trans: bool) -> tuple[int, int]:
    """For ldmatrix: element `e` of `lane`'s result comes from (the lane that
    gave the row address, the column within that 8-element row): the
    distribution's (row of the stacked matrices, col) is that lane and column."""
    return (_F.LDMATRIX_X4_TRANS if trans else _F.LDMATRIX_X4).coords(lane, e)


def ldmatrix_a_rows(lane: int) -> tuple[int, int]:
    """The (row, col) of a 16 x 16 tile whose address lane `lane` gives to
    `ldmatrix.x4` so that the result is an mma A fragment (MMA_A): lanes 0-15
    rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8."""
    return _F.LDMATRIX_A_ROWS(lane)


def ldmatrix_b_rows(lane: int) -> tuple[int, int]:
    """The (k, n) of a 16 x 16 (k x n) tile whose address lane `lane` gives to
    `ldmatrix.x4.trans` so that the result is two mma B fragments (MMA_B) side
    by side: elements 0-3 for columns n 0-7, elements 4-7 for columns 8-15.
    Lanes 0-15: k rows 0-15 at column 0; lanes 16-31: rows 0-15 at column 8."""
    return _F.LDMATRIX_B_ROWS(lane)
