"""fp8 inputs of `tcomp run --input`: float8_e4m3fn from numpy.save (raw 1-byte
records, as bfloat16), float8_e5m2 as its bytes (numpy.save writes it as '<f1',
which numpy.load cannot read: a clear error names the remedy)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.test_cli import run_cli

SRC = """def e4(float8_e4m3fn(N) X) -> (O) { O(i) = X(i) * 2.0 }
def e5(float8_e5m2(N) X) -> (O) { O(i) = X(i) * 2.0 }
"""


def _run(tmp_path, capsys, entry, path):
    tc = tmp_path / "f.tc"
    tc.write_text(SRC)
    return run_cli(["run", str(tc), "--entry", entry, "--input", f"X={path}", "--target", "sim",
                    "--repeat", "1"], capsys)


def test_e4m3fn_from_numpy_save(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.arange(6).astype(ml_dtypes.float8_e4m3fn))
    rc, out, err = _run(tmp_path, capsys, "e4", tmp_path / "x.npy")
    assert rc == 0 and "PASS" in out, err


def test_e5m2_as_bytes(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.arange(6).astype(ml_dtypes.float8_e5m2).view(np.uint8))
    rc, out, err = _run(tmp_path, capsys, "e5", tmp_path / "x.npy")
    assert rc == 0 and "PASS" in out, err


def test_e5m2_from_numpy_save_names_the_remedy(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.arange(6).astype(ml_dtypes.float8_e5m2))
    rc, out, err = _run(tmp_path, capsys, "e5", tmp_path / "x.npy")
    assert rc == 2
    assert (f"--input X: {tmp_path / 'x.npy'} holds float8_e5m2 values, which numpy.load cannot "
            f"read back; save x.view(numpy.uint8) (the bytes are taken as float8_e5m2)") in err
