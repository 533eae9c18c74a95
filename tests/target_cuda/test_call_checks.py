"""Call-time checks of CUDA kernels, built and loaded, on a machine without a GPU.

A CUDA kernel checks its arguments (tcomp/lang/signature.py, shared with evaluate
and the sim) before it touches the device, so a bad call raises the same LangError
here as on a GPU; a loaded kernel rebuilds the checks from its .json sidecar."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.lang.signature import Signature
from tcomp.target_cuda import cuda_api

WRITES = "def f(float(N) A, float(M) C) -> (B) {\n  B(i) = C(i)\n  B(i) = A(i)\n}"
SQUARE = "def t(float(N, N) A, float(3) v) -> (B) { B(i, j) = A(j, i) * v(1) }"
SCALARS = "def s(float a, int32(N) I, bool b) -> (O) { O(i) = b ? a * float(I(i)) : 0.0 }"

# (source, arguments, message) — the bad calls every target refuses the same way
BAD_CALLS = [
    ("def f(float(1) a) -> (b) { b(i) = a(i) }", [np.zeros(3, np.float32)],
     "input 'a' dimension 0 must be 1, got 3"),
    ("def f(int32 a) -> (b) { b = a + 1 }", [np.zeros((1, 2), np.int32)],
     "input 'a' must have 0 dimension(s), got 2 (shape (1, 2))"),
    ("def f(float(N) a) -> (b) { b(i) = a(i) }", [np.zeros((2, 3), np.float32)],
     "input 'a' must have 1 dimension(s), got 2 (shape (2, 3))"),
    (SQUARE, [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)],
     "input 'A' dimension 1 is 3, but size N is 2 from input 'A' dimension 0"),
    (SQUARE, [np.zeros((2, 2), np.float32)], "'t' takes 2 input(s) (A, v), got 1"),
    (SQUARE, [np.zeros((2, 2)), np.zeros(3, np.float32)],
     "input 'A' is float32, but the array passed for it is float64; convert it explicitly"),
    (SQUARE, [np.zeros((2, 2), np.float32), np.zeros(3, np.int32)],
     "input 'v' is float32, but the array passed for it is int32"),
    (SCALARS, [np.float64(1.0), [1, 2], True],
     "input 'a' is float32, but the array passed for it is float64"),
    (SCALARS, [1.0, [1.5, 2.0], True],
     "input 'I' is int32, but the Python data passed for it holds float values"),
    (WRITES, [np.zeros(3, np.float32), np.zeros(4, np.float32)],
     "the statement on line 2 writes 'B' beyond its shape: i runs over 0:M = 0:4 there, but "
     "'B' has extent N = 3 in dimension 0"),
]


def _message(fn, *args) -> str:
    with pytest.raises(tcomp.LangError) as info:
        fn(*args)
    return info.value.message


def assert_refused_like_evaluate(src, args, message, folder):
    """A built cuda kernel, the same loaded from its files, and the sim kernel
    refuse `args` with evaluate's LangError text (on a GPU machine too: the
    checks come before anything reaches the device)."""
    op = tcomp.op(src)
    want = _message(tcomp.evaluate, op, *args)
    assert want.startswith(message)
    # (the plain schedule: tcomp.build(op) may choose a specialised kernel, which exports
    # variant by variant)
    k = tcomp.build(tcomp.Schedule(op), target="cuda")
    assert _message(k, *args) == want
    k.export(str(folder / "k.cubin"))
    assert _message(tcomp.load(str(folder / "k.cubin")), *args) == want
    assert _message(tcomp.build(op, target="sim"), *args) == want


@pytest.mark.parametrize("src,args,message", BAD_CALLS)
def test_built_and_loaded_kernels_refuse_bad_calls_like_evaluate(src, args, message, tmp_path):
    assert_refused_like_evaluate(src, args, message, tmp_path)


def test_signature_travels_in_the_sidecar(tmp_path):
    op = tcomp.op(WRITES)
    k = tcomp.build(tcomp.Schedule(op), target="cuda")
    k.export(str(tmp_path / "w.cubin"))
    meta = json.load(open(tmp_path / "w.json"))
    assert meta["signature"] == {
        "op": "f",
        "inputs": [{"name": "A", "dtype": "float32", "dims": ["N"]},
                   {"name": "C", "dtype": "float32", "dims": ["M"]}],
        "write_checks": [{"tensor": "B", "dim": 0, "var": "i", "lo": 0, "hi": "M",
                          "extent": "N", "line": 2, "last_line": 3}]}
    assert Signature.from_json(meta["signature"]) == Signature.from_op(op)
    assert tcomp.load(str(tmp_path / "w.cubin")).signature == Signature.from_op(op)


def test_sidecar_without_a_signature_is_refused_at_load(tmp_path):
    """Every sidecar tcomp writes carries the signature the checks are built from;
    one without it is refused before any call can miss a check."""
    k = tcomp.build(tcomp.op(SQUARE), target="cuda", sizes={"N": 2})
    k.export(str(tmp_path / "old.cubin"))
    meta = json.load(open(tmp_path / "old.json"))
    del meta["signature"]
    json.dump(meta, open(tmp_path / "old.json", "w"))
    with pytest.raises(tcomp.TcompError, match=r"load: .*old.json: the sidecar has no "
                                               r"'signature'; export the kernel again"):
        tcomp.load(str(tmp_path / "old.cubin"))


def test_compiled_sizes_are_checked_before_launch(tmp_path):
    k = tcomp.build(tcomp.op(SQUARE), target="cuda", sizes={"N": 2})
    with pytest.raises(tcomp.LoweringError, match="'t' was compiled for N=2, but the inputs "
                                                  "have N=3"):
        k(np.zeros((3, 3), np.float32), np.zeros(3, np.float32))


@pytest.mark.skipif(cuda_api.have_device(), reason="checks the no-GPU behaviour")
def test_good_calls_get_past_the_checks():
    """Python data of a fitting kind is accepted: the call reaches the device."""
    k = tcomp.build(tcomp.op(SCALARS), target="cuda")
    with pytest.raises(tcomp.CudaError, match="no CUDA driver found"):
        k(1.5, [1, 2, 3], True)
    k = tcomp.build(tcomp.Schedule(tcomp.op(WRITES)), target="cuda")
    with pytest.raises(tcomp.CudaError, match="no CUDA driver found"):
        k(np.zeros(4, np.float32), np.zeros(3, np.float32))


def test_malformed_signature_in_the_sidecar(tmp_path):
    k = tcomp.build(tcomp.op(SQUARE), target="cuda")
    k.export(str(tmp_path / "bad.cubin"))
    meta = json.load(open(tmp_path / "bad.json"))
    meta["signature"]["inputs"][0]["dtype"] = "float128"
    json.dump(meta, open(tmp_path / "bad.json", "w"))
    with pytest.raises(tcomp.TcompError) as e:
        tcomp.load(str(tmp_path / "bad.cubin"))
    assert str(e.value) == (
        f"load: {tmp_path / 'bad.json'}: signature.inputs[0] is \"A\" of \"float128\", but "
        f"inputs[0] is 'A' of float32; export the kernel again (k.export or tcomp compile)")


def test_malformed_size_expression_in_the_sidecar(tmp_path):
    k = tcomp.build(tcomp.Schedule(tcomp.op(WRITES)), target="cuda")
    k.export(str(tmp_path / "bad.cubin"))
    meta = json.load(open(tmp_path / "bad.json"))
    meta["signature"]["write_checks"][0]["hi"] = ["%", "M", 2]
    json.dump(meta, open(tmp_path / "bad.json", "w"))
    with pytest.raises(tcomp.TcompError) as e:
        tcomp.load(str(tmp_path / "bad.cubin"))
    assert str(e.value) == (
        f"load: {tmp_path / 'bad.json'}: signature.write_checks[0].hi must be [op, a, b] with "
        f"op one of + - * / min max, got [\"%\", \"M\", 2]; export the kernel again (k.export "
        f"or tcomp compile)")
