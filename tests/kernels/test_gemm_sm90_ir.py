"""The Hopper IR on the CPU: tcomp.kernels.gemm_sm90's IR (golden), the CUDA
it prints (the PTX each intrinsic becomes), the verifier's rules for
Specialize, the tensor-map encoding's checks, and the launch description
(sidecar format 3: tensor-map parameters, the SM-count size, min_blocks)."""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from tcomp.errors import CudaError, LoweringError
from tcomp.kernels import GemmConfig, gemm_sm90, gemm_sm90_program
from tcomp.target_cuda import tensor_maps

from tests.lower.util import check_golden

ir = importlib.import_module("tcomp.lower.ir")
verify = importlib.import_module("tcomp.lower.verify").verify
GOLDEN = Path(__file__).parent / "golden"
SIZES = {"M": 256, "N": 512, "K": 128}


def test_golden_ir(update_golden):
    """Every construct of the kernel as the printer shows it: the kernel's
    tensor-map parameters and launch bounds, barrier buffers, the producer
    and consumer roles with their register counts, the ring's waits and
    arrivals, wgmma on swizzled operands, the TMA-store epilogue."""
    check_golden(GOLDEN / "gemm_sm90.txt", str(gemm_sm90_program(SIZES)), update_golden)


def test_cuda_prints_the_ptx_of_each_intrinsic():
    k = gemm_sm90(SIZES)
    src = k.source
    for text in [
        "const __grid_constant__ tc_tensor_map tmA",
        "__launch_bounds__(384, 1)",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
        'setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(40)',
        'setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(232)',
        "fence.proxy.async.shared::cta;",
        "if ((threadIdx.x >> 7) == 0) {  // role producer",
        "} else if ((threadIdx.x >> 7) >= 1 && (threadIdx.x >> 7) < 3) {  // role consumer",
        # the swizzled tiles 1024-aligned at run time (the launch asks for the slack)
        "& 1023);",
    ]:
        assert text in src, text
    # TMA coordinates are innermost first: (k, m) for A
    assert "tc_tma_load_2d((&A_s[slot * 8192]), &tmA, (&full[slot]), kb * 64, m0);" in src
    assert k.meta["kernels"][0]["dynamic_smem"] == GemmConfig().smem_bytes + 1024  # the alignment slack
    params = k.meta["kernels"][0]["params"]
    assert params[0] == {"size": "tc_sm_count"}
    assert params[1] == {"tensor_map": {"name": "tmA", "buffer": "A", "dtype": "bfloat16",
                                        "box": [128, 64], "swizzle": 128}}
    assert k.meta["kernels"][0]["grid"] == ["tc_sm_count", 1, 1]
    assert k.meta["kernels"][0]["min_blocks"] == 1


def test_symbolic_sizes_are_parameters():
    k = gemm_sm90()
    assert [p.get("size") for p in k.meta["kernels"][0]["params"][:4]] == \
        ["M", "N", "K", "tc_sm_count"]


def _with_roles(*roles, block=384):
    prog = gemm_sm90_program(SIZES)
    k = prog.kernels[0]
    body = ir.Specialize(tuple(roles))
    return dataclasses.replace(k, body=body, block=(ir.const(block), ir.ONE, ir.ONE)), prog


def _role(name, first, count, regs=0, body=ir.Seq(())):
    return ir.Role("r", name, first, count, regs, body)


