"""The GPU bench scripts' cases build, without a GPU or torch (CI has neither).

bench/rows.py, bench/tc_gemm.py, bench/tc_conv.py and bench/tune_targets.py
import torch at the top and run only on the GPU machine, so a case whose
schedule call is wrong surfaced there, after device time was spent (the
one-kernel cross-entropy cases passed `exp2` as the dtype). Here each script
is imported with a stand-in `torch` module (dtypes, and stand-ins for the
tensors some cases make eagerly), and every case's schedule is built and
lowered for the sim at the case's own sizes (the tensor-core variants at
small ones).
"""
from __future__ import annotations

import importlib.util
import sys
import types
from unittest import mock

import pytest

import tcomp

from .common import BENCH


def _stub_torch():
    torch = types.ModuleType("torch")
    torch.float32, torch.bfloat16, torch.float16 = "float32", "bfloat16", "float16"
    torch.finfo = lambda dt: types.SimpleNamespace(bits={"float32": 32}.get(dt, 16))
    torch.__getattr__ = lambda name: mock.MagicMock(name=f"torch.{name}")  # tensors made eagerly
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    functional.__getattr__ = lambda name: mock.MagicMock(name=f"F.{name}")
    torch.nn, nn.functional = nn, functional
    return {"torch": torch, "torch.nn": nn, "torch.nn.functional": functional}


def _load(name: str, monkeypatch):
    for mod, stub in _stub_torch().items():
        monkeypatch.setitem(sys.modules, mod, stub)
    monkeypatch.syspath_prepend(str(BENCH))
    for dep in ("timing", "tc_gemm", "tc_conv"):  # imported by name by the scripts: fresh copies
        monkeypatch.delitem(sys.modules, dep, raising=False)
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lowered(s, sizes):
    """Lowered for the sim (every schedule and lowering check), not run."""
    assert tcomp.build(s, target="sim", sizes=sizes) is not None


def test_rows_cases_build(monkeypatch):
    rows = _load("rows", monkeypatch)
    cases = [make() for make in rows.cases(sweep=True)]
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "two cases of bench/rows.py share a name"
    assert any("1 kernel" in n for n in names)
    for c in cases:
        op, s = c["build"]()
        _lowered(s, c["sizes"])


def test_tc_gemm_and_conv_variants_build(monkeypatch):
    tc = _load("tc_gemm", monkeypatch)
    S = sys.modules["schedules"]
    sizes = {"M": 256, "N": 264, "K": 192}
    for name, kw in tc.VARIANTS.items():
        _lowered(S.tc_gemm(**kw)[1], sizes)
    for name, kw in tc.EPILOGUE_VARIANTS.items():
        _lowered(S.tc_gemm(tcomp.op(S.TC_GEMM_GELU), **kw)[1], sizes)
    fp16 = tcomp.op(S.TC_GEMM.replace("bfloat16", "float16"))
    _lowered(S.tc_gemm(fp16, **tc.BEST_SWZ)[1], sizes)
    for layout in ("NT", "TN", "TT"):  # --layouts
        _lowered(S.tc_gemm(tcomp.op(S.TC_LAYOUTS[layout]), **tc.BEST_SWZ)[1], sizes)
    for name, kw in tc.BATCHED_VARIANTS.items():  # --batched
        _lowered(S.tc_gemm(tcomp.op(S.TC_BMM), **kw)[1], dict(sizes, NB=3))
    conv = _load("tc_conv", monkeypatch)
    csizes = {"N": 2, "H": 6, "W": 5, "C": 16, "K": 24, "R": 144}
    for name, kw in conv.VARIANTS.items():
        _lowered(S.tc_conv2d(**kw)[1], csizes)


