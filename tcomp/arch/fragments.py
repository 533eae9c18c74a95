"""Where tensor-core operands live, as layout objects (layout.py): the
register fragments of mma.sync m16n8k16 and wgmma m64nNk16/k32, the
distributions of ldmatrix, and the shared-memory swizzle atoms of TMA and
wgmma. Each is the one definition the lowering, the sim and the tests use
(tests/arch/test_ptx_tables.py ties each to the PTX ISA's tables).

Fragments map (thread, value) to (row, col). With g = lane / 4 and
t = lane % 4 (PTX's groupID and threadID_in_group):

  mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
  point type"):
    A (16 x 16, 16-bit): a0..a7 at (g + 8 ((i / 2) % 2), 2t + i % 2 + 8 (i / 4))
        lane (4, 8) : (E(0,2), E(1,0));  value (2, 2, 2) : (E(0,1), E(8,0), E(0,8))
    B (16 x 8, k x n):   b0..b3 at (2t + i % 2 + 8 (i / 2), g)
        lane (4, 8) : (E(2,0), E(0,1));  value (2, 2) : (E(1,0), E(8,0))
    C, D (16 x 8, 32-bit): c0..c3 at (g + 8 (i / 2), 2t + i % 2)
        lane (4, 8) : (E(0,2), E(1,0));  value (2, 2) : (E(0,1), E(8,0))

  wgmma m64nNk16 (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16",
  the figures for A in registers and for D):
  thread = lane + 32 w over the warpgroup's 4 warps; warp w owns rows
  16w .. 16w + 15, and within a warp the layout is mma.m16n8k16's:
    D (64 x N, 32-bit): the C layout repeated over the N / 8 column blocks,
        d_i at (16w + g + 8 ((i / 2) % 2), 8 (i / 4) + 2t + i % 2)
        thread (4, 8, 4) : (E(0,2), E(1,0), E(16,0));
        value (2, 2, N/8) : (E(0,1), E(8,0), E(0,8))      (CUTLASS CLayout_64xN)
    A (64 x 16, 16-bit, in registers): the m16n8k16 A layout, warp w at rows
        16w: thread (4, 8, 4) : (E(0,2), E(1,0), E(16,0)); value as A's
    A (64 x 32, 8-bit e4m3/e5m2, m64nNk32): a_i at
        (16w + g + 8 ((i / 4) % 2), 4t + i % 4 + 16 (i / 8))
        thread (4, 8, 4) : (E(0,4), E(1,0), E(16,0));
        value (4, 2, 2) : (E(0,1), E(8,0), E(0,16))        (CUTLASS ALayout_64x32)
  (for fp8 the D layout is the same as for 16-bit inputs.)

  ldmatrix .x1/.x2/.x4 (PTX ISA, "ldmatrix"): lanes 8q .. 8q + 7
  give the row addresses of matrix q; lane l receives from matrix q the pair
  (row l / 4, columns 2 (l % 4) + {0, 1}) into values 2q, 2q + 1, or with
  .trans the pair (rows 2 (l % 4) + {0, 1}, column l / 4). As a fragment of
  the stacked matrices (row 8q + r, col c):
    LDMATRIX_X4       lane (4, 8) : (E(0,2), E(1,0)); value (2, 4) : (E(0,1), E(8,0))
    LDMATRIX_X4_TRANS lane (4, 8) : (E(2,0), E(0,1)); value (2, 4) : (E(1,0), E(8,0))
  Row addresses that make ldmatrix.x4 deliver an A fragment of a 16 x 16
  tile: lane l gives row l % 16 at column 8 (l / 16), LDMATRIX_A_ROWS =
  (16, 2) : (E(1,0), E(0,8)); x4.trans for two B tiles side by side the same;
  x2.trans for one B tile: lanes 16-31 repeat 0-15, (16, 2) : (E(1,0), E(0,0)).

Swizzle atoms (byte offsets; CUTLASS's GMMA Layout_K_SW{32,64,128}_Atom, 8
rows of the span): Swizzle(1, 4, 3), (2, 4, 3), (3, 4, 3) over
Layout((8, span), (span, 1)); in elements of `itemsize` bytes the swizzle's
base drops by log2(itemsize) (bf16: Swizzle(3, 3, 3)). A swizzled tile starts
at a multiple of the swizzle's period (1024 bytes for 128B), which the PTX
ISA's matrix-descriptor section gives as the start of the repeating pattern.
"""
from __future__ import annotations

from .layout import E, ComposedLayout, Fragment, Layout, Swizzle

MMA_M16N8K16_A = Fragment("mma_m16n8k16.a", 16, 16, Layout(
    ((4, 8), (2, 2, 2)), ((E(0, 2), E(1, 0)), (E(0, 1), E(8, 0), E(0, 8)))))
MMA_M16N8K16_B = Fragment("mma_m16n8k16.b", 16, 8, Layout(
    ((4, 8), (2, 2)), ((E(2, 0), E(0, 1)), (E(1, 0), E(8, 0)))))
MMA_M16N8K16_C = Fragment("mma_m16n8k16.c", 16, 8, Layout(
    ((4, 8), (2, 2)), ((E(0, 2), E(1, 0)), (E(0, 1), E(8, 0)))))

