"""Issue 22's long fuzz run, seed 9 (100,000 pairs, 3 failures), one test each."""
import json

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.bounds import interval
from tcomp.lower.simplify import simplify_expr


def _schedule(op, directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": directives}))


SIBLING = tcomp.op("""def f(float(N, M) B, int64(N) Y) -> (O) {
    O(j) = Y(j) * 2
    R(i) min=! B(i, j)
}""")


def test_rfactor_of_a_stage_with_a_sibling_computed_at_it_is_refused():
    """Pair 45410: `O` computed beside `R` (it does not read it) at R's loop `i`,
    then R factored over `j`: the factored stage put `j` first, and `O` was computed
    at `j`'s index 0 only (got [4, 0, 0], evaluate [4, 7, 16])."""
    with pytest.raises(tcomp.ScheduleError) as e:
        _schedule(SIBLING, [{"kind": "ComputeAt", "stage": "O", "target": "R", "axis": "i"},
                            {"kind": "Rfactor", "stage": "R", "axis": "j"}])
    assert str(e.value) == (
        "rfactor: stage 'O' is computed at loop 'i' of 'R' beside it (it is not one of its "
        "inputs), by this stage's own indices, which the factored stage does not keep; call "
        "rfactor before that compute_at")


def test_rfactor_then_the_sibling_compute_at_runs_like_evaluate():
    s = tcomp.Schedule(SIBLING)
    s["R"].rfactor(s["R"].reduce_axes[0])
    s["O"].compute_at(s["R"], s["R"].axes[0])
    B = np.arange(12, dtype=np.float32).reshape(3, 4)[::-1].copy()
    Y = np.array([2, -5, 9], np.int64)
    got, want = tcomp.build(s, "sim", sizes={"N": 3, "M": 4})(B, Y), tcomp.evaluate(SIBLING, B, Y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_global_reduction_every_thread_computes_alike_with_a_shared_copy_is_refused():
    """Pair 7700: a reduction accumulating in memory (its reduction loop outside its
    spatial loop), computed at a consumer's loop bound to threadIdx.y over a region
    that does not move with it (`O(0, 0)`), with a shared copy inside: it cannot run in
    one thread (the copy's barriers need them all), so every thread accumulated the same
    element while the others read it (the sim: a missing barrier). Without the shared
    copy thread 0 computes it (test_sim_schedules.py's memory accumulation test)."""
    op = tcomp.op("""def f(float(N, M) X) -> (P) {
    O(r, j) max=! X(j, i) where r in 0:M
    P(t) = O(0, 0) + t where t in 0:N
}""")
    base = [{"kind": "Bind", "stage": "P", "axis": "t", "tag": "threadIdx.y"},
            {"kind": "ComputeAt", "stage": "O", "target": "P", "axis": "t"},
            {"kind": "Reorder", "stage": "O", "axes": ["i", "j", "r"]}]
    shared = [{"kind": "CacheRead", "tensor": "X", "scope": "shared", "readers": ["O"]},
              {"kind": "ComputeAt", "stage": "X.shared", "target": "O", "axis": "j"}]
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(_schedule(op, base + shared), sizes={"N": 2, "M": 3})
    assert str(e.value) == (
        "stage 'O' (global scope) accumulates in memory inside the thread loop(s) 't' "
        "(threadIdx.y), which its region does not use, so every thread of them would update "
        "the same elements while the others read them (a race between threads); it cannot "
        "run in one thread of them, because it synchronises the block (a shared copy or a "
        "barrier inside it). Compute it at root or outside those loops, reorder its "
        "reduction loops inside its spatial loops (it accumulates in registers then), or "
        "give it local scope")
    X = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = tcomp.build(_schedule(op, base), "sim", sizes={"N": 2, "M": 3})(X)
    np.testing.assert_array_equal(got, tcomp.evaluate(op, X))


PAIR_26120 = tcomp.op("""def f(int64(N) A, uint16(N) B, int32(N) Z) -> (O) {
    O(p, q) +=! int32((!(Z(q)) >= ((B(p) * 1e2) / A(q))))
    C(i) +=! 2.0 + a where a = (!(O(q, i)) ? (2 == O(i, p)) : int8(A(q) * 0.5))
}""")


@pytest.mark.parametrize("N", [1, 3])
def test_a_region_through_a_deeper_copy_names_no_inner_loop(N):
    """Pair 26120: `O` computed at C's loop `i`, read only through its global copy
    computed at the deeper loop `p`, whose region's extent moves with `p`: O's loop
    extent named `p` outside its loop (`max(0, p) - min(0, p) + 1`; the sim: variable
    'p' is not bound). The interval of a variable whose range names other varying
    variables takes their extremes now."""
    s = _schedule(PAIR_26120, [
        {"kind": "Reorder", "stage": "C", "axes": ["q", "i", "p"]},
        {"kind": "ComputeAt", "stage": "O", "target": "C", "axis": "i"},
        {"kind": "CacheRead", "tensor": "O", "scope": "global", "readers": ["C"]},
        {"kind": "ComputeAt", "stage": "O.global", "target": "C", "axis": "p"}])
    rng = np.random.default_rng(N)
    args = (rng.integers(1, 5, N).astype(np.int64), rng.integers(0, 9, N).astype(np.uint16),
            rng.integers(0, 2, N).astype(np.int32))
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes={"N": N})(*args),
                                  tcomp.evaluate(PAIR_26120, *args))


def test_the_interval_of_a_range_that_moves_with_another_variable():
    """t in 0..j + 2 with j in 0..4: t + 1 in 1..7."""
    j, t = ir.Var("j"), ir.Var("t")
    vary = {"j": (ir.const(0), ir.const(4)),
            "t": (ir.const(0), ir.Bin("+", j, ir.const(2), ir.int32))}
    lo, hi = interval(ir.Bin("+", t, ir.const(1), ir.int32), vary)
    assert simplify_expr(lo) == ir.const(1) and simplify_expr(hi) == ir.const(7)
