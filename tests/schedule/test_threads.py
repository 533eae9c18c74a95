"""The thread hierarchy as types (tcomp/schedule/threads.py): one place that
parses and prints "threadIdx.x"; Kernel IR holds the typed axis."""
from __future__ import annotations

import pytest

from tcomp.lang import dtypes
from tcomp.lower import ir, printer
from tcomp.schedule import threads
from tcomp.schedule.stage import THREAD_TAGS
from tcomp.schedule.threads import ThreadAxis


def test_spellings_round_trip():
    for a in threads.AXES:
        assert threads.parse(a.name) is a and str(a) == a.name
    assert threads.parse("blockIdx.y") == ThreadAxis("block", 1)
    assert threads.parse("threadIdx.z") == ThreadAxis("thread", 2)
    assert THREAD_TAGS == ("blockIdx.x", "blockIdx.y", "blockIdx.z",
                           "threadIdx.x", "threadIdx.y", "threadIdx.z")
    assert threads.INDEX_VARS == set(THREAD_TAGS)


def test_levels_and_dims():
    a = threads.parse("blockIdx.z")
    assert a.is_block and not a.is_thread and a.dim == 2
    assert threads.is_thread("threadIdx.x") and not threads.is_thread("blockIdx.x")
    assert threads.is_block("blockIdx.y") and not threads.is_block("threadIdx.y")


@pytest.mark.parametrize("tag", ["warpIdx.x", "threadIdx.w", "threadIdx", "", None, 3])
def test_unknown_spellings(tag):
    assert threads.parse(tag) is None
    assert not threads.is_block(tag) and not threads.is_thread(tag)
    with pytest.raises(ValueError, match="unknown thread tag"):
        threads.axis(tag)


def test_axis_validates_its_fields():
    with pytest.raises(ValueError, match="no thread axis at level 'warp', dimension 0"):
        ThreadAxis("warp", 0)
    with pytest.raises(ValueError, match="no thread axis at level 'thread', dimension 3"):
        ThreadAxis("thread", 3)


def test_ir_holds_the_typed_axis_and_prints_its_spelling():
    body = ir.Store("A", (ir.Var("i"),), ir.const(0))
    loop = ir.For("i", ir.const(0), ir.const(8), "thread", body, "threadIdx.y")
    assert loop.tag == ThreadAxis("thread", 1)
    assert loop == ir.For("i", ir.const(0), ir.const(8), "thread", body, threads.THREAD[1])
    assert printer.stmt(loop)[0] == "for i in 0:8  @threadIdx.y"
    red = ir.AllReduce("max", "R", dtypes.float32, "threadIdx.x", ir.const(4))
    assert red.tag is threads.THREAD[0]
    assert printer.stmt(red) == ["R[0] = allreduce_max(R[0]) over threadIdx.x (4 threads)"]
    with pytest.raises(ValueError, match="unknown thread tag 'laneIdx.x'"):
        ir.For("i", ir.const(0), ir.const(8), "thread", body, "laneIdx.x")
