"""CUDA for the tensor-core intrinsics (target_cuda/warp_ops.py) on the
hand-built programs of tests/lower/warp_kernels.py: the emitted text, NVRTC
compiles it for sm_90a (no GPU needed), and on a GPU the results equal the
sim's meaning (tests/lower/test_warp_ops.py) within float32 rounding."""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.target_cuda.codegen import program_source
from tcomp.target_cuda.compile import compile_source
from tcomp.target_sim.executor import run_program

from ..lower.warp_kernels import one_tile


def test_source_uses_the_instructions_and_registers():
    src, _ = program_source(one_tile(dtypes.bfloat16))
    assert "unsigned AF[4];" in src and "unsigned BF[4];" in src and "float CF[8];" in src
    assert ('ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n" : "=r"(AF[0]), '
            '"=r"(AF[1]), "=r"(AF[2]), "=r"(AF[3]) : "r"(static_cast<unsigned>('
            '__cvta_generic_to_shared(&AS[') in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    assert ('mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, '
            '{%8,%9}, {%0,%1,%2,%3};\\n" : "+f"(CF[4]), "+f"(CF[5]), "+f"(CF[6]), "+f"(CF[7]) : '
            '"r"(AF[0]), "r"(AF[1]), "r"(AF[2]), "r"(AF[3]), "r"(BF[2]), "r"(BF[3]));') in src


@pytest.mark.parametrize("dtype, ty", [(dtypes.bfloat16, "bf16"), (dtypes.float16, "f16")])
def test_compiles_for_sm90a(dtype, ty):
    src, _ = program_source(one_tile(dtype, warps=2))
    c = compile_source(src, "one_tile")
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32" in c.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in c.ptx
    assert ".local" not in c.ptx  # the fragments stay in registers
    assert len(c.cubin) > 0


def _packed_element_access(kind):
    prog = one_tile()
    k = prog.kernels[0]
    extra = (ir.Store("AF", (ir.const(0),), ir.Imm(0.0, dtypes.bfloat16)) if kind == "write" else
             ir.Store("C", (ir.const(0),), ir.Cast(dtypes.float32, ir.Load(
                 "AF", (ir.const(0),), dtypes.bfloat16))))

    def put(s):
        if isinstance(s, ir.Alloc):
            return dataclasses.replace(s, body=put(s.body))
        return ir.seq(s, extra)
    return dataclasses.replace(prog, kernels=(dataclasses.replace(k, body=put(k.body)),))


@pytest.mark.parametrize("kind, word", [("write", "written"), ("read", "read")])
def test_element_access_to_a_packed_fragment_is_refused(kind, word):
    with pytest.raises(tcomp.CudaError, match=rf"element AF\[...\] of a 16-bit fragment is {word} "
                                              rf"outside a tensor-core intrinsic"):
        program_source(_packed_element_access(kind))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
@pytest.mark.parametrize("warps", [1, 2])
def test_gpu_matches_the_sim(dtype, warps):
    from tcomp.target_cuda import cuda_api
    prog = one_tile(dtype, warps)
    src, _ = program_source(prog)
    mod = cuda_api.Module(compile_source(src, "one_tile").cubin)
    f = mod.function("one_tile")
    rng = np.random.default_rng(3)
    a = rng.standard_normal(16 * warps * 16).astype(dtype.numpy)
    b = rng.standard_normal(256).astype(dtype.numpy)
    want = np.zeros(16 * warps * 16, np.float32)
    run_program(prog, {"A": a, "B": b, "C": want}, {})
    ptrs = []
    for arr in (a, b, want):
        p = cuda_api.mem_alloc(arr.nbytes)
        cuda_api.memcpy_htod(p, arr.ctypes.data, arr.nbytes)
        ptrs.append(p)
    try:
        cuda_api.launch(f, (1, 1, 1), (32 * warps, 1, 1), 0,
                        [(ctypes.c_void_p, p) for p in ptrs])
        got = np.empty_like(want)
        cuda_api.memcpy_dtoh(got.ctypes.data, ptrs[2], got.nbytes)
        cuda_api.synchronize()
    finally:
        for p in ptrs:
            cuda_api.mem_free(p)
    ref = a.astype(np.float64).reshape(-1, 16) @ b.astype(np.float64).reshape(16, 16)
    np.testing.assert_allclose(got.reshape(-1, 16), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cp_async_source_and_ptx():
    from ..lower.warp_kernels import async_copy
    src, _ = program_source(async_copy(groups=2, wait=0, zero_from=40))
    assert 'cp.async.cg.shared.global [%0], [%1], 16, %2;' in src
    assert 'asm volatile("cp.async.commit_group;\\n" ::);' in src
    assert 'asm volatile("cp.async.wait_group 0;\\n" ::: "memory");' in src
    ptx = compile_source(src, "async_copy").ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 0" in ptx


@pytest.mark.cuda
@pytest.mark.parametrize("groups, zero_from", [(1, None), (2, None), (1, 40)])
def test_gpu_cp_async_matches_the_sim(groups, zero_from):
    from tcomp.target_cuda import cuda_api

    from ..lower.warp_kernels import async_copy
    prog = async_copy(groups=groups, zero_from=zero_from)
    src, _ = program_source(prog)
    mod = cuda_api.Module(compile_source(src, "async_copy").cubin)
    f = mod.function("async_copy")
    g = (np.arange(8 * 64 * groups) % 251).astype(dtypes.bfloat16.numpy)
    want = np.zeros_like(g)
    run_program(prog, {"G": g, "O": want}, {})
    ptrs = []
    for arr in (g, np.zeros_like(g)):
        p = cuda_api.mem_alloc(arr.nbytes)
        cuda_api.memcpy_htod(p, arr.ctypes.data, arr.nbytes)
        ptrs.append(p)
    try:
        cuda_api.launch(f, (1, 1, 1), (64, 1, 1), 0, [(ctypes.c_void_p, p) for p in ptrs])
        got = np.empty_like(g)
        cuda_api.memcpy_dtoh(got.ctypes.data, ptrs[1], got.nbytes)
        cuda_api.synchronize()
    finally:
        for p in ptrs:
            cuda_api.mem_free(p)
    np.testing.assert_array_equal(got, want)
