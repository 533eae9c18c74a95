"""The sim's meaning of cp.async (target_sim/async_copy.py) on hand-built IR
(warp_kernels.async_copy): the copy lands at its wait; reading or writing its
destination before that, a misaligned destination, and zero-fill."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lang import dtypes
from tcomp.target_sim.executor import run_program

from .warp_kernels import async_copy


def _run(prog, groups=1, threads=64):
    g = (np.arange(8 * threads * groups) % 251).astype(dtypes.bfloat16.numpy)
    o = np.zeros_like(g)
    run_program(prog, {"G": g, "O": o}, {})
    return g, o


def _want(g, threads, groups, zero_from=None):
    pieces = g.reshape(groups, threads, 8).copy()
    if zero_from is not None:
        pieces[:, zero_from:] = 0
    return np.roll(pieces, -1, axis=1).reshape(-1)


@pytest.mark.parametrize("groups", [1, 2])
def test_copies_land_at_the_wait(groups):
    g, o = _run(async_copy(groups=groups), groups)
    np.testing.assert_array_equal(o, _want(g, 64, groups))


def test_zero_fill():
    g, o = _run(async_copy(zero_from=40))
    np.testing.assert_array_equal(o, _want(g, 64, 1, zero_from=40))


def test_read_before_the_wait_is_reported():
    with pytest.raises(tcomp.SimError, match=r"read of shared S.* before the asynchronous copy "
                                             r"to it completed \(a cp_async_wait for its group "
                                             r"is missing"):
        _run(async_copy(groups=2, wait=1), 2)


def test_plain_write_while_pending_is_reported():
    with pytest.raises(tcomp.SimError, match="writes shared S at offset 0 while an asynchronous "
                                             "copy to it is pending"):
        _run(async_copy(extra_store=True))


def test_misaligned_destination():
    with pytest.raises(tcomp.SimError, match=r"cp_async of 16 bytes to S at element 4, not "
                                             r"16-byte aligned"):
        _run(async_copy(misalign=True))
