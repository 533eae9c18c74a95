"""The command line: `tcomp compile` (cubin out, no GPU needed) and `tcomp run`."""
from __future__ import annotations

import json
import os

import pytest

from tcomp.cli import main

HERE = os.path.dirname(__file__)
TUT = os.path.join(HERE, "..", "tutorials")


def test_compile_writes_cubin_cu_ptx_json(tmp_path, capsys):
    out = str(tmp_path / "mm.cubin")
    rc = main(["compile", os.path.join(TUT, "matmul.tc"), "--schedule",
               os.path.join(TUT, "matmul_schedule.json"), "--sizes", "K=64", "--arch", "sm_90a",
               "-o", out])
    assert rc == 0
    for ext in (".cubin", ".cu", ".ptx", ".json"):
        assert os.path.getsize(str(tmp_path / ("mm" + ext))) > 0
    assert open(out, "rb").read(4) == b"\x7fELF"
    meta = json.load(open(tmp_path / "mm.json"))
    assert meta["bound_sizes"] == {"K": 64} and meta["arch"] == "sm_90a"
    assert "__global__" in open(tmp_path / "mm.cu").read()
    assert "wrote" in capsys.readouterr().out


def test_run_on_sim_checks_against_evaluate(capsys):
    rc = main(["run", os.path.join(TUT, "matmul.tc"), "--schedule",
               os.path.join(TUT, "matmul_schedule.json"), "--sizes", "M=20,N=18,K=9",
               "--target", "sim", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "check vs tcomp.evaluate: PASS" in out and "sim (CPU)" in out


def test_run_needs_sizes(capsys):
    rc = main(["run", os.path.join(TUT, "matmul.tc"), "--target", "sim", "--sizes", "M=4"])
    assert rc == 2
    assert "give the size(s) K with --sizes" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["compile", "nope.tc", "-o", "x.cubin"], "cannot read nope.tc"),
    (["run", "TUT/matmul.tc", "--sizes", "M"], "--sizes: expected NAME=INT, got 'M'"),
    (["run", "TUT/matmul.tc", "--sizes", "M=x"], "--sizes: M must be an integer, got 'x'"),
    (["compile", "TUT/matmul.tc", "-o", "out.bin"], "-o must name a .cubin file"),
    (["run", "TUT/matmul.tc", "--entry", "nothere", "--sizes", "M=1"], "no def named 'nothere'"),
])
def test_cli_errors(argv, message, capsys):
    argv = [a.replace("TUT", TUT) for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_source_reports_location(tmp_path, capsys):
    f = tmp_path / "bad.tc"
    f.write_text("def f(float(N) A) -> (B) {\n  B(i) = A(i) +\n}\n")
    assert main(["compile", str(f), "-o", str(tmp_path / "b.cubin")]) == 2
    err = capsys.readouterr().err
    assert "bad.tc:3:1: error: expected an expression" in err
