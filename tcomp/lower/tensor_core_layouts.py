"""The fragment layouts tensor_cores.py distributes over a warp's lanes
(`Layout` per operand role, from warp_layouts), the lane index and the
int32 IR helper both tensor-core modules build indices with."""
from __future__ import annotations

import dataclasses

from ..arch.hierarchy import LANE_INDEX
from ..errors import LoweringError
from . import ir
from .warp_layouts import IR_OPS, MMA_A, MMA_B, MMA_C, FragmentLayout


LANE = ir.Var(LANE_INDEX)  # (the mma.sync kernels' blocks are one warp wide along x)
I32 = ir.int32


def _b(op, a, b):
    return ir.Bin(op, a, b if isinstance(b, ir.Expr) else ir.const(b), I32)


@dataclasses.dataclass(frozen=True)
class Layout:
    """An mma operand's fragment (arch/fragments.py) as this pass uses it:
    its th x tw tile and the (row, col) of this lane's element e, as IR."""
    role: str  # 'a', 'b' or 'c'
    fragment: FragmentLayout

    @property
    def th(self) -> int:
        return self.fragment.rows

    @property
    def tw(self) -> int:
        return self.fragment.cols

    @property
    def per_lane(self) -> int:
        return self.fragment.per_lane

    def coords(self, e):
        return self.fragment.coords(LANE, e, ops=IR_OPS)

    def check(self, name, shape):
        rows, cols = shape
        if rows % self.th or cols % self.tw:
            raise LoweringError(f"fragment '{name}' is {rows} x {cols}, not a whole number of "
                                f"{self.th} x {self.tw} tiles of its mma operand "
                                f"({self.role.upper()}); make the warp tile a multiple of it")


LAYOUTS = {"a": Layout("a", MMA_A), "b": Layout("b", MMA_B), "c": Layout("c", MMA_C)}
