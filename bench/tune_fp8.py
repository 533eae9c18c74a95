"""Tune the fp8 e4m3 GEMM (float32 out) at 4096^3 with tcomp.tune, then time the tuned and the hand
Hopper schedules against torch._scaled_mm(out_dtype=float32), two rounds (issue 24: the search finds
the Hopper path for fp8). Run on the GPU machine: PYTHONPATH=. python3 bench/tune_fp8.py"""
import sys, time, json, os
sys.path.insert(0, "bench")
import torch, tcomp
from timing import timed
from tcomp.search import LocalRunner
from tcomp.kernels.gemm_sm90 import hopper_schedule
SRC = ("def mm8(float8_e4m3fn(M,K) A, float8_e4m3fn(N,K) B) -> (C) "
       "{ C(m, n) +=! float(A(m, k)) * float(B(n, k)) }")
op = tcomp.op(SRC)
n = 4096
sizes = {"M": n, "N": n, "K": n}
with LocalRunner(devices=[0]) as runner:
    t0 = time.time()
    res = tcomp.tune(op, sizes, trials=32, target="cuda", runner=runner, patience=None, time_limit_s=150)
    tune_s = time.time() - t0
A = (torch.randn(n, n, device="cuda") / 4).to(torch.float8_e4m3fn)
B = (torch.randn(n, n, device="cuda") / 4).to(torch.float8_e4m3fn)
one = torch.ones((), device="cuda")
kt = tcomp.build(res.schedule, target="cuda", sizes=sizes)
kh = tcomp.build(hopper_schedule(op), target="cuda", sizes=sizes)
ref = A.double() @ B.double().T
for name, k in (("tuned", kt), ("hand", kh)):
    C = k(A, B)
    print(name, "err", ((C.double() - ref).abs().max() / ref.abs().max()).item())
lib = lambda: torch._scaled_mm(A, B.T, scale_a=one, scale_b=one, out_dtype=torch.float32)
for rep in range(2):
    tl, tt, th = timed(lib, 30), timed(lambda: kt(A, B), 30), timed(lambda: kh(A, B), 30)
    f = 2 * n ** 3 / 1e9
    print(f"round {rep}: scaled_mm {f / tl:.0f}, tuned {f / tt:.0f} ({res.best.sketch}), hand {f / th:.0f} TFLOP/s; tuned/lib {tl / tt:.3f}, tuned/hand {th / tt:.3f}")
print("trials", len(res.history), "tune_s", round(tune_s, 1), "best plan", json.dumps(res.best.plan_dict()["stages"] if hasattr(res.best, "plan_dict") else None)[:300])
