"""The CUDA target on a machine without a GPU: codegen, NVRTC to PTX and cubin,
and the clear error when a kernel is called."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.target_cuda import cuda_api
from tcomp.target_cuda.compile import CompileOptions, compile_source

MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def elf_symbols(cubin: bytes) -> set[str]:
    """Names in the ELF string tables (enough to find kernel entry symbols)."""
    assert cubin[:4] == b"\x7fELF", "not an ELF file"
    return {s.decode(errors="replace") for s in cubin.split(b"\x00") if s}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_matmul_compiles_to_cubin(arch):
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target=f"cuda:{arch}")
    assert k.cubin[:4] == b"\x7fELF"
    assert "matmul_C" in elf_symbols(k.cubin)
    assert f".target {arch}" in k.ptx
    assert k.meta["arch"] == arch


def test_compile_error_shows_log_source_and_repro():
    with pytest.raises(tcomp.CudaError) as e:
        compile_source("__global__ void f() { undefined_name = 1; }", "broken",
                       CompileOptions("sm_90a"), use_cache=False)
    text = str(e.value)
    assert 'identifier "undefined_name" is undefined' in text
    assert "   1  __global__ void f()" in text
    assert "repro: python3 -m tcomp.target_cuda.compile" in text


def test_unknown_arch():
    with pytest.raises(tcomp.CudaError, match="unknown GPU architecture 'gfx90a' \\(expected sm_"):
        compile_source("__global__ void f() {}", "f", CompileOptions("gfx90a"))


def test_compile_cache_reuses_result():
    src = "__global__ void cache_probe(float* x) { x[0] = 1.0f; }"
    a = compile_source(src, "probe", CompileOptions("sm_90a"))
    b = compile_source(src, "probe", CompileOptions("sm_90a"))
    assert a.key == b.key and a.cubin == b.cubin
    c = compile_source(src, "probe", CompileOptions("sm_80"))
    assert c.key != a.key


@pytest.mark.skipif(cuda_api.have_device(), reason="checks the no-GPU behaviour")
def test_call_without_gpu_raises_cuda_error():
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="cuda")
    a = np.ones((2, 2), np.float32)
    with pytest.raises(tcomp.CudaError, match="no CUDA driver found"):
        k(a, a)


def test_unknown_target():
    with pytest.raises(tcomp.TcompError, match="unknown target 'opencl'"):
        tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="opencl")


def test_export_writes_cubin_and_sidecar(tmp_path):
    import json
    k = tcomp.build(tcomp.Schedule(tcomp.op(MM)), target="cuda", sizes={"K": 16})
    k.export(str(tmp_path / "mm.cubin"))
    meta = json.load(open(tmp_path / "mm.json"))
    assert meta["op"] == "matmul" and meta["arch"] and meta["tcomp_version"]
    assert [i["name"] for i in meta["inputs"]] == ["A", "B"]
    assert meta["inputs"][0]["shape"] == ["M", 16]
    assert meta["bound_sizes"] == {"K": 16}
    assert meta["kernels"][0]["name"] == "matmul_C"
    assert meta["kernels"][0]["params"] == [{"buffer": "A"}, {"buffer": "B"}, {"buffer": "C"},
                                            {"size": "M"}, {"size": "N"}]
    k2 = tcomp.load(str(tmp_path / "mm.cubin"))
    assert k2.cubin == k.cubin
    with pytest.raises(tcomp.TcompError, match="must end with .cubin"):
        k.export(str(tmp_path / "mm.bin"))
    with pytest.raises(tcomp.TcompError, match="No such file"):
        tcomp.load(str(tmp_path / "missing.cubin"))


NVRTC_KEEPS_SHARED_BYTES = r"""
from tcomp.target_cuda import cuda_api
ptx, cubin, log = cuda_api.nvrtc_compile('extern "C" __global__ void k() {}', "k.cu",
                                         ["--gpu-architecture=sm_90a"])
assert log == "" and cubin, (log, len(cubin))      # an empty log: NVRTC's log size is 1
assert bytes([32])[0] == 32 and " ".encode()[0] == 32, bytes([32])  # (contents: all b" " are one)
x, y = 1, 2
assert eval(compile('f"{x} {y}"', "<f>", "eval")) == "1 2"
print("ok")
"""


def test_nvrtc_output_buffers_never_alias_shared_bytes():
    """NVRTC writes its log, PTX and cubin into the buffers it is given; a
    one-byte `b" " * 1` is CPython's shared b" " object, and writing the empty
    log's NUL into it broke every later b" " in the process (f-strings compiled
    afterwards lost their spaces: the CUDA source read `intN`). A fresh
    interpreter, so that nothing else compiled first."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", NVRTC_KEEPS_SHARED_BYTES], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
