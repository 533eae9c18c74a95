"""float16/bfloat16 reductions: the output keeps the right-hand side's type (as in TC
and cuBLAS), the sum runs in a float32 accumulator and is rounded once, when stored.

The inputs are multiples of 2^-11 (float16) / 2^-8 (bfloat16) small enough that every
partial sum is exact in float32: the result does not depend on the reduction order, so
the sim (any schedule: registers, all-reduce across threads, rfactor partials, a
cache_write tile) must equal `tcomp.evaluate` bit for bit. The values are chosen so
that rounding after each step would give a different answer (1 + eight 2^-11 steps:
each step rounds back to 1 in float16; summed in float32 it is 1 + 2^-8, exact in
float16).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tcomp

BF16 = np.dtype(ml_dtypes.bfloat16)
HALF_TYPES = [("float16", np.dtype(np.float16), 2.0 ** -11),
              ("bfloat16", BF16, 2.0 ** -8)]

ROWSUM = "def rowsum({t}(M, N) A) -> (S) {{ S(i) +=! A(i, j) }}"
TOTAL = "def total({t}(M, N) A) -> (T) {{ T +=! A(i, j) }}"


def rows(dt, step, m, n, seed=0):
    """Row i: 1 followed by small multiples of `step` (exact float32 sums)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (m, n)) * step
    a[:, 0] = 1.0
    a[0, 1:] = step  # row 0: 1 + (n-1) steps, lost by per-step rounding
    return a.astype(dt)


def per_step(a: np.ndarray) -> np.ndarray:
    """What an accumulator of a's own type would compute (rounding every step)."""
    acc = np.zeros(a.shape[0], a.dtype)
    for j in range(a.shape[1]):
        acc = (acc.astype(np.float32) + a[:, j].astype(np.float32)).astype(a.dtype)
    return acc


def exact(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64).sum(axis=-1).astype(a.dtype)


@pytest.mark.parametrize("tname,dt,step", HALF_TYPES)
def test_output_type_and_single_rounding(tname, dt, step):
    op = tcomp.op(ROWSUM.format(t=tname))
    assert op.outputs[0].dtype.name == tname
    assert op.statements[0].acc_dtype.name == "float32"
    A = rows(dt, step, 3, 9)
    want = exact(A)
    assert want[0] != per_step(A)[0]  # the data tells the two roundings apart
    for got in (tcomp.evaluate(op, A), tcomp.build(op, target="sim")(A)):
        assert got.dtype == dt
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("tname,dt,step", HALF_TYPES)
def test_typed_output_overrides(tname, dt, step):
    op = tcomp.op(f"def f({tname}(M, N) A) -> (float32(M) S) {{ S(i) +=! A(i, j) }}")
    A = rows(dt, step, 2, 5)
    want = A.astype(np.float64).sum(-1).astype(np.float32)
    for got in (tcomp.evaluate(op, A), tcomp.build(op, target="sim")(A)):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def _cross_thread(s):
    S = s["S"]
    (i,), (j,) = S.axes, S.reduce_axes
    S.bind(i, "blockIdx.x")
    jo, ji = S.split(j, 4)
    S.bind(ji, "threadIdx.x")


def _rfactor(s):
    """Four float32 partial sums per row (S.rf), then a 4-thread all-reduce."""
    S = s["S"]
    (j,) = S.reduce_axes
    jo, ji = S.split(j, 4)
    rf = S.rfactor(ji)
    S.bind(S.reduce_axes[0], "threadIdx.x")
    rf.bind(rf.axes[0], "threadIdx.x")


def _cache_write(s):
    """A 4-row local tile accumulated in memory (its rows inside the reduction loop)."""
    S = s["S"]
    CL = s.cache_write(S, "local")
    (i,) = S.axes
    io, ii = S.split(i, 4)
    CL.compute_at(S, io)
    (li,), (lj,) = CL.axes, CL.reduce_axes
    CL.reorder(lj, li)


def _split_unroll(s):
    S = s["S"]
    (j,) = S.reduce_axes
    jo, ji = S.split(j, 3)
    S.unroll(ji)


SCHEDULES = {"cross_thread": _cross_thread, "rfactor": _rfactor, "cache_write": _cache_write,
             "split_unroll": _split_unroll}


@pytest.mark.parametrize("tname,dt,step", HALF_TYPES)
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_accumulate_in_float32(tname, dt, step, name):
    op = tcomp.op(ROWSUM.format(t=tname))
    s = tcomp.Schedule(op)
    SCHEDULES[name](s)
    A = rows(dt, step, 3, 11)
    got = tcomp.build(s, target="sim")(A)
    want = tcomp.evaluate(op, A)
    assert got.dtype == want.dtype == dt
    assert got.tobytes() == want.tobytes() == exact(A).tobytes()
    # The generated CUDA accumulates in float (registers, shuffles, the float32 S.rf
    # partials) and converts to the narrow type once: in the store to S.
    src = tcomp.build(s, target="cuda").source
    conv = "__float2half_rn" if tname == "float16" else "__float2bfloat16_rn"
    stores = [line.strip() for line in src.splitlines() if conv in line]
    assert len(stores) == 1 and stores[0].startswith("S["), src


def test_full_reduction_to_0d_half():
    op = tcomp.op(TOTAL.format(t="float16"))
    A = rows(np.float16, 2.0 ** -11, 1, 9)
    got = tcomp.build(op, target="sim")(A)
    assert got.dtype == np.float16 and got.shape == ()
    assert got.tobytes() == tcomp.evaluate(op, A).tobytes() == np.float16(1 + 2 ** -8).tobytes()


def test_half_reduction_in_memory_needs_cache_write():
    """The output tensor is float16 but the accumulator float32: accumulating in memory
    would round every step, so lowering refuses and names the fix."""
    op = tcomp.op(ROWSUM.format(t="float16"))
    s = tcomp.Schedule(op)
    S = s["S"]
    S.reorder(S.reduce_axes[0], S.axes[0])
    with pytest.raises(tcomp.LoweringError,
                       match=r"accumulate in 'S' \(float16\), but the reduction needs float32; "
                             r"use cache_write\(\.\.\., 'local'\)"):
        tcomp.build(s, target="sim")


@pytest.mark.parametrize("tname", ["float16", "bfloat16"])
def test_cuda_source_rounds_once(tname):
    """Default schedule: the accumulator is a float register, the store converts it."""
    op = tcomp.op(ROWSUM.format(t=tname))
    src = tcomp.build(tcomp.Schedule(op), target="cuda").source
    conv = "__float2half_rn" if tname == "float16" else "__float2bfloat16_rn"
    assert "float S_acc[1];" in src
    store = [line for line in src.splitlines() if conv in line]
    assert len(store) == 1 and "S_acc[0]" in store[0], src
