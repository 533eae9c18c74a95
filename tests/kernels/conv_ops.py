"""Convolutions for the Hopper im2col tests: data and the float64 reference
(NHWC input, filters as an (R S C) x K matrix, output as (N Ho Wo) x K)."""
from __future__ import annotations

import numpy as np

# (filter, padding, sizes, config kwargs): 3x3 "same" with an M tail, 1x1, 3x3 "valid",
# 5x5, and the asymmetric filters and paddings (3x1 pad (1, 0), 2x3 pad (1, 0))
CASES = [
    ((3, 3), (1, 1), dict(N=3, H=7, W=9, C=64, K=72), dict(bm=128, bn=128, stages=2)),
    ((1, 1), (0, 0), dict(N=2, H=5, W=6, C=128, K=64), dict(bm=128, bn=64, stages=4)),
    ((3, 3), (0, 0), dict(N=2, H=6, W=7, C=64, K=64), dict(bm=64, bn=64, consumers=1, stages=3)),
    ((5, 5), (2, 2), dict(N=1, H=9, W=11, C=64, K=64), dict(bm=128, bn=64, stages=3)),
    ((3, 1), (1, 0), dict(N=2, H=6, W=5, C=64, K=64), dict(bm=128, bn=64, stages=3)),
    ((2, 3), (1, 0), dict(N=2, H=6, W=5, C=64, K=64), dict(bm=128, bn=64, stages=3)),
]


def sizes_of(filt, sizes):
    return dict(sizes, RSC=filt[0] * filt[1] * sizes["C"])


def data(filt, sizes, seed=0, dtype=np.float16):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((sizes["N"], sizes["H"], sizes["W"], sizes["C"])).astype(dtype)
    Wt = rng.standard_normal((filt[0] * filt[1] * sizes["C"], sizes["K"])).astype(dtype)
    return X, Wt


def reference(filt, pad, X, Wt):
    """O (N Ho Wo) x K in float64: the padded input's windows times the filters."""
    (R, S), (ph, pw) = filt, pad
    N, H, W, C = X.shape
    Ho, Wo = H + 2 * ph - R + 1, W + 2 * pw - S + 1
    Xp = np.pad(X.astype(np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    W4 = Wt.astype(np.float64).reshape(R, S, C, -1)
    out = np.zeros((N, Ho, Wo, W4.shape[-1]))
    for i in range(R):
        for j in range(S):
            out += np.einsum("nhwc,ck->nhwk", Xp[:, i:i + Ho, j:j + Wo], W4[i, j])
    return out.reshape(N * Ho * Wo, -1)


def close(O, ref, bits=11):
    """Within float16's rounding of the largest magnitude (the output is float16)."""
    err = np.abs(np.asarray(O).astype(np.float64) - ref).max()
    assert err <= 2.0 ** -(bits - 1) * np.abs(ref).max() + 1e-3, err
