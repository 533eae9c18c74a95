"""Shared by the tests of bench/triton_rows.py (test_triton_rows.py, and
interpreted_triton_rows.py which it runs under Triton's interpreter): loading the module and
comparing results with the float64 references."""
from __future__ import annotations

import importlib.util

from .common import BENCH, import_torch

torch = import_torch()  # callers skip first where torch is missing
import triton  # noqa: E402

ROW_CASES = ("softmax", "layernorm", "rmsnorm", "add_layernorm", "cross_entropy", "rowsum")
ULP = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}  # at 1.0


def load_triton_rows():
    """bench/triton_rows.py as a module (bench/ need not be on sys.path). Whether its kernels
    are interpreted or compiled was fixed when triton was first imported in this process, by
    TRITON_INTERPRET (Triton's own library functions are decorated then)."""
    spec = importlib.util.spec_from_file_location("bench_triton_rows", BENCH / "triton_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check(out, ref, dtype, interpreted):
    """Relative L2 error and largest elementwise error (relative to the largest reference
    value) within float32 accuracy (1e-5, as bench/suite.py) plus the rounding of an output in
    `dtype` (half an ulp on the GPU, an ulp under the interpreter); every element finite."""
    out64 = out.double()
    assert out.shape == ref.shape
    assert bool(torch.isfinite(out64).all()), "non-finite output"
    tol = 1e-5 + (0.0 if dtype == torch.float32 else ULP[dtype] * (1.0 if interpreted else 0.5))
    scale = ref.norm().clamp_min(1e-30)
    rel = float((out64 - ref).norm() / scale)
    worst = float((out64 - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    assert rel <= tol and worst <= tol, \
        f"relative L2 error {rel:.3g}, worst {worst:.3g}, tol {tol:.3g}"


def check_case(mod, case, args, out, interpreted):
    ref = mod.CASES[case].ref(*args)
    dtype = args[0].dtype
    if case == "add_layernorm":
        assert out[0].dtype == out[1].dtype == dtype
        check(out[0], ref[0], dtype, interpreted)
        check(out[1], ref[1], dtype, interpreted)
    elif case == "cross_entropy":
        assert out.dtype == torch.float32
        check(out, ref, torch.float32, interpreted)
    else:
        assert out.dtype == dtype
        check(out, ref, dtype, interpreted)


def chunk_config(D):
    """A chunk-loop configuration for rows of D: about four chunks, the last one partial
    where D is not a power of two."""
    return dict(CHUNK=max(1, triton.next_power_of_2(D) // 4), num_warps=2)


