"""What the tuning tests share: the GEMM they tune and a records file's lines."""
from __future__ import annotations

import json

MM = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def lines(path) -> list:
    """The JSON records of a records file, in order."""
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]
