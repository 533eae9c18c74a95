"""Shared pieces of the Hopper attention tests: data and the float64 reference."""
from __future__ import annotations

import numpy as np


def data(Z, S, T, D, E, dtype="bfloat16", seed=0, scale=1.0):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(seed)
    return tuple((scale * rng.standard_normal(sh)).astype(dt)
                 for sh in ((Z, S, D), (Z, T, D), (Z, T, E)))


def reference(Q, K, V, causal=False, scale=None):
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    s = q @ k.transpose(0, 2, 1) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = np.where(np.arange(k.shape[1])[None, None, :] > np.arange(q.shape[1])[None, :, None],
                     -np.inf, s)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return p @ v / p.sum(axis=-1, keepdims=True)
