"""One multi-block look-back cumsum (fp32, one row of 2^28) built and run twice,
for `ncu` (issue 27: what limits the look-back scan):

    ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SourceCounters --launch-skip 1 \
        --launch-count 1 -k regex:cumsum_O_1 python3 bench/scan_ncu.py 256 16

argv: threads, items (elements a thread), optionally the row length's log2."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import tcomp  # noqa: E402
from scan import CUMSUM, scanned  # noqa: E402


def main(argv):
    threads, items = int(argv[0]), int(argv[1])
    T = 1 << (int(argv[2]) if len(argv) > 2 else 28)
    k = scanned(CUMSUM, threads, {"B": 1, "T": T}, items)
    x = torch.randn(1, T, device="cuda")
    for _ in range(2):
        k(x)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
