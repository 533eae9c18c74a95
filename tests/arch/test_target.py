"""Targets and their features, device limits, and the tensor-core table
(tcomp/arch/target.py, limits.py, instructions.py)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tcomp.arch

from tcomp.arch import instructions as I
from tcomp.arch import limits, target
from tcomp.arch.hierarchy import Uniformity
from tcomp.lower import launch
from tcomp.schedule.tensor_intrinsics import TENSORIZE
from tcomp.target_cuda import kernel as cuda_kernel

AMPERE = {"ldmatrix", "cp_async", "mma_sync"}
HOPPER = AMPERE | {"tma", "mbarrier_tx", "clusters", "stmatrix"}


@pytest.mark.parametrize("name,cc,features", [
    ("sm_75", (7, 5), {"ldmatrix"}), ("sm_80", (8, 0), AMPERE), ("sm_86", (8, 6), AMPERE),
    ("sm_90", (9, 0), HOPPER), ("sm_90a", (9, 0), HOPPER | {"wgmma", "setmaxnreg"}),
    ("sm_100a", (10, 0), HOPPER), ("sm_120", (12, 0), HOPPER)])
def test_parse(name, cc, features):
    t = target.parse(name)
    assert (t.name, t.cc, set(t.features)) == (name, cc, features) and str(t) == name
    assert t == target.parse(name) and hash(t) == hash(target.parse(name))


def test_presets_and_resolve():
    assert target.SM80 == target.parse("sm_80") and target.SM90A.has("wgmma")
    assert not target.SM90.has("wgmma") and target.SM90.has("tma")
    assert target.resolve() is target.DEFAULT
    assert target.DEFAULT.name == "sm_90a"  # as target_cuda/compile.py's DEFAULT_ARCH
    assert target.resolve("cuda:sm_80") == target.SM80
    assert target.resolve("sm_90a") == target.SM90A and target.resolve(target.SM80) is target.SM80


def test_features_are_data():
    assert set(target.FEATURES) == {"cp_async", "ldmatrix", "mma_sync", "tma", "mbarrier_tx",
                                    "wgmma", "setmaxnreg", "clusters", "stmatrix"}
    assert target.targets_with("wgmma") == ("sm_90a",)
    assert target.targets_with("tma") == ("sm_90", "later")
    target.SM90A.require("wgmma", "a warpgroup MMA")  # has it: no error
    with pytest.raises(ValueError, match="unknown target feature 'tensor_memory'"):
        target.SM90A.has("tensor_memory")


def test_launch_limits_live_in_arch():
    assert launch.LaunchLimits is limits.LaunchLimits and launch.CUDA_LIMITS is limits.CUDA_LIMITS
    assert cuda_kernel.SHARED_PER_BLOCK is limits.SHARED_PER_BLOCK


def test_device_limits():
    h = limits.device_limits("sm_90a")
    assert h.shared_per_block == 227 * 1024 and h.registers_per_thread == 255
    assert h.registers_per_block == 65536 and h.shared_default == 48 * 1024
    assert limits.device_limits("sm_80").shared_per_block == 163 * 1024
    assert limits.device_limits("sm_61") is None
    assert limits.SM_COUNT.attribute == "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"
    assert limits.LAUNCH_VALUES["sm_count"] is limits.SM_COUNT


def test_tensor_core_table():
    mma = I.TENSOR_CORE["mma_m16n8k16"]
    assert (mma.m, mma.n, mma.k, mma.threads, mma.feature) == (16, 8, 16, 32, "mma_sync")
    assert mma.spelling("bfloat16") == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    t = TENSORIZE["mma_m16n8k16"]  # the schedule's entry agrees with the table
    assert (t.m, t.n, t.k, t.inputs, t.accumulator) == (mma.m, mma.n, mma.k, mma.inputs,
                                                        mma.accumulator)
    names = [n for n in I.TENSOR_CORE if n.startswith("wgmma")]
    assert len(names) == 64  # N = 8..256 step 8, for k16 (16-bit) and k32 (fp8)
    w = I.TENSOR_CORE["wgmma_m64n128k16"]
    assert w.spelling("float16") == "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
    assert w.issued_by is Uniformity.WARPGROUP and w.threads == 128 and w.feature == "wgmma"
    assert w.a.sources == (I.REGISTERS, I.SHARED) and w.b.sources == (I.SHARED,)
    assert w.b.fragment is None and w.d.fragment.cols == 128
    f8 = I.for_shape(64, 256, 32, "float8_e4m3fn")
    assert f8.name == "wgmma_m64n256k32_fp8"
    assert f8.spelling("float8_e5m2").endswith("m64n256k32.f32.e5m2.e5m2")
    assert I.for_shape(64, 128, 16, "float8_e5m2") is None
    with pytest.raises(ValueError, match="takes bfloat16, float16, not float32"):
        w.spelling("float32")


@pytest.mark.parametrize("name", list(I.TENSOR_CORE))
def test_every_register_operand_covers_its_tile(name):
    i = I.TENSOR_CORE[name]
    for op, shape in ((i.a, (i.m, i.k)), (i.b, (i.k, i.n)), (i.d, (i.m, i.n))):
        if op.fragment is not None:
            assert (op.fragment.rows, op.fragment.cols) == shape
            assert op.fragment.threads == i.threads and op.fragment.is_bijective()


def test_arch_imports_no_compiler_layer():
    """arch is below schedule: its modules import the standard library, numpy,
    each other and tcomp.errors, nothing else of tcomp."""
    for path in Path(tcomp.arch.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                assert node.level == 1 or node.module == "errors", (path.name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module]
                assert not any(n.startswith("tcomp") for n in names), (path.name, names)
