"""Every layout object of tcomp/arch/fragments.py against the tables of the
documents that define it, written out here independently, in the documents'
own form (element by element, as the PTX ISA states them):

* PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"
  (A, B, C/D of .bf16/.f16 -> .f32);
* PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16" (and m64nNk32 for
  .e4m3/.e5m2): the figures for A in registers and for the accumulator D:
  warp w of the warpgroup holds rows 16w .. 16w + 15, laid out within the
  warp as mma.m16n8k16's A, respectively C repeated over the N/8 column
  blocks; the fragment sizes of the ISA's tables (A: four .b32 registers,
  D: N/2 .f32 registers);
* PTX ISA, "ldmatrix": lanes 8q .. 8q + 7 give matrix q's row addresses;
  each thread receives a pair of a row (or, with .trans, of a column);
* CUTLASS include/cute/swizzle.hpp, Swizzle<B, M, S>:
  offset ^ ((offset & (((1 << B) - 1) << (M + S))) >> S), and the PTX ISA's
  statement of the 32/64/128-byte swizzles (16-byte chunks XORed within a
  row; the pattern repeats every 256/512/1024 bytes);
* and the swizzle that lower/flatten.py applies for `ir.Swizzle`, from the
  offsets it actually computes.
"""
from __future__ import annotations

import pytest

from tcomp.arch import fragments as F
from tcomp.arch.layout import Swizzle
from tcomp.lang import dtypes

from ..lower.test_swizzle import swizzled_offsets


def group(lane):
    return lane >> 2, lane % 4  # groupID, threadID_in_group


# ------------------------------------------------------------------ mma.m16n8k16
def ptx_mma_a(lane, i):
    g, t = group(lane)
    row = g if i in (0, 1, 4, 5) else g + 8
    col = t * 2 + (i & 0x1) if i < 4 else t * 2 + (i & 0x1) + 8
    return row, col


def ptx_mma_b(lane, i):
    g, t = group(lane)
    row = t * 2 + (i & 0x1) if i < 2 else t * 2 + (i & 0x1) + 8
    return row, g


def ptx_mma_c(lane, i):
    g, t = group(lane)
    row = g if i < 2 else g + 8
    return row, t * 2 + (i & 0x1)


def same(fragment, table, threads, values):
    assert (fragment.threads, fragment.per_thread) == (threads, values)
    for th in range(threads):
        for v in range(values):
            assert tuple(int(x) for x in fragment.coords(th, v)) == table(th, v), (th, v)
    assert fragment.is_bijective()


def test_mma_m16n8k16_fragments_are_the_ptx_tables():
    same(F.MMA_M16N8K16_A, ptx_mma_a, 32, 8)
    same(F.MMA_M16N8K16_B, ptx_mma_b, 32, 4)
    same(F.MMA_M16N8K16_C, ptx_mma_c, 32, 4)


