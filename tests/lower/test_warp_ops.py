"""The sim's meaning of ldmatrix and mma.sync m16n8k16 (target_sim/warp_ops.py),
on hand-built Kernel IR (warp_kernels.py), checked against NumPy; the layouts
(lower/warp_layouts.py) checked against the PTX ISA's definitions; and the
errors a wrong use of them gets."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.lower.rewriter import Rewriter
from tcomp.lower.warp_layouts import (MMA_A, MMA_B, MMA_C, ldmatrix_a_rows, ldmatrix_b_rows,
                                      ldmatrix_source)
from tcomp.target_sim.executor import run_program

from .warp_kernels import one_tile


def _run(prog, a, b):
    out = np.zeros(prog.buffer("C").shape[0].value, np.float32)
    run_program(prog, {"A": a, "B": b, "C": out}, {})
    return out


def _data(dtype, warps=1, seed=0):
    rng = np.random.default_rng(seed)
    np_dt = dtype.numpy
    a = rng.standard_normal(16 * warps * 16).astype(np_dt)
    b = rng.standard_normal(256).astype(np_dt)
    return a, b


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
@pytest.mark.parametrize("warps", [1, 2])
def test_mma_tile_matches_numpy(dtype, warps):
    a, b = _data(dtype, warps)
    got = _run(one_tile(dtype, warps), a, b).reshape(16 * warps, 16)
    want = a.astype(np.float64).reshape(16 * warps, 16) @ b.astype(np.float64).reshape(16, 16)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_padded_shared_rows_and_untransposed_b():
    """Row pitch 24 (padding) for A, B given n x k and loaded without .trans."""
    dt = dtypes.bfloat16
    a, b = _data(dt)
    got = _run(one_tile(dt, a_row=24, b_row=24, trans_b=False), a, b).reshape(16, 16)
    bt = b.astype(np.float64).reshape(16, 16)  # n x k
    np.testing.assert_allclose(got, a.astype(np.float64).reshape(16, 16) @ bt.T, rtol=1e-6,
                               atol=1e-6)


def test_layouts_are_the_ptx_ones():
    # every (row, col) held exactly once
    for lay in (MMA_A, MMA_B, MMA_C):
        r, col = lay.table()
        assert len({(x, y) for x, y in zip(r.ravel(), col.ravel())}) == lay.rows * lay.cols
    # spot values from the PTX ISA's figures: lane 5 is group 1, thread 1
    assert MMA_A.coords(5, 0) == (1, 2) and MMA_A.coords(5, 3) == (9, 3)
    assert MMA_A.coords(5, 4) == (1, 10) and MMA_A.coords(5, 7) == (9, 11)
    assert MMA_B.coords(5, 0) == (2, 1) and MMA_B.coords(5, 3) == (11, 1)
    assert MMA_C.coords(5, 2) == (9, 2) and MMA_C.owner(9, 2) == (5, 2)


def test_ldmatrix_x4_gives_the_mma_fragments():
    """The row addresses of ldmatrix_a_rows/_b_rows make ldmatrix.x4 (.trans)
    deliver exactly the mma A fragment and two B fragments."""
    for lane in range(32):
        for e in range(8):
            src, col = ldmatrix_source(lane, e, False)
            r0, c0 = ldmatrix_a_rows(src)
            assert (r0, c0 + col) == MMA_A.coords(lane, e)
            src, col = ldmatrix_source(lane, e, True)
            k0, n0 = ldmatrix_b_rows(src)
            # elements 0-3: columns 0-7; 4-7: columns 8-15
            k, n = MMA_B.coords(lane, e % 4)
            assert (k0 + col * 0 + (src % 16) * 0, n0 + col) == (k0, n + 8 * (e // 4))
            assert k0 == k


class _Drop(Rewriter):
    def __init__(self, what):
        self.what = what

    def stmt_Barrier(self, s):
        return ir.Seq(()) if self.what == "barrier" else s

    def stmt_For(self, s):
        if self.what == "zero" and s.var == "r" and isinstance(s.body, ir.Store) and \
                s.body.buffer == "CF":
            return ir.Seq(())
        return self.generic_stmt(s)


def _kernel_body(prog, fn):
    k = prog.kernels[0]
    return dataclasses.replace(prog, kernels=(dataclasses.replace(k, body=fn(k.body)),))


def test_missing_barrier_before_ldmatrix_is_a_race():
    prog = _kernel_body(one_tile(warps=2), _Drop("barrier").stmt)
    a, b = _data(dtypes.bfloat16, 2)
    with pytest.raises(tcomp.SimError, match="reads shared AS.* written by thread .* since the "
                                             "last barrier"):
        _run(prog, a, b)


def test_mma_reading_an_unwritten_accumulator():
    prog = _kernel_body(one_tile(), _Drop("zero").stmt)
    a, b = _data(dtypes.bfloat16)
    with pytest.raises(tcomp.SimError, match=r"mma_m16n8k16 reads fragment CF\[0:4\] before "
                                             r"every lane wrote it"):
        _run(prog, a, b)


def test_warp_op_under_a_lane_dependent_branch():
    def guard(body):  # everything after the barrier under `if threadIdx.x < 16`
        if isinstance(body, ir.Alloc):
            return dataclasses.replace(body, body=guard(body.body))
        cut = next(i for i, x in enumerate(body.stmts) if isinstance(x, ir.Barrier)) + 1
        cond = ir.Bin("<", ir.Var("threadIdx.x"), ir.const(16), dtypes.bool_)
        return ir.seq(*body.stmts[:cut], ir.If(cond, ir.seq(*body.stmts[cut:])))
    prog = _kernel_body(one_tile(), guard)
    a, b = _data(dtypes.bfloat16)
    with pytest.raises(tcomp.SimError, match="warp-collective .* reached by only 16 of the 32 "
                                             "lanes of warp 0"):
        _run(prog, a, b)


def test_misaligned_ldmatrix_row():
    """Row pitch 20 elements (40 bytes): rows 1, 2, ... are not 16-byte aligned."""
    prog = one_tile(a_row=20)
    a, b = _data(dtypes.bfloat16)
    with pytest.raises(tcomp.SimError, match=r"ldmatrix_x4 row address of thread \(1, 0, 0\) .* "
                                             r"element 20 of AS, not 16-byte aligned"):
        _run(prog, a, b)


def test_warp_op_in_a_block_that_is_not_whole_warps():
    prog = one_tile()
    k = prog.kernels[0]
    k = dataclasses.replace(k, block=(ir.const(16), ir.const(1), ir.const(1)))
    prog = dataclasses.replace(prog, kernels=(k,))
    a, b = _data(dtypes.bfloat16)
    with pytest.raises(tcomp.SimError, match="warp-collective .* in a block of 16 threads"):
        _run(prog, a, b)
