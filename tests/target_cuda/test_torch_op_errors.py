"""torch_op's errors that need no torch: a missing PyTorch, and the fake
implementation's argument count."""
from __future__ import annotations

import sys

import pytest

import tcomp
from tcomp.target_cuda.torch_op import fake_outputs, op_name

MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def test_missing_torch_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="cuda")
    with pytest.raises(tcomp.CudaError, match=r"torch_op: PyTorch is not installed \(pip install "
                                              r"torch\)"):
        k.torch_op()


def test_fake_implementation_checks_the_argument_count(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", object())  # never used before the check
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="cuda")
    with pytest.raises(tcomp.CudaError, match=r"'matmul' takes 2 input\(s\), got 1"):
        fake_outputs(k.meta, (None,))


def test_op_names():
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="cuda")
    assert op_name(k).startswith("matmul_") and len(op_name(k)) == len("matmul_") + 12
    assert op_name(k, "mine") == "mine"
