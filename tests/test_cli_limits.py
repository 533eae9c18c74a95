"""The command line keeps docs/cli.md's promise (one `tcomp: ...` line, exit status 2, no
traceback) for inputs beyond what a run can take (issue 22, defect 8): a negative seed
(NumPy raised ValueError), sizes beyond 64 bits or beyond int()'s 4,300 digits, and sizes
whose arrays do not fit in memory (NumPy raised MemoryError, or ValueError for a shape of
more than 2^63 elements)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tcomp
from tcomp import cli_inputs
from tcomp.cli import main

MM_TC = os.path.join(os.path.dirname(__file__), "..", "tutorials", "matmul.tc")


def error_of(argv, capsys) -> str:
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("tcomp: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err[len("tcomp: "):-1]


@pytest.mark.parametrize("seed, got", [("-5", "-5"), ("-0x1", "'-0x1'"), ("1.5", "'1.5'")])
def test_seed_must_be_non_negative(seed, got, capsys):
    err = error_of(["run", MM_TC, "--sizes", "M=2,K=2,N=2", "--target", "sim", f"--seed={seed}"],
                   capsys)
    assert err == (f"argument --seed: expected a non-negative integer, got {got} "
                   f"(see 'tcomp run --help')")


def test_a_large_seed_is_a_seed(capsys):
    rc = main(["run", MM_TC, "--sizes", "M=2,K=2,N=2", "--target", "sim", "--repeat", "1",
               "--seed", str(2 ** 200)])
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("value, message", [
    ("9223372036854775808", "M must be at most 2^63 - 1 (sizes are 64-bit ints), got "
                            "9223372036854775808"),
    ("99999999999999999999999", "M must be at most 2^63 - 1 (sizes are 64-bit ints), got "
                                "99999999999999999999999"),
    ("9" * 5000, "M must be at most 2^63 - 1 (sizes are 64-bit ints), got 999999999999... "
                 "(5000 characters)"),
    ("-" + "9" * 5000, "M must be >= 0, got -99999999999... (5001 characters)"),
    ("0" * 5000 + "3", None),
    ("x" * 100, "M must be an integer, got '" + "x" * 37 + "...'"),
])
@pytest.mark.parametrize("cmd", ["run", "compile"])
def test_sizes_beyond_64_bits(cmd, value, message, capsys, tmp_path):
    op = tcomp.op(open(MM_TC).read())
    if message is None:
        assert cli_inputs.parse_sizes(f"M={value}", op) == {"M": 3}
        return
    argv = [cmd, MM_TC, "--sizes", f"M={value},K=2,N=2"]
    argv += ["--target", "sim"] if cmd == "run" else ["-o", str(tmp_path / "x.cubin")]
    assert error_of(argv, capsys) == f"--sizes: {message}"


def test_sizes_too_large_for_memory(capsys):
    err = error_of(["run", MM_TC, "--sizes", "M=100000000,K=100000000,N=2", "--target", "sim"],
                   capsys)
    assert err.startswith("run: at these sizes the arrays need 106.6 PiB ('A' the most), more "
                          "than the ")
    assert err.endswith(" of memory free here; give smaller --sizes")
    # a shape of more than 2^63 elements (NumPy: "Maximum allowed dimension exceeded")
    err = error_of(["run", MM_TC, "--sizes", f"M={2 ** 62},K={2 ** 62},N=1", "--target", "sim"],
                   capsys)
    assert err.startswith("run: at these sizes the arrays need ")


def test_check_memory_counts_inputs_outputs_and_the_draw():
    op = tcomp.op(open(MM_TC).read())
    sizes = {"M": 1000, "K": 1000, "N": 1000}
    # A, B: 4 MB each; C: 4 MB twice (evaluate's and the kernel's); the draw: 8 MB
    need = 4_000_000 * 4 + 8_000_000
    cli_inputs.check_memory(op, {}, sizes, limit=need)
    with pytest.raises(tcomp.TcompError) as e:
        cli_inputs.check_memory(op, {}, sizes, limit=need - 1)
    assert str(e.value) == ("run: at these sizes the arrays need 22.9 MiB ('C' the most), more "
                            "than the 22.9 MiB of memory free here; give smaller --sizes")
    # a given input is already in memory: not counted again
    given = {"A": np.zeros((1000, 1000), np.float32)}
    cli_inputs.check_memory(op, given, sizes, limit=need - 4_000_000)


def test_out_of_memory_anywhere_is_one_line(monkeypatch, capsys):
    def no_memory(*args):
        raise MemoryError()
    monkeypatch.setattr(cli_inputs, "make_inputs", no_memory)
    err = error_of(["run", MM_TC, "--sizes", "M=2,K=2,N=2", "--target", "sim"], capsys)
    assert err == "run: out of memory; give smaller --sizes"
