"""Barriers of a cp.async ring (software_pipeline + insert_barriers): one per
K tile, after the wait, and the sim's shared-memory race checks prove the one
left is needed and the ones removed were not.

The pipelined loop is `wait; barrier; copy(k + N-1) into buffer (k-1) % N;
commit; compute(k)`. insert_barriers used to add two more (one at the top of
the loop, one between the copy and the compute) because it saw a loop that
writes and reads the same shared buffers; a cp.async write is ordered by the
wait and the barrier the pipeline places, and the copy writes the buffer the
previous iteration read, not the one the compute reads.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tcomp
from tcomp.errors import SimError
from tcomp.lower import ir
from tcomp.lower.rewriter import Rewriter, walk_stmts
from tcomp.target_sim.executor import run_program

from .util import inputs_for, run_sim


def _tc(op_src=None, **kw):
    from ..bench.common import S as bench
    op = tcomp.op(op_src or "def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                            "{ C(m, n) +=! A(m, k) * B(k, n) }")
    return bench.tc_gemm(op, bm=32, bn=32, wm=16, wn=32, bk=16, **kw)[1]


def _k_loop(prog):
    (k,) = prog.kernels
    loops = [x for x in walk_stmts(k.body) if isinstance(x, ir.For) and x.var == "k_o"]
    assert len(loops) == 1
    return k, loops[0]


def _count(stmt, cls):
    return sum(isinstance(x, cls) for x in walk_stmts(stmt))


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("extra", [{}, {"swizzle": True, "pair_stores": True},
                                   {"fragment_pipeline": 2}])
def test_one_barrier_per_k_tile_and_the_sim_agrees(stages, extra):
    s = _tc(pipeline=stages, **extra)
    sizes = {"M": 30, "N": 32, "K": 80}  # awkward M, 5 K tiles
    k, loop = _k_loop(tcomp.lower(s, sizes=sizes))
    assert _count(loop.body, ir.Barrier) == 1
    first = loop.body.stmts[:2]
    assert isinstance(first[0], ir.Evaluate) and first[0].call.fn == "cp_async_wait"
    assert isinstance(first[1], ir.Barrier)
    assert _count(k.body, ir.Barrier) == 1  # none before the loop either
    run_sim(s, inputs_for(s.op, sizes), sizes)  # shared-memory race checks on


class _MoveBarrier(Rewriter):
    """The pipelined K loop with its barrier dropped, or moved before the wait."""

    def __init__(self, before_wait: bool):
        self.before_wait = before_wait

    def stmt_For(self, s):
        s = self.generic_stmt(s)
        if s.var != "k_o":
            return s
        rest = [x for x in s.body.stmts if not isinstance(x, ir.Barrier)]
        return dataclasses.replace(s, body=ir.seq(*([ir.Barrier()] if self.before_wait
                                                    else []), *rest))


@pytest.mark.parametrize("before_wait", [False, True])
def test_without_the_barrier_after_the_wait_the_sim_reports_a_race(before_wait):
    """The barrier that stays is the one that matters: without it (or with it
    before the wait, where it orders nothing that has landed) the sim reports
    a read of a tile element another thread's copy wrote since the last
    barrier."""
    s = _tc(pipeline=3)
    sizes = {"M": 32, "N": 32, "K": 80}
    good = tcomp.lower(s, sizes=sizes)
    (k,) = good.kernels
    k = dataclasses.replace(k, body=_MoveBarrier(before_wait).stmt(k.body))
    bad = dataclasses.replace(good, kernels=(k,))
    _, loop = _k_loop(bad)
    assert _count(loop.body, ir.Barrier) == int(before_wait)
    a, b = inputs_for(s.op, sizes)
    env = lambda: {"A": a, "B": b, "C": np.zeros((32, 32), np.float32)}  # noqa: E731
    out = env()
    run_program(good, out, sizes)  # the pass's program runs clean and right ...
    np.testing.assert_allclose(out["C"], a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-2, atol=1e-2)  # bf16 output
    with pytest.raises(SimError, match=r"reads shared \w+_shared.*missing barrier"):
        run_program(bad, env(), sizes)  # ... the one without it does not


def test_an_ordinary_store_into_the_ring_keeps_its_barrier():
    """Only cp.async writes are exempt: a plain store of a shared buffer
    followed by a read still gets its barrier (RAW), also next to a cp.async
    of the same buffer in one statement."""
    from tcomp.lang import dtypes
    from tcomp.lower import barriers
    f32, c0 = dtypes.float32, ir.const(0)
    cp = ir.Evaluate(ir.Call("cp_async", (ir.Ref("R", (c0,)), ir.Ref("G", (c0,)),
                                          ir.const(16), ir.const(16)), ir.int32))
    read = ir.Store("T", (c0,), ir.Load("R", (c0,), f32))
    store = ir.Store("R", (c0,), ir.Imm(1.0, f32))

    def barriers_in(*stmts):
        return _count(barriers._Sync({"R"}).stmt(ir.seq(*stmts)), ir.Barrier)
    assert barriers_in(cp, read) == 0
    assert barriers_in(store, read) == 1
    assert barriers_in(ir.If(ir.const(1), ir.seq(cp, store)), read) == 1


class _CopyBeforeBarrier(Rewriter):
    """The pipelined K loop as `wait; copy; commit; barrier; compute`: the copy
    into buffer (k-1) % N is issued before the barrier that ends the previous
    iteration's reads of that buffer."""

    def stmt_For(self, s):
        s = self.generic_stmt(s)
        if s.var != "k_o":
            return s
        wait, bar, copy, commit, *rest = s.body.stmts
        assert isinstance(bar, ir.Barrier)
        return dataclasses.replace(s, body=ir.seq(wait, copy, commit, bar, *rest))


def test_a_copy_issued_before_the_barrier_is_a_race_the_sim_reports():
    """A cp.async may write its destination at any moment until the wait, so
    one issued into a buffer another thread read since the last barrier races
    with that read even when it lands after a later barrier. The sim checks
    the copy when it is issued (at the landing, the barrier has already
    cleared what was read)."""
    s = _tc(pipeline=3)
    sizes = {"M": 32, "N": 32, "K": 80}
    good = tcomp.lower(s, sizes=sizes)
    (k,) = good.kernels
    bad = dataclasses.replace(good, kernels=(
        dataclasses.replace(k, body=_CopyBeforeBarrier().stmt(k.body)),))
    a, b = inputs_for(s.op, sizes)
    env = {"A": a, "B": b, "C": np.zeros((32, 32), np.float32)}
    with pytest.raises(SimError, match=r"issues a cp_async to shared \w+_shared at offset \d+ "
                                       r"that thread \(\d+, \d+, \d+\) read since the last "
                                       r"barrier \(missing barrier before the copy\)"):
        run_program(bad, env, sizes)