LDMATRIX_X4 = Fragment("ldmatrix.x4", 32, 8, Layout(
    ((4, 8), (2, 4)), ((E(0, 2), E(1, 0)), (E(0, 1), E(8, 0)))))
LDMATRIX_X4_TRANS = Fragment("ldmatrix.x4.trans", 32, 8, Layout(
    ((4, 8), (2, 4)), ((E(2, 0), E(0, 1)), (E(1, 0), E(8, 0)))))
# lane -> (row, col) of the address each lane gives
LDMATRIX_A_ROWS = Layout((16, 2), (E(1, 0), E(0, 8)))  # x4 for A; x4.trans for two B tiles
LDMATRIX_B_ROWS = LDMATRIX_A_ROWS
LDMATRIX_X2_ROWS = Layout((16, 2), (E(1, 0), E(0, 0)))  # x2.trans for one B tile
# An operand stored in the other major order (A as (k, m), B as (n, k)): each lane's 8-element
# row runs along the fragment's rows, from the (row, col) below; lane l gives matrix l / 8 its
# row l % 8. x4.trans with these delivers an A fragment (matrices (m 0-7, k 0-7), (m 8-15,
# k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)); plain x4 two B fragments side by side (k 0-7 and
# 8-15 of columns n 0-7, then of n 8-15); plain x2 one B fragment (lanes 16-31 repeat 0-15).
LDMATRIX_T_ROWS = Layout((8, 2, 2), (E(0, 1), E(8, 0), E(0, 8)))
LDMATRIX_T_X2_ROWS = Layout((8, 2, 2), (E(0, 1), E(8, 0), E(0, 0)))


def ldmatrix_fragment(count: int, trans: bool) -> Fragment:
    """The distribution of ldmatrix.x{count}[.trans]: (lane, value) ->
    (8 q + row, col) of matrix q."""
    base = LDMATRIX_X4_TRANS if trans else LDMATRIX_X4
    t, v = base.layout.mode(0), base.layout.mode(1)
    return Fragment(f"ldmatrix.x{count}" + (".trans" if trans else ""), 8 * count, 8,
                    Layout((t.shape, (2, count)), (t.stride, v.stride)))


WGMMA_N = tuple(range(8, 257, 8))


def wgmma_d(n: int) -> Fragment:
    """The accumulator (D) of wgmma m64nNk16 / m64nNk32 with 32-bit D."""
    _check_n(n)
    return Fragment(f"wgmma_m64n{n}.d", 64, n, Layout(
        ((4, 8, 4), (2, 2, n // 8)),
        ((E(0, 2), E(1, 0), E(16, 0)), (E(0, 1), E(8, 0), E(0, 8)))))


WGMMA_A_K16 = Fragment("wgmma_m64k16.a", 64, 16, Layout(
    ((4, 8, 4), (2, 2, 2)), ((E(0, 2), E(1, 0), E(16, 0)), (E(0, 1), E(8, 0), E(0, 8)))))
WGMMA_A_K32 = Fragment("wgmma_m64k32.a", 64, 32, Layout(
    ((4, 8, 4), (4, 2, 2)), ((E(0, 4), E(1, 0), E(16, 0)), (E(0, 1), E(8, 0), E(0, 16)))))


def _check_n(n: int) -> None:
    if n not in WGMMA_N:
        raise ValueError(f"wgmma has N in 8..256 in steps of 8, not {n}")


# ------------------------------------------------------------------ shared memory
SWIZZLE_BYTES = {32: Swizzle(1, 4, 3), 64: Swizzle(2, 4, 3), 128: Swizzle(3, 4, 3)}
# the wgmma matrix descriptor's "swizzle mode" field (bits 62-63) per span (PTX ISA
# "Matrix Descriptor Format" of wgmma); 0 is no swizzle
WGMMA_SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}


def swizzle_atom(span: int, itemsize: int) -> ComposedLayout:
    """The K-major swizzle atom of `span` bytes (32, 64, 128) in elements of
    `itemsize` bytes: 8 rows of span / itemsize elements, (row, col) ->
    swizzled element offset."""
    if span not in SWIZZLE_BYTES:
        raise ValueError(f"a swizzle spans 32, 64 or 128 bytes, not {span}")
    w = span // itemsize
    return Layout((8, w), (w, 1)).with_swizzle(SWIZZLE_BYTES[span].in_units(itemsize))


def row_swizzle(row_bytes: int, span: int = 128) -> Swizzle | None:
    """The swizzle, on byte offsets, that `ir.Swizzle(span)` applies to a
    buffer with rows of `row_bytes` (lower/ir.py: chunk c of row r at
    c ^ ((r / g) % n), n = min(R, span) / 16, g = max(1, 128 / R)), when the
    rows are a power of two bytes: Swizzle(log2 n, 4, log2(g R) - 4). For
    R = span = 128 that is Swizzle(3, 4, 3), for R = span = 64 Swizzle(2, 4, 3),
    for 32 Swizzle(1, 4, 3); None when R is not a power of two (the row index
    is then not a bit field of the offset)."""
    if row_bytes < 32 or row_bytes & (row_bytes - 1):
        return None
    n = min(row_bytes, span) // 16
    g = max(1, 128 // row_bytes)
    return Swizzle(n.bit_length() - 1, 4, (g * row_bytes).bit_length() - 1 - 4)
