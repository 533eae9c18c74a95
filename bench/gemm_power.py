"""SM clock, power and throttle reasons (nvidia-smi every 20 ms) while the bf16 Hopper
GEMM and cuBLAS run back to back for 3 s each, at 3000x5000x7000 and the aligned
3008x5056x7040 (issue 24). Run on the GPU machine: PYTHONPATH=. python3 bench/gemm_power.py
(writes $OUT/power.csv). Measured 2026-12-03: every case at the 690 W software power cap,
SM clock 1485-1560 MHz (bench/results/2026-12-03_gemm_misaligned.txt, item 6)."""
import os
import statistics
import subprocess
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import tcomp
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule
from hopper_schedule import op

out = os.environ.get("OUT", ".")
q = "timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active,clocks_throttle_reasons.sw_power_cap,clocks_throttle_reasons.hw_slowdown,temperature.gpu"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "20"],
                       stdout=open(os.path.join(out, "power.csv"), "w"))
time.sleep(1)
marks = []
torch.manual_seed(0)
for M, N, K in ((3000, 5000, 7000), (3008, 5056, 7040)):
    A = torch.randn(M, K, device="cuda").bfloat16(); B = torch.randn(K, N, device="cuda").bfloat16()
    k = tcomp.build(hopper_schedule(op("NN", "bfloat16"), GemmConfig()), target="cuda", sizes={"M": M, "N": N, "K": K})
    for who, fn in (("tcomp", lambda: k(A, B)), ("cublas", lambda: torch.matmul(A, B))):
        fn(); torch.cuda.synchronize()
        t0 = time.time(); n = 0
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True); a.record()
        while time.time() - t0 < 3.0:
            for _ in range(20): fn()
            n += 20; torch.cuda.synchronize()
        b.record(); b.synchronize()
        us = a.elapsed_time(b) * 1e3 / n
        marks.append((f"{M}x{N}x{K} {who}", t0 + 0.5, time.time(), us, 2 * M * N * K / us / 1e6))
        time.sleep(1.0)
smi.terminate(); time.sleep(0.5)
import datetime
rows = []
for line in open(os.path.join(out, "power.csv")):
    f = [x.strip() for x in line.split(",")]
    try:
        ts = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((ts, float(f[1]), float(f[2]), f[3], f[4], f[5], f[6]))
    except Exception:
        pass
for name, t0, t1, us, tf in marks:
    sel = [r for r in rows if t0 <= r[0] <= t1]
    if not sel:
        print(name, "no samples", us, tf); continue
    print(f"{name}: {us:.1f} us/call {tf:.0f} TFLOP/s; SM clock median {statistics.median(r[1] for r in sel):.0f} MHz "
          f"(min {min(r[1] for r in sel):.0f}), power median {statistics.median(r[2] for r in sel):.0f} W, "
          f"reasons {sorted({r[3] for r in sel})}, sw_power_cap {sorted({r[4] for r in sel})}, hw_slowdown {sorted({r[5] for r in sel})}, "
          f"temp {sorted({r[6] for r in sel})[-1]}  ({len(sel)} samples)", flush=True)
