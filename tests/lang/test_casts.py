"""Casts give one answer on every target: `evaluate` and the sim here, the
generated CUDA through the CPU emulator and on the GPU in
tests/target_cuda/test_casts_cuda.py (the table: cast_table.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes, npfuncs

from .cast_table import (FLOATS, INT_VALUES, LITERALS, float_expected, float_program,
                         float_values, int_expected, int_program, literal_program)


def sim(op, *args):
    s = tcomp.Schedule(op)
    out = tcomp.build(s, target="sim")(*args)
    return out if isinstance(out, tuple) else (out,)


def threaded_sim(op, *args):
    """The same casts in thread-bound stages: the sim's per-lane path."""
    s = tcomp.Schedule(op)
    for t in op.outputs:
        (i,) = s[t.name].axes
        io, ii = s[t.name].split(i, 8)
        s[t.name].bind(io, "blockIdx.x")
        s[t.name].bind(ii, "threadIdx.x")
    return tcomp.build(s, target="sim")(*args)


def assert_same(got, want, what):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, what
        bad = np.flatnonzero(g != w)
        assert bad.size == 0, f"{what}: {g.dtype} differs at {bad[:5]}: got {g[bad[:5]]}, " \
                              f"want {w[bad[:5]]}"


@pytest.mark.parametrize("src", FLOATS)
def test_float_to_every_integer_type_saturates_on_evaluate_and_sim(src):
    op = float_program(src)
    x = float_values(src)
    want = float_expected(src, x)
    assert_same(tcomp.evaluate(op, x), want, f"evaluate, {src}")
    assert_same(sim(op, x), want, f"sim, {src}")
    assert_same(threaded_sim(op, x), want, f"sim with threads, {src}")


@pytest.mark.parametrize("src", sorted(INT_VALUES))
def test_integer_to_narrower_integer_wraps_on_evaluate_and_sim(src):
    op = int_program(src)
    x = np.array(INT_VALUES[src], dtypes.BY_NAME[src].numpy)
    want = int_expected(x)
    assert_same(tcomp.evaluate(op, x), want, f"evaluate, {src}")
    assert_same(sim(op, x), want, f"sim, {src}")


def test_the_h200_table_of_the_issue():
    """Issue 22: the H200 gave int8(inf) = -1 through a C cast; the rule gives 127."""
    op = tcomp.op("def f(float(N) X) -> (A, B, C, D, E, F, G, H) {\n"
                  "  A(i) = int32(X(0)) where i in 0:1\n  B(i) = int32(X(1)) where i in 0:1\n"
                  "  C(i) = uint8(X(2)) where i in 0:1\n  D(i) = uint8(X(3)) where i in 0:1\n"
                  "  E(i) = int8(X(4)) where i in 0:1\n  F(i) = uint32(X(2)) where i in 0:1\n"
                  "  G(i) = uint32(X(5)) where i in 0:1\n  H(i) = int64(X(6)) where i in 0:1\n}")
    x = np.array([3e9, np.nan, -1.0, -200.0, np.inf, 5e9, 1e19], np.float32)
    want = [2147483647, 0, 0, 0, 127, 0, 4294967295, 9223372036854775807]
    for got in (tcomp.evaluate(op, x), sim(op, x)):
        assert [int(g[0]) for g in got] == want


def test_cast_literals_fold_to_the_same_values():
    op = literal_program()
    x = np.zeros(2, np.float32)
    for got in (tcomp.evaluate(op, x), sim(op, x)):
        for g, (text, dt, value) in zip(got, LITERALS):
            assert g.dtype == dtypes.BY_NAME[dt].numpy, text
            assert g.tolist() == [value, value], text


def test_lowered_constants_are_converted_by_the_rule():
    # translate.cast folds a constant cast; the IR holds the converted value
    op = tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) + float(int8(300.0)) + "
                  "float(int8(300)) }")
    text = str(tcomp.lower(tcomp.Schedule(op)))
    assert "X[i] + 127.0 + 44.0" in text


def test_saturate_keeps_scalars_scalars():
    v = npfuncs.saturate(np.float32(3e9), np.int32)
    assert isinstance(v, np.int32) and v == 2**31 - 1
    assert npfuncs.convert(np.array([np.nan], np.float16), np.uint8).tolist() == [0]
