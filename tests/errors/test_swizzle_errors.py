"""Every error of `Stage.swizzle` and of what it combines with: the message
text, the exception type, and a failed call leaving the schedule as it was."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.schedule import templates

from ..bench.common import S
from .test_schedule_errors import _unchanged, sched_error

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")


def shared_a():
    s = tcomp.Schedule(MM)
    AS = s.cache_read("A", "shared", [s["C"]])
    return s, AS


@pytest.mark.parametrize("bad", [0, 16, 48, 256, True, "128", 128.5, None])
def test_span_must_be_32_64_or_128(bad):
    s, AS = shared_a()
    sched_error(lambda: AS.swizzle(bad), "swizzle: span must be 32, 64 or 128 (bytes), got")
    _unchanged(s, lambda: AS.swizzle(bad))


def test_a_global_stage_is_not_swizzled():
    s = tcomp.Schedule(MM)
    sched_error(lambda: s["C"].swizzle(), "swizzle: 'C' is in global memory; a swizzle lays out "
                "a shared-memory tile (cache_read(..., 'shared') or set_scope('shared') first)")


@pytest.mark.parametrize("scope", ["local", "fragment"])
def test_a_local_or_fragment_stage_is_not_swizzled(scope):
    s = tcomp.Schedule(MM)
    L = s.cache_read("A", scope, [s["C"]])
    sched_error(lambda: L.swizzle(), f"swizzle: 'A_{scope}' is in {scope} memory")
    _unchanged(s, lambda: L.swizzle())


def test_padding_then_swizzle():
    s, AS = shared_a()
    AS.storage_align(AS.axes[0], 32, 4)
    sched_error(lambda: AS.swizzle(), "swizzle: stage 'A.shared' pads its rows with "
                "storage_align (axis 'ax0'); a swizzle replaces that padding", "drop the "
                "storage_align")
    _unchanged(s, lambda: AS.swizzle())


def test_swizzle_then_padding():
    s, AS = shared_a()
    AS.swizzle(64)
    sched_error(lambda: AS.storage_align(AS.axes[0], 32, 4),
                "storage_align: stage 'A.shared' is swizzled (swizzle(64)), which already "
                "spreads its rows over the banks", "use one or the other")
    _unchanged(s, lambda: AS.storage_align(AS.axes[0], 32, 4))


def test_swizzle_twice():
    s, AS = shared_a()
    AS.swizzle()
    sched_error(lambda: AS.swizzle(32), "swizzle: stage 'A.shared' is already swizzled "
                "(swizzle(128))")


def test_a_swizzled_temporary_stays_in_shared_memory_and_is_not_inlined():
    op = tcomp.op(S.TC_CONV2D)
    s = tcomp.Schedule(op)
    A = s["Acol"]
    A.set_scope("shared")
    A.swizzle()
    sched_error(lambda: A.set_scope("local"), "set_scope: stage 'Acol' is swizzled "
                "(swizzle(128)), a layout of shared memory; it cannot move to local memory")
    sched_error(lambda: A.compute_inline(), "compute_inline: stage 'Acol' is swizzled "
                "(swizzle(128)), a layout of its shared buffer, which inlining would remove")
    A.set_scope("shared")  # staying in shared memory is fine


def test_an_inlined_stage_has_no_buffer_to_swizzle():
    op = tcomp.op(S.TC_CONV2D)
    s = tcomp.Schedule(op)
    A = s["Acol"]
    A.set_scope("shared")
    A.compute_inline()
    sched_error(lambda: A.swizzle(), "swizzle: stage 'Acol' is inlined and has no buffer to "
                "lay out")


def test_tc_tiles_takes_pad_or_swizzle():
    with pytest.raises(ValueError, match="pad and swizzle are two ways to the same end"):
        S.tc_gemm(pad=True, swizzle=True)


# ----------------------------------------------------------- at lowering (the tile's shape)
def simt(bk, span=128, bm=8):
    """A SIMT GEMM whose A tile is bm x bk float32 (rows of 4 bk bytes), swizzled."""
    s = tcomp.Schedule(MM)
    templates.simt_gemm(s, "C", "A", "B", bm=bm, bn=8, bk=bk, tm=2, tn=4, fragments=False,
                        vector=False)
    s["A.shared"].swizzle(span)
    return s


@pytest.mark.parametrize("bk,span,why", [
    (4, 128, "a row of 16 bytes holds fewer than two 16-byte chunks, nothing to permute"),
    (24, 128, "a row of 96 bytes is shorter than 128 bytes but not 32 or 64 bytes (its 16-byte "
              "chunks must be a power of two)"),
    (48, 128, "a row of 192 bytes is not a multiple of the swizzle span (128 bytes)"),
])
def test_rows_the_swizzle_cannot_permute(bk, span, why):
    s = simt(bk, span)
    sched_error(lambda: tcomp.lower(s, sizes={"M": 8, "N": 8, "K": 2 * bk}),
                f"swizzle: stage 'A.shared' (A_shared, 8 x {bk} float32): {why}; change the "
                f"tile's innermost extent (e.g. 64 16-bit elements make rows of 128 bytes) or "
                f"do not swizzle it")


@pytest.mark.parametrize("bk,span", [(8, 128), (16, 32), (48, 64), (48, 32), (64, 128)])
def test_rows_it_can_permute(bk, span):
    s = simt(bk, span)
    text = str(tcomp.lower(s, sizes={"M": 8, "N": 8, "K": 2 * bk}))
    assert f"A_shared[8, {bk}] swizzle({span})" in text
