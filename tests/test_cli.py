"""The command line: `tcomp compile` (cubin out, no GPU needed) and `tcomp run`
(docs/cli.md). Every user error is one `tcomp: ...` line on stderr and exit
status 2, never a traceback; a failed check is exit status 1."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tcomp
from tcomp.cli import main, parser
from tcomp.cli_inputs import index_ranges, make_inputs

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
TUT = os.path.join(ROOT, "tutorials")
MM_TC = os.path.join(TUT, "matmul.tc")
MM_S = os.path.join(TUT, "matmul_schedule.json")

GATHERS = """
def lut(float(E, D) LUT, int32(B, L) I) -> (O) {
  O(i, j) +=! LUT(I(i, k), j)
}
def shifted(float(E) T, int64(B) I) -> (O) {
  O(i) = T(I(i) + 2) + T(int32(I(i)) - 1)
}
def viabind(float(E) T, int8(B) I) -> (O) {
  O(i) = T(x) where x = I(i)
}
def plain(int32(N) A, uint8(N) U) -> (O) { O(i) = A(i) / 3 + int32(U(i)) }
def bf(bfloat16(N) X) -> (O) { O(i) = float(X(i)) * 2.0 }
def fixed(float(N, 4) X) -> (O) { O(i) +=! X(i, j) }
"""


@pytest.fixture
def gathers(tmp_path):
    path = tmp_path / "g.tc"
    path.write_text(GATHERS)
    return str(path)


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of `tcomp argv`, SystemExit included."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def error_of(argv, capsys) -> str:
    rc, _, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert err.startswith("tcomp: ") and err.endswith("\n") and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ compile and run
def test_compile_writes_cubin_cu_ptx_json(tmp_path, capsys):
    out = str(tmp_path / "mm.cubin")
    rc = main(["compile", MM_TC, "--schedule", MM_S, "--sizes", "K=64", "--arch", "sm_90a",
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
    rc = main(["run", MM_TC, "--schedule", MM_S, "--sizes", "M=20,N=18,K=9",
               "--target", "sim", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "check vs tcomp.evaluate: PASS" in out and "sim (CPU)" in out
    assert "(median of 1, host-timed, includes copies)" in out


def test_run_exits_1_when_the_check_fails(capsys, monkeypatch):
    class Wrong:
        def __init__(self, s, target, sizes):
            self.op = s.op

        def __call__(self, *arrays):
            return tcomp.evaluate(self.op, *arrays) + 1.0
    monkeypatch.setattr(tcomp, "build", Wrong)
    rc, out, _ = run_cli(["run", MM_TC, "--sizes", "M=3,N=4,K=5", "--target", "sim"], capsys)
    assert rc == 1
    assert "check vs tcomp.evaluate: FAIL — C: max error" in out and "MISMATCH" in out


def test_console_script_entry_point():
    """`python -m tcomp` is the same program (as the installed `tcomp` script)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "tcomp", "run", MM_TC, "--sizes", "M=-1"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert p.stderr == "tcomp: --sizes: M must be >= 0, got -1\n"
    p = subprocess.run([sys.executable, "-m", "tcomp", "--version"], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0 and p.stdout == f"tcomp {tcomp.__version__}\n"


# ------------------------------------------------------------------ help and version
def test_version(capsys):
    rc, out, _ = run_cli(["--version"], capsys)
    assert rc == 0 and out == f"tcomp {tcomp.__version__}\n"


def test_help_describes_each_subcommand(capsys):
    rc, out, _ = run_cli(["--help"], capsys)
    assert rc == 0
    assert "compile   compile a def to OUT.cubin, OUT.cu, OUT.ptx and OUT.json" in out
    assert "run       compile and run a def, and check the result against" in out
    assert "--version" in out
    for cmd, words in (("compile", ["--arch", "-o OUT.cubin", "stay symbolic"]),
                       ("run", ["--input NAME=FILE.npy", "gets values in range of the dimension",
                                "Exit status: 0 when the check passes"])):
        rc, out, _ = run_cli([cmd, "--help"], capsys)
        assert rc == 0
        for w in words:
            assert w in out, (cmd, w)


def test_every_option_has_help_text():
    top = parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == {"compile", "run", "tune"}
    assert all(c.help for c in subs._choices_actions)
    for p in [top, *subs.choices.values()]:
        for a in p._actions:
            if not isinstance(a, argparse._SubParsersAction):
                assert a.help and a.help != argparse.SUPPRESS, (p.prog, a.dest)


# ------------------------------------------------------------------ --input
def test_input_files_are_used_and_bind_sizes(tmp_path, gathers, capsys, monkeypatch):
    lut = np.arange(200, dtype=np.float32).reshape(50, 4)
    idx = (np.arange(15, dtype=np.int32).reshape(3, 5) * 7) % 50
    np.save(tmp_path / "lut.npy", lut)
    np.save(tmp_path / "idx.npy", idx)
    seen = []
    real = tcomp.evaluate
    monkeypatch.setattr(tcomp, "evaluate", lambda op, *a: seen.append(a) or real(op, *a))
    rc, out, err = run_cli(["run", gathers, "--entry", "lut", "--input",
                            f"LUT={tmp_path / 'lut.npy'}", "--input", f"I={tmp_path / 'idx.npy'}",
                            "--target", "sim", "--repeat", "1"], capsys)
    assert rc == 0, err
    assert "PASS" in out
    np.testing.assert_array_equal(seen[0][0], lut)
    np.testing.assert_array_equal(seen[0][1], idx)


def test_input_bfloat16_file(tmp_path, gathers, capsys):
    import ml_dtypes
    np.save(tmp_path / "x.npy", np.arange(6).astype(ml_dtypes.bfloat16))
    rc, out, err = run_cli(["run", gathers, "--entry", "bf", "--input",
                            f"X={tmp_path / 'x.npy'}", "--target", "sim", "--repeat", "1"], capsys)
    assert rc == 0 and "PASS" in out, err


@pytest.mark.parametrize("files, argv, message", [
    ({}, ["--input", "LUT"], "--input: expected NAME=FILE.npy, got 'LUT'"),
    ({}, ["--input", "Q=x.npy"], "--input: 'Q' is not an input of 'lut' (inputs: LUT, I)"),
    ({"a.npy": np.zeros((2, 2), np.float32)}, ["--input", "LUT=a.npy", "--input", "LUT=a.npy"],
     "--input: LUT is given twice"),
    ({}, ["--input", "LUT=nope.npy"], "--input LUT: cannot read nope.npy: No such file or "
                                      "directory"),
    ({"t.npy": "text"}, ["--input", "LUT=t.npy"], "--input LUT: t.npy is not a .npy file; save "
                                                  "the array with numpy.save"),
    ({"z.npz": "npz"}, ["--input", "LUT=z.npz"], "--input LUT: z.npz is an .npz archive; save "
                                                 "the one array with numpy.save"),
    ({"o.npy": np.array([{}], dtype=object)}, ["--input", "LUT=o.npy"],
     "--input LUT: cannot load o.npy: Object arrays cannot be loaded when allow_pickle=False"),
    ({"i.npy": np.zeros((3, 5), np.int64)}, ["--input", "I=i.npy", "--sizes", "E=4,D=2"],
     "--input I: i.npy holds int64 values but 'I' is int32; save it as int32 (tcomp does not "
     "cast inputs)"),
    ({"a.npy": np.zeros(3, np.float32)}, ["--input", "LUT=a.npy"],
     "--input LUT: the array has shape (3,), but 'LUT' has 2 dimension(s)"),
    ({"a.npy": np.zeros((3, 2), np.float32)}, ["--input", "LUT=a.npy", "--sizes", "E=4"],
     "--input LUT: dimension 0 is 3, but E=4 (from --sizes)"),
    ({"a.npy": np.zeros((3, 2), np.float32), "i.npy": np.zeros((2, 3), np.float32)},
     ["--input", "LUT=a.npy", "--input", "I=i.npy"],
     "--input I: i.npy holds float32 values but 'I' is int32"),
    ({"a.npy": np.zeros((3, 2), np.float32)}, ["--input", "LUT=a.npy"],
     "run: give the size(s) B, L with --sizes (or the inputs that have them with --input)"),
    ({"a.npy": np.zeros((3, 2), np.float32), "i.npy": np.full((1, 1), 9, np.int32)},
     ["--input", "LUT=a.npy", "--input", "I=i.npy"], "reads 'LUT' out of bounds"),
])
def test_input_errors(files, argv, message, tmp_path, gathers, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, content in files.items():
        if isinstance(content, np.ndarray):
            np.save(tmp_path / name, content)
        elif content == "npz":
            np.savez(tmp_path / name, a=np.zeros(2))
        else:
            (tmp_path / name).write_text(content)
    err = error_of(["run", gathers, "--entry", "lut", "--target", "sim", *argv], capsys)
    assert message in err


def test_constant_dimension_of_an_input_file(tmp_path, gathers, capsys):
    np.save(tmp_path / "x.npy", np.zeros((3, 5), np.float32))
    err = error_of(["run", gathers, "--entry", "fixed", "--input", f"X={tmp_path / 'x.npy'}",
                    "--target", "sim"], capsys)
    assert err == "tcomp: --input X: dimension 1 is 5, but 'X' declares it as 4\n"


# ------------------------------------------------------------------ random integer inputs
def test_gather_indices_are_in_range(gathers):
    prog = tcomp.parse(GATHERS)
    assert index_ranges(prog["lut"], {"E": 50, "D": 4, "B": 3, "L": 5}) == {"I": (0, 50)}
    # I(i) + 2 in 0:E and I(i) - 1 in 0:E intersect to 1:E-2
    assert index_ranges(prog["shifted"], {"E": 6, "B": 4}) == {"I": (1, 4)}
    assert index_ranges(prog["viabind"], {"E": 6, "B": 4}) == {"I": (0, 6)}  # via where x = I(i)
    assert index_ranges(prog["plain"], {"N": 4}) == {}
    rng = np.random.default_rng(0)
    for name, sizes in (("lut", {"E": 7, "D": 2, "B": 30, "L": 20}),
                        ("shifted", {"E": 6, "B": 400}), ("viabind", {"E": 300, "B": 500}),
                        ("plain", {"N": 1000})):
        op = prog[name]
        arrays = make_inputs(op, {}, sizes, rng)
        tcomp.evaluate(op, *arrays)  # no out-of-bounds gather
        ints = [a for t, a in zip(op.inputs, arrays) if t.dtype.is_int]
        if name == "shifted":
            assert ints[0].min() == 1 and ints[0].max() == 3
        elif name == "viabind":  # int8: the range is clipped to the type
            assert ints[0].min() == 0 and ints[0].max() == 127
        elif name == "plain":
            assert all(a.min() >= 0 and a.max() <= 99 for a in ints)


def test_no_valid_gather_index(gathers, capsys):
    err = error_of(["run", gathers, "--entry", "shifted", "--sizes", "E=2,B=3",
                    "--target", "sim"], capsys)
    assert err == ("tcomp: run: no value of int64 indexes what 'I' indexes in bounds (valid "
                   "range 1..-1); give 'I' with --input\n")


# ------------------------------------------------------------------ every other error
@pytest.mark.parametrize("argv, message", [
    (["compile", "nope.tc", "-o", "x.cubin"], "cannot read source nope.tc: No such file or "
                                              "directory"),
    (["run", TUT, "--sizes", "M=1"], f"cannot read source {TUT}: Is a directory"),
    (["run", "MM", "--sizes", "M"], "--sizes: expected NAME=INT, got 'M'"),
    (["run", "MM", "--sizes", "M=1,"], "--sizes: expected NAME=INT, got ''"),
    (["run", "MM", "--sizes", "M=x"], "--sizes: M must be an integer, got 'x'"),
    (["run", "MM", "--sizes", "M=-3"], "--sizes: M must be >= 0, got -3"),
    (["run", "MM", "--sizes", "M=1,M=2"], "--sizes: M is given twice"),
    (["run", "MM", "--sizes", "Q=2"], "--sizes: 'Q' is not a size variable of 'matmul' "
                                      "(sizes: M, K, N)"),
    (["compile", "MM", "--sizes", "Q=2", "-o", "x.cubin"],
     "--sizes: 'Q' is not a size variable of 'matmul' (sizes: M, K, N)"),
    (["run", "MM", "--sizes", "M=4"], "run: give the size(s) K, N with --sizes (or the inputs "
                                      "that have them with --input)"),
    (["compile", "MM", "-o", "out.bin"], "-o must name a .cubin file, got 'out.bin'"),
    (["run", "MM", "--entry", "nothere", "--sizes", "M=1"],
     "no def named 'nothere' (defs: matmul)"),
    (["run", "MM", "--schedule", "nope.json"], "cannot read schedule nope.json: No such file"),
    (["run", "MM", "--schedule", "BADJSON"], "bad.json: from_json: not a tcomp schedule "
                                             "(JSONDecodeError"),
    (["run", "MM", "--schedule", "OLDJSON"], "old.json: from_json: schedule format version 7 is "
                                             "not supported; this tcomp reads version 1"),
    (["run", "MM", "--schedule", "BADAXIS"], "axis.json: split: stage 'C' has no axis 'zz'"),
    (["run", "MM", "--bogus"], "unrecognized arguments: --bogus (see 'tcomp --help')"),
    (["run", "MM", "--target", "tpu"], "argument --target: invalid choice: 'tpu'"),
    (["run", "MM", "--repeat", "0"], "argument --repeat: expected a positive integer, got 0 "
                                     "(see 'tcomp run --help')"),
    (["run", "MM", "--repeat", "x"], "argument --repeat: expected a positive integer, got 'x'"),
    (["run", "MM", "--seed", "x"], "argument --seed: expected a non-negative integer, got 'x'"),
    (["compile", "MM"], "the following arguments are required: -o/--output"),
    ([], "the following arguments are required: COMMAND (see 'tcomp --help')"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    (["compile", "MM", "-o", "BLOCKED/x.cubin"], "cannot write blocker/x.cubin: "),
])
def test_cli_errors(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "old.json").write_text('{"tcomp_schedule": 7, "directives": []}')
    (tmp_path / "axis.json").write_text(json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "Split", "stage": "C", "axis": "zz", "factor": 2, "nparts": None}]}))
    (tmp_path / "blocker").write_text("a file where a folder should be")
    names = {"MM": MM_TC, "BADJSON": "bad.json", "OLDJSON": "old.json", "BADAXIS": "axis.json",
             "BLOCKED": "blocker"}
    argv = [names.get(a, a).replace("BLOCKED", "blocker") for a in argv]
    err = error_of(argv, capsys)
    assert message in err
    assert err.count("\n") == 1, err  # one line


def test_bad_source_reports_location(tmp_path, capsys):
    f = tmp_path / "bad.tc"
    f.write_text("def f(float(N) A) -> (B) {\n  B(i) = A(i) +\n}\n")
    err = error_of(["compile", str(f), "-o", str(tmp_path / "b.cubin")], capsys)
    # A source error keeps its excerpt: the line and a caret under the column.
    assert err.startswith(f"tcomp: {f}:3:1: error: expected an expression")
    assert err.endswith("    }\n    ^\n")


def test_not_utf8_source(tmp_path, capsys):
    f = tmp_path / "bin.tc"
    f.write_bytes(b"def \xff")
    err = error_of(["run", str(f)], capsys)
    assert err == f"tcomp: cannot read source {f}: not UTF-8 text (byte 4)\n"


def test_several_defs_need_entry(gathers, capsys):
    err = error_of(["run", gathers, "--sizes", "N=3"], capsys)
    assert err == (f"tcomp: {gathers} has 6 defs (lut, shifted, viabind, plain, bf, fixed); "
                   f"choose one with --entry\n")