@pytest.mark.parametrize("roles,block,message", [
    ((("a", 0, 2), ("b", 1, 2)), 384, "role 'b' takes warpgroups 1..2, overlapping another"),
    ((("a", 0, 1), ("b", 1, 1)), 384, "the roles cover warpgroups [0, 1], but the block is "
                                      "(384, 1, 1)"),
    ((("a", 0, 1, 30),), 128, "role 'a' asks for 30 registers per thread; setmaxnreg takes a "
                              "multiple of 8 in 24..256"),
])
def test_verifier_refuses_bad_roles(roles, block, message):
    k, prog = _with_roles(*[_role(*r) for r in roles], block=block)
    with pytest.raises(LoweringError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        verify(k, prog)


def test_verifier_refuses_a_block_barrier_inside_a_role():
    k, prog = _with_roles(_role("a", 0, 1, body=ir.Barrier()), _role("b", 1, 2))
    with pytest.raises(LoweringError, match="barrier under a thread-dependent condition"):
        verify(k, prog)


def test_verifier_refuses_wgmma_under_a_lane_condition():
    lane0 = ir.Bin("==", ir.Var("threadIdx.x"), ir.ZERO, ir.bool_)
    body = ir.If(lane0, ir.Evaluate(ir.Call("wgmma_fence", (), ir.int32)))
    k, prog = _with_roles(_role("a", 0, 3, body=body))
    with pytest.raises(LoweringError, match="wgmma_fence under a thread-dependent condition"):
        verify(k, prog)


@pytest.mark.parametrize("shape,box,swizzle,message", [
    ((100, 13), (64, 64), 128, r"a row of 'X' is 26 bytes .* pad the innermost dimension to a "
                               r"multiple of 8 elements"),
    ((128, 256), (64, 128), 128, "the box's rows are 256 bytes, more than its 128-byte swizzle"),
    ((128, 256), (300, 64), 128, r"box \[300, 64\] has a dimension outside 1..256"),
    ((128, 256), (64, 64), 96, r"swizzle must be one of \(0, 32, 64, 128\), got 96"),
    ((128, 256), (64,), 0, "a box of rank 1 over 'X' of rank 2"),
    ((-1, 256), (64, 64), 128, "'X' has a negative dimension"),
])
def test_tensor_map_spec_refuses_what_tma_cannot_move(shape, box, swizzle, message):
    with pytest.raises(CudaError, match=message):
        tensor_maps.spec("tmX", "X", "bfloat16", shape, box, swizzle)


def test_tensor_map_spec():
    s = tensor_maps.spec("tmA", "A", "bfloat16", (4096, 1024), (128, 64), 128)
    assert (s.dims, s.strides, s.box, s.swizzle) == ((1024, 4096), (2048,), (64, 128), 128)


def test_tensor_map_of_an_empty_buffer_reads_zeros():
    """A (384, 0) operand (K = 0): the map is encoded over a zero-filled
    allocation of one element per dimension (never a refusal: the GEMM stores
    zeros), with strides the driver takes."""
    s = tensor_maps.spec("tmA", "A", "bfloat16", (384, 0), (128, 64), 128)
    assert (s.dims, s.strides, s.box, s.empty) == ((1, 1), (16,), (64, 128), True)


@pytest.mark.parametrize("config,message", [
    (GemmConfig(bk=32), r"bk must be 64 \(one 128-byte swizzled row of bfloat16 or "
                        r"float16\) or 128"),
    (GemmConfig(bn=192), "bn must be 64, 128 or 256"),
    (GemmConfig(bm=256), "bm must be 64 x consumers"),
    (GemmConfig(stages=1), "stages must be 2..5"),
])
def test_config_errors(config, message):
    with pytest.raises(LoweringError, match=message):
        gemm_sm90_program(SIZES, config)


def test_sizes_the_tma_engine_cannot_move():
    with pytest.raises(LoweringError, match="K = 100 is not a multiple of 8"):
        gemm_sm90_program({"M": 64, "N": 64, "K": 100})


@pytest.mark.parametrize("arch", ["sm_90", "sm_100a"])
def test_arch_specific_instructions_need_sm_90a(arch):
    """wgmma and setmaxnreg exist in sm_90a only: another arch is refused
    before NVRTC runs, naming what needs sm_90a."""
    from tcomp.target_cuda.kernel import CudaKernel
    prog = gemm_sm90_program(SIZES)
    with pytest.raises(CudaError, match=f"(which only sm_90a has; it cannot be compiled for "
                                        f"{arch})|(cannot be compiled for {arch})"):
        CudaKernel.from_program(prog, target=f"cuda:{arch}")