def test_tune_targets_cases_are_known(monkeypatch):
    tt = _load("tune_targets", monkeypatch)
    assert set(tt.CASES) >= {"gemm_fp32", "gemm_bf16", "softmax", "layernorm", "bmm_bt",
                             "conv2d", "bmm_fp16", "bmm_bf16", "bmm_bf16_large"}
    with pytest.raises(SystemExit):  # an unknown case is refused by argparse
        monkeypatch.setattr(sys, "argv", ["tune_targets.py", "nope"])
        tt.main()


@pytest.mark.parametrize("case", ["softmax_bf16_wide", "layernorm_fp32_wide", "layernorm_bf16",
                                  "layernorm_bf16_wide"])
def test_tune_targets_row_cases_build(monkeypatch, case):
    tt = _load("tune_targets", monkeypatch)
    op, sizes, args, lib, lib_name, hand, exact = tt.CASES[case]()
    assert op.name in ("softmax", "layernorm") and lib_name.startswith("torch")
    _lowered(hand, sizes)


def test_rows_wide_bf16_defaults_are_the_measured_best(monkeypatch):
    """bf16 softmax and RMSNorm at 4096x32768 run the schedules measured fastest
    (bench/rows.py WIDE_BF16_DEFAULTS), R's row-in-registers default becomes a
    --sweep variant, and no sweep case repeats a default's schedule under another name."""
    rows = _load("rows", monkeypatch)
    by_name = {c["name"]: c for c in (make() for make in rows.cases(sweep=True))}
    built: dict = {}  # (the op's text, the schedule) -> case names
    for name, c in by_name.items():
        if "bfloat16_4096x32768" in name:
            op, s = c["build"]()
            built.setdefault((str(op), s.to_json()), []).append(name)
    assert [names for names in built.values() if len(names) > 1] == []
    sm = by_name["softmax_bfloat16_4096x32768"]["build"]()[1]
    rms = by_name["rmsnorm_bfloat16_4096x32768"]["build"]()[1]
    assert "softmax_bfloat16_4096x32768[1024t]" in by_name
    assert "softmax_bfloat16_4096x32768[512t]" in by_name  # the default before the ring
    assert not any(n.startswith("softmax_bfloat16_4096x32768[pipelined,32 rows,512t,3 stages")
                   for n in by_name)
    assert "rmsnorm_bfloat16_4096x32768[1024t]" in by_name
    assert "rmsnorm_bfloat16_4096x32768[shared row,512t,v4]" not in by_name
    sizes = {"N": 4096, "D": 32768}
    for s in (sm, rms):
        (k,) = tcomp.lower(s, sizes=sizes).kernels
        assert k.const_block() == (512, 1, 1)
    # RMSNorm's row is staged in shared memory (the shared-row schedule); softmax's rows are
    # prefetched into a ring of three shared rows by persistent blocks, 32 rows each
    assert "X_shared" in str(tcomp.lower(rms, sizes=sizes))
    (k,) = tcomp.lower(sm, sizes=sizes).kernels
    assert [int(g.value) for g in k.grid] == [128, 1, 1]
    text = str(tcomp.lower(sm, sizes=sizes))
    assert "alloc shared bfloat16 X_shared[3, 1, 32768]" in text and "cp_async_wait(1)" in text
    # layernorm bf16 4096x32768: the row in shared memory, 8-element passes read as 16-byte
    # vectors; the streamed row and the ring (the row in float32 registers) are sweep variants
    ln = by_name["layernorm_bfloat16_4096x32768"]["build"]()[1]
    assert "layernorm_bfloat16_4096x32768[1024t]" in by_name
    assert "layernorm_bfloat16_4096x32768[streamed,512t,unroll 4]" in by_name
    assert ("layernorm_bfloat16_4096x32768[pipelined,32 rows,512t,3 stages,x in registers]"
            in by_name)
    assert "layernorm_bfloat16_4096x32768[shared row,512t,v8]" not in by_name
    text = str(tcomp.lower(ln, sizes=sizes))
    assert "alloc shared bfloat16 X_shared[1, 32768]" in text
    assert "X_shared_piece" in text  # the passes read 16-byte pieces (vector_loads)
