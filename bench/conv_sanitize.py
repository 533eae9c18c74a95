"""Small calls of the Hopper convolution (kernels/conv_sm90.py: im2col TMA
copies) for compute-sanitizer (NumPy data, no torch): a 3x3 "same" case with
an M tail and an asymmetric 2x3 filter, each checked against float64.

    compute-sanitizer --tool memcheck|racecheck|synccheck python3 bench/conv_sanitize.py
"""
import os
import sys

import numpy as np

import tcomp
from tcomp.kernels.conv_sm90 import conv2d_schedule, conv2d_source
from tcomp.kernels.gemm_sm90 import GemmConfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.kernels.conv_ops import CASES, data, reference, sizes_of  # noqa: E402

for filt, pad, sizes, cfg in (CASES[0], CASES[5]):
    sz = sizes_of(filt, sizes)
    k = tcomp.build(conv2d_schedule(tcomp.op(conv2d_source(filt, pad)), GemmConfig(**cfg)),
                    target="cuda", sizes=sz)
    X, Wt = data(filt, sz)
    O = np.asarray(k(X, Wt)).astype(np.float64)
    ref = reference(filt, pad, X, Wt)
    print(filt, pad, "max error", float(np.abs(O - ref).max()), "of", float(np.abs(ref).max()))
