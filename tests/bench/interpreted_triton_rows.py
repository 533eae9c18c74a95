"""bench/triton_rows.py under Triton's interpreter (CPU tensors): each kernel at tiny and
awkward shapes (row lengths 1, 33, 1000, 4099) on both of its paths, the row in registers and
the chunk loop, forced through `config=` (autotuning needs a GPU to time on), against the float64
references.

Triton's interpreter must be chosen before triton is first imported, so this file runs in its
own process with TRITON_INTERPRET=1: test_triton_rows.py::test_interpreted_kernels starts it
(the file name keeps pytest from collecting it otherwise). Directly:

    TRITON_INTERPRET=1 python3 -m pytest -q tests/bench/interpreted_triton_rows.py

The interpreter converts float32 to bfloat16 by truncation (the GPU rounds to nearest), so the
bfloat16 tolerance here is one ulp, on the GPU half of one.
"""
from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run with TRITON_INTERPRET=1 (test_triton_rows.py::test_interpreted_kernels does)",
                allow_module_level=True)
pytest.importorskip("torch")
pytest.importorskip("triton")

from .triton_rows_helpers import (ROW_CASES, check, check_case, chunk_config,  # noqa: E402
                                  load_triton_rows, torch)


@pytest.fixture(scope="module")
def T():
    return load_triton_rows()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("path", ["registers", "chunks"])
@pytest.mark.parametrize("shape", [(3, 1000), (2, 4099), (4, 33), (3, 1)], ids=str)
@pytest.mark.parametrize("case", ROW_CASES)
def test_row_case_interpreted(T, case, shape, path, dtype):
    torch.manual_seed(0)
    fn, make, _ = T.CASES[case]
    args = make(shape, dtype, device="cpu")
    D = shape[1]
    cfg = T.row_configs(D, args[0].element_size())[0] if path == "registers" else chunk_config(D)
    assert (cfg["CHUNK"] >= D) == (path == "registers" or D == 1)
    check_case(T, case, args, fn(*args, config=cfg), interpreted=True)


@pytest.mark.parametrize("case", ["softmax", "layernorm", "rmsnorm", "rowsum"])
def test_rows_are_the_last_dimension_of_any_shape_and_layout(T, case):
    """A 3-D float16 input whose last dimension is not contiguous: rows are the last dimension,
    the result has the input's shape (and is contiguous)."""
    torch.manual_seed(1)
    fn, make, ref = T.CASES[case]
    args = list(make((6, 50), torch.float16, device="cpu"))
    x = args[0].reshape(2, 3, 50).transpose(1, 2).contiguous().transpose(1, 2)
    assert not x.is_contiguous()
    out = fn(x, *args[1:], config=dict(CHUNK=16, num_warps=1))
    check(out, ref(x, *args[1:]), torch.float16, interpreted=True)
    assert out.shape == (x.shape if case != "rowsum" else x.shape[:-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape,cfg", [((33, 70), dict(BM=8, BN=16, num_warps=1)),
                                       ((64, 64), dict(BM=32, BN=32, num_warps=4)),
                                       ((1, 5), dict(BM=8, BN=8, num_warps=1))], ids=str)
def test_transpose_interpreted_is_exact(T, shape, cfg, dtype):
    x = T.make_transpose(shape, dtype, device="cpu")[0]
    y = T.transpose(x, config=cfg)
    assert y.dtype == dtype and y.is_contiguous()
    assert torch.equal(y.double(), T.transpose_ref(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("scalars", ["tensors", "numbers"])
@pytest.mark.parametrize("shape", [(1000,), (3, 77), (1,)], ids=str)
def test_gelu_interpreted(T, shape, scalars, dtype):
    torch.manual_seed(2)
    x, a, b = T.make_gelu(shape, dtype, device="cpu")
    if scalars == "numbers":
        a, b = 0.75, -0.25
    y = T.gelu(x, a, b, config=dict(BLOCK=128, num_warps=4))
    assert y.dtype == dtype and y.shape == x.shape
    check(y, T.gelu_ref(x, a, b), dtype, interpreted=True)


def test_gelu_is_exact_gelu_of_the_affine_input(T):
    """The chain is the erf GELU of x * a + b (bench/schedules.py GELU), not the tanh form."""
    x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0])
    y = T.gelu(x, 2.0, 1.0, config=dict(BLOCK=16, num_warps=1))
    want = torch.nn.functional.gelu((x * 2 + 1).double())
    assert torch.allclose(y.double(), want, rtol=1e-6, atol=1e-7)


def test_cross_entropy_out_of_range_targets_are_nan(T):
    """No silent read outside the row: targets < 0 or >= V give NaN, the others their loss."""
    logits = torch.randn(4, 100)
    t = torch.tensor([-1, 100, 0, 99])
    loss = T.cross_entropy(logits, t, config=dict(CHUNK=32, num_warps=1))
    assert torch.isnan(loss[:2]).all()
    check(loss[2:], T.cross_entropy_ref(logits[2:], t[2:]), torch.float32, interpreted=True)


def test_cross_entropy_accepts_int32_targets(T):
    logits = torch.randn(3, 40)
    t = torch.tensor([5, 0, 39], dtype=torch.int32)
    check(T.cross_entropy(logits, t, config=dict(CHUNK=16, num_warps=1)),
          T.cross_entropy_ref(logits, t), torch.float32, interpreted=True)


def test_softmax_large_logits_do_not_overflow(T):
    """Rows near the float32 range: the online max/sum rescales instead of overflowing."""
    x = torch.tensor([[80.0, 88.0, -1e30, 3e38], [-3e38, -3e38, 0.0, 1.0]])
    for cfg in (dict(CHUNK=4, num_warps=1), dict(CHUNK=1, num_warps=1)):
        check(T.softmax(x, config=cfg), T.softmax_ref(x), torch.float32, interpreted=True)


def test_empty_inputs(T):
    assert T.softmax(torch.empty(0, 5)).shape == (0, 5)
    assert T.layernorm(torch.empty(0, 5), torch.ones(5), torch.zeros(5)).shape == (0, 5)
    assert torch.equal(T.rowsum(torch.empty(3, 0)), torch.zeros(3))
    assert T.transpose(torch.empty(0, 4)).shape == (4, 0)
    assert T.gelu(torch.empty(0), 1.0, 0.0).shape == (0,)
    assert T.cross_entropy(torch.empty(0, 7), torch.empty(0, dtype=torch.int64)).shape == (0,)
