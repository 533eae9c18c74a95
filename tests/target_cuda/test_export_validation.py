"""`tcomp.load` checks an exported sidecar and its cubins completely before
anything reaches the GPU (tcomp/target_cuda/sidecar.py), so these run on a
machine without one: every single-field edit of a real sidecar, the edits
that change what a launch does, cubins that are not the exported ones, and
paths that leave the sidecar's folder are refused with a TcompError."""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil

import pytest

import tcomp
from tcomp.target_cuda import cubin_info, sidecar

from . import sidecars as S


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return S.exports(tmp_path_factory.mktemp("exports"))


@pytest.fixture
def copy(exported, tmp_path):
    """A fresh copy of each export's folder: name -> its .cubin path."""
    out = {}
    for name, path in exported.items():
        shutil.copytree(os.path.dirname(path), tmp_path / name)
        out[name] = str(tmp_path / name / os.path.basename(path))
    return out


def refused(path: str) -> str:
    """The TcompError text of `tcomp.load(path)`; anything else fails the test."""
    try:
        tcomp.load(path)
    except tcomp.TcompError as e:
        return str(e)
    except Exception as e:  # pragma: no cover - what this file is here to catch
        pytest.fail(f"tcomp.load raised {type(e).__name__}: {e}")
    pytest.fail("tcomp.load accepted the edited files")


def test_every_export_loads_as_written(exported):
    for path in exported.values():
        k = tcomp.load(path)
        assert k.meta == S.read(path)
        assert k.meta["sidecar_sha256"] == sidecar.digest(k.meta)


@pytest.mark.parametrize("name", ["normalize", "matmul", "dot", "writes"])
def test_every_single_field_edit_is_refused(copy, name):
    """Each field and element dropped, retyped, or out of range: a TcompError."""
    path = copy[name]
    meta = S.read(path)
    edits = list(S.single_field_edits(meta))
    assert len(edits) > 200
    for what, bad in edits:
        S.write(path, bad)
        assert refused(path).startswith("load: "), what


@pytest.mark.parametrize("name", ["normalize", "matmul", "dot", "writes"])
def test_resealed_edits_raise_nothing_but_tcomp_errors(copy, name):
    """The same edits with a fresh digest (a writer that means them): what the
    other checks cannot tell from a valid sidecar may load, and nothing raises
    another exception, at load or on a machine without a GPU at the call."""
    path = copy[name]
    meta = S.read(path)
    loaded = 0
    for what, bad in S.single_field_edits(meta):
        S.write(path, bad, reseal=True)
        try:
            tcomp.load(path)
            loaded += 1
        except tcomp.TcompError:
            pass
        except Exception as e:  # pragma: no cover
            pytest.fail(f"{what}: tcomp.load raised {type(e).__name__}: {e}")
    assert loaded < 40  # (harmless ones: a version string, a written line number, ...)


def _first_kernel(meta: dict) -> dict:
    return meta["kernels"][0]


