"""One wide bf16 row kernel (4096x32768) built and run twice, for `ncu` (issue 14:
what limits the wide rows). The sixth session's figures (BENCHMARKS.md) came from:

    M=dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.avg.per_cycle_active,\
smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,...
    ncu --clock-control none --metrics $M --launch-skip 1 --launch-count 1 \
        -k regex:"softmax_O|layernorm_Y|rmsnorm_Y" python3 bench/rows_ncu.py softmax 512 0

argv: kind (softmax, layernorm, rmsnorm), threads, x in registers (0/1), and "regs" for the
row-in-registers softmax (one block per row) instead of the ring.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import row_schedules as R  # noqa: E402
import tcomp  # noqa: E402


def main(argv):
    kind, threads, x_regs = argv[0], int(argv[1]), argv[2] == "1"
    if len(argv) > 3 and argv[3] == "regs":
        op, s = R.softmax(32768, "bfloat16", threads, exp2=True)
    else:
        op, s = R.pipelined(kind, 4096, "bfloat16", 32, threads, 3, x_regs=x_regs)
    k = tcomp.build(s, target="cuda", sizes={"N": 4096, "D": 32768})
    x = torch.randn(4096, 32768, device="cuda", dtype=torch.bfloat16)
    args = [x] + [torch.randn(32768, device="cuda", dtype=torch.bfloat16) for _ in op.inputs[1:]]
    for _ in range(2):
        k(*args)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
