"""The sim's Hopper mechanisms on kernels that are right: the warp-specialised
TMA + wgmma GEMM (tcomp.kernels.gemm_sm90) against `tcomp.evaluate` at small
and awkward sizes, and small hand-built kernels tying TMA and wgmma to their
definitions (the buffer's swizzle, the wgmma accumulator layout)."""
from __future__ import annotations

import numpy as np
import pytest

from tcomp.kernels import GemmConfig, gemm_sm90
from tcomp.lang import dtypes
from tcomp.lower import ir
from tcomp.target_sim.executor import SIM_SM_COUNT
from tcomp.target_sim.wgmma import accumulator_layout

from .hopper import (BF16, SMALL, TID, b, c, call, check_product, glob, inputs, loop, mapvar,
                     ref, run_kernel, shared, thread0)


@pytest.mark.parametrize("M, N, K, config", [
    (37, 72, 40, GemmConfig()),          # one partial tile: M, N, K all short of it
    (200, 136, 256, SMALL),              # 12 tiles over 3 blocks; the ring of 2 wraps
    (64, 128, 72, GemmConfig(bn=128)),   # a K tail of 8 (read as zeros)
])
def test_gemm_equals_evaluate(M, N, K, config):
    A, B = inputs(M, N, K)
    k = gemm_sm90({"M": M, "N": N, "K": K}, config, target="sim")
    check_product(k(A, B), A, B)


def test_gemm_with_symbolic_sizes_runs_any_multiple_of_8():
    k = gemm_sm90(None, SMALL, target="sim")
    for M, N, K, seed in ((37, 72, 40, 1), (130, 64, 136, 2)):
        A, B = inputs(M, N, K, seed)
        check_product(k(A, B), A, B)


def test_sm_count_is_small_on_the_sim():
    """A persistent grid of SIM_SM_COUNT blocks: at 200 x 136 with 64 x 64
    tiles each block takes 4 of the 12 tiles."""
    assert SIM_SM_COUNT == 3


def test_tma_load_and_store_through_the_swizzle_and_the_edges():
    """A 64 x 64 box over a 50 x 56 tensor: the load lands in the swizzled tile
    where flattening addresses it (threads read it back by subscripts), the
    elements outside read as zero; the store writes only those inside."""
    A = (np.arange(50 * 56) % 251 - 125).astype(np.float32).reshape(50, 56).astype(BF16)
    env = {"A": A, "P": np.zeros((64, 64), BF16), "C": np.zeros((50, 56), BF16)}
    row, col = b("/", TID, 2), b("*", b("%", TID, 2), 32)
    body = ir.seq(
        thread0(ir.seq(call("mbarrier_init", ref("bar", 0), c(1)), call("fence_mbarrier_init"))),
        ir.Barrier(),
        thread0(ir.seq(call("mbarrier_expect_tx", ref("bar", 0), c(64 * 64 * 2)),
                       call("tma_load_2d", ref("S", 0, 0), mapvar("tmA"), ref("bar", 0), c(0),
                            c(0)))),
        call("mbarrier_wait", ref("bar", 0), c(0)),
        loop("i", 32, ir.Store("P", (row, b("+", col, ir.Var("i", ir.int32))),
                               ir.Load("S", (row, b("+", col, ir.Var("i", ir.int32))),
                                       dtypes.bfloat16))),
        thread0(ir.seq(call("tma_store_2d", mapvar("tmC"), ref("S", 0, 0), c(0), c(0)),
                       call("tma_store_commit"), call("tma_store_wait", c(0)))))
    maps = (ir.TensorMap("tmA", "A", (64, 64), 128), ir.TensorMap("tmC", "C", (64, 64), 128))
    run_kernel(body, [shared("S", 64), ir.Buffer("bar", dtypes.uint64, (c(1),), "barrier")],
               [glob("A", (50, 56)), glob("P", (64, 64), role="output"),
                glob("C", (50, 56), role="output")], env, maps)
    padded = np.zeros((64, 64), BF16)
    padded[:50, :56] = A
    np.testing.assert_array_equal(env["P"], padded)
    np.testing.assert_array_equal(env["C"], A)


