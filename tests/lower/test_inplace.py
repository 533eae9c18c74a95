"""In-place updates (README: "A statement's right-hand side sees the state
before the statement"): the snapshot stages that give such statements the old
values (tcomp/schedule/snapshot.py), under the default schedule and under
threads, blocks, caches, rfactor and cross-thread reductions, checked on the
sim against `tcomp.evaluate` and against hand-computed numbers; the free case
(reads only at the write subscripts) stays without a snapshot; and the sim's
race checks catch the lowering that reads and writes one buffer across
threads or blocks."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
import tcomp.schedule.snapshot as snapshot

from .util import inputs_for

SHIFT = tcomp.op("""
def f(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) = O(i) + O(i - 1) where i in 1:N
}""")
A7 = np.arange(1, 8, dtype=np.float32)
SHIFT_WANT = np.float32([1, 3, 5, 7, 9, 11, 13])  # not the prefix sums 1 3 6 10 15 21 28

REDUCE = tcomp.op("""
def r(float(M, N) A) -> (O) {
    O(i) = A(i, 0)
    O(i) += O(i) * A(i, j)
}""")
INIT = tcomp.op("""
def r(float(M, N) A) -> (O) {
    O(i) = A(i, 0)
    O(i) +=! (i + 1 < M ? O(i + 1) : 1.0) * A(i, j) where i in 0:M
}""")
DIAG = tcomp.op("""
def d(float(M, N) A) -> (O) {
    O(i, j) = A(i, j)
    O(i, j) = i >= 1 && j + 1 < N ? O(i - 1, j + 1) : O(i, j) where i in 0:M, j in 0:N
}""")
A34 = np.arange(1, 13, dtype=np.float32).reshape(3, 4)


def sim(s, *arrays, sizes=None):
    return tcomp.build(s, target="sim", sizes=sizes)(*arrays)


def check(op, s, arrays, sizes=None, tol=1e-5):
    want = tcomp.evaluate(op, *arrays)
    np.testing.assert_allclose(sim(s, *arrays, sizes=sizes), want, rtol=tol, atol=tol)


# ----------------------------------------------------------------- the oracle
def test_evaluate_by_hand():
    """The oracle on the programs below, against numbers computed by hand
    (A34 = 1..12 in rows of 4)."""
    np.testing.assert_array_equal(tcomp.evaluate(SHIFT, A7), SHIFT_WANT)
    # O = A(:, 0) = 1 5 9; O(i) + O(i) * rowsum(i): 1 + 10, 5 + 5 * 26, 9 + 9 * 42
    np.testing.assert_array_equal(tcomp.evaluate(REDUCE, A34), [11, 135, 387])
    # O(i+1) * rowsum(i) with the old O(i+1) = 5, 9; the last row times 1.0
    np.testing.assert_array_equal(tcomp.evaluate(INIT, A34), [5 * 10, 9 * 26, 42])
    # rows 1 and 2, columns 0..2 take the old up-right neighbour
    np.testing.assert_array_equal(tcomp.evaluate(DIAG, A34),
                                  [[1, 2, 3, 4], [2, 3, 4, 8], [6, 7, 8, 12]])


# ----------------------------------------------------------------- the reproducer
def shift_schedule(how):
    s = tcomp.Schedule(SHIFT)
    O1 = s["O.1"]
    (i,) = O1.axes
    if how == "threads":
        O1.bind(i, "threadIdx.x")
    elif how == "split_threads":
        io, ii = O1.split(i, 2)
        O1.bind(ii, "threadIdx.x")
    elif how == "blocks":
        io, ii = O1.split(i, 2)
        O1.bind(io, "blockIdx.x")
    elif how == "blocks_threads":
        io, ii = O1.split(i, 4)
        O1.bind(io, "blockIdx.x")
        O1.bind(ii, "threadIdx.x")
    elif how == "one_block_per_element":
        O1.bind(i, "blockIdx.x")
    return s


HOWS = ["default", "threads", "split_threads", "blocks", "blocks_threads",
        "one_block_per_element"]


@pytest.mark.parametrize("how", HOWS)
def test_reproducer(how):
    sizes = {"N": 7} if how == "threads" else None
    np.testing.assert_array_equal(sim(shift_schedule(how), A7, sizes=sizes), SHIFT_WANT)


def test_reproducer_lowered():
    """The statement reads a copy of O made by its own kernel before it."""
    s = shift_schedule("threads")
    assert [x.name for x in s.stages] == ["O", "O.1.snap", "O.1"]
    text = str(tcomp.lower(s, sizes={"N": 7}))
    assert text.endswith(
        "buffer temp global float32 O_snap[7]\n"
        "kernel f_O(A, O) grid=(1, 1, 1) block=(1, 1, 1)\n"
        "  for i in 0:7\n"
        "    O[i] = A[i]\n"
        "kernel f_O_1_snap(O, O_snap) grid=(1, 1, 1) block=(1, 1, 1)\n"
        "  for ax0 in 0:7\n"
        "    O_snap[ax0] = O[ax0]\n"
        "kernel f_O_1(O, O_snap) grid=(1, 1, 1) block=(6, 1, 1)\n"
        "  let i = threadIdx.x\n"
        "  O[i + 1] = O_snap[i + 1] + O_snap[i]\n"), text


def test_snapshot_is_schedulable_and_replays():
    """The copy is a stage like any other (its loops split and bound); a
    schedule naming it replays from JSON to the same program."""
    s = shift_schedule("blocks_threads")
    snap = s["O.1.snap"]
    (ax,) = snap.axes
    o, i = snap.split(ax, 4)
    snap.bind(o, "blockIdx.x")
    snap.bind(i, "threadIdx.x")
    np.testing.assert_array_equal(sim(s, A7), SHIFT_WANT)
    s2 = tcomp.Schedule.from_json(SHIFT, s.to_json())
    assert [x.name for x in s2.stages] == ["O", "O.1.snap", "O.1"]
    assert str(tcomp.lower(s2)) == str(tcomp.lower(s))
    assert "blockIdx.x" in str(tcomp.lower(s)).split("kernel f_O_1_snap")[1].split("kernel")[0]


def test_cache_read_of_the_snapshot():
    """The reader stages the old values in shared memory per block."""
    s = shift_schedule("blocks_threads")
    O1 = s["O.1"]
    io = O1.leaf_axes[0]
    S = s.cache_read("O_snap", "shared", [O1])
    S.compute_at(O1, io)
    np.testing.assert_array_equal(sim(s, A7), SHIFT_WANT)
    A = np.random.default_rng(1).standard_normal(29).astype(np.float32)
    check(SHIFT, s, [A])


# ----------------------------------------------------------------- the free case
FREE = [
    "O(i, j) = O(i, j) * 2.0 + A(i, j)",
    "O(i, j) = x * x where x = O(i, j)",
    "O(i, j) +=! O(i, j) * 3.0",  # `!` with nothing to reduce: an assignment
    "O(i, j) += O(i, j) * 3.0",  # a continuation with nothing to reduce: one update per point
]


@pytest.mark.parametrize("stmt", FREE)
def test_reads_at_the_write_subscripts_need_no_snapshot(stmt):
    op = tcomp.op(f"def f(float(M, N) A) -> (O) {{ O(i, j) = A(i, j) {stmt} }}")
    s = tcomp.Schedule(op)
    assert [x.name for x in s.stages] == ["O", "O.1"]
    prog = tcomp.lower(s)
    assert len(prog.kernels) == 2 and [b.name for b in prog.buffers] == ["A", "O"]
    O1 = s["O.1"]
    i, j = O1.axes
    O1.bind(i, "blockIdx.x")
    jo, ji = O1.split(j, 4)
    O1.bind(ji, "threadIdx.x")
    check(op, s, inputs_for(op, {"M": 3, "N": 7}))


def test_cache_write_of_the_free_case_reads_a_snapshot():
    """cache_write moves the reads into another stage than the writes: each
    thread computing the row of the local buffer would read elements the
    other threads overwrite, so that stage reads a snapshot."""
    op = tcomp.op("def f(float(M, N) A) -> (O) { O(i, j) = A(i, j) "
                  "O(i, j) = O(i, j) * O(i, j) + 1.0 }")
    s = tcomp.Schedule(op)
    O1 = s["O.1"]
    L = s.cache_write(O1, "local")
    assert [x.name for x in s.stages] == ["O", "O.1.snap", "O.1.local", "O.1"]
    i, j = O1.axes
    O1.bind(j, "threadIdx.x")
    L.compute_at(O1, i)
    check(op, s, inputs_for(op, {"M": 2, "N": 3}), sizes={"M": 2, "N": 3})
    assert tcomp.Schedule.from_json(op, s.to_json()).to_json() == s.to_json()


# ----------------------------------------------------------------- reductions
def reduce_schedules(op):
    """(name, schedule) pairs over O.1 = the reduction that reads its own tensor."""
    out = []
    s = tcomp.Schedule(op)
    out.append(("default", s))
    s = tcomp.Schedule(op)
    O1 = s["O.1"]
    (i,), (j,) = O1.axes, O1.reduce_axes
    O1.reorder(j, i)  # the reduction loop outside: it accumulates in O itself
    out.append(("memory_accumulation", s))
    s = tcomp.Schedule(op)
    O1 = s["O.1"]
    (i,), (j,) = O1.axes, O1.reduce_axes
    O1.bind(i, "blockIdx.x")
    jo, ji = O1.split(j, 4)
    O1.reorder(ji, jo)
    O1.bind(ji, "threadIdx.x")  # a cross-thread reduction
    out.append(("cross_thread", s))
    s = tcomp.Schedule(op)
    O1 = s["O.1"]
    (j,) = O1.reduce_axes
    jo, ji = O1.split(j, 2)
    O1.rfactor(ji)
    (i,) = O1.axes
    O1.bind(i, "threadIdx.x")
    out.append(("rfactor", s))
    return out


@pytest.mark.parametrize("opname", ["REDUCE", "INIT"])
@pytest.mark.parametrize("which", range(4))
def test_reduction_reading_its_own_tensor(opname, which):
    op = {"REDUCE": REDUCE, "INIT": INIT}[opname]
    name, s = reduce_schedules(op)[which]
    assert "O.1.snap" in [x.name for x in s.stages]
    sizes = {"M": 5, "N": 9}
    bound = name == "rfactor"  # (it binds a loop of symbolic extent M to threads)
    check(op, s, inputs_for(op, sizes, seed=which), sizes=sizes if bound else None)
    np.testing.assert_allclose(sim(s, A34, sizes={"M": 3, "N": 4} if bound else None),
                               tcomp.evaluate(op, A34))


def test_cache_write_of_an_initialising_reduction():
    s = tcomp.Schedule(INIT)
    O1 = s["O.1"]
    L = s.cache_write(O1, "local")
    (i,) = O1.axes
    io, ii = O1.split(i, 4)
    O1.bind(io, "blockIdx.x")
    O1.bind(ii, "threadIdx.x")
    L.compute_at(O1, ii)
    check(INIT, s, inputs_for(INIT, {"M": 10, "N": 6}))


def test_scalar_reduction_reading_itself_across_threads():
    op = tcomp.op("def s(float(N) A) -> (S) { S = A(0) S +=! S * A(j) }")
    s = tcomp.Schedule(op)
    S1 = s["S.1"]
    (j,) = S1.reduce_axes
    S1.bind(j, "threadIdx.x")
    A = np.random.default_rng(3).standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(sim(s, A, sizes={"N": 16}), A[0] * A.astype(np.float64).sum(),
                               rtol=1e-5)


def test_continuing_cross_thread_reduction_updates_once():
    """`O(i) += ...` with its reduction across threads: the threads of a row
    all hold the sum after the all-reduce, and one of them adds it to O(i)
    (all of them would race on the read-modify-write)."""
    name, s = reduce_schedules(REDUCE)[2]
    text = str(tcomp.lower(s, sizes={"M": 5, "N": 9}))
    assert "if threadIdx.x == 0\n" in text and "O[i] = O[i] + O_acc[0]" in text, text


# ----------------------------------------------------------------- several dimensions
def test_diagonal_shift_tiled_over_blocks_and_threads():
    s = tcomp.Schedule(DIAG)
    O1 = s["O.1"]
    i, j = O1.axes
    io, jo, ii, ji = O1.tile(i, j, 2, 4)
    O1.bind(io, "blockIdx.y")
    O1.bind(jo, "blockIdx.x")
    O1.bind(ii, "threadIdx.y")
    O1.bind(ji, "threadIdx.x")
    np.testing.assert_array_equal(sim(s, A34), tcomp.evaluate(DIAG, A34))
    check(DIAG, s, inputs_for(DIAG, {"M": 9, "N": 11}))


def test_diagonal_shift_unrolled_and_vectorized():
    s = tcomp.Schedule(DIAG)
    O1 = s["O.1"]
    i, j = O1.axes
    jo, ji = O1.split(j, 4)
    O1.vectorize(ji)
    io, ii = O1.split(i, 2)
    O1.unroll(ii)
    snap = s["O.1.snap"]
    a0, a1 = snap.axes
    a1o, a1i = snap.split(a1, 4)
    snap.vectorize(a1i)
    check(DIAG, s, inputs_for(DIAG, {"M": 7, "N": 10}))


# ----------------------------------------------------------------- the sim's race checks
@pytest.fixture
def no_snapshots(monkeypatch):
    """The lowering as it was before snapshots: the statement reads O itself."""
    monkeypatch.setattr(snapshot, "needs_snapshot", lambda d: False)


def test_without_snapshots_the_default_schedule_is_wrong(no_snapshots):
    # (documents the bug the snapshot fixes: a serial loop sees its own updates)
    s = shift_schedule("default")
    assert "O.1.snap" not in [x.name for x in s.stages]
    np.testing.assert_array_equal(sim(s, A7), np.cumsum(A7))


@pytest.mark.parametrize("how,msg", [
    # Lock-step threads read before any writes; a GPU's warps need not: write after read.
    ("threads", r"kernel f_O_1: thread \(0, 0, 0\) overwrites O\[1\] that several threads read "
                r"since the last barrier \(missing barrier\) in block \(0, 0, 0\)"),
    ("split_threads", r"thread \(0, 0, 0\) (reads O\[\d\] written by thread|overwrites O\[\d\] "
                      r"that several threads read)"),
    ("blocks", r"kernel f_O_1: block \(1, 0, 0\) reads O\[2\], which block \(0, 0, 0\) wrote in "
               r"the same launch; blocks run in no fixed order, so it may read the value before "
               r"or after that write \(race between blocks\)"),
    ("one_block_per_element", r"block \(1, 0, 0\) reads O\[1\], which block \(0, 0, 0\) wrote"),
])
def test_sim_reports_the_race_when_one_buffer_is_read_and_written(no_snapshots, how, msg):
    sizes = {"N": 7} if how == "threads" else None
    with pytest.raises(tcomp.SimError, match=msg):
        sim(shift_schedule(how), A7, sizes=sizes)


def test_sim_reports_a_block_overwriting_what_another_block_read(no_snapshots):
    """O(i) = O(i) + O(i + 1): block 0 reads O[1] first, block 1 then
    overwrites it (a GPU may run block 1 first)."""
    op = tcomp.op("def f(float(N) A) -> (O) { O(i) = A(i) "
                  "O(i) = O(i) + O(i + 1) where i in 0:N - 1 O(i) = O(i) where i in 0:N }")
    s = tcomp.Schedule(op)
    O1 = s["O.1"]
    (i,) = O1.axes
    O1.bind(i, "blockIdx.x")
    # (O[1] is read by blocks 0 and 1)
    with pytest.raises(tcomp.SimError, match=r"block \(1, 0, 0\) overwrites O\[1\], which other "
                                             r"blocks read in the same launch; blocks run in no "
                                             r"fixed order \(race between blocks\)"):
        sim(s, A7)


def _two_block_program(values):
    """Block b stores values[b] to O[0]: the same value is a benign redundant
    store, different values are a race between blocks."""
    from tcomp.lang import dtypes
    from tcomp.lower import ir
    f32 = dtypes.float32
    val = ir.Select(ir.Bin("==", ir.Var("blockIdx.x"), ir.const(0), ir.bool_),
                    ir.Imm(values[0], f32), ir.Imm(values[1], f32), f32)
    body = ir.Store("O", (ir.const(0),), val)
    k = ir.Kernel("k", ("O",), (), (ir.const(2), ir.const(1), ir.const(1)), (ir.const(1), ir.const(1), ir.const(1)), body)
    bufs = (ir.Buffer("O", f32, (ir.const(1),), "global", "output"),)
    return ir.Program("p", bufs, (k,), (), ("O",), ())


def test_sim_blocks_writing_one_element():
    from tcomp.target_sim import run_program
    env = {"O": np.zeros(1, np.float32)}
    run_program(_two_block_program((2.0, 2.0)), env, {})
    assert env["O"][0] == 2.0
    with pytest.raises(tcomp.SimError, match=r"kernel k: block \(1, 0, 0\) overwrites O\[0\], "
                                             r"which block \(0, 0, 0\) wrote in the same launch"):
        run_program(_two_block_program((2.0, 3.0)), {"O": np.zeros(1, np.float32)}, {})
