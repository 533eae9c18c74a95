"""The vector_loads pass: a reduction's piece (an unrolled loop that
accumulates) reads its consecutive elements with one vectorized copy into
registers first; values never change (the sim runs every case against the
oracle), and loops it must leave alone stay as they were."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.pipeline import lower
from tcomp.lower.rewriter import walk_stmts

from .util import inputs_for, run_sim

ROWMAX = "def rmax({dt}(N, D) X) -> (O) {{ O(n) max=! float(X(n, d)) }}"


def _row_reduce(dt="bfloat16", vec=8, threads=8, shared=True):
    op = tcomp.op(ROWMAX.format(dt=dt))
    s = tcomp.Schedule(op)
    O = s["O"]
    (n,) = O.axes
    (d,) = O.reduce_axes
    O.bind(n, "blockIdx.x")
    dd, dv = O.split(d, vec)
    do, di = O.split(dd, threads)
    O.reorder(di, do, dv)
    O.bind(di, "threadIdx.x")
    O.unroll(do)
    O.unroll(dv)
    if shared:
        X = s.cache_read("X", "shared", [O])
        X.compute_at(O, n)
        xo, xv = X.split(X.axes[-1], vec)
        _, xt = X.split(xo, threads)
        X.bind(xt, "threadIdx.x")
        X.vectorize(xv)
    return op, s


def _vector_loops(prog):
    return [x for k in prog.kernels for x in walk_stmts(k.body)
            if isinstance(x, ir.For) and x.kind == "vectorize" and x.vector is not None]


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dt,vec", [("bfloat16", 8), ("float32", 4), ("bfloat16", 2),
                                    ("float32", 2)])
def test_a_piece_is_one_vector_load(dt, vec, shared):
    op, s = _row_reduce(dt, vec, shared=shared)
    sizes = {"N": 3, "D": 8 * vec * 2}
    prog = tcomp.lower(s, sizes=sizes)
    src = "X_shared" if shared else "X"
    pieces = [x for x in _vector_loops(prog) if x.vector.loads[0].buffer == src
              and isinstance(x.body, ir.Store) and x.body.buffer.startswith(f"{src}_piece")]
    assert len(pieces) == 2  # two pieces a thread
    assert all(p.vector.bytes == vec * (2 if dt == "bfloat16" else 4) for p in pieces)
    run_sim(s, inputs_for(op, sizes, seed=vec), sizes)


def test_the_pass_runs_before_unroll_and_keeps_values():
    op, s = _row_reduce()
    sizes = {"N": 2, "D": 128}
    before = lower(s, sizes=sizes, until="vector_loads")
    after = lower(s, sizes=sizes, until="unroll")
    assert "X_shared_piece" not in str(before) and "X_shared_piece" in str(after)
    run_sim(s, inputs_for(op, sizes, seed=1), sizes)


@pytest.mark.parametrize("d", [100, 131, 7])
def test_ragged_rows_keep_their_guards(d):
    """Rows not a multiple of the piece: the copy carries the body's guard (lane
    by lane where it does not hold for a whole piece), so no element past the
    row is read."""
    op, s = _row_reduce("float32", 4, 8)
    sizes = {"N": 3, "D": d}
    run_sim(s, inputs_for(op, sizes, seed=d), sizes)
    run_sim(_row_reduce("float32", 4, 8, shared=False)[1], inputs_for(op, sizes, seed=d), sizes)


def test_a_piece_of_three_is_left_alone():
    op, s = _row_reduce("float32", 3, 4)
    sizes = {"N": 2, "D": 24}
    assert "X_shared_piece" not in str(tcomp.lower(s, sizes=sizes))
    run_sim(s, inputs_for(op, sizes), sizes)


def test_a_loop_whose_stores_move_is_left_alone():
    """An unrolled loop writing a different element per lane (a GEMM's
    register tile) is not a reduction's piece."""
    op = tcomp.op("def sc(float(N, D) X) -> (O) { O(n, d) = X(n, d) * 2.0 }")
    s = tcomp.Schedule(op)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    _, dv = O.split(d, 4)
    O.unroll(dv)
    sizes = {"N": 2, "D": 16}
    assert "_piece" not in str(tcomp.lower(s, sizes=sizes))


def test_loads_in_a_select_branch_are_left_alone():
    op = tcomp.op("def sel(float(N, D) X) -> (O) {\n"
                  "  O(n) +=! X(n, d) > 0.0 ? X(n, d) : 0.0\n}")
    s = tcomp.Schedule(op)
    O = s["O"]
    (n,) = O.axes
    (d,) = O.reduce_axes
    _, dv = O.split(d, 4)
    O.unroll(dv)
    sizes = {"N": 2, "D": 16}
    text = str(lower(s, sizes=sizes, until="unroll"))
    # the condition's read becomes a piece; the branch's read stays a load of X
    assert "X_piece" in text
    run_sim(s, inputs_for(op, sizes, seed=2), sizes)
