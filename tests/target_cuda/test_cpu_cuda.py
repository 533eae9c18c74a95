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
    with pytest.raises(tcomp.CudaError, match="unknown GPU architecture 'gfx90a'"):
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
