"""Persistent blocks prefetching rows into a shared ring (templates.row_pipelined),
and what it rests on: a pipelined loop that also computes other stages (a
row's statistics, register caches) after its shared copies.

The sim runs every kernel against the oracle with its shared-memory race
checks on: the ring's copies land while the block reduces another row.
"""
from __future__ import annotations

import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.rewriter import walk_stmts
from tcomp.schedule import templates

from .util import ROW_SOFTMAX as SOFTMAX, inputs_for, run_sim

LAYERNORM = """def layernorm({dt}(N, D) X, {dt}(D) g, {dt}(D) b) -> ({dt}(N, D) Y) {{
  sx(n) +=! float(X(n, d))
  mu(n) = sx(n) / float(D)
  sq(n) +=! (float(X(n, d)) - mu(n)) * (float(X(n, d)) - mu(n))
  rstd(n) = rsqrt(sq(n) / float(D) + 1e-5)
  Y(n, d) = {dt}((float(X(n, d)) - mu(n)) * rstd(n) * float(g(d)) + float(b(d)))
}}"""
ADD_ROWS = """def add_rows(float(N, D) X, float(N, D) R) -> (O) {
  s(n) +=! X(n, d) + R(n, d)
  O(n, d) = X(n, d) * s(n)
}"""


def _softmax(rows, threads, vec, stages, e_regs):
    op = tcomp.op(SOFTMAX)
    s = tcomp.Schedule(op)
    if not e_regs:
        s["e"].compute_inline()
    templates.row_pipelined(s, "O", rows, threads, vec, ("mx", "sm"), stages=stages,
                            local=("e",) if e_regs else ())
    return op, s


@pytest.mark.parametrize("e_regs", [True, False])
@pytest.mark.parametrize("n,d,rows,threads,vec,stages", [
    (10, 64, 4, 8, 4, 3),     # 3 blocks, the last with 2 rows
    (7, 100, 3, 8, 4, 2),     # rows of 100: a partial piece loop, through registers
    (9, 30, 2, 4, 2, 4),      # a ring of 4, 30 not a multiple of 4 * 2
    (4, 37, 4, 4, 4, 3)])     # one block, 37 not a multiple of the vector width
def test_softmax_matches_the_oracle(n, d, rows, threads, vec, stages, e_regs):
    op, s = _softmax(rows, threads, vec, stages, e_regs)
    sizes = {"N": n, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=n * d), sizes)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_layernorm_matches_the_oracle(dt):
    op = tcomp.op(LAYERNORM.format(dt=dt))
    s = tcomp.Schedule(op)
    templates.row_pipelined(s, "Y", 3, 8, 8 if dt == "bfloat16" else 4, ("sx", "sq"),
                            ("mu", "rstd"))
    sizes = {"N": 8, "D": 136}
    run_sim(s, inputs_for(op, sizes, seed=3), sizes)


def test_two_inputs_each_get_a_ring():
    op = tcomp.op(ADD_ROWS)
    s = tcomp.Schedule(op)
    templates.row_pipelined(s, "O", 2, 4, 4, ("s",))
    sizes = {"N": 5, "D": 32}
    text = str(tcomp.lower(s, sizes=sizes))
    assert "alloc shared float32 X_shared[3, 1, 32]" in text
    assert "alloc shared float32 R_shared[3, 1, 32]" in text
    run_sim(s, inputs_for(op, sizes, seed=5), sizes)


def test_the_ring_is_issued_ahead_with_one_wait_and_barrier_per_row():
    op, s = _softmax(8, 16, 4, 3, True)
    (k,) = tcomp.lower(s, sizes={"N": 64, "D": 256}).kernels
    assert [int(g.value) for g in k.grid] == [8, 1, 1]
    (row,) = [x for x in walk_stmts(k.body) if isinstance(x, ir.For) and x.var == "n_i"]
    calls = [x.call.fn for x in walk_stmts(row.body) if isinstance(x, ir.Evaluate)]
    assert calls.count("cp_async_wait") == 1 and calls.count("cp_async_commit") == 1
    assert calls.count("cp_async") == 4  # the row two ahead: 256 / (16 * 4) pieces a thread
    # the prologue issues rows 0 and 1 before the loop
    before = [x.call.fn for x in walk_stmts(k.body) if isinstance(x, ir.Evaluate)]
    assert before.count("cp_async") == 3 * 4


