"""Shared helpers of the benchmark-schedule tests: the module bench/schedules.py
(loaded by path, so bench/ need not be on sys.path) and the cases of
bench/suite.py at their full benchmark sizes.

SUITE_CASES mirrors the `cases` list in bench/suite.py:main() (without --quick);
test_bench_golden_cuda.py::test_suite_cases_in_sync checks that against the
suite's source, so a case added there shows up here as a failure.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (dataclasses with postponed annotations look their module up)
    spec.loader.exec_module(mod)
    return mod


S = _load("bench_schedules", BENCH / "schedules.py")


@dataclass(frozen=True)
class SuiteCase:
    """One case of bench/suite.py: `call` is the suite's own call (function name
    and positional arguments), the rest what that case_* function builds."""
    slug: str               # golden file name (without .cu)
    call: tuple             # ("case_softmax", 32768, 4096, 512, True)
    kind: str               # schedule function of bench/schedules.py
    kwargs: dict = field(hash=False)
    sizes: dict = field(hash=False)
    tol: float = 1e-5       # the suite's tolerance on the relative L2 error

    def schedule(self):
        return getattr(S, self.kind)({}, **self.kwargs)


def _gemm(n, variant):
    kw = S.gemm_variant(variant)  # as case_gemm
    return SuiteCase(f"gemm_{n}_{variant.replace('+', '_')}", ("case_gemm", n, variant), "gemm",
                     kw, {"M": n, "N": n, "K": n})


def _row(kind, r, c, threads, shared_row, variant=""):
    v = ("smem" if shared_row else "L2") + (f"_{variant.replace('+', '_')}" if variant else "")
    call = (f"case_{kind}", r, c, threads, shared_row) + ((variant,) if variant else ())
    return SuiteCase(f"{kind}_{r}x{c}_{threads}t_{v}", call, kind,
                     {"threads": threads, "shared_row": shared_row, **S.row_variant(variant)},
                     {"N": r, "D": c})


def _rowsum(r, c):
    threads = 256 if c >= 4096 else 128  # as case_rowsum chooses
    return SuiteCase(f"rowsum_{r}x{c}_{threads}t", ("case_rowsum", r, c), "rowsum",
                     {"threads": threads}, {"N": r, "D": c})


SUITE_CASES = [
    SuiteCase("gelu_2p28", ("case_gelu", 1 << 28), "gelu", {}, {"N": 1 << 28}),
    SuiteCase("transpose_8192x8192", ("case_transpose", 8192), "transpose", {},
              {"M": 8192, "N": 8192}, tol=0.0),
    _rowsum(32768, 4096), _rowsum(4096, 32768),
    _row("softmax", 32768, 4096, 512, True), _row("softmax", 32768, 4096, 256, False),
    _row("softmax", 32768, 4096, 256, True, "vec4+rcp"),
    _row("softmax", 4096, 32768, 1024, True), _row("softmax", 4096, 32768, 1024, False),
    _row("softmax", 4096, 32768, 1024, True, "vec4"),
    _row("softmax", 4096, 32768, 1024, True, "vec4+rcp"),
    _row("layernorm", 32768, 4096, 512, True), _row("layernorm", 32768, 4096, 256, False),
    _row("layernorm", 32768, 4096, 512, True, "vec4"),
    _row("layernorm", 4096, 32768, 1024, True), _row("layernorm", 4096, 32768, 1024, False),
    _row("layernorm", 4096, 32768, 1024, True, "vec4"),
    _gemm(4096, "frag+scalar"), _gemm(4096, "frag"), _gemm(4096, "frag+warp+pad"),
    _gemm(4096, "frag+warp+pad+pipe"), _gemm(4096, "frag+warp+pad+pipe+g8"),
    _gemm(4096, "shared+warp+pad+pipe+g8"),
    _gemm(8192, "frag"), _gemm(8192, "frag+warp+pad+pipe"), _gemm(8192, "frag+warp+pad+pipe+g8"),
]
SUITE_IDS = [c.slug for c in SUITE_CASES]


def import_torch():
    """torch on a freshly started GPU machine has failed its first import under
    pytest while registering one of its own custom ops; a second import succeeds
    (see tests/target_cuda/test_gpu_runtime.py)."""
    try:
        import torch
    except RuntimeError:
        import sys
        for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
            del sys.modules[name]
        import torch
    return torch
