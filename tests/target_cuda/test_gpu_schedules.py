"""Every op of the schedule tests on the GPU: each hand-written GPU-shaped
schedule of tests/lower/test_sim_schedules.py, and the default schedule of the
same op, compiled with NVRTC, run on the device and compared with
`tcomp.evaluate` on the same random data (dividing and non-dividing sizes)."""
from __future__ import annotations

import pytest

import tcomp
from tests.lower.util import assert_matches

from .cases import NAMES, replay

pytestmark = pytest.mark.cuda


def run_cuda(s, args, sizes=None, tol=None):
    want = tcomp.evaluate(s.op, *args)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    assert_matches(s.op, k(*args), want, tol)
    default = tcomp.build(tcomp.Schedule(s.op), target="cuda", sizes=sizes)
    assert_matches(s.op, default(*args), want, tol)
    return k


@pytest.mark.parametrize("name", NAMES)
def test_schedule_on_gpu(name, monkeypatch):
    replay(name, monkeypatch, run_cuda)
