"""Small calls of tcomp.kernels.attention_sm90 for compute-sanitizer (NumPy
data, no torch): the persistent grid walking several tiles per block (more
tiles than multiprocessors), causal with the log-sum-exp output, 176 keys per
step, grouped-query, one block per tile, ping-pong consumers.

    compute-sanitizer --tool memcheck --report-api-errors no python3 bench/attention_sanitize.py
"""
import ml_dtypes
import numpy as np

from tcomp.kernels.attention_sm90 import AttentionConfig, attention_sm90

rng = np.random.default_rng(0)


def data(Z, S, T, D, zk=None):
    zk = Z if zk is None else zk
    return tuple(rng.standard_normal(sh).astype(ml_dtypes.bfloat16)
                 for sh in ((Z, S, D), (zk, T, D), (zk, T, D)))


def reference(Q, K, V, causal, g=1):
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    k, v = np.repeat(k, g, 0), np.repeat(v, g, 0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(k.shape[1])[None, None, :] > np.arange(q.shape[1])[None, :, None],
                     -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return p @ v / p.sum(-1, keepdims=True)


CASES = [  # (config, Z, S, T, kv heads)
    (AttentionConfig(causal=True, lse=True, persistent=True, bn=128), 140, 300, 300, None),
    (AttentionConfig(bn=176), 70, 500, 433, None),
    (AttentionConfig(kv_group=4), 136, 200, 257, 34),
    (AttentionConfig(persistent=False, causal=True), 8, 260, 260, None),
    (AttentionConfig(pingpong=True), 140, 256, 384, None),
]
for cfg, Z, S, T, zk in CASES:
    Q, K, V = data(Z, S, T, 128, zk)
    out = attention_sm90(cfg, {"D": 128, "E": 128})(Q, K, V)
    O = out[0] if cfg.lse else out
    err = float(np.abs(O.astype(np.float64) - reference(Q, K, V, cfg.causal, cfg.kv_group)).max())
    print(cfg, "max error", err, "OK" if err < 2e-2 else "WRONG", flush=True)
