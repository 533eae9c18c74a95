"""conv2d on tensor cores (bench/schedules.py tc_conv2d, an im2col stage in
shared memory) on the GPU against torch.nn.functional.conv2d: the float64
convolution within one float16 rounding (plus float32 summation error), and
cuDNN's own float16 result, at small awkward sizes and the benchmark size
N32 C256 56x56 K256. Runs in a fresh interpreter, like the other torch GPU
tests (test_gpu_interop.run_script)."""
from __future__ import annotations

import pytest

from .test_gpu_interop import run_script

pytestmark = pytest.mark.cuda

SCRIPT = r"""
import numpy as np, torch, tcomp
import torch.nn.functional as F
from tests.bench.common import S

def nhwc(t, N, H, W, K):
    return t.permute(0, 2, 3, 1).reshape(N * H * W, K)

def check(N, H, W, C, K, kw, sim):
    op, s = S.tc_conv2d(**kw)
    k = tcomp.build(s, target="cuda", sizes={"N": N, "H": H, "W": W, "C": C, "K": K, "R": 9 * C})
    g = torch.Generator(device="cuda").manual_seed(N * H + C)
    X = torch.randn(N, H, W, C, device="cuda", generator=g).half()
    Wt = torch.randn(9 * C, K, device="cuda", generator=g).half()
    O = k(X, Wt)
    torch.cuda.synchronize()
    assert isinstance(O, torch.Tensor) and O.is_cuda, type(O)
    assert O.shape == (N * H * W, K) and O.dtype == torch.float16, (O.shape, O.dtype)
    x = X.permute(0, 3, 1, 2)                      # NCHW view of the NHWC input
    filt = Wt.reshape(3, 3, C, K).permute(3, 2, 0, 1)  # (K, C, 3, 3)
    exact = nhwc(F.conv2d(x.double(), filt.double(), padding=1), N, H, W, K)
    mag = nhwc(F.conv2d(x.double().abs(), filt.double().abs(), padding=1), N, H, W, K)
    got = O.double()
    # float32 accumulation in any order, then one rounding to float16
    bad = (got - exact).abs() > exact.abs() * 2.0 ** -10 + 2.0 ** -17 * mag
    assert not bad.any(), (int(bad.sum()), float((got - exact).abs().max()))
    # cuDNN on the same data, channels-last: two roundings apart, plus what its algorithm
    # (possibly Winograd or FFT) loses where terms cancel
    lib = nhwc(F.conv2d(x.contiguous(memory_format=torch.channels_last),
                        filt.contiguous(memory_format=torch.channels_last), padding=1),
               N, H, W, K).double()
    bad = (got - lib).abs() > exact.abs() * 2.0 ** -9 + 2.0 ** -11 * mag
    assert not bad.any(), (int(bad.sum()), float((got - lib).abs().max()))
    if sim:
        sizes = {"N": N, "H": H, "W": W, "C": C, "K": K, "R": 9 * C}
        ref = tcomp.build(s, target="sim", sizes=sizes)(X.cpu().numpy(), Wt.cpu().numpy())
        ref = ref.astype(np.float64)
        d = np.abs(O.cpu().numpy().astype(np.float64) - ref)
        assert (d <= np.abs(ref) * 2.0 ** -9 + 2.0 ** -17 * mag.cpu().numpy()).all()
    print("ok", N, H, W, C, K, kw)

SMALL = dict(bm=64, bn=64, wm=32, wn=32, bk=32)
check(2, 9, 7, 32, 40, dict(SMALL, pipeline=3), sim=True)    # awkward H, W, N H W, K
check(2, 5, 7, 12, 24, dict(SMALL, pipeline=4), sim=True)    # pieces across taps: ring stores
check(1, 6, 5, 16, 24, dict(SMALL, pipeline=True), sim=True)  # register double buffering
check(32, 56, 56, 256, 256, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3), sim=False)
print("tc conv ok")
"""


def test_tc_conv2d_against_torch_conv2d():
    out = run_script(SCRIPT, "torch", timeout=600)
    assert "tc conv ok" in out, out
