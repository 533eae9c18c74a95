"""bench/rows_sass.py: the SASS figures the row-kernel predictions rest on
(needs cuobjdump: on the PATH, or from the nvidia cu13 pip wheel)."""
from __future__ import annotations

import glob
import os
import shutil
import sys

import pytest

from .common import BENCH, _load


@pytest.fixture
def cuobjdump(monkeypatch):
    if shutil.which("cuobjdump") is None:
        found = [p for d in sys.path for p in glob.glob(os.path.join(d, "nvidia", "cu13", "bin",
                                                                     "cuobjdump"))]
        if not found:
            pytest.skip("no cuobjdump (pip install nvidia-cuda-cuobjdump)")
        monkeypatch.setenv("PATH", os.path.dirname(found[0]) + os.pathsep + os.environ["PATH"])


def test_one_kernel_cross_entropy_and_shared_weights_figures(cuobjdump, capsys):
    sys.path.insert(0, str(BENCH))
    RS = _load("bench_rows_sass", BENCH / "rows_sass.py")
    RS.main(["[1k,512t,32]", "rmsnorm_bfloat16_4096x32768[smem w]"])
    out = capsys.readouterr().out.splitlines()
    ce = next(line for line in out if "[1k,512t,32]" in line)
    assert "threads=512 blocks_per_sm=2" in ce and "BAR=4" in ce and "local=0" in ce
    assert "LDG128=32" in ce  # 8 chunks x 4 pieces of 8 logits
    rms = next(line for line in out if "[smem w]" in line)
    assert "smem=65536" in rms
    order = rms.split("order=")[1]
    assert order.index("B") > order.index("Lx8")  # every load before the first barrier
    assert "L" not in order[order.index("B"):]
