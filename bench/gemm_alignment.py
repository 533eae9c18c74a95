"""Which rows' alignment costs the bf16 3000x5000x7000 Hopper GEMM (issue 24): the
Hopper schedule (128x256, 4 stages) against cuBLAS at sizes that make A's rows (K) or
B's and C's rows (N) multiples of 128 bytes, or both; with cuBLAS's kernel names
(torch.profiler). Run on the GPU machine:

    PYTHONPATH=. python3 bench/gemm_alignment.py            # the table, $OUT/align.json
    PYTHONPATH=. python3 bench/gemm_alignment.py 3000x5000x7000   # two calls, for ncu -k regex:mm

Measured (2026-12-03, bench/results/2026-12-03_gemm_misaligned.txt): N = 5000 (rows of
10,000 bytes) costs ~20%, K = 7000 (14,000-byte rows) ~2%; not the C store."""
import os, sys, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import tcomp
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule
from hopper_schedule import op, check
from timing import timed

SIZES = [(3000, 5000, 7000), (3000, 5000, 7040), (3000, 5056, 7000), (3008, 5056, 7040),
         (3008, 5000, 7040), (3000, 5056, 7040)]

def names(fn):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize()
    return sorted({e.name for e in p.events() if e.device_type.name == "CUDA"})

def main(only=None, reps=15):
    torch.manual_seed(0)
    rows = []
    for M, N, K in SIZES:
        if only and (M, N, K) != only:
            continue
        A = torch.randn(M, K, device="cuda").bfloat16(); B = torch.randn(K, N, device="cuda").bfloat16()
        dims = {"M": M, "N": N, "K": K}
        k = tcomp.build(hopper_schedule(op("NN", "bfloat16"), GemmConfig()), target="cuda", sizes=dims)
        err = check(k(A, B), A, B)
        if only:
            for _ in range(2): k(A, B)
            torch.cuda.synchronize(); return
        fl = 2 * M * N * K
        t_ref = timed(lambda: torch.matmul(A, B), reps); t = timed(lambda: k(A, B), reps)
        r = dict(size=f"{M}x{N}x{K}", tcomp=fl / t / 1e9, cublas=fl / t_ref / 1e9, ratio=t_ref / t,
                 err=err, cublas_kernels=names(lambda: torch.matmul(A, B)))
        print(json.dumps(r), flush=True); rows.append(r)
    if os.environ.get("OUT"):
        json.dump(rows, open(os.path.join(os.environ["OUT"], "align.json"), "w"), indent=1)

if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(tuple(int(x) for x in sys.argv[1].split("x")))
    else:
        main()