def test_rows_and_stages_are_checked():
    op = tcomp.op(SOFTMAX)
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError, match="pipeline: stages must be an int from 2 to 5"):
        templates.row_pipelined(s, "O", 4, 8, 4, ("mx", "sm"), stages=6)
    s = tcomp.Schedule(tcomp.op("def v(float(N) X) -> (O) { O(n) = X(n) }"))
    with pytest.raises(tcomp.ScheduleError, match="row_pipelined: stage 'O' needs two or more"):
        templates.row_pipelined(s, "O", 4, 8, 4, ())


@pytest.mark.parametrize("stages", [2, 3])
def test_a_register_cache_at_a_pipelined_loop(stages):
    """The shared copy is pipelined; the local cache computed at the same loop
    is built in the iteration, after the copies (it was an error before)."""
    op = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.bind(n, "threadIdx.x")
    ko, ki = C.split(k, 4)
    s.cache_read("A", "shared", [C]).compute_at(C, ko)
    s.cache_read("B", "local", [C]).compute_at(C, ko)
    C.pipeline(ko, stages=stages)
    sizes = {"M": 3, "K": 14, "N": 5}
    run_sim(s, inputs_for(op, sizes, seed=stages), sizes)


@pytest.mark.parametrize("stages", [2, 3])
def test_a_ring_copy_that_hosts_a_register_cache(stages):
    """A shared copy computed through a register cache of its source (the cache
    computed inside the copy's loops) is still a copy into the ring: it runs
    ahead as ordinary stores (found by the property test)."""
    op = tcomp.op("def conv1d(float(B,L) I, float(KW) W) -> (O) "
                  "{ O(b, l) +=! I(b, l + kw) * W(kw) where l in 0:L }")
    s = tcomp.Schedule(op)
    O = s["O"]
    b = O.axes[0]
    WS = s.cache_read("W", "shared", [O])
    WS.compute_at(O, b)
    WL = s.cache_read("W", "local", [WS])
    WL.compute_at(WS, WS.axes[0])
    O.pipeline(b, stages=stages)
    sizes = {"B": 4, "KW": 3, "L": 5}
    run_sim(s, inputs_for(op, sizes, seed=7), sizes)


def test_a_ring_whose_copies_are_empty_at_these_sizes():
    """A copy of an empty region (O(i + 1) with one row) is simplified away: the
    loop runs unpipelined instead of failing (found by the property test)."""
    op = tcomp.op("def f(float(M, N) A) -> (O) {\n  O(i) = A(i, 0)\n"
                  "  O(i) +=! (i + 1 < M ? O(i + 1) : 1.0) * A(i, r_j) where i in 0:M\n}")
    s = tcomp.Schedule(op)
    s["O.1"].rfactor(s["O.1"].reduce_axes[0])
    rf = s["O.1.rf"]
    (rj,) = [a for a in rf.leaf_axes if a.name == "r_j"]
    s.cache_read("O_snap", "shared", [rf]).compute_at(rf, rj)
    rf.pipeline(rj, stages=3)
    for sizes in ({"M": 1, "N": 3}, {"M": 3, "N": 2}):
        run_sim(s, inputs_for(op, sizes, seed=1), sizes)


def test_the_ring_depth_is_printed_until_the_pipeline_pass_issues_it():
    """`For.stages` is part of the IR the dumps show: `@stages(N)` on the loop
    from construction until software_pipeline turns it into the ring."""
    op, s = _softmax(4, 32, 4, 3, False)
    from tcomp.lower.pipeline import lower
    before = str(lower(s, sizes={"N": 8, "D": 256}, until="software_pipeline"))
    after = str(tcomp.lower(s, sizes={"N": 8, "D": 256}))
    assert "@stages(3)" in before and "@stages" not in after
