"""The adversarial reductions of tests/lower/test_adversarial_data.py as CUDA:
the generated C++ run on the CPU emulator (g++, one std::thread per CUDA
thread: fmaxf/fminf, the identity literals and the shuffle allreduce are
the real generated code), and on a GPU (marked `cuda`).

Also the CUDA prelude's integer floor division and modulo (`tc_floordiv`,
`tc_floormod`) by value against Python's `//` and `%` on every sign
combination: a truncating helper (C's `/`) fails here, not only in golden text.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tcomp
from tcomp.target_cuda.codegen import PRELUDE as CUDA_PRELUDE
from tests.lower.test_adversarial_data import (OPS, PAIRS, SCHEDULES, assert_result,
                                               case, data_all_negative)

from .emulator import HAVE_CXX, _compile, run_emulated

needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++)")

# The emulator runs one process per call: a representative subset of the cases
# (every data set once per reduction kind, every schedule on the sharpest data).
EMULATED = sorted({(k, d, "allreduce") for k, d in PAIRS } |
                  {(k, "nans", s) for k in ("max", "min") for s in SCHEDULES} |
                  {("max", "all_negative", s) for s in SCHEDULES})


@needs_cxx
@pytest.mark.parametrize("kind,data,schedule", EMULATED)
def test_emulated_cuda_on_adversarial_data(kind, data, schedule):
    op, a, want = case(kind, data)
    k = tcomp.build(SCHEDULES[schedule](op), target="cuda")
    assert_result(run_emulated(k, a), want, f"cuda (emulated) {kind} on {data}, {schedule}")


@pytest.mark.cuda
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("kind,data", PAIRS)
def test_gpu_on_adversarial_data(kind, data, schedule):
    op, a, want = case(kind, data)
    k = tcomp.build(SCHEDULES[schedule](op), target="cuda")
    assert_result(k(a), want, f"cuda {kind} on {data}, schedule {schedule}")


@pytest.mark.cuda
def test_gpu_max_of_negative_rows_is_negative():
    """The GPU pin of the max identity: no row of negative values has max 0.0,
    with rows long enough for several warps (a 96-thread allreduce)."""
    op = OPS["max"]
    a = (-np.random.default_rng(5).uniform(0.5, 10.0, (7, 96))).astype(np.float32)
    for name, make in SCHEDULES.items():
        got = tcomp.build(make(op), target="cuda")(a)
        assert (got < 0).all(), f"schedule {name}: max of negative rows gave {got}"
        np.testing.assert_array_equal(got, a.max(axis=1), err_msg=name)
    small = data_all_negative(np.random.default_rng(6))
    assert (tcomp.build(SCHEDULES["allreduce"](op), target="cuda")(small) < 0).all()


# ------------------------------------------------------------------ integer floor division
OPERANDS = [-9, -8, -7, -3, -2, -1, 0, 1, 2, 3, 7, 8, 9]
DIVISORS = [-8, -3, -2, -1, 1, 2, 3, 8]

_FLOORDIV_MAIN = r"""
#include <cstdio>
#define __device__
#define __forceinline__ inline
%s
extern "C" void tc_test_floor(const long long* a, const long long* b, long long* q, long long* r,
                              int* q32, int* r32, int n) {
  for (int i = 0; i < n; ++i) {
    q[i] = tc_floordiv<long long>(a[i], b[i]);
    r[i] = tc_floormod<long long>(a[i], b[i]);
    q32[i] = tc_floordiv<int>((int)a[i], (int)b[i]);
    r32[i] = tc_floormod<int>((int)a[i], (int)b[i]);
  }
}
"""


@needs_cxx
def test_prelude_floor_division_matches_python():
    """tc_floordiv/tc_floormod, exactly as the generated kernels include them,
    compiled with g++ and run on every sign combination (int and long long):
    q == a // b and r == a % b as Python defines them (README: integer `/` and
    `%` floor), and a == q * b + r with r of b's sign."""
    import ctypes
    lib = ctypes.CDLL(_compile(_FLOORDIV_MAIN % CUDA_PRELUDE))
    pairs = list(itertools.product(OPERANDS + [2**31 - 1, -2**31 + 1], DIVISORS))
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    q, r = np.zeros_like(a), np.zeros_like(a)
    q32, r32 = np.zeros(len(a), np.int32), np.zeros(len(a), np.int32)
    ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib.tc_test_floor(ptr(a), ptr(b), ptr(q), ptr(r), ptr(q32), ptr(r32), ctypes.c_int(len(a)))
    for i, (x, y) in enumerate(pairs):
        assert (q[i], r[i]) == (x // y, x % y), f"long long: {x} / {y} gave {q[i]}, {r[i]}"
        assert (q32[i], r32[i]) == (x // y, x % y), f"int: {x} / {y} gave {q32[i]}, {r32[i]}"


IDIV = tcomp.op("""def idiv(int32(N) A, int32(N) B) -> (Q, R) {
  Q(i) = A(i) / B(i)
  R(i) = A(i) % B(i)
}""")


def _idiv_inputs():
    pairs = list(itertools.product(OPERANDS, DIVISORS))
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def _idiv_want(a, b):
    return (np.array([x // y for x, y in zip(a.tolist(), b.tolist())], np.int32),
            np.array([x % y for x, y in zip(a.tolist(), b.tolist())], np.int32))


@needs_cxx
def test_emulated_kernel_integer_division_floors():
    """A whole generated kernel dividing negative operands: Q and R floor like
    Python (and like evaluate and the sim)."""
    a, b = _idiv_inputs()
    k = tcomp.build(tcomp.Schedule(IDIV), target="cuda")
    q, r = run_emulated(k, a, b)
    wq, wr = _idiv_want(a, b)
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(r, wr)
    eq, er = tcomp.evaluate(IDIV, a, b)
    np.testing.assert_array_equal(eq, wq)
    np.testing.assert_array_equal(er, wr)
    sq, sr = tcomp.build(tcomp.Schedule(IDIV), target="sim")(a, b)
    np.testing.assert_array_equal(sq, wq)
    np.testing.assert_array_equal(sr, wr)


@pytest.mark.cuda
def test_gpu_integer_division_floors():
    a, b = _idiv_inputs()
    q, r = tcomp.build(tcomp.Schedule(IDIV), target="cuda")(a, b)
    wq, wr = _idiv_want(a, b)
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(r, wr)
