"""On the GPU: call-time checks (issue 9 items 2, 4, 5) and float16/bfloat16
reductions (item 6) — the same errors and the same bits as `tcomp.evaluate`."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tests.lower.test_half_reductions import HALF_TYPES, ROWSUM, SCHEDULES, exact, rows
from tests.target_cuda.test_gpu_interop import run_script

from .test_call_checks import (BAD_CALLS, SCALARS, WRITES, _message,
                               assert_refused_like_evaluate)

pytestmark = pytest.mark.cuda



@pytest.mark.parametrize("src,args,message", BAD_CALLS)
def test_bad_calls_never_reach_the_gpu(src, args, message, tmp_path):
    assert_refused_like_evaluate(src, args, message, tmp_path)


def test_python_data_is_converted_on_the_gpu():
    k = tcomp.build(tcomp.op(SCALARS), target="cuda")
    out = k(1.5, [1, 2, 3], True)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.5, 3.0, 4.5])
    np.testing.assert_array_equal(k(2, [1, 2], False), [0.0, 0.0])


def test_write_check_on_the_gpu(tmp_path):
    """Undecided at op time (N vs M): the call with M <= N runs, M > N is refused,
    by built and loaded kernels."""
    op = tcomp.op(WRITES)
    k = tcomp.build(op, target="cuda")
    k.export(str(tmp_path / "w.cubin"))
    A, C = np.arange(4, dtype=np.float32), np.full(3, 7, np.float32)
    for kern in (k, tcomp.load(str(tmp_path / "w.cubin"))):
        np.testing.assert_array_equal(kern(A, C), tcomp.evaluate(op, A, C))
        msg = _message(kern, C, A)
        assert msg.startswith("the statement on line 2 writes 'B' beyond its shape")


def test_half_reduction_reproducer_on_the_gpu():
    op = tcomp.op("def f(float16(N) A) -> (B) { B(k) +=! A(i) where k in 0:1 }")
    A = np.array([1.0] + [2.0 ** -11] * 8, np.float16)
    got = tcomp.build(op, target="cuda")(A)
    assert got.dtype == np.float16
    assert got.tobytes() == tcomp.evaluate(op, A).tobytes() == \
        np.array([1 + 2.0 ** -8], np.float16).tobytes()


@pytest.mark.parametrize("tname,dt,step", HALF_TYPES)
@pytest.mark.parametrize("name", ["default"] + sorted(SCHEDULES))
def test_half_reductions_on_the_gpu(tname, dt, step, name):
    op = tcomp.op(ROWSUM.format(t=tname))
    s = tcomp.Schedule(op)
    if name != "default":
        SCHEDULES[name](s)
    A = rows(dt, step, 5, 37)
    got = tcomp.build(s, target="cuda")(A)
    assert got.dtype == dt
    assert got.tobytes() == tcomp.evaluate(op, A).tobytes() == exact(A).tobytes()


TORCH_SCRIPT = r"""
import numpy as np, torch, tcomp
k = tcomp.build(tcomp.op("def t(float(N, N) A, float(3) v) -> (B) { B(i, j) = A(j, i) * v(1) }"),
                target="cuda")
a, v = torch.randn(4, 4, device="cuda"), torch.randn(3, device="cuda")
torch.testing.assert_close(k(a, v), a.t() * v[1])
for bad, msg in (((a.double(), v), "input 'A' is float32, but the array passed for it is float64"),
                 ((a, v.half()), "input 'v' is float32, but the array passed for it is float16"),
                 ((a[:, :3].contiguous(), v), "input 'A' dimension 1 is 3, but size N is 4")):
    try:
        k(*bad)
        raise AssertionError("no error for " + msg)
    except tcomp.LangError as e:
        assert msg in str(e), str(e)
h = tcomp.build(tcomp.op("def f(float16(N) A) -> (B) { B(k) +=! A(i) where k in 0:1 }"),
                target="cuda")
x = torch.tensor([1.0] + [2.0 ** -11] * 8, dtype=torch.float16, device="cuda")
out = h(x)
assert out.dtype == torch.float16 and float(out[0]) == 1 + 2.0 ** -8, out
print("torch call checks ok")
"""


def test_torch_dtypes_and_half_reduction():
    """In a fresh interpreter, as tests/target_cuda/test_gpu_runtime.py does for torch."""
    assert "torch call checks ok" in run_script(TORCH_SCRIPT, "torch", timeout=300)


def test_cupy_dtype_mismatch():
    cupy = pytest.importorskip("cupy")
    k = tcomp.build(tcomp.op(SCALARS), target="cuda")
    I = cupy.asarray(np.array([1, 2], np.int64))
    assert _message(k, 1.0, I, True).startswith(
        "input 'I' is int32, but the array passed for it is int64")
    out = k(1.0, cupy.asarray(np.array([1, 2], np.int32)), True)
    np.testing.assert_array_equal(cupy.asnumpy(out), [1.0, 2.0])