def wgmma_kernel(n=64, *, fence=True, wait=True, first_scale=0):
    """One warpgroup: A (64 x 64) and B (n x 64) copied into swizzled shared
    tiles by ordinary stores, four wgmma m64n{n}k16 over K = 64, the
    accumulators stored to C (64 x n) through the wgmma layout."""
    i, kk = ir.Var("i", ir.int32), ir.Var("kk", ir.int32)
    copy = []
    for name, rows in (("A", 64), ("B", n)):
        per = rows * 64 // 128  # elements per thread
        e = b("+", b("*", TID, per), i)
        r, col = b("/", e, 64), b("%", e, 64)
        copy.append(loop("i", per, ir.Store(name + "_s", (r, col),
                                             ir.Load(name, (r, col), dtypes.bfloat16))))
    lane, warp = b("%", TID, 32), b("/", TID, 32)
    row = b("+", b("+", b("*", warp, 16), b("/", lane, 4)), b("*", b("%", b("/", i, 2), 2), 8))
    col = b("+", b("+", b("*", b("/", i, 4), 8), b("*", b("%", lane, 4), 2)), b("%", i, 2))
    scale = ir.Select(b("!=", kk, 0, ir.bool_), c(1), c(first_scale), ir.int32)
    body = ir.seq(
        *copy,
        call("fence_proxy_async") if fence else None,
        ir.Barrier(),
        call("wgmma_fence"),
        loop("kk", 4, call(f"wgmma_m64n{n}k16_bf16", ref("acc", 0), ref("A_s", 0, b("*", kk, 16)),
                           ref("B_s", 0, b("*", kk, 16)), scale, c(0), c(0))),
        call("wgmma_commit"),
        call("wgmma_wait", c(0)) if wait else None,
        loop("i", n // 2, ir.Store("C", (row, col), ir.Load("acc", (i,), dtypes.float32))))
    allocs = [shared("A_s", 64), shared("B_s", n),
              ir.Buffer("acc", dtypes.float32, (c(n // 2),), "local")]
    globals_ = [glob("A", (64, 64)), glob("B", (n, 64)),
                glob("C", (64, n), dtypes.float32, role="output")]
    return body, allocs, globals_


@pytest.mark.parametrize("n", [64, 256])
def test_wgmma_multiplies_in_the_accumulator_layout(n):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((64, 64)).astype(BF16)
    B = rng.standard_normal((n, 64)).astype(BF16)
    env = {"A": A, "B": B, "C": np.zeros((64, n), np.float32)}
    run_kernel(*wgmma_kernel(n), env)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(env["C"], want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_the_accumulator_layout_is_the_ptx_formula(n):
    """The sim's accumulator layout (arch/fragments.py's wgmma_d, tied to the
    PTX ISA's tables in tests/arch) is the formula of the brief: register i of
    thread t holds row (t/32)*16 + (t%32)/4 + 8*((i/2)%2), column
    (i/4)*8 + (t%4)*2 + i%2, and covers the 64 x n tile once."""
    row, col = accumulator_layout(n)
    t, i = np.arange(128)[:, None], np.arange(n // 2)[None, :]
    np.testing.assert_array_equal(row, (t // 32) * 16 + (t % 32) // 4 + 8 * ((i // 2) % 2))
    np.testing.assert_array_equal(col, (i // 4) * 8 + (t % 4) * 2 + i % 2)
    assert len(set(zip(row.reshape(-1).tolist(), col.reshape(-1).tolist()))) == 64 * n


def test_named_barriers_join_two_tasks():
    """Two consumer warpgroups of a Specialize meet at one named barrier of
    256 threads: each writes its half of a shared row, then reads the other's."""
    w, t = ir.Var("w", ir.int32), b("%", TID, 128)
    mine = b("+", b("*", w, 128), t)
    other = b("+", b("*", b("-", 1, w), 128), t)
    body = ir.Specialize((ir.Role("w", "consumer", 0, 2, 0, ir.seq(
        ir.Store("S", (mine,), ir.Cast(dtypes.float32, mine)),
        call("named_barrier", c(1), c(256)),
        ir.Store("C", (mine,), ir.Load("S", (other,), dtypes.float32)))),))
    env = {"C": np.zeros(256, np.float32)}
    run_kernel(body, [ir.Buffer("S", dtypes.float32, (c(256),), "shared")],
               [glob("C", (256,), dtypes.float32, role="output")], env, threads=256)
    np.testing.assert_array_equal(env["C"], np.r_[np.arange(128, 256), np.arange(128)])
