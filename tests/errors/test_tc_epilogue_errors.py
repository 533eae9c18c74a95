"""Every error of paired accumulator stores (a vectorized loop over a
tensor-core fragment) and of multi-buffered fragments (`pipeline` on the loop
fragments are computed at): the message text and the exception type."""
from __future__ import annotations

import dataclasses

import pytest

import tcomp
from tcomp.lower import ir, tensor_cores
from tcomp.lower.pipeline import lower as lower_until
from tcomp.lower.rewriter import Rewriter

from ..bench.common import S
from .test_schedule_errors import lowering_error

SIZES = {"M": 64, "N": 64, "K": 32}
SMALL = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)


def _lower(s):
    return lambda: tcomp.lower(s, sizes=SIZES)


def test_pairs_have_two_lanes():
    s = S.tc_gemm(**SMALL)[1]
    C = s["C"]
    _, v = C.split(C.leaf_axes[-1], 4)
    C.vectorize(v)
    lowering_error(_lower(s), "fragment 'C_fragment': vectorized loop 'n_i_i_i' has 4 lanes; "
                   "each lane of the m16n8k16 accumulator holds pairs of 2 adjacent columns, "
                   "so a vectorized loop over it needs 2 (split the column loop by 2 and "
                   "vectorize the inner one)")


def test_pairs_run_along_columns():
    s = S.tc_gemm(**SMALL)[1]
    C = s["C"]
    mf, nf = C.leaf_axes[-2:]
    C.reorder(nf, mf)
    _, v = C.split(mf, 2)
    C.vectorize(v)
    lowering_error(_lower(s), "fragment 'C_fragment': vectorized loop 'm_i_i_i': access "
                   "C_fragment[m_i_i_o * 2 + m_i_i_i, n_i_i] does not pair the accumulator's "
                   "columns; vectorize the inner half of its column loop split by 2, inside "
                   "the row loop (C_fragment[n_i_i + r, 2 * m_i_i_o + m_i_i_i + s])")


def test_pairs_start_tiles():
    """Columns split by 4 then 2, the 4-column groups outside the rows: the
    pairs of a row loop start every 4 columns, not at whole 16 x 8 tiles."""
    s = S.tc_gemm(**SMALL)[1]
    C = s["C"]
    mf, nf = C.leaf_axes[-2:]
    no, ni = C.split(nf, 4)
    nio, niv = C.split(ni, 2)
    C.reorder(no, mf, nio, niv)
    C.vectorize(niv)
    lowering_error(_lower(s), "fragment 'C_fragment': element access C_fragment[m_i_i, "
                   "n_i_i_o * 4 + n_i_i_i_o * 2 + n_i_i_i_i] does not start a 16 x 8 tile; "
                   "loop over whole tiles of the fragment")


def test_pairs_cover_whole_tiles():
    """A pairs nest whose row loop covers half a tile (IR a schedule cannot
    produce: its splits cover the fragment) is refused, not half stored."""
    s = S.tc_gemm(**SMALL, pair_stores=True)[1]
    prog = lower_until(s, sizes=SIZES, until="tensor_cores")
    (k,) = prog.kernels

    class HalfRows(Rewriter):
        def stmt_For(self, x):
            x = self.generic_stmt(x)
            if isinstance(x.body, ir.For) and isinstance(x.body.body, ir.For) and \
                    x.body.body.kind == "vectorize":
                return dataclasses.replace(x, extent=ir.const(8))
            return x
    k = dataclasses.replace(k, body=HalfRows().stmt(k.body))
    lowering_error(lambda: tensor_cores.run(k, prog), "fragment 'C_fragment': loops 'm_i_i' (8) "
                   "and 'n_i_i_o' (16 pairs) do not cover whole 16 x 8 tiles of it")


def test_operand_fragments_are_not_vectorized():
    s = S.tc_gemm(**SMALL)[1]
    A = s["A_shared.fragment"]
    _, v = A.split(A.axes[1], 2)
    A.vectorize(v)
    lowering_error(_lower(s), "fragment 'A_shared_fragment': vectorized loop 'ax1_i' runs over "
                   "the elements of an mma operand A; only the accumulator (C) is read in "
                   "vectors (pairs of columns): do not vectorize loops over 'A_shared_fragment'")


def test_fragment_pipeline_with_a_shared_copy_at_the_loop():
    s = S.tc_gemm(**SMALL)[1]
    CF = s["C.fragment"]
    kio = CF.leaf_axes[1]
    s["A.shared"].compute_at(CF, kio)
    CF.pipeline(kio)
    lowering_error(_lower(s), "stage 'C.fragment': pipeline on 'k_i_o' multi-buffers the "
                   "fragments computed there ('A_shared.fragment'), but 'A.shared' (shared) is "
                   "also computed there; compute it at another loop")


@pytest.mark.parametrize("stages", [2, 3])
def test_pipeline_with_nothing_at_the_loop_names_both_uses(stages):
    """The k16 loop of a schedule whose fragments are computed elsewhere (at
    the K-tile loop): nothing to run ahead there."""
    s = S.tc_gemm(**dict(SMALL, pipeline=False))[1]
    CF = s["C.fragment"]
    ko, kio = CF.leaf_axes[:2]
    s["A_shared.fragment"].compute_at(CF, ko)
    s["B_shared.fragment"].compute_at(CF, ko)
    CF.pipeline(kio, stages=stages)
    lowering_error(_lower(s), "stage 'C.fragment': pipeline on 'k_i_o', but no shared-memory "
                   "copy is computed at that loop (pipeline runs the shared copies, or the "
                   "fragment loads of tensor-core operands, computed at a loop ahead of its "
                   "compute)")