# ------------------------------------------------------------------ wgmma
def ptx_wgmma_d(n):
    def at(thread, i):
        warp, lane = divmod(thread, 32)
        g, t = group(lane)
        row = 16 * warp + (g if i % 4 < 2 else g + 8)
        col = (i // 4) * 8 + t * 2 + (i & 0x1)
        return row, col
    return at


def ptx_wgmma_a_k16(thread, i):
    warp, lane = divmod(thread, 32)
    r, c = ptx_mma_a(lane, i)
    return 16 * warp + r, c


def ptx_wgmma_a_k32(thread, i):
    """8-bit A (as mma.m16n8k32's .e4m3 A, per warp): a0..a15, four per .b32."""
    warp, lane = divmod(thread, 32)
    g, t = group(lane)
    row = g if (i < 4 or 8 <= i < 12) else g + 8
    col = t * 4 + (i & 0x3) if i < 8 else t * 4 + (i & 0x3) + 16
    return 16 * warp + row, col


@pytest.mark.parametrize("n", [8, 16, 64, 128, 136, 256])
def test_wgmma_accumulator_is_the_ptx_figure(n):
    same(F.wgmma_d(n), ptx_wgmma_d(n), 128, n // 2)  # N/2 .f32 registers per thread


def test_wgmma_a_in_registers_is_the_ptx_figure():
    same(F.WGMMA_A_K16, ptx_wgmma_a_k16, 128, 8)  # four .f16x2 registers
    same(F.WGMMA_A_K32, ptx_wgmma_a_k32, 128, 16)  # four .b32 of four e4m3 each


def test_wgmma_has_every_n_of_the_isa():
    assert F.WGMMA_N == tuple(8 * i for i in range(1, 33))
    with pytest.raises(ValueError, match="N in 8..256"):
        F.wgmma_d(12)


# ------------------------------------------------------------------ ldmatrix
def ptx_ldmatrix(trans):
    """(the lane that gave the row address, the column within that row)."""
    def at(lane, i):
        q, half = divmod(i, 2)  # matrix q's pair lands in registers 2q, 2q + 1
        if not trans:
            return 8 * q + lane // 4, 2 * (lane % 4) + half
        return 8 * q + 2 * (lane % 4) + half, lane // 4
    return at


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_distribution_is_the_ptx_one(count, trans):
    same(F.ldmatrix_fragment(count, trans), ptx_ldmatrix(trans), 32, 2 * count)


def test_ldmatrix_row_addresses_give_the_mma_fragments():
    """With LDMATRIX_A_ROWS, ldmatrix.x4 delivers the A fragment; with the same
    rows, .x4.trans delivers two B fragments side by side; with
    LDMATRIX_X2_ROWS, .x2.trans one B fragment."""
    for lane in range(32):
        for i in range(8):
            src, col = ptx_ldmatrix(False)(lane, i)
            r0, c0 = (int(x) for x in F.LDMATRIX_A_ROWS(src))
            assert (r0, c0 + col) == ptx_mma_a(lane, i)
            src, col = ptx_ldmatrix(True)(lane, i)
            k0, n0 = (int(x) for x in F.LDMATRIX_B_ROWS(src))
            k, n = ptx_mma_b(lane, i % 4)
            assert (k0 + col * 0, n0 + col) == (k0, n + 8 * (i // 4)) and k0 == k
        for i in range(4):
            src, col = ptx_ldmatrix(True)(lane, i)
            k0, n0 = (int(x) for x in F.LDMATRIX_X2_ROWS(src))
            assert (k0, n0 + col) == ptx_mma_b(lane, i)


def test_ldmatrix_row_addresses_of_the_other_major_order():
    """An operand stored in the other major order (A as (k, m), B as (n, k)):
    each lane's 8-element row runs along the fragment's rows. With
    LDMATRIX_T_ROWS, ldmatrix.x4.trans delivers the A fragment and plain .x4
    two B fragments side by side; with LDMATRIX_T_X2_ROWS, plain .x2 one B
    fragment."""
    for lane in range(32):
        for i in range(8):
            src, col = ptx_ldmatrix(True)(lane, i)
            r0, c0 = (int(x) for x in F.LDMATRIX_T_ROWS(src))
            assert (r0 + col, c0) == ptx_mma_a(lane, i)
            src, col = ptx_ldmatrix(False)(lane, i)
            k0, n0 = (int(x) for x in F.LDMATRIX_T_ROWS(src))
            k, n = ptx_mma_b(lane, i % 4)
            assert (k0 + col, n0) == (k, n + 8 * (i // 4))
        for i in range(4):
            src, col = ptx_ldmatrix(False)(lane, i)
            k0, n0 = (int(x) for x in F.LDMATRIX_T_X2_ROWS(src))
            assert (k0 + col, n0) == ptx_mma_b(lane, i)


# ------------------------------------------------------------------ swizzles
def cutlass_swizzle(b, m, s):
    def apply(offset):
        return offset ^ ((offset & (((1 << b) - 1) << (m + s))) >> s)
    return apply


@pytest.mark.parametrize("b,m,s", [(1, 4, 3), (2, 4, 3), (3, 4, 3), (3, 3, 3), (2, 1, 5),
                                   (0, 4, 3), (3, 4, 4)])
def test_swizzle_is_cutlass_formula(b, m, s):
    sw, ref = Swizzle(b, m, s), cutlass_swizzle(b, m, s)
    for o in range(1 << 12):
        assert sw(o) == ref(o)


@pytest.mark.parametrize("span", [32, 64, 128])
def test_byte_swizzles_are_the_ptx_ones(span):
    """A row of `span` bytes: 16-byte chunk c of row r lands at chunk
    c ^ ((r / (128 / span)) % (span / 16)) of the same row (the row bits of the
    128-byte line above it); the pattern repeats every 256, 512, 1024 bytes."""
    sw = F.SWIZZLE_BYTES[span]
    chunks, rows_per_line = span // 16, 128 // span
    assert sw.period == {32: 256, 64: 512, 128: 1024}[span]
    for r in range(32):
        for c in range(chunks):
            for b in range(16):
                want = r * span + 16 * (c ^ ((r // rows_per_line) % chunks)) + b
                assert sw(r * span + 16 * c + b) == want


def test_128_byte_swizzle_atom_in_bf16_elements():
    """CUTLASS Layout_K_SW128_Atom<bf16>: Sw<3,3,3> o (8,64):(64,1)."""
    atom = F.swizzle_atom(128, 2)
    assert str(atom) == "Sw<3,3,3> o (8,64):(64,1)"
    for r in range(8):
        for j in range(64):
            assert atom(r, j) == r * 64 + ((j // 8) ^ r) * 8 + j % 8


@pytest.mark.parametrize("shape,dt,span", [
    ((16, 64), "bfloat16", 128), ((16, 32), "bfloat16", 64), ((16, 16), "bfloat16", 32),
    ((8, 32), "float32", 128), ((8, 16), "float32", 64), ((3, 8, 128), "bfloat16", 128),
    ((16, 128), "float16", 64)])
def test_ir_swizzle_is_the_layout_swizzle(shape, dt, span):
    """What flattening applies for ir.Swizzle(span) is fragments.row_swizzle's
    CuTe swizzle of the row-major byte offset."""
    dtype = dtypes.BY_NAME[dt]
    item = dtype.numpy.itemsize
    row_bytes = shape[-1] * item
    sw = F.row_swizzle(row_bytes, span)
    for idx, off in swizzled_offsets(shape, dtype, span).items():
        flat = 0
        for i, n in zip(idx, shape):
            flat = flat * n + i
        assert off * item == sw(flat * item), idx


def test_row_swizzle_without_a_bit_field():
    assert F.row_swizzle(384) is None and F.row_swizzle(16) is None
    assert F.row_swizzle(128) == Swizzle(3, 4, 3) and F.row_swizzle(256) == Swizzle(3, 4, 4)


def test_wgmma_descriptor_swizzle_modes():
    """(the matrix descriptor's bits 62-63: 1 = 128B, 2 = 64B, 3 = 32B)"""
    assert F.WGMMA_SWIZZLE_MODE == {128: 1, 64: 2, 32: 3}


@pytest.mark.parametrize("n", [64, 128, 256])
def test_a_16_column_slice_of_the_accumulators_is_the_register_a_fragment(n):
    """Attention's P . V takes P = softmax(S) from S's accumulators without
    moving data: registers 8 kk .. 8 kk + 7 of wgmma_d(n) hold columns 16 kk ..
    16 kk + 15 in the layout of WGMMA_A_K16 (lower/hopper_attention.py)."""
    dr, dc = F.wgmma_d(n).table()
    ar, ac = F.WGMMA_A_K16.table()
    for kk in range(n // 16):
        assert (dr[:, 8 * kk:8 * kk + 8] == ar).all()
        assert (dc[:, 8 * kk:8 * kk + 8] - 16 * kk == ac).all()