# (what, edit of the sidecar in place, a fragment of the message when resealed: the
# checks that hold even for a sidecar with a valid digest)
LAUNCH_EDITS = [
    ("swap two buffer parameters",
     lambda m: _first_kernel(m)["params"].insert(0, _first_kernel(m)["params"].pop(1)),
     None),
    ("swap a buffer and a size parameter",
     lambda m: _first_kernel(m)["params"].append(_first_kernel(m)["params"].pop(0)),
     "kernel f_S takes 4 parameter(s) of (8, 8, 4, 4) bytes, but the sidecar lists 4 of "
     "(8, 4, 4, 8) bytes"),
    ("drop a parameter", lambda m: _first_kernel(m)["params"].pop(),
     "kernel f_S takes 4 parameter(s) of (8, 8, 4, 4) bytes, but the sidecar lists 3 of "
     "(8, 8, 4) bytes"),
    ("drop a launch", lambda m: m["kernels"].pop(), "index64.kernels must name the same "
                                                    "kernels as 'kernels', in order"),
    ("shrink an output", lambda m: m["outputs"][1]["shape"].__setitem__(0, ["-", "N", 1]),
     None),
    ("halve a block", lambda m: _first_kernel(m)["block"].__setitem__(0, 16),
     "kernel f_S was compiled for blocks of 32 threads, but the sidecar launches 16x1x1 = 16"),
    ("double a block", lambda m: _first_kernel(m)["block"].__setitem__(0, 64),
     "kernel f_S was compiled for blocks of 32 threads, but the sidecar launches 64x1x1 = 64"),
    ("zero a grid", lambda m: _first_kernel(m)["grid"].__setitem__(0, 0), None),
    ("another entry point", lambda m: [kd.__setitem__("name", "f_T") for kd in (
        m["kernels"][0], m["index64"]["kernels"][0])], "has no entry point 'f_T'"),
    ("64-bit sizes for the 32-bit cubin", lambda m: (m.pop("index64"),
                                                     m.__setitem__("index_bits", 64)),
     "kernel f_S takes 4 parameter(s) of (8, 8, 4, 4) bytes, but the sidecar lists 4 of "
     "(8, 8, 8, 8) bytes"),
    ("an unknown buffer", lambda m: _first_kernel(m)["params"][0].__setitem__("buffer", "Z"),
     "kernels[0].params[0] names buffer 'Z', which is not an input, output or temporary"),
    ("an unknown size", lambda m: _first_kernel(m)["grid"].__setitem__(1, "Q"),
     "kernels[0].grid[1] names size 'Q', which is neither in 'sizes' nor in 'bound_sizes'"),
    ("a block beyond CUDA's limit", lambda m: _first_kernel(m)["block"].__setitem__(1, 64),
     "kernels[0].block has 2048 threads per block in its constant dimensions, more than "
     "CUDA's 1024"),
    ("a negative grid", lambda m: _first_kernel(m)["grid"].__setitem__(2, -1),
     "kernels[0].grid[2] must be in 0..65535, got -1"),
    ("an output of another dtype", lambda m: m["outputs"][0].__setitem__("dtype", "float16"),
     None),
    ("an unknown dtype", lambda m: m["outputs"][0].__setitem__("dtype", "float128"),
     "outputs[0].dtype is 'float128', not a tcomp type"),
    ("too much shared memory", lambda m: _first_kernel(m).__setitem__("dynamic_smem", 2**20),
     "kernels[0].dynamic_smem must be in 0..232448, got 1048576"),
]


@pytest.mark.parametrize("what,edit,resealed", LAUNCH_EDITS, ids=[e[0] for e in LAUNCH_EDITS])
def test_edits_that_change_a_launch_are_refused(copy, what, edit, resealed):
    path = copy["normalize"]
    meta = S.read(path)
    edit(meta)
    S.write(path, meta)
    assert "load: " in refused(path)
    S.write(path, meta, reseal=True)
    if resealed is None:
        return  # a plausible launch description: only the digest tells it from the real one
    assert resealed in refused(path)


def test_the_digest_names_the_remedy(copy):
    path = copy["normalize"]
    meta = S.read(path)
    _first_kernel(meta)["grid"][0] = 0
    S.write(path, meta)
    assert refused(path) == (f"load: {path[:-6]}.json was changed after export: its content "
                             f"does not match its sidecar_sha256; export the kernel again "
                             f"(k.export or tcomp compile)")


