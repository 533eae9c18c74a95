"""Small calls of the fused decode kernels (tcomp.kernels.attention_decode,
`fused=True`) for compute-sanitizer (NumPy data, no torch): KV lengths no
step divides (T = 1000, 777, 33), grouped-query (4 query heads a KV head),
one part and several, with and without the register prefetch.

    compute-sanitizer --tool memcheck --report-api-errors no \
        python3 bench/attention_decode_sanitize.py
"""
import ml_dtypes
import numpy as np

from tcomp.kernels.attention_decode import attention_decode

rng = np.random.default_rng(0)


def reference(Q, K, V, g):
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    k, v = np.repeat(k, g, 0), np.repeat(v, g, 0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return p @ v / p.sum(-1, keepdims=True)


CASES = [  # (Z, T, kv_group, parts, unroll, prefetch)
    (8, 1000, 1, 8, 2, True),
    (8, 777, 4, 8, 4, True),
    (4, 33, 1, 16, 2, True),
    (8, 1000, 1, 1, 4, False),
    (16, 777, 4, 4, 2, False),
]
bad = 0
for Z, T, g, parts, unroll, prefetch in CASES:
    zk = Z // g
    Q = rng.standard_normal((Z, 1, 128)).astype(ml_dtypes.bfloat16)
    K = rng.standard_normal((zk, T, 128)).astype(ml_dtypes.bfloat16)
    V = rng.standard_normal((zk, T, 128)).astype(ml_dtypes.bfloat16)
    k = attention_decode({"D": 128, "E": 128, "S": 1}, parts=parts, kv_group=g, fused=True,
                         unroll=unroll, prefetch=prefetch)
    O = k(Q, K, V)
    err = float(np.abs(np.asarray(O, np.float64) - reference(Q, K, V, g)).max())
    ok = err < 2e-2
    bad += not ok
    print(f"Z={Z} T={T} g={g} parts={parts} unroll={unroll} prefetch={prefetch}: max error "
          f"{err:.3g}", "OK" if ok else "WRONG", flush=True)
raise SystemExit(1 if bad else 0)
