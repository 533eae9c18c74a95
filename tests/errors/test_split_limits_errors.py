"""Split factors at the edges (issue 22, defect 8): a factor of 2^31 or more is a
ScheduleError (it was an OverflowError at build); a factor near 2^31 computes the right
values (at 2^31 - 1 the kernel computed nothing: `N + factor - 1` overflowed int32); a
factor far above the extent runs as many iterations as the extent has (extent 8 split by
10^6 ran 10^6 guarded iterations: 159 s on the sim)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.rewriter import walk_stmts

SCALE = "def scale(float(N) X) -> (O) { O(i) = X(i) * 2 }"
X = np.arange(8, dtype=np.float32)


@pytest.fixture(scope="module")
def op():
    return tcomp.op(SCALE)


def split(op, factor=None, nparts=None):
    s = tcomp.Schedule(op)
    s["O"].split(s["O"].axes[0], factor, nparts=nparts)
    return s


def loops(prog) -> list:
    return [x for k in prog.kernels for x in walk_stmts(k.body) if isinstance(x, ir.For)]


@pytest.mark.parametrize("make, message", [
    (lambda O, i: O.split(i, 2 ** 31), "split: factor must be below 2^31 (loop extents are "
                                       "32-bit ints), got 2147483648"),
    (lambda O, i: O.split(i, nparts=np.int64(2 ** 40)),
     "split: nparts must be below 2^31 (loop extents are 32-bit ints), got 1099511627776"),
    (lambda O, i: O.tile(i, O.axes[1], 4, 2 ** 31),
     "tile: y_factor must be below 2^31 (loop extents are 32-bit ints), got 2147483648"),
    (lambda O, i: O.unroll(i, 2 ** 31), "unroll: factor must be below 2^31 (loop extents are "
                                        "32-bit ints), got 2147483648"),
    (lambda O, i: O.storage_align(i, 2 ** 31, 0),
     "storage_align: factor must be below 2^31 (loop extents are 32-bit ints), got 2147483648"),
    (lambda O, i: O.rasterize(i, O.axes[1], 2 ** 31),
     "rasterize: group must be below 2^31 (loop extents are 32-bit ints), got 2147483648"),
])
def test_factors_beyond_int32(make, message):
    op2 = tcomp.op("def s2(float(M, N) X) -> (O) { O(i, j) = X(i, j) * 2 }")
    s = tcomp.Schedule(op2)
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        make(s["O"], s["O"].axes[0])
    assert str(e.value) == message
    assert s.to_json() == before


@pytest.mark.parametrize("sizes", [None, {"N": 8}])
@pytest.mark.parametrize("factor, nparts", [(2 ** 31 - 1, None), (None, 2 ** 31 - 1),
                                            (2 ** 30 + 5, None), (10 ** 6, None),
                                            (None, 10 ** 6)])
def test_huge_factors_compute_the_right_values(op, factor, nparts, sizes):
    k = tcomp.build(split(op, factor, nparts), target="sim", sizes=sizes)
    np.testing.assert_array_equal(k(X), tcomp.evaluate(op, X))


@pytest.mark.parametrize("factor, nparts", [(10 ** 6, None), (None, 10 ** 6)])
def test_a_factor_above_the_extent_is_clamped(op, factor, nparts):
    # Fixed sizes: the loop runs the extent's 8 iterations (the other loop, of one
    # iteration, is gone).
    fixed = loops(tcomp.lower(split(op, factor, nparts), sizes={"N": 8}))
    assert [(f.var, f.extent) for f in fixed] == [
        ("i_i" if factor else "i_o", ir.const(8))]
    # Symbolic sizes: min(factor, N) iterations.
    text = str(tcomp.lower(split(op, factor, nparts)))
    assert f"max(min({factor or nparts}, N), 1)" in text


def test_a_block_grid_of_huge_nparts_is_clamped(op):
    s = split(op, nparts=10 ** 6)
    s["O"].bind(s["O"].leaf_axes[0], "blockIdx.x")
    prog = tcomp.lower(s, sizes={"N": 8})
    assert prog.kernels[0].grid == (ir.const(8), ir.const(1), ir.const(1))
    k = tcomp.build(s, target="sim", sizes={"N": 8})
    np.testing.assert_array_equal(k(X), tcomp.evaluate(op, X))


def test_factors_up_to_65536_stay_as_written(op):
    # The IR keeps the factor given (golden IR and the schedule search see it).
    fixed = loops(tcomp.lower(split(op, 65536), sizes={"N": 8}))
    assert ir.const(65536) in [f.extent for f in fixed]


def test_a_thread_loop_keeps_its_extent(op):
    s = split(op, 32)
    s["O"].bind(s["O"].leaf_axes[1], "threadIdx.x")
    prog = tcomp.lower(s, sizes={"N": 8})
    assert prog.kernels[0].block[0] == ir.const(32)