def _cubin_refusals(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return refused(path)


def test_a_cubin_that_is_not_the_exported_one_is_refused(copy, tmp_path):
    path = copy["normalize"]
    good = open(path, "rb").read()
    # another build of the same op, with the same entry points (other block size)
    other = tcomp.build(S.normalize(threads=64), target="cuda:sm_90a").cubin
    assert set(cubin_info.entry_points(other)) == set(cubin_info.entry_points(good))
    truncated = good[:len(good) // 2]
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    for data in (other, truncated, bytes(flipped), b""):
        assert _cubin_refusals(path, data) == (
            f"load: {path} is not the cubin its sidecar was exported with (its sha256 "
            f"differs: a truncated or edited file, or another build's); export the kernel "
            f"again (k.export or tcomp compile)")
    wide = path[:-6] + ".i64.cubin"
    shutil.copy(path, wide)  # the 32-bit cubin in place of the 64-bit one
    with open(path, "wb") as f:
        f.write(good)
    assert refused(path).startswith(f"load: {wide} is not the cubin its sidecar was exported")


@pytest.mark.parametrize("name", ["/tmp/x.i64.cubin", "../normalize.i64.cubin",
                                  "sub/normalize.i64.cubin", "..\\normalize.i64.cubin",
                                  "normalize.i64", "C:normalize.i64.cubin",
                                  "normalize\x00.i64.cubin", "\nnormalize.i64.cubin"])
def test_the_64_bit_variant_stays_beside_the_sidecar(copy, name):
    path = copy["normalize"]
    folder = os.path.dirname(path)
    meta = S.read(path)
    # the file is there, with the right content: only the path is wrong
    target = name if os.path.isabs(name) else os.path.join(folder, name)
    if name.endswith(".cubin") and not any(ch in name for ch in "\\:\x00\n"):
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        shutil.copy(path[:-6] + ".i64.cubin", target)
    meta["index64"]["cubin"] = name
    S.write(path, meta, reseal=True)
    assert refused(path) == (
        f"load: {path[:-6]}.json: index64.cubin must be the bare name of a .cubin file beside "
        f"the sidecar (no folder, no '..', not absolute), got {name!r}; export the kernel "
        f"again (k.export or tcomp compile)")
    if os.path.isabs(name) and os.path.exists(name):
        os.remove(name)


def test_a_loaded_kernel_exports_again_with_fresh_digests(exported, tmp_path):
    k = tcomp.load(exported["matmul"])
    k.export(str(tmp_path / "again.cubin"))
    again = S.read(str(tmp_path / "again.cubin"))
    assert again["index64"]["cubin"] == "again.i64.cubin"
    assert again["cubin_sha256"] == k.meta["cubin_sha256"]
    k2 = tcomp.load(pathlib.Path(tmp_path / "again.cubin"))  # os.PathLike works too
    assert k2.cubin == k.cubin and k2.variant(64).cubin == k.variant(64).cubin


def test_the_sidecar_is_json_a_launcher_can_check(exported):
    """The digest is over canonical JSON: any JSON library can recompute it."""
    import hashlib
    meta = S.read(exported["normalize"])
    rest = {k: v for k, v in meta.items() if k != "sidecar_sha256"}
    canon = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert hashlib.sha256(canon.encode()).hexdigest() == meta["sidecar_sha256"]
    cubin = open(exported["normalize"], "rb").read()
    assert hashlib.sha256(cubin).hexdigest() == meta["cubin_sha256"]


# ------------------------------------------------------------------ cubin_info
def test_cubin_info_reads_parameters_and_launch_bounds(exported):
    k = tcomp.load(exported["normalize"])
    entries = cubin_info.entry_points(k.cubin)
    assert entries["f_S"] == cubin_info.Entry("f_S", (8, 8, 4, 4), 32)
    assert entries["f_O"] == cubin_info.Entry("f_O", (8, 8, 8, 8, 4, 4), 32)
    wide = cubin_info.entry_points(k.variant(64).cubin)
    assert wide["f_O"].param_sizes == (8, 8, 8, 8, 8, 8)


def test_cubin_info_reports_a_runtime_block_as_unbounded():
    from tests.lower.test_runtime_launch import conv_rows_on_threads
    k = tcomp.build(conv_rows_on_threads(), target="cuda:sm_90a", sizes={"KW": 3})
    (entry,) = cubin_info.entry_points(k.cubin).values()
    assert entry.max_threads is None and len(entry.param_sizes) == 9


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_89", "sm_100a", "sm_120"])
def test_cubin_info_reads_every_architecture(arch):
    k = tcomp.build(S.normalize(), target=f"cuda:{arch}")
    assert cubin_info.entry_points(k.cubin)["f_S"] == cubin_info.Entry("f_S", (8, 8, 4, 4), 32)


def test_cubin_info_refuses_what_is_not_a_cubin(exported):
    good = open(exported["normalize"], "rb").read()
    elf = bytearray(good)
    elf[0x12] = 62  # EM_X86_64
    for data, why in ((b"", "not an ELF file"), (b"\x7fELF" + b"\x00" * 60,
                                                  "not a 64-bit little-endian ELF file"),
                      (bytes(elf), "an ELF file for machine 62, not CUDA (190)"),
                      (good[:len(good) - 100], "lie outside the file (a truncated file?)"),
                      (good[:len(good) // 2], "outside the file (a truncated file?)")):
        with pytest.raises(cubin_info.NotACubin, match=re.escape(why)):
            cubin_info.entry_points(data)


def test_an_nv_info_record_that_does_not_parse_leaves_the_parameters_unknown():
    assert cubin_info._entry("k", b"\x04\x17\xff\x00") == cubin_info.Entry("k", None, None)
    assert cubin_info._entry("k", b"\x09\x17\x00\x00") == cubin_info.Entry("k", None, None)
    v2 = b"\x04\x45\x04\x00" + b"\x00" * 4
    assert cubin_info._entry("k", v2).param_sizes is None
