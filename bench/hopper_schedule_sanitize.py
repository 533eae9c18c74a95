"""Small calls of schedule-built Hopper kernels for compute-sanitizer (NumPy
data, no torch): each operand order (NN, TN: MN-major operands), ping-pong
consumers (64 x 256 and 128 x 128), a batched product, the fused GEMM + bias
+ GELU epilogue, each checked against float64 first (tests/kernels'
helpers).

    compute-sanitizer --tool memcheck|racecheck|synccheck python3 bench/hopper_schedule_sanitize.py
"""
import os
import sys

import numpy as np

import tcomp
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.kernels.hopper_ops import data, op, reference  # noqa: E402
from tests.kernels.test_hopper_schedule import BIAS_GELU, batched, batched_data  # noqa: E402


def report(name, got, want):
    got = np.asarray(got).astype(np.float64)
    err = float(np.abs(got - want).max())
    ok = err <= 2.0 ** -7 * float(np.abs(want).max()) + 1e-3
    print(f"{name}: max error {err:.3g} of {float(np.abs(want).max()):.3g} "
          f"{'ok' if ok else 'WRONG'}", flush=True)


for layout, cfg in (("NN", GemmConfig()), ("TN", GemmConfig(bn=128, stages=3)),
                    ("NT", GemmConfig(bm=64, bn=256, pingpong=True)),
                    ("NN", GemmConfig(bm=128, bn=128, pingpong=True))):
    k = tcomp.build(hopper_schedule(op(layout), cfg), target="cuda")
    A, B = data(layout, 304, 520, 136)
    report(f"{layout} {cfg.bm}x{cfg.bn}{' pingpong' if cfg.pingpong else ''}", k(A, B),
           reference(layout, A, B))

o, ref = batched("bmm_nn")
k = tcomp.build(hopper_schedule(o, GemmConfig(bm=64, bn=256, pingpong=True)), target="cuda")
A, B = batched_data(o, {"Z": 3, "M": 200, "N": 264, "K": 72}, seed=9)
report("batched", k(A, B), ref(A.astype(np.float64), B.astype(np.float64)))

o = tcomp.op(BIAS_GELU)
s = hopper_schedule(o, stage="T")
s["T"].epilogue(s["D"])
k = tcomp.build(s, target="cuda")
A, B = data("NN", 300, 264, 136, seed=4)
bias = np.random.default_rng(5).standard_normal(264).astype(np.float32)
report("bias+gelu", k(A, B, bias), np.asarray(tcomp.evaluate(o, A, B, bias)).astype(np.float64))
