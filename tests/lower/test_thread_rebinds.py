"""Issue 22, defect 1: a thread axis bound twice on one path computed only the elements
where the two indices coincide (GPU [3, 1] against evaluate [3, 11]). The schedule is
refused when lowered, and the sim independently reports such a store."""
import importlib

import numpy as np
import pytest

import tcomp

stage_nest = importlib.import_module("tcomp.lower.stage_nest")

CHAIN = """def f(float(M) X) -> (O2) {
  O0(i) = X(i) * 2
  O2(i) = O0(i) + 1
}"""
ROWSUM = """def g(float(N,D) X) -> (O) {
  S(i) +=! X(i, j)
  O(i) = S(i)
}"""


def chain(scope=None):
    op = tcomp.op(CHAIN)
    s = tcomp.Schedule(op)
    O2, O0 = s["O2"], s["O0"]
    (i,) = O2.axes
    O2.bind(i, "threadIdx.y")
    O0.compute_at(O2, i)
    if scope:
        O0.set_scope(scope)
    (j,) = O0.axes
    _, ji = O0.split(j, 2)
    O0.bind(ji, "threadIdx.y")
    return op, s


def rowsum():
    op = tcomp.op(ROWSUM)
    s = tcomp.Schedule(op)
    O, S = s["O"], s["S"]
    (i,) = O.axes
    O.bind(i, "threadIdx.x")
    S.compute_at(O, i)
    (r,) = S.reduce_axes
    S.bind(r, "threadIdx.x")
    return op, s


CHAIN_MSG = ("stage 'O0' binds its loop 'i_i' (i_i) to threadIdx.y, but it is computed inside "
             "loop 'i', already bound to threadIdx.y: each thread would compute only the "
             "elements where the two indices coincide. Bind 'i_i' to another thread axis, "
             "compute 'O0' at a loop outside 'i' (or at root), or give it shared scope")
ROWSUM_MSG = ("stage 'S' binds its loop 'j' (j) to threadIdx.x, but it is computed inside loop "
              "'i', already bound to threadIdx.x")


@pytest.mark.parametrize("make, msg", [(chain, CHAIN_MSG), (rowsum, ROWSUM_MSG)])
@pytest.mark.parametrize("sizes", [None, {"M": 2, "N": 3, "D": 3}])
@pytest.mark.parametrize("target", ["sim", "cuda"])
def test_a_thread_axis_bound_twice_on_one_path_is_refused(make, msg, sizes, target):
    op, s = make()
    sizes = None if sizes is None else {k: v for k, v in sizes.items() if k in op.size_vars}
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, target=target, sizes=sizes)
    assert str(e.value).startswith(msg), str(e.value)


def test_a_local_stage_is_refused_too():
    _, s = chain("local")
    with pytest.raises(tcomp.ScheduleError, match="stage 'O0' binds its loop 'i_i'"):
        tcomp.lower(s, sizes={"M": 2})


@pytest.mark.parametrize("make, want", [
    (chain, "kernel f_O2: the store to 'O0' (the statement at <tc>:2:3) uses 'i' and 'i_i', "
            "which both read threadIdx.y: its instances where they differ are executed by no "
            "thread"),
    (rowsum, "kernel g_O: the store to 'S_acc' uses 'i' and 'j', which both read threadIdx.x"),
])
def test_the_sim_reports_instances_no_thread_runs(monkeypatch, make, want):
    """With the schedule check bypassed, the sim still refuses the kernel."""
    monkeypatch.setattr(stage_nest, "_check_rebinds", lambda *a: None)
    op, s = make()
    sizes = {k: v for k, v in {"M": 2, "N": 3, "D": 3}.items() if k in op.size_vars}
    k = tcomp.build(s, target="sim", sizes=sizes)
    shape = tuple(sizes[d] for d in (["M"] if "M" in sizes else ["N", "D"]))
    with pytest.raises(tcomp.SimError) as e:
        k(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    assert str(e.value).startswith(want), str(e.value)


def test_a_shared_stage_shares_its_whole_region_out_over_the_same_threads():
    """The exception: a shared cache computed inside the consumer's thread loops covers
    every thread's reads, and its own loops on the same thread axes copy it cooperatively."""
    op = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 8, 8)
    for ax, tag in ((mo, "blockIdx.y"), (no, "blockIdx.x"), (mi, "threadIdx.y"),
                    (ni, "threadIdx.x")):
        C.bind(ax, tag)
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, ni)
    a0, a1 = AS.axes
    AS.bind(a0, "threadIdx.y")
    _, a1i = AS.split(a1, 8)
    AS.bind(a1i, "threadIdx.x")
    rng = np.random.default_rng(0)
    A, B = rng.random((13, 11), np.float32), rng.random((11, 10), np.float32)
    np.testing.assert_allclose(tcomp.build(s, target="sim", sizes={"K": 11})(A, B),
                               tcomp.evaluate(op, A, B),
                               rtol=1e-5)


def test_another_thread_axis_inside_is_fine():
    op = tcomp.op(CHAIN)
    s = tcomp.Schedule(op)
    O2, O0 = s["O2"], s["O0"]
    (i,) = O2.axes
    io, ii = O2.split(i, 4)
    O2.bind(ii, "threadIdx.y")
    O0.compute_at(O2, io)
    (j,) = O0.axes
    O0.bind(j, "threadIdx.x")
    X = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(s, target="sim")(X), tcomp.evaluate(op, X))
