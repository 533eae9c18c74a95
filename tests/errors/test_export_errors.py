"""Every error of `k.export` and `tcomp.load`: the message text, naming the
file, the field and the remedy (tcomp/target_cuda/sidecar.py, kernel.py)."""
from __future__ import annotations

import os
import shutil

import pytest

import tcomp
from tcomp.target_cuda import cuda_api, sidecar

from ..target_cuda import sidecars as S

AGAIN = "; export the kernel again (k.export or tcomp compile)"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("k")
    path = str(folder / "k.cubin")
    tcomp.build(S.normalize(), target="cuda:sm_90a").export(path)
    return path


@pytest.fixture
def path(exported, tmp_path):
    """A fresh copy of the export: its .cubin path."""
    for ext in (".cubin", ".i64.cubin", ".json"):
        shutil.copy(exported[:-6] + ext, tmp_path / ("k" + ext))
    return str(tmp_path / "k.cubin")


def message(fn) -> str:
    with pytest.raises(tcomp.TcompError) as e:
        fn()
    return str(e.value)


def load_error(path: str) -> str:
    return message(lambda: tcomp.load(path))


def kern(m, i=0):
    return m["kernels"][i]


# ------------------------------------------------------------------ paths and files
@pytest.mark.parametrize("bad,kind", [(None, "NoneType"), (3, "int"), (b"k.cubin", "bytes")])
def test_a_path_that_is_not_a_string(bad, kind):
    want = f"path must be a str or os.PathLike naming a .cubin file, got {kind}"
    assert message(lambda: tcomp.load(bad)) == f"load: {want}"
    k = tcomp.build(S.normalize(), target="cuda:sm_90a")
    assert message(lambda: k.export(bad)) == f"export: {want}"


def test_a_path_without_cubin(path):
    assert message(lambda: tcomp.load(path[:-6] + ".json")) == (
        f"load: path must end with .cubin, got '{path[:-6]}.json'")
    assert message(lambda: tcomp.load("a\x00.cubin")) == (
        "load: path must not contain a NUL character, got 'a\\x00.cubin'")


def test_missing_files(path):
    os.remove(path[:-6] + ".json")
    assert load_error(path) == (f"load: [Errno 2] No such file or directory: "
                                f"'{path[:-6]}.json'")
    os.remove(path)
    assert load_error(path) == f"load: [Errno 2] No such file or directory: '{path}'"


def test_a_missing_64_bit_variant(path):
    os.remove(path[:-6] + ".i64.cubin")
    assert load_error(path) == (
        f"load: {path[:-6]}.json names the 64-bit variant 'k.i64.cubin', which cannot be read "
        f"([Errno 2] No such file or directory: '{path[:-6]}.i64.cubin')")


def test_export_that_cannot_write(tmp_path):
    os.makedirs(tmp_path / "d.cubin")  # a folder where the cubin should go
    k = tcomp.build(S.normalize(), target="cuda:sm_90a")
    assert message(lambda: k.export(str(tmp_path / "d.cubin"))) == (
        f"export: cannot write {tmp_path / 'd.cubin'}: [Errno 21] Is a directory: "
        f"'{tmp_path / 'd.cubin'}'")


