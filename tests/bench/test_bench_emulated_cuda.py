"""The generated CUDA C++ of some suite cases whose golden file was dropped,
run by value on the g++ CUDA emulator (tests/target_cuda/emulator.py) at small
sizes that divide their tiles, with the suite's own schedule parameters: what
the structural checks of test_bench_golden_cuda.py cannot see (index
arithmetic, the pipeline's buffer flips, the rasterized block order, the
all-reduces' shuffles) is checked against numpy on the very source NVRTC
compiles for the benchmark."""
from __future__ import annotations


import numpy as np
import pytest

import tcomp
from tests.target_cuda.emulator import HAVE_CXX, run_emulated

from .common import SUITE_CASES
from .test_bench_golden_cuda import ARCH
from .test_bench_schedules_sim import make_inputs, suite_small_sizes

BY_SLUG = {c.slug: c for c in SUITE_CASES}
CASES = ["gemm_4096_frag_warp_pad_pipe_g8", "gemm_4096_shared_warp_pad_pipe_g8",
         "layernorm_32768x4096_512t_smem_vec4"]


def oracle(kind, args):
    if kind == "gemm":
        a, b = (x.astype(np.float64) for x in args)
        return a @ b
    x, gamma, beta = (v.astype(np.float64) for v in args)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.skipif(not HAVE_CXX, reason="no host C++ compiler (g++)")
@pytest.mark.parametrize("slug", CASES)
def test_suite_case_emulated(slug):
    c = BY_SLUG[slug]
    op, s = c.schedule()
    sizes = suite_small_sizes(c)
    k = tcomp.build(s, target=f"cuda:{ARCH}", sizes=sizes)
    args = make_inputs(op, sizes, seed=3)
    out = run_emulated(k, *args)
    want = oracle(c.kind, args)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    # the sim agrees with the emulated CUDA
    np.testing.assert_allclose(tcomp.build(s, target="sim", sizes=sizes)(*args), out,
                               rtol=1e-5, atol=1e-5)
