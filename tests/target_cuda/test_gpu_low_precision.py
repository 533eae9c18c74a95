"""float16 and bfloat16 on the GPU: within 1 ulp of `tcomp.evaluate`.

The same programs and schedules as tests/lower/test_sim_low_precision.py
(where the sim agrees with `evaluate` bit for bit). The GPU computes in
float32 and rounds once on store as well, but its float32 operations may
differ in the last float32 bit (a * b + c contracted into one fma, `exp`
within 2 float32 ulps), which can move the narrow result by one ulp at most.
Integer-valued reductions are exact in float32 in any order: there the GPU
must agree bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.lower.test_sim_low_precision import (ABOVE_TIES, ELEMENTWISE, INT_ABOVE_TIES, MATMUL,
                                                TYPES, bits, small_ints, threads, vectorized)
from tests.lower.util import inputs_for, tile_on_blocks_and_threads

pytestmark = pytest.mark.cuda


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units in the last place of a 16-bit float type (NaN to NaN: 0)."""
    def ordered(a):
        b = bits(a).astype(np.int32)
        return np.where(b & 0x8000, 0x8000 - b, b)  # -0 and +0 both map to 0
    d = np.abs(ordered(got) - ordered(want))
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return np.where(nan, 0, d)


@pytest.mark.parametrize("sched", ["default", "threads", "vectorized"])
@pytest.mark.parametrize("expr", list(ELEMENTWISE))
@pytest.mark.parametrize("t", list(TYPES))
def test_elementwise_within_one_ulp(t, expr, sched):
    op = tcomp.op(ELEMENTWISE[expr].format(t=t))
    args = inputs_for(op, {"N": 1003 if sched != "vectorized" else 1024}, seed=1)
    s = {"default": lambda: tcomp.Schedule(op), "threads": lambda: threads(op, "O"),
         "vectorized": lambda: vectorized(op, "O")}[sched]()
    got = tcomp.build(s, target="cuda")(*args)
    want = tcomp.evaluate(op, *args)
    assert got.dtype == want.dtype and got.shape == want.shape
    d = ulps(got, want)
    assert d.max() <= 1, f"{int((d > 1).sum())} elements more than 1 ulp off (max {d.max()})"
    if expr == "product":  # a product of two narrow values is exact in float32: no fma to differ
        np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("t", list(TYPES))
def test_integer_matmul_bit_exact(t):
    op = tcomp.op(MATMUL.format(t=t))
    args = small_ints(op, {"M": 8, "N": 12, "K": 211}, lo=0, seed=5)
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    tile_on_blocks_and_threads(C, m, n, 4, 4)
    got = tcomp.build(s, target="cuda")(*args)
    np.testing.assert_array_equal(bits(got), bits(tcomp.evaluate(op, *args)))


@pytest.mark.parametrize("t", list(TYPES))
def test_wide_to_narrow_conversions_round_once(t):
    """double and 64-bit integers to float16/bfloat16: one rounding, bit for bit
    with `evaluate` (values just above a tie, where rounding through float goes wrong)."""
    x, want = ABOVE_TIES[t]
    op = tcomp.op(f"def f(double(N) D) -> (O) {{ O(i) = {t}(D(i)) }}")
    got = tcomp.build(threads(op, "O", 2), target="cuda")(x)
    np.testing.assert_array_equal(bits(got), bits(tcomp.evaluate(op, x)))
    np.testing.assert_array_equal(got.astype(np.float64), want)
    if t == "bfloat16":  # integers below 2^53 (exact in double; beyond, 1 ulp at most)
        x, want = INT_ABOVE_TIES
        x, want = x[[0, 2]], want[[0, 2]]
        for src in ("int64", "int32"):  # both values fit in int32
            op = tcomp.op(f"def f({src}(N) D) -> (O) {{ O(i) = bfloat16(D(i)) }}")
            xs = x.astype(src)
            got = tcomp.build(threads(op, "O", 2), target="cuda")(xs)
            np.testing.assert_array_equal(bits(got), bits(tcomp.evaluate(op, xs)))
            np.testing.assert_array_equal(got.astype(np.float64), want)
