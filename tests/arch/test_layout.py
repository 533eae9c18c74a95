"""Layouts as data (tcomp/arch/layout.py): evaluation on ints, NumPy arrays,
sympy symbols and any values given an ops object; the algebra (coalesce,
inverse, swizzle composition, vectors of a fragment); and the IR the lowering
builds with it (lower/warp_layouts.IR_OPS), which must be the expressions
tensor_cores has always produced (the generated CUDA is unchanged) and must
agree with the numbers."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

from tcomp.arch import fragments as F
from tcomp.arch.layout import E, ComposedLayout, Fragment, Layout, Swizzle
from tcomp.lower import ir, printer
from tcomp.lower.warp_layouts import IR_OPS, MMA_A, MMA_B, MMA_C, MMA_C_PAIRS

from ..lower.bank_conflicts import value


# ------------------------------------------------------------------ evaluation
def test_offsets_colexicographic_like_cute():
    col_major = Layout((4, 8), (1, 4))
    row_major = Layout((4, 8), (8, 1))
    assert [col_major(i) for i in range(6)] == [0, 1, 2, 3, 4, 5]
    assert [row_major(i) for i in range(6)] == [0, 8, 16, 24, 1, 9]  # mode 0 fastest
    assert row_major(2, 3) == 19
    nested = Layout(((2, 2), 8), ((1, 16), 2))
    assert nested((1, 1), 3) == 1 + 16 + 6 and nested(3, 3) == 1 + 16 + 6
    assert nested.size == 32 and nested.rank == 2 and str(nested) == "((2,2),8):((1,16),2)"


def test_the_last_leaf_is_not_wrapped():
    """An index past the size extends the outermost leaf (no modulo there)."""
    assert Layout((4, 8), (1, 4))(40) == 40
    assert Layout((4, 8), (8, 1))(40) == 10  # (0, 10)


def test_vector_strides_give_coordinates():
    lay = Layout((4, 8), (E(0, 2), E(1, 0)))
    assert lay(5) == (1, 2) and lay.dims == 2
    assert lay.table()[5].tolist() == [1, 2]


def test_numpy_tables_at_once():
    lane = np.arange(32)[:, None]
    e = np.arange(8)[None, :]
    r, c = MMA_A.coords(lane, e)
    rr, cc = MMA_A.table()
    assert (np.broadcast_to(r, (32, 8)) == rr).all() and (np.broadcast_to(c, (32, 8)) == cc).all()
    assert Layout((4, 8), (8, 1)).table().tolist() == [Layout((4, 8), (8, 1))(i) for i in range(32)]


def test_sympy_symbols():
    lane, e = sympy.symbols("lane e", integer=True, nonnegative=True)
    row, col = MMA_C.coords(lane, e)
    assert row == sympy.floor(lane / 4) + 8 * sympy.floor(e / 2)
    assert col == 2 * sympy.Mod(lane, 4) + sympy.Mod(e, 2)
    for ln in range(32):
        for v in range(4):
            assert (row.subs({lane: ln, e: v}), col.subs({lane: ln, e: v})) == MMA_C.coords(ln, v)


class Text:
    """An ops object that builds strings: evaluation is generic."""

    def const(self, v):
        return str(v)

    def add(self, a, b):
        return f"({a} + {b})"

    def mul(self, a, k):
        return f"{a}*{k}"

    def floordiv(self, a, k):
        return f"{a}/{k}"

    def mod(self, a, k):
        return f"{a}%{k}"

    def and_(self, a, k):
        return f"({a} & {k})"

    def shr(self, a, k):
        return f"{a} >> {k}"

    def xor(self, a, b):
        return f"({a} ^ {b})"


def test_generic_ops_form_only_needed_terms():
    """No stride-0 or size-1 terms, no `* 1`, no `/ 1`, no modulo of the last leaf."""
    assert MMA_A.coords("l", "e", ops=Text()) == ("(l/4 + e/2%2*8)", "((l%4*2 + e%2) + e/4*8)")
    assert Layout((1, 4), (7, 3))("i", ops=Text()) == "i*3"
    assert Layout((16, 2), (E(1, 0), E(0, 0)))("l", ops=Text()) == ("l%16", "0")
    assert Layout(8, 2).with_swizzle(Swizzle(1, 1, 2))("i", ops=Text()) == \
        "(i*2 ^ (i*2 & 8) >> 2)"


# ------------------------------------------------------------------ algebra
def test_coalesce_merges_continuing_leaves():
    assert Layout((2, (1, 4)), (1, (9, 2))).coalesce() == Layout(8, 1)
    assert Layout((4, 8), (8, 1)).coalesce() == Layout((4, 8), (8, 1))
    assert Layout((2, 2, 2), (E(0, 1), E(0, 2), E(8, 0))).coalesce() == \
        Layout((4, 2), (E(0, 1), E(8, 0)))
    assert Layout((1, 1), (3, 5)).coalesce() == Layout(1, 0)
    for lay in (Layout(((2, 2), 8), ((1, 16), 2)), MMA_A.layout):
        assert (lay.coalesce().table() == lay.table()).all()


def test_inverse_and_owner():
    lay = Layout((4, 8), (8, 1))
    inv = lay.inverse()
    assert all(lay(i) == v for v, i in inv.items()) and len(inv) == 32
    with pytest.raises(ValueError, match="not injective"):
        Layout((2, 2), (1, 1)).inverse()
    for lane in range(32):
        for e in range(8):
            assert MMA_A.owner(*MMA_A.coords(lane, e)) == (lane, e)
    with pytest.raises(ValueError, match="not held by exactly one lane"):
        MMA_C.owner(16, 0)


def test_composed_swizzle():
    sw = Swizzle(3, 4, 3)
    comp = ComposedLayout(sw, Layout((8, 128), (128, 1)))
    assert comp(3, 16) == sw(3 * 128 + 16) == 3 * 128 + 16 * (1 ^ 3)
    assert sorted(comp.table().tolist()) == list(range(1024))  # a permutation of the atom
    assert Swizzle(3, 4, 3).in_units(2) == Swizzle(3, 3, 3)
    with pytest.raises(ValueError, match="cannot count offsets in units of 32 bytes"):
        Swizzle(3, 4, 3).in_units(32)
    with pytest.raises(ValueError, match="a swizzle applies to offsets"):
        ComposedLayout(sw, Layout(4, E(1, 0)))
    assert Swizzle(0, 4, 3)(77) == 77 and Swizzle(2, 0, -2)(0b0011) == 0b1111


def test_fragment_vectors():
    """The accumulator in pairs of adjacent columns: (lane, h) -> (row, pair)."""
    pairs = MMA_C.vectors(2)
    assert (pairs.rows, pairs.cols, pairs.per_thread) == (16, 4, 2) and pairs.is_bijective()
    for lane in range(32):
        for h in range(2):
            r, p = pairs.coords(lane, h)
            assert MMA_C.coords(lane, 2 * h) == (r, 2 * p)
            assert MMA_C.coords(lane, 2 * h + 1) == (r, 2 * p + 1)
    with pytest.raises(ValueError, match="runs of 2 adjacent columns"):
        MMA_B.vectors(2)


def test_malformed_layouts():
    with pytest.raises(ValueError, match="nesting"):
        Layout((4, 8), 1)
    with pytest.raises(ValueError, match="positive ints"):
        Layout(0, 1)
    with pytest.raises(ValueError, match="mix ints and E"):
        Layout((2, 2), (1, E(0, 1)))
    with pytest.raises(ValueError, match="two modes"):
        Fragment("x", 4, 4, Layout(16, E(1, 0)))
    with pytest.raises(ValueError, match="takes 2 coordinates"):
        Layout((2, 2), (1, 2))(0, 1, 2)
    with pytest.raises(ValueError, match="B >= 0"):
        Swizzle(3, 4, 2)


# ------------------------------------------------------------------ Kernel IR
LANE = ir.Var("threadIdx.x")
E_ = ir.Var("e")


def test_ir_expressions_are_the_ones_tensor_cores_always_built():
    """(the forms of the former tensor_cores._coords_a/_b/_c: the generated
    CUDA of every tensor-core kernel stays byte-identical)"""
    def text(pair):
        return tuple(printer.expr(x) for x in pair)
    assert text(MMA_A.coords(LANE, E_, ops=IR_OPS)) == (
        "threadIdx.x / 4 + e / 2 % 2 * 8", "threadIdx.x % 4 * 2 + e % 2 + e / 4 * 8")
    assert text(MMA_B.coords(LANE, E_, ops=IR_OPS)) == (
        "threadIdx.x % 4 * 2 + e % 2 + e / 2 * 8", "threadIdx.x / 4")
    assert text(MMA_C.coords(LANE, E_, ops=IR_OPS)) == (
        "threadIdx.x / 4 + e / 2 * 8", "threadIdx.x % 4 * 2 + e % 2")
    assert text(F.LDMATRIX_A_ROWS(LANE, ops=IR_OPS)) == ("threadIdx.x % 16",
                                                          "threadIdx.x / 16 * 8")
    assert text(F.LDMATRIX_X2_ROWS(LANE, ops=IR_OPS)) == ("threadIdx.x % 16", "0")
    assert text(MMA_C_PAIRS.coords(LANE, E_, ops=IR_OPS)) == ("threadIdx.x / 4 + e * 8",
                                                              "threadIdx.x % 4")


@pytest.mark.parametrize("frag", [MMA_A, MMA_B, MMA_C, MMA_C_PAIRS, F.wgmma_d(64),
                                  F.WGMMA_A_K16, F.WGMMA_A_K32, F.LDMATRIX_X4_TRANS],
                         ids=lambda f: f.name)
def test_ir_and_numbers_agree(frag):
    row, col = frag.coords(LANE, E_, ops=IR_OPS)
    r, c = frag.table()
    for t in range(frag.threads):
        for v in range(frag.per_thread):
            env = {"threadIdx.x": t, "e": v}
            assert (value(row, env), value(col, env)) == (r[t, v], c[t, v])


def test_ir_swizzle_expression_agrees():
    atom = F.swizzle_atom(128, 2)
    x = atom(ir.Var("r"), ir.Var("j"), ops=IR_OPS)
    for r in range(8):
        for j in range(64):
            assert value(x, {"r": r, "j": j}) == atom(r, j)
