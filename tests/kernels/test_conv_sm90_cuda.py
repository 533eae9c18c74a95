"""Convolution on the Hopper path on the GPU (issue 24): the im2col TMA
copies at every filter, padding and tail of conv_ops.CASES (asymmetric
paddings pin the order of the map's corners), the benchmark's shape at a
sample of output pixels, and an export round trip of the im2col map."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.kernels.conv_sm90 import conv2d_schedule, conv2d_source
from tcomp.kernels.gemm_sm90 import GemmConfig

from .conv_ops import CASES, close, data, reference, sizes_of

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("filt,pad,sizes,cfg", CASES)
def test_gpu_matches_the_float64_convolution(filt, pad, sizes, cfg):
    op = tcomp.op(conv2d_source(filt, pad))
    sz = sizes_of(filt, sizes)
    k = tcomp.build(conv2d_schedule(op, GemmConfig(**cfg)), target="cuda", sizes=sz)
    X, Wt = data(filt, sz, seed=4)
    close(k(X, Wt), reference(filt, pad, X, Wt))


@pytest.mark.parametrize("cfg", [GemmConfig(), GemmConfig(bm=64, bn=256, pingpong=True)])
def test_the_benchmark_shape_at_sampled_pixels(cfg):
    sz = dict(N=8, H=56, W=56, C=256, K=256, RSC=2304)
    k = tcomp.build(conv2d_schedule(tcomp.op(conv2d_source()), cfg), target="cuda", sizes=sz)
    X, Wt = data((3, 3), sz, seed=5)
    O = np.asarray(k(X, Wt)).astype(np.float64)
    rng = np.random.default_rng(0)
    pix = rng.integers(0, O.shape[0], 64)
    Xp = np.pad(X.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    n, h, w = pix // 3136, pix // 56 % 56, pix % 56
    win = np.stack([Xp[n, h + i, w + j] for i in range(3) for j in range(3)], 1)
    ref = win.reshape(len(pix), -1) @ Wt.astype(np.float64)
    close(O[pix], ref)


def test_export_and_load_keep_the_im2col_map(tmp_path):
    sz = dict(N=2, H=5, W=7, C=64, K=64, RSC=576)
    s = conv2d_schedule(tcomp.op(conv2d_source()), GemmConfig(bm=128, bn=64, stages=3))
    k = tcomp.build(s, target="cuda", sizes=sz)
    path = str(tmp_path / "conv.cubin")
    k.export(path)
    k2 = tcomp.load(path)
    X, Wt = data((3, 3), sz, seed=6)
    assert np.array_equal(np.asarray(k(X, Wt)), np.asarray(k2(X, Wt)))