# ------------------------------------------------------------------ JSON
@pytest.mark.parametrize("text,problem", [
    ("", "is not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ("{\"format\": 2", "is not valid JSON (Expecting ',' delimiter: line 1 column 13 (char 12))"),
    ("\xff", "is not valid JSON ('utf-8' codec can't decode byte 0xff in position 0: invalid "
             "start byte)"),
    ("[" * 100000 + "]" * 100000, "nests JSON too deeply to be a sidecar" + AGAIN),
    ("{\"a\": " * 100000 + "1" + "}" * 100000, "nests JSON too deeply to be a sidecar" + AGAIN),
])
def test_a_sidecar_that_is_not_json(path, text, problem):
    with open(path[:-6] + ".json", "wb") as f:
        f.write(text.encode("latin-1"))
    assert load_error(path) == f"load: {path[:-6]}.json {problem}"


def test_an_integer_of_too_many_digits(path):
    with open(path[:-6] + ".json", "w") as f:
        f.write("{\"format\": " + "9" * 5000 + "}")
    assert load_error(path).startswith(f"load: {path[:-6]}.json is not valid JSON (Exceeds the "
                                       f"limit (4300 digits)")


# ------------------------------------------------------------------ format
@pytest.mark.parametrize("sidecar_json,want", [
    ([], ": the sidecar must be a JSON object, got an array" + AGAIN),
    ({}, ": the sidecar has no 'format'" + AGAIN),
    ({"format": 99}, " has format 99, expected 3"),
    ({"format": "2"}, " has format \"2\", expected 3"),
    ({"format": True}, " has format true, expected 3"),
    ({"format": 1}, " has format 1: it was written by an older tcomp, without the digests that "
                    "tie a sidecar to its cubin; export the kernel again with this version "
                    "(format 3)"),
])
def test_formats(path, sidecar_json, want):
    S.write(path, sidecar_json)
    assert load_error(path) == f"load: {path[:-6]}.json{want}"


# ------------------------------------------------------------------ fields
FIELD_ERRORS = [
    (lambda m: m.pop("kernels"), "the sidecar has no 'kernels'"),
    (lambda m: m.__setitem__("kernels", {}), "kernels must be a JSON array, got an object"),
    (lambda m: m.__setitem__("arch", "sm90"), "arch must be an architecture like sm_90a, got "
                                              "'sm90'"),
    (lambda m: m.__setitem__("op", ""), "op must be a non-empty string, got string \"\""),
    (lambda m: m.__setitem__("tcomp_version", None),
     "tcomp_version must be a non-empty string, got null"),
    (lambda m: m["sizes"].append("N"), "sizes names 'N' twice"),
    (lambda m: m["bound_sizes"].__setitem__("N", 4),
     "bound_sizes fixes 'N', which 'sizes' lists as symbolic"),
    (lambda m: m["bound_sizes"].__setitem__("Q", 1.5),
     "bound_sizes.Q must be an integer, got number 1.5"),
    (lambda m: m["inputs"][0].pop("dtype"), "inputs[0] has no 'dtype'"),
    (lambda m: m["inputs"][0].__setitem__("dtype", "float128"),
     "inputs[0].dtype is 'float128', not a tcomp type"),
    (lambda m: m["inputs"][0].__setitem__("shape", ["N"] * 65),
     "inputs[0].shape has 65 entries, more than 64"),
    (lambda m: m["inputs"][1]["shape"].__setitem__(0, -2),
     "inputs[1].shape[0] must be in 0..9223372036854775807, got -2"),
    (lambda m: m["outputs"][0]["shape"].__setitem__(0, ["^", "N", 2]),
     "outputs[0].shape[0] must be [op, a, b] with op one of + - * / % min max, got "
     "[\"^\", \"N\", 2]"),
    (lambda m: m["outputs"][0]["shape"].__setitem__(0, 2.0),
     "outputs[0].shape[0] must be a size expression (integer, size name or [op, a, b]), got "
     "number 2.0"),
    (lambda m: m["outputs"][0]["shape"].__setitem__(0, _deep(70)),
     "outputs[0].shape[0] is a size expression nested deeper than 64"),
    (lambda m: m["outputs"][0]["shape"].__setitem__(0, ["+", "N", 2**63]),
     "outputs[0].shape[0] must be in -9223372036854775808..9223372036854775807, got "
     "9223372036854775808"),
    (lambda m: m["outputs"][0].__setitem__("zero_fill", 0),
     "outputs[0].zero_fill must be true or false, got number 0"),
    (lambda m: m["outputs"][1].__setitem__("declared_shape", ["N"]),
     "outputs[1].declared_shape must have 2 entries, got 1"),
    (lambda m: m.__setitem__("outputs", []), "outputs is empty"),
    (lambda m: m["temps"].append({"name": "X", "dtype": "float32", "shape": [4]}),
     "inputs, outputs and temps together names 'X' twice"),
    (lambda m: m["size_sources"].pop("D"), "size_sources does not say where size 'D' comes from"),
    (lambda m: m["size_sources"].__setitem__("D", [0, 0]),
     "size_sources.D points at input 'X' dimension 0, whose extent is \"N\", not 'D'"),
    (lambda m: m["size_sources"].__setitem__("D", [2, 0]),
     "size_sources.D[0] must be in 0..1, got 2"),
    (lambda m: m["signature"].__setitem__("op", "g"),
     "signature.op is \"g\", but the sidecar's op is 'f'"),
    (lambda m: m["signature"]["inputs"].pop(), "signature.inputs must have 2 entries, got 1"),
    (lambda m: m["signature"]["inputs"][0]["dims"].__setitem__(1, "N"),
     "signature.inputs[0].dims[1] is \"N\", but inputs[0].shape[1] is \"D\""),
    (lambda m: m["signature"]["write_checks"].append({"tensor": "O"}),
     "signature.write_checks[0] has no 'dim'"),
    (lambda m: m.__setitem__("index_bits", 16), "index_bits must be 32 or 64, got 16"),
    (lambda m: m.__setitem__("cubin_sha256", "ABC"),
     "cubin_sha256 must be a sha256 in lowercase hex, got 'ABC'"),
    (lambda m: m.pop("index64"), "the sidecar has symbolic sizes and 32-bit indices but no "
                                 "'index64' (the variant for tensors of 2^31 elements or more)"),
    (lambda m: (m.__setitem__("index_bits", 64)),
     "index64 is present, but only a 32-bit kernel with symbolic sizes has a 64-bit variant"),
    (lambda m: kern(m)["grid"].pop(), "kernels[0].grid must have 3 entries, got 2"),
    (lambda m: kern(m)["grid"].__setitem__(1, 65536), "kernels[0].grid[1] must be in 0..65535, "
                                                      "got 65536"),
    (lambda m: kern(m)["block"].__setitem__(2, 65), "kernels[0].block[2] must be in 0..64, got 65"),
    (lambda m: kern(m)["block"].__setitem__(1, 64),
     "kernels[0].block has 2048 threads per block in its constant dimensions, more than CUDA's "
     "1024"),
    (lambda m: kern(m).__setitem__("name", "f S"), "kernels[0].name must be a C identifier, got "
                                                   "'f S'"),
    (lambda m: kern(m, 1).__setitem__("name", "f_S"), "kernels names 'f_S' twice"),
    (lambda m: kern(m).__setitem__("dynamic_smem", -1),
     "kernels[0].dynamic_smem must be in 0..232448, got -1"),
    (lambda m: kern(m)["params"].__setitem__(0, {"buffer": "X", "size": "N"}),
     "kernels[0].params[0] must be {\"buffer\": NAME} or {\"size\": NAME} or "
     "{\"tensor_map\": {...}}, got "
     "{\"buffer\": \"X\", \"size\": \"N\"}"),
    (lambda m: kern(m)["params"].__setitem__(0, {"pointer": "X"}),
     "kernels[0].params[0] must be {\"buffer\": NAME} or {\"size\": NAME} or "
     "{\"tensor_map\": {...}}, got "
     "{\"pointer\": \"X\"}"),
    (lambda m: kern(m)["params"].__setitem__(0, {"buffer": 1}),
     "kernels[0].params[0].buffer must be a non-empty string, got number 1"),
    (lambda m: kern(m)["params"].__setitem__(0, {"buffer": "Z"}),
     "kernels[0].params[0] names buffer 'Z', which is not an input, output or temporary"),
    (lambda m: kern(m)["params"].__setitem__(2, {"size": "Q"}),
     "kernels[0].params[2] names size 'Q', which is neither in 'sizes' nor in 'bound_sizes'"),
    (lambda m: kern(m)["params"].__setitem__(1, {"buffer": "X"}),
     "kernels[0].params names 'buffer X' twice"),
    (lambda m: kern(m)["aligned_buffers"].append("O"),
     "kernels[0].aligned_buffers[0] is \"O\", not a buffer parameter of f_S"),
    (lambda m: m["index64"].__setitem__("cubin", "/abs/k.i64.cubin"),
     "index64.cubin must be the bare name of a .cubin file beside the sidecar (no folder, no "
     "'..', not absolute), got '/abs/k.i64.cubin'"),
    (lambda m: m["index64"]["kernels"].reverse(),
     "index64.kernels must name the same kernels as 'kernels', in order"),
]


def _deep(n: int):
    e = "N"
    for _ in range(n):
        e = ["+", e, 1]
    return e


@pytest.mark.parametrize("edit,want", FIELD_ERRORS, ids=[w for _, w in FIELD_ERRORS])
def test_field_errors(path, edit, want):
    meta = S.read(path)
    edit(meta)
    S.write(path, meta)
    assert load_error(path) == f"load: {path[:-6]}.json: {want}{AGAIN}"


def test_an_edit_the_fields_cannot_tell(path):
    meta = S.read(path)
    params = kern(meta)["params"]
    params[0], params[1] = params[1], params[0]  # two pointers: every field still plausible
    S.write(path, meta)
    assert load_error(path) == (f"load: {path[:-6]}.json was changed after export: its content "
                                f"does not match its sidecar_sha256{AGAIN}")


# ------------------------------------------------------------------ the cubins
def test_cubin_errors(path):
    meta = S.read(path)
    with open(path, "wb") as f:
        f.write(b"garbage")
    assert load_error(path) == (f"load: {path} is not the cubin its sidecar was exported with "
                                f"(its sha256 differs: a truncated or edited file, or another "
                                f"build's){AGAIN}")
    meta["cubin_sha256"] = sidecar.sha256(b"garbage")
    S.write(path, meta, reseal=True)
    assert load_error(path) == f"load: {path} is not a CUDA cubin (not an ELF file){AGAIN}"


def test_entry_point_errors(path, exported):
    meta = S.read(path)
    kern(meta)["params"].pop()
    S.write(path, meta, reseal=True)
    assert load_error(path) == (f"load: {path}: kernel f_S takes 4 parameter(s) of (8, 8, 4, 4) "
                                f"bytes, but the sidecar lists 3 of (8, 8, 4) bytes{AGAIN}")
    meta = S.read(exported)
    kern(meta)["block"][0] = 16
    S.write(path, meta, reseal=True)
    assert load_error(path) == (f"load: {path}: kernel f_S was compiled for blocks of 32 "
                                f"threads, but the sidecar launches 16x1x1 = 16{AGAIN}")
    meta = S.read(exported)
    kern(meta)["name"] = kern(meta["index64"])["name"] = "f_T"
    S.write(path, meta, reseal=True)
    assert load_error(path) == f"load: {path} has no entry point 'f_T'{AGAIN}"


# ------------------------------------------------------------------ the driver's check
class FakeModule:
    """A module whose functions the driver describes with `sizes` parameters."""
    sizes = None

    def __init__(self, cubin):
        self.cubin = cubin

    def param_sizes(self, name):
        return FakeModule.sizes


def test_the_driver_check_at_load(path, monkeypatch):
    """On a GPU, load asks the driver for each function's parameters (here a
    stand-in for the driver: the GPU test is tests/target_cuda/test_gpu_export.py)."""
    monkeypatch.setattr(cuda_api, "have_device", lambda: True)
    monkeypatch.setattr(cuda_api, "Module", FakeModule)
    FakeModule.sizes = [8, 8, 4, 4]
    with pytest.raises(tcomp.CudaError) as e:
        tcomp.load(path)
    assert str(e.value) == (f"{path}: kernel f_O takes 4 parameter(s) of (8, 8, 4, 4) bytes by "
                            f"the driver's account, but the launch passes 6 of (8, 8, 8, 8, 4, "
                            f"4) bytes{AGAIN}")
    FakeModule.sizes = None  # a driver that cannot tell: nothing to compare
    k = tcomp.load(path)
    assert all(isinstance(v.module, FakeModule) for v in k._variants.values())


class FakeDriver:
    """cuda.bindings.driver's cuFuncGetParamInfo for a function of `sizes`."""

    class CUresult:
        CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED = 0, 1, 801

    def __init__(self, sizes, past_end=1):
        self.sizes, self.past_end = sizes, past_end

    def cuFuncGetParamInfo(self, func, i):
        if i < len(self.sizes):
            return 0, 8 * i, self.sizes[i]
        if self.past_end == "raise":
            raise RuntimeError("Function \"cuFuncGetParamInfo\" not found")
        return self.past_end, 0, 0


def test_cuda_api_param_sizes(monkeypatch):
    for driver, want in ((FakeDriver([8, 8, 4]), [8, 8, 4]), (FakeDriver([]), []),
                         (FakeDriver([8], past_end=801), None),
                         (FakeDriver([], past_end="raise"), None), (object(), None)):
        monkeypatch.setattr(cuda_api, "_driver", lambda d=driver: d)
        assert cuda_api.param_sizes("f") == want

