"""The Hopper GEMM built as IR (tcomp.kernels.gemm_sm90) on the GPU: equal to
the float64 product within bfloat16 rounding at awkward and symbolic sizes,
and the same bits after export -> tcomp.load."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tcomp
from tcomp.kernels import GemmConfig, gemm_sm90

pytestmark = pytest.mark.cuda


def _data(M, N, K, seed=0):
    import ml_dtypes
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    return A, B


def _close(C, A, B):
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    # float32 accumulation, one rounding to bfloat16 (8 bits of mantissa)
    err = np.abs(C.astype(np.float64) - ref).max()
    assert err <= 2 ** -7 * np.abs(ref).max() + 1e-3, err


@pytest.mark.parametrize("M,N,K", [(37, 72, 40), (129, 264, 64), (1000, 1032, 520),
                                   (256, 512, 1024)])
def test_symbolic_sizes(M, N, K):
    k = gemm_sm90()
    A, B = _data(M, N, K)
    _close(k(A, B), A, B)


@pytest.mark.parametrize("config", [GemmConfig(), GemmConfig(stages=3),
                                    GemmConfig(bn=128, stages=5)])
def test_fixed_sizes_and_configs(config):
    M, N, K = 384, 768, 320
    k = gemm_sm90({"M": M, "N": N, "K": K}, config)
    A, B = _data(M, N, K, 1)
    _close(k(A, B), A, B)


def test_export_and_load_give_the_same_bits(tmp_path):
    k = gemm_sm90({"M": 512, "N": 512, "K": 256})
    A, B = _data(512, 512, 256, 2)
    C = k(A, B)
    path = os.path.join(tmp_path, "g.cubin")
    k.export(path)
    assert np.array_equal(tcomp.load(path)(A, B), C)
