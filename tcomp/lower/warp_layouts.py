"""Where the elements of a warp's tensor-core operands live: the (lane, register)
layouts of `mma.sync.m16n8k16` and the distribution of `ldmatrix`, as data.

One fragment is a per-thread register array; element `e` of lane `l`'s array
holds one element of the warp's matrix. Each layout below maps (lane, e) to
(row, col) of that matrix, as the PTX ISA defines it ("Matrix fragments for
mma.m16n8k16"). Lowering uses them to place fragment accesses, the sim to
execute mma and ldmatrix by their meaning, tests to check both.

With g = lane // 4 and t = lane % 4 (the "group" and the "thread in group"):

  A (16 x 16, row-major, 16-bit): 8 elements, pairs a0..a3:
      a0: (g, 2t..2t+1)   a1: (g+8, 2t..2t+1)   a2: (g, 2t+8..)   a3: (g+8, 2t+8..)
  B (16 x 8, k x n, 16-bit): 4 elements, pairs b0, b1:
      b0: (2t..2t+1, g)   b1: (2t+8..2t+9, g)
  C, D (16 x 8, 32-bit): 4 elements:
      c0, c1: (g, 2t..2t+1)   c2, c3: (g+8, 2t..2t+1)

ldmatrix (m8n8, 16-bit): with `.x1/.x2/.x4`, lanes 8q..8q+7 give the row
addresses of matrix q (each row: 8 contiguous elements); lane l then receives,
from matrix q, the pair (l // 4, 2 (l % 4) + {0, 1}) into its elements 2q, 2q+1,
or with `.trans` the pair (2 (l % 4) + {0, 1}, l // 4).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WARP = 32


@dataclass(frozen=True)
class FragmentLayout:
    """The (lane, element) -> (row, col) map of one operand of a warp intrinsic."""
    name: str
    rows: int
    cols: int
    per_lane: int  # elements each lane holds

    def coords(self, lane: int, e: int) -> tuple[int, int]:
        return _COORDS[self.name](lane, e)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, col) as two (32, per_lane) int arrays."""
        rc = np.array([[self.coords(l, e) for e in range(self.per_lane)] for l in range(WARP)])
        return rc[..., 0], rc[..., 1]

    def owner(self, row: int, col: int) -> tuple[int, int]:
        """(lane, element) holding (row, col): the inverse map."""
        r, c = self.table()
        hit = np.argwhere((r == row) & (c == col))
        if len(hit) != 1:
            raise ValueError(f"{self.name}: ({row}, {col}) is not held by exactly one lane")
        return int(hit[0][0]), int(hit[0][1])


def _a(lane, e):
    g, t = lane // 4, lane % 4
    pair, half = e // 2, e % 2
    return g + 8 * (pair % 2), 2 * t + half + 8 * (pair // 2)


def _b(lane, e):
    g, t = lane // 4, lane % 4
    pair, half = e // 2, e % 2
    return 2 * t + half + 8 * pair, g


def _c(lane, e):
    g, t = lane // 4, lane % 4
    return g + 8 * (e // 2), 2 * t + e % 2


_COORDS = {"mma_m16n8k16.a": _a, "mma_m16n8k16.b": _b, "mma_m16n8k16.c": _c}
MMA_A = FragmentLayout("mma_m16n8k16.a", 16, 16, 8)
MMA_B = FragmentLayout("mma_m16n8k16.b", 16, 8, 4)
MMA_C = FragmentLayout("mma_m16n8k16.c", 16, 8, 4)


def ldmatrix_source(lane: int, e: int, trans: bool) -> tuple[int, int]:
    """For ldmatrix: element `e` of `lane`'s result comes from (the lane that
    gave the row address, the column within that 8-element row)."""
    q, half = e // 2, e % 2
    if not trans:
        return 8 * q + lane // 4, 2 * (lane % 4) + half
    return 8 * q + 2 * (lane % 4) + half, lane // 4


def ldmatrix_a_rows(lane: int) -> tuple[int, int]:
    """The (row, col) of a 16 x 16 tile whose address lane `lane` gives to
    `ldmatrix.x4` so that the result is an mma A fragment (MMA_A): lanes 0-15
    rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8."""
    return lane % 16, 8 * (lane // 16)


def ldmatrix_b_rows(lane: int) -> tuple[int, int]:
    """The (k, n) of a 16 x 16 (k x n) tile whose address lane `lane` gives to
    `ldmatrix.x4.trans` so that the result is two mma B fragments (MMA_B) side
    by side: elements 0-3 for columns n 0-7, elements 4-7 for columns 8-15.
    Lanes 0-15: k rows 0-15 at column 0; lanes 16-31: rows 0-15 at column 8."""
    return lane % 16, 8 * (lane // 16)
