"""GPU architectures checked before NVRTC runs (issue 22, defect 8): `--arch sm_70`
passed tcomp's check, then NVRTC failed with its log and the whole source. An
architecture this NVRTC does not compile for, a suffix the architecture lacks, and a
kernel whose intrinsics need a newer GPU are one-line CudaErrors."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.cli import main
from tcomp.target_cuda import cuda_api
from tcomp.target_cuda.arch import check_arch
from tcomp.target_cuda.compile import CompileOptions, compile_source

from ..schedule.test_tensorize import BF, tc_gemm

SCALE = "def scale(float(N) X) -> (O) { O(i) = X(i) * 2 }"


def cuda_error(fn) -> str:
    with pytest.raises(tcomp.CudaError) as e:
        fn()
    text = str(e.value)
    assert "\n" not in text and "NVRTC failed" not in text
    return text


def test_an_arch_nvrtc_does_not_compile_for():
    major, minor = cuda_api.nvrtc_version()
    archs = cuda_api.nvrtc_archs()
    assert archs is not None and 70 not in archs and 75 in archs  # NVRTC 13
    known = ", ".join(f"sm_{a}" for a in archs)
    msg = (f"GPU architecture sm_70 is not one this NVRTC ({major}.{minor}) compiles for: "
           f"sm_75 and up ({known})")
    op = tcomp.op(SCALE)
    assert cuda_error(lambda: tcomp.build(op, target="cuda:sm_70")) == msg
    assert cuda_error(lambda: compile_source("__global__ void f() {}", "f",
                                             CompileOptions("sm_70"))) == msg
    assert cuda_error(lambda: check_arch("sm_99")).startswith("GPU architecture sm_99 is not")


@pytest.mark.parametrize("arch, message", [
    ("sm_80a", "GPU architecture sm_80a: the arch-specific suffix 'a' exists from sm_90a on; "
               "use sm_80"),
    ("sm_90f", "GPU architecture sm_90f: the family suffix 'f' exists from sm_100f on; "
               "use sm_90"),
    ("sm_9", "unknown GPU architecture 'sm_9' (expected sm_ and the compute capability, e.g. "
             "sm_80, sm_90a)"),
    ("sm_90ab", "unknown GPU architecture 'sm_90ab' (expected sm_ and the compute capability, "
                "e.g. sm_80, sm_90a)"),
    (90, "unknown GPU architecture 90 (expected sm_ and the compute capability, e.g. sm_80, "
         "sm_90a)"),
])
def test_malformed_arch(arch, message):
    assert cuda_error(lambda: check_arch(arch)) == message


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "sm_90a", "sm_100f", "sm_120a"])
def test_archs_nvrtc_compiles_for(arch):
    k = tcomp.build(tcomp.op(SCALE), target=f"cuda:{arch}")
    assert k.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("pipeline, what", [(False, "mma_m16n8k16"), (3, "cp_async")])
def test_intrinsics_that_need_a_newer_gpu(pipeline, what):
    op, s = tc_gemm(tcomp.op(BF), bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=pipeline)
    msg = cuda_error(lambda: tcomp.build(s, target="cuda:sm_75",
                                         sizes={"M": 64, "N": 64, "K": 64}))
    assert msg == (f"kernel mm_C uses {what}, which needs sm_80 or newer; it cannot be "
                   f"compiled for sm_75 (compile for sm_80 or newer, or schedule it without "
                   f"{what})")
    k = tcomp.build(s, target="cuda:sm_80", sizes={"M": 64, "N": 64, "K": 64})
    assert k.cubin[:4] == b"\x7fELF"


def test_cli_arch(tmp_path, capsys):
    src = tmp_path / "s.tc"
    src.write_text(SCALE)
    rc = main(["compile", str(src), "--arch", "sm_70", "-o", str(tmp_path / "s.cubin")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("tcomp: GPU architecture sm_70 is not one this NVRTC")
