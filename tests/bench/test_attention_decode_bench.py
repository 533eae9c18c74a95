"""bench/attention_decode.py's CPU-side logic (no torch, no GPU): its byte
count, the --splits parser and its error, the ratios and printed lines from
a result, and that every case's kernel lowers at small sizes."""
from __future__ import annotations

import importlib.util

import pytest

import tcomp
from tcomp.kernels import decode_schedule, decode_source

from .common import BENCH


def _mod():
    spec = importlib.util.spec_from_file_location("attention_decode_bench",
                                                  BENCH / "attention_decode.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_kv_bytes_of_the_issue_row():
    assert _mod().kv_bytes(32, 32, 32768) == 17_179_869_184   # 2 x 1024 x 32768 x 128 x 2


def test_splits_parser():
    m = _mod()
    assert m.parse_splits("4,8,16") == [4, 8, 16]
    with pytest.raises(SystemExit, match="--splits: positive integers"):
        m.parse_splits("4,0")


def test_ratios_and_lines():
    m = _mod()
    res = dict(case="c", kv_bytes=4e9, copy=dict(ms=2.0, kv_GBps=2000.0, rw_GBps=4000.0),
               tcomp={"8": dict(ms=1.25, kv_GBps=3200.0), "4": dict(error="E: x")},
               sdpa={"flash": dict(ms=2.5, kv_GBps=1600.0), "cudnn": dict(error="E: no")})
    m.summarise(res)
    assert res["tcomp"]["8"]["vs_copy"] == pytest.approx(0.8)
    assert res["tcomp"]["8"]["vs_best_sdpa"] == pytest.approx(2.0)
    text = "\n".join(m.lines(res))
    assert "tcomp P=8: 1.250 ms 3200 GB/s 0.80x copy 2.00x best SDPA" in text
    assert "tcomp P=4: E: x" in text and "sdpa cudnn: E: no" in text


@pytest.mark.parametrize("case", range(3))
def test_each_case_lowers(case):
    name, b, h, hk, t = _mod().cases()[case]
    op = tcomp.op(decode_source("bfloat16", None, 128, 8, h // hk))
    prog = tcomp.lower(decode_schedule(op, 128), sizes={"D": 128, "E": 128, "T": t})
    assert [k.name for k in prog.kernels][0] == "attention_decode_Sc"


def test_empty_lists_and_the_other_flags():
    m = _mod()
    assert m.parse_splits("") == []
    with pytest.raises(SystemExit, match="--fused: positive integers"):
        m.parse_splits("-1", "--fused")


def test_fused_ratios_and_lines():
    m = _mod()
    res = dict(case="c", kv_bytes=4e9, copy=dict(ms=2.0, kv_GBps=2000.0, rw_GBps=4000.0),
               tcomp={}, fused={"16/u4": dict(ms=1.0, kv_GBps=3600.0, blocks=16384),
                                "8/u2": dict(error="E: y")},
               sdpa={"cudnn": dict(ms=1.2, kv_GBps=3000.0)})
    m.summarise(res)
    assert res["fused"]["16/u4"]["vs_copy"] == pytest.approx(0.9)
    text = "\n".join(m.lines(res))
    assert "fused P=16/u4 (16384 blocks): 1.000 ms 3600 GB/s 0.90x copy 1.20x best SDPA" in text
    assert "fused P=8/u2: E: y" in text


@pytest.mark.parametrize("case", range(3))
def test_each_case_builds_fused(case):
    from tcomp.kernels.attention_decode_fused import decode_program
    name, b, h, hk, t = _mod().cases()[case]
    prog = decode_program({"D": 128, "E": 128, "S": 1, "T": t}, parts=16, kv_group=h // hk)
    assert [k.name for k in prog.kernels] == ["attention_decode_split", "attention_decode_combine"]
