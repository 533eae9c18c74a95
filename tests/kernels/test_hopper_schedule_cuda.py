"""The Hopper path from a schedule on the GPU (issue 24): each operand in
either major order, bfloat16 and float16 inputs, 16- and 32-bit outputs,
awkward and symbolic sizes, against the float64 product."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule

from .hopper_ops import LAYOUTS, data, op, reference

pytestmark = pytest.mark.cuda


def _close(C, ref, bits=8):
    err = np.abs(np.asarray(C).astype(np.float64) - ref).max()
    assert err <= 2.0 ** -(bits - 1) * np.abs(ref).max() + 1e-3, err


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("M,N,K", [(40, 72, 40), (1000, 1032, 520), (384, 768, 0)])
def test_layouts_at_symbolic_sizes(layout, M, N, K):
    k = tcomp.build(hopper_schedule(op(layout)), target="cuda")
    A, B = data(layout, M, N, K)
    _close(k(A, B), reference(layout, A, B))


@pytest.mark.parametrize("layout", ["NN", "TT"])
@pytest.mark.parametrize("config", [GemmConfig(bn=128, stages=5), GemmConfig(bm=64, consumers=1,
                                                                            bn=64, stages=2)])
def test_layouts_and_configs_at_fixed_sizes(layout, config):
    sizes = {"M": 392, "N": 648, "K": 328}
    k = tcomp.build(hopper_schedule(op(layout), config), target="cuda", sizes=sizes)
    A, B = data(layout, 392, 648, 328, seed=1)
    _close(k(A, B), reference(layout, A, B))


@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("out,bits", [("float16", 11), ("float", 24)])
def test_float16_inputs(layout, out, bits):
    k = tcomp.build(hopper_schedule(op(layout, "float16", out)), target="cuda")
    A, B = data(layout, 200, 264, 136, "float16", seed=2)
    _close(k(A, B), reference(layout, A, B), bits=min(bits, 11))


def test_rows_the_tma_engine_cannot_move_are_a_clear_error():
    """A given as (K, M) with M = 37: rows of 74 bytes."""
    k = tcomp.build(hopper_schedule(op("TN")), target="cuda")
    A, B = data("TN", 37, 72, 40)
    with pytest.raises(tcomp.CudaError, match="a row of 'A' is 74 bytes .* pad the innermost "
                                              "dimension to a multiple of 8 elements"):
        k(A, B)


def test_fused_bias_gelu():
    from .test_hopper_schedule import BIAS_GELU
    o = tcomp.op(BIAS_GELU)
    s = hopper_schedule(o, stage="T")
    s["T"].epilogue(s["D"])
    k = tcomp.build(s, target="cuda")
    A, B = data("NN", 1000, 1032, 520, seed=4)
    bias = np.random.default_rng(5).standard_normal(1032).astype(np.float32)
    want = np.asarray(tcomp.evaluate(o, A, B, bias)).astype(np.float64)
    _close(k(A, B, bias), want)


@pytest.mark.parametrize("layout", ["NN", "NT"])
@pytest.mark.parametrize("config", [GemmConfig(bm=128, bn=128, stages=4, pingpong=True),
                                    GemmConfig(bm=64, bn=256, stages=4, pingpong=True)])
def test_pingpong(layout, config):
    k = tcomp.build(hopper_schedule(op(layout), config), target="cuda")
    for M, N, K in [(1000, 1032, 520), (2048, 2048, 64)]:
        A, B = data(layout, M, N, K, seed=M)
        _close(k(A, B), reference(layout, A, B))


@pytest.mark.parametrize("name", ["bmm_nn", "shared_nt", "tt"])
def test_batched(name):
    from .test_hopper_schedule import batched, batched_data
    o, ref = batched(name)
    k = tcomp.build(hopper_schedule(o, GemmConfig(bm=64, bn=256, stages=4, pingpong=True)),
                    target="cuda")
    sizes = {"Z": 5, "M": 520, "N": 264, "K": 136}
    A, B = batched_data(o, sizes, seed=9)
    _close(k(A, B), ref(A.astype(np.float64), B.astype(np.float64)))
