"""Every error of ordered recurrences (`where ordered t`): the checker's rules
(lang/check_ordered.py) and what a schedule refuses on an ordered stage
(schedule/ordered.py): the exception type and its message text."""
from __future__ import annotations

import pytest

import tcomp

ORDERED_T = "(where ordered t): each iteration reads what the ones before it stored, so its " \
    "iterations run one after another, in one thread"
HINT_B = "; spread the independent axes (b) over threads instead"
REMEDY = "read another point of {v} (e.g. '{v} - 1'), read exactly the element written in a " \
    "statement without reduction, or guard the read with a condition that excludes this " \
    "point (e.g. 'j < {v} ? ... : ...')"


@pytest.mark.parametrize("src, message", [
    ("def f(float(N) X) -> (O) {\n O(t) = X(t)\n"
     " O(t) = O(t - 1) + X(t) where t in 1:N, ordered s }",
     "'ordered s': 's' is not an index of this statement; only an index of the left-hand side "
     "can be ordered (a reduction runs in any order)"),
    ("def f(float(N, D) X) -> (O) {\n O(n) = X(n, 0)\n O(n) +=! X(n, d) where ordered d }",
     "'ordered d': 'd' is a reduction index; only an index of the left-hand side can be "
     "ordered (a reduction runs in any order)"),
    ("def f(float(N) X) -> (O) {\n O(t) = X(t)\n"
     " O(t) = O(t - 1) + X(t) where t in 1:N, ordered t, ordered t }",
     "index 't' is ordered twice"),
    ("def f(float(N, D) X) -> (a, b) { a(n), b(n) argmax=! X(n, d), d where ordered n }",
     "'ordered' is not supported on a tuple reduction ('argmax=!'); write the recurrence on "
     "each component"),
    ("def f(float(N) X) -> (O) {\n O(t) = X(t)\n O(t) = O(N - 1 - t) + X(t) where ordered t }",
     "this ordered statement reads 'O(N - 1 - t)', which may be the point (t) it is writing; "
     + REMEDY.format(v="t")),
    ("def f(float(N) X) -> (O) {\n O(t) = X(t)\n"
     " O(t) +=! O(t) * X(j) where j in 0:N, ordered t }",
     "this ordered statement reads 'O(t)', which may be the element it writes, in a reduction "
     "(it would read its own partial result); " + REMEDY.format(v="t")),
    ("def f(float(N, D) X) -> (O) {\n O(n) = X(n, 0)\n"
     " O(n) +=! (d <= n ? O(d) : 0.0) * X(n, d) where ordered n }",
     "this ordered statement reads 'O(d)', which may be the point (n) it is writing; "
     + REMEDY.format(v="n")),
])
def test_lang_errors(src, message):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    assert message in str(e.value)


def test_statements_do_not_share_an_ordered_loop():
    """Cholesky's shape: a sum over the row, then a statement of the same ordered index
    that the sum reads at earlier points. Each ordered statement runs its whole loop
    before the next, so this is refused, saying why and what to write instead."""
    src = ("def f(float(N) X) -> (S, L) {\n L(i) = X(i)\n"
           " S(i) +=! (k < i ? L(k) : 0.0) where i in 0:N, k in 0:N, ordered i\n"
           " L(i) = S(i) + 1.0 where ordered i\n}")
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    assert ("'L' is written here after a statement read it (line 3); reads must see a "
            "tensor's final value. Both statements are ordered over 'i', but statements do not "
            "share an ordered loop: each runs its whole loop before the next (several "
            "statements in one ordered loop are not supported yet). Write the dependence "
            "inside one statement (a reduction guarded by the triangle, as trisolv and lu), or "
            "keep each step's values in a tensor indexed by the ordered index (as "
            "floyd-warshall's P(k, i, j))") in str(e.value)
    assert e.value.line == 4
    # not ordered: the plain message, unchanged
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src.replace(", ordered i", "").replace(" where ordered i", ""))
    assert str(e.value).split("\n")[0].endswith("reads must see a tensor's final value")


def test_a_guard_that_excludes_the_point_is_accepted():
    """The counterpart of the last case above: `d < n` excludes the point written."""
    op = tcomp.op("def f(float(N, D) X) -> (O) {\n O(n) = X(n, 0)\n"
                  " O(n) +=! (d < n ? O(d) : 0.0) * X(n, d) where ordered n }")
    assert op.statements[1].ordered == ("n",)


# A stage with an ordered axis t, a dependent axis b (it reads O(b - 1, ...)) and a reduction k.
DEPENDENT = """def f(float(B, T) X, float(B, T, K) W) -> (O) {
    O(b, t) = X(b, t)
    O(b, t) +=! (t > 0 ? O(b, t - 1) : 0.0) * W(b, t, k)
                + (b > 0 && t > 0 ? O(b - 1, t - 1) : 0.0) where t in 0:T, ordered t
}"""
# A prefix sum along t, independent along b, and a reader P.
CUMSUM = """def f(float(B, T) X) -> (O, P) {
    O(b, t) = X(b, t)
    O(b, t) = O(b, t - 1) + X(b, t) where t in 1:T, ordered t
    P(b, t) = O(b, t) * 2.0
}"""


def _dependent():
    s = tcomp.Schedule(tcomp.op(DEPENDENT))
    st = s["O.1"]
    return s, st, st.axes, st.reduce_axes[0]


def _cumsum():
    s = tcomp.Schedule(tcomp.op(CUMSUM))
    return s, s["O.1"], s["O.1"].axes, s["P"]


WHY = "stage 'O.1' computes an ordered recurrence (where ordered t); "


@pytest.mark.parametrize("call, message", [
    (lambda: (lambda s, st, ax, k: st.bind(ax[1], "threadIdx.x"))(*_dependent()),
     "bind: axis 't' is ordered " + ORDERED_T),
    (lambda: (lambda s, st, ax, k: st.bind(ax[0], "threadIdx.x"))(*_dependent()),
     "bind: axis 'b' of the ordered stage is not independent: a read of 'O' uses another value "
     "of 'b', stored by another iteration, so it runs serially inside the ordered loop"),
    (lambda: (lambda s, st, ax, k: st.bind(k, "threadIdx.x"))(*_dependent()),
     "bind: axis 'k' is a reduction of an ordered stage: it reads earlier points of 'O', "
     "stored by one thread, so it runs serially in that thread"),
    (lambda: (lambda s, st, ax, k: st.split(k, 2))(*_dependent()),
     "split: axis 'k' is a reduction of an ordered stage"),
    (lambda: (lambda s, st, ax, k: st.reorder(k, ax[1]))(*_dependent()),
     "reorder: the serial loops of ordered stage 'O.1' (where ordered t) must stay in the order "
     "t, b, k (the ordered axes outermost, then the axes that read other points, then the "
     "reductions); move only its independent axes (none)"),
    (lambda: (lambda s, st, ax, p: st.split(ax[1], 4))(*_cumsum()),
     "split: axis 't' is ordered " + ORDERED_T + HINT_B),
    (lambda: (lambda s, st, ax, p: st.fuse(ax[0], ax[1]))(*_cumsum()),
     "fuse: axis 't' is ordered " + ORDERED_T + HINT_B),
    (lambda: (lambda s, st, ax, p: st.vectorize(ax[1]))(*_cumsum()),
     "vectorize: axis 't' is ordered " + ORDERED_T + HINT_B),
    (lambda: (lambda s, st, ax, p: st.tile(ax[0], ax[1], 4, 4))(*_cumsum()),
     "tile: axis 't' is ordered " + ORDERED_T + HINT_B),
    (lambda: (lambda s, st, ax, p: st.rasterize(ax[0], ax[1], 2))(*_cumsum()),
     "rasterize: axis 't' is ordered " + ORDERED_T + HINT_B),
    (lambda: (lambda s, st, ax, p: st.compute_at(p, p.axes[0]))(*_cumsum()),
     "compute_at: " + WHY + "its ordered loop reads what it stored at earlier points, so it "
     "runs at root in its own loop nest; compute the stages it reads at its loops instead"),
    (lambda: (lambda s, st, ax, p: st.compute_inline())(*_cumsum()),
     "compute_inline: " + WHY + "its ordered loop reads what it stored at earlier points, so "
     "it must be stored"),
    (lambda: (lambda s, st, ax, p: st.set_scope("shared"))(*_cumsum()),
     "set_scope: " + WHY + "it reads its own stores at earlier points from global memory"),
    (lambda: (lambda s, st, ax, p: s.cache_write(st, "local"))(*_cumsum()),
     "cache_write: " + WHY + "its ordered loop reads its stores at earlier points from the "
     "tensor itself"),
    (lambda: (lambda s, st, ax, p: s.cache_read("O", "shared", [st]))(*_cumsum()),
     "cache_read: " + WHY + "a copy made before the stage runs holds none of the values it "
     "stores at earlier points"),
    (lambda: (lambda s, st, ax, p: st.rfactor(ax[1]))(*_cumsum()),
     "rfactor: " + WHY + "its reduction reads earlier points of the tensor and runs in one "
     "thread"),
    (lambda: (lambda s, st, ax, p: st.tensorize(ax[1], "mma_m16n8k16"))(*_cumsum()),
     "tensorize: " + WHY + "no tensor-core intrinsic computes an ordered recurrence"),
    (lambda: (lambda s, st, ax, p: st.pipeline(ax[1], 2))(*_cumsum()),
     "pipeline: " + WHY + "its serial loops read what they stored; pipelining reorders loads "
     "and stores"),
])
def test_schedule_errors(call, message):
    with pytest.raises(tcomp.ScheduleError) as e:
        call()
    assert message in str(e.value)


def test_a_refused_primitive_records_nothing():
    s, st, (b, t), p = _cumsum()
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError):
        st.tile(b, t, 4, 4)
    assert s.to_json() == before
    st.reorder(t, b)  # the independent axis moves freely
    st.unroll(t)      # an unrolled serial loop keeps its order
    assert [a.name for a in st.leaf_axes] == ["t", "b"]


# ------------------------------------------------------------------ Stage.scan
def _rec(rhs, dtype="float", out="O", where="where t in 1:T, ordered t", head=None):
    head = head or f"{dtype}(B, T) X, {dtype}(B, T) A"
    return tcomp.Schedule(tcomp.op(f"""def f({head}) -> ({out}) {{
    O(b, t) = X(b, t)
    O(b, t) = {rhs} {where}
}}"""))


def _scan(s, stage="O.1", axis=1, threads=64):
    st = s[stage]
    return st.scan(st.axes[axis], threads=threads)


SUM = "O(b, t - 1) + X(b, t)"
CANNOT = "scan: stage 'O.1' cannot be computed as a scan: "
LOOP = "; leave it an ordered loop"
NOT_ONCE = CANNOT + "it does not read 'O' exactly once, at the previous point ('t - 1') and " \
    "its own other indices" + LOOP


def _bound_then_scan():
    s = _rec(SUM)
    s["O.1"].bind(s["O.1"].axes[0], "threadIdx.y")
    return _scan(s)


def _scanned():
    s = _rec(SUM)
    st = s["O.1"]
    t_o, t_i = st.scan(st.axes[1], threads=64)
    return s, st, t_o, t_i


@pytest.mark.parametrize("call, message", [
    (lambda: _scan(_rec(SUM), stage="O"),
     "scan: stage 'O' is not ordered; a scan computes an ordered recurrence ('where ordered t')"),
    (lambda: _scan(_rec(SUM), axis=0), "scan: axis 'b' is not the ordered axis of stage 'O.1' (t)"),
    (lambda: _scan(_rec(SUM), threads=48),
     "scan: threads must be a multiple of 32 from 32 to 1024 (whole warps of one block), got 48"),
    (lambda: _scan(_rec(SUM), threads=2048),
     "scan: threads must be a multiple of 32 from 32 to 1024 (whole warps of one block), got "
     "2048"),
    (_bound_then_scan,
     "scan: stage 'O.1' binds 'b' to threadIdx.y; a scan's block is its 64 threads along x: bind "
     "the independent axes to blocks"),
    (lambda: _scan(_rec("O(b, t - 1) - X(b, t)")),
     CANNOT + "its right-hand side is not an associative combine of the previous point (P + f, "
     "P * f, max(P, f), min(P, f) or a * P + b, with P the read of 'O' at 't - 1')" + LOOP),
    (lambda: _scan(_rec("O(b, t - 1) * O(b, t - 1)")), NOT_ONCE),
    (lambda: _scan(_rec("O(b, t - 2) + X(b, t)", where="where t in 2:T, ordered t")), NOT_ONCE),
    (lambda: _scan(_rec(SUM, dtype="bfloat16")),
     CANNOT + "'O' is bfloat16 (a scan keeps its partial results unrounded: declare it one of "
     "int32, uint32, int64, uint64, float32, float64)" + LOOP),
    (lambda: _scan(_rec("O(b, t - 1) + A(b, t)", head="float(B, T) X, double(B, T) A",
                        out="float(B, T) O")),
     CANNOT + "it computes in float64 but 'O' is float32 (each step would round, which a scan "
     "skips)" + LOOP),
    (lambda: _scan(_rec("O(b, t - 1) + (b > 0 ? O(b - 1, t - 1) : 0.0)")),
     CANNOT + "its reads of the tensor use other values of its other indices" + LOOP),
    (lambda: _scan(tcomp.Schedule(tcomp.op("""def f(float(B, T) X) -> (O) {
        O(b, t) = X(b, t)
        O(b, t) +=! O(b, t - 1) * X(b, k) where t in 1:T, ordered t
    }"""))),
     CANNOT + "it is a reduction (a scan computes a plain '=' recurrence)" + LOOP),
    (lambda: _scan(tcomp.Schedule(tcomp.op("""def f(float(B, T) X) -> (O) {
        O(b, t) = X(b, t)
        O(b, t) = b > 0 && t > 0 ? O(b - 1, t) + O(b, t - 1) : O(b, t) where ordered b, ordered t
    }"""))),
     CANNOT + "it is ordered over b, t, and a scan runs over one axis" + LOOP),
    (lambda: (lambda s, st, t_o, t_i: st.bind(st.axes[0], "threadIdx.y"))(*_scanned()),
     "bind: stage 'O.1' is scanned over 64 threads along threadIdx.x, its whole block; bind "
     "Axis(O.1.b) to blocks"),
    (lambda: (lambda s, st, t_o, t_i: st.split(t_o, 2))(*_scanned()),
     "split: axis 't_o' is a loop of the scan over 't' (its tiles, its lanes on "
     "threadIdx.x, or a thread's elements): the scan fixes it; bind the independent axes (b) to blocks"),
    (lambda: (lambda s, st, t_o, t_i: st.bind(t_i, "blockIdx.y"))(*_scanned()),
     "bind: axis 't_i' is a loop of the scan over 't' (its tiles, its lanes on "
     "threadIdx.x, or a thread's elements): the scan fixes it; bind the independent axes (b) to blocks"),
])
def test_scan_errors(call, message):
    with pytest.raises(tcomp.ScheduleError) as e:
        call()
    assert message in str(e.value)


def test_the_scan_tile_loop_must_stay_innermost():
    s, st, t_o, t_i = _scanned()
    st.reorder(t_o, st.axes[0])  # the independent axis may move, but not inside the tiles
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={"B": 3, "T": 10})
    assert "stage 'O.1': the scan's tile loop 't_o' must be its innermost loop; reorder the " \
        "independent axes outside it" in str(e.value)


def test_the_first_value_is_not_computed_inside_the_ordered_loop():
    """Computed at the ordered loop, `O`'s first statement would overwrite at each t the
    points the recurrence already stored (an in-place epilogue needs updates of each element
    from that element alone)."""
    s = tcomp.Schedule(tcomp.op("""def f(float(B, T) X) -> (O) {
        O(b, t) = X(b, t)
        O(b, t) = t > 0 ? O(b, t - 1) + X(b, t) : X(b, t) where ordered t
    }"""))
    st = s["O.1"]
    with pytest.raises(tcomp.ScheduleError) as e:
        s["O"].compute_at(st, st.leaf_axes[1])
    assert "'O.1' does not update each element of 'O' from that element alone" in str(e.value)


def _lookback(**kw):
    s = _rec(SUM)
    st = s["O.1"]
    return s, st, st.scan(st.axes[1], threads=64, **kw)


def _bound_x():
    s = _rec(SUM)
    st = s["O.1"]
    st.bind(st.axes[0], "blockIdx.x")
    return st.scan(st.axes[1], threads=64, lookback=True)


@pytest.mark.parametrize("call, message", [
    (lambda: _lookback(items=0, lookback=True),
     "scan: items must be an integer from 1 to 32 (elements a thread scans in its registers), "
     "got 0"),
    (lambda: _lookback(items=4),
     "scan: items=4 needs lookback=True (the single-block scan keeps one element a thread; "
     "the multi-block scan with look-back keeps 'items' a thread)"),
    (lambda: _lookback(lookback=1), "scan: lookback must be True or False, got 1"),
    (_bound_x,
     "scan: stage 'O.1' binds 'b' to blockIdx.x; a scan with lookback puts its tiles on "
     "blockIdx.x: bind the independent axes to blockIdx.y or blockIdx.z"),
    (lambda: (lambda s, st, ax: st.bind(st.axes[0], "blockIdx.x"))(*_lookback(lookback=True)),
     "bind: blockIdx.x is already bound to axis 't_o' of stage 'O.1'"),
    (lambda: (lambda s, st, ax: st.split(st.leaf_axes[3], 2))(*_lookback(items=2,
                                                                         lookback=True)),
     "split: axis 't_k' is a loop of the scan over 't' (its tiles, its lanes on threadIdx.x, "
     "or a thread's elements): the scan fixes it; bind the independent axes (b) to blocks"),
])
def test_lookback_scan_errors(call, message):
    with pytest.raises(tcomp.ScheduleError) as e:
        call()
    assert message in str(e.value)


def test_a_threads_elements_stay_innermost():
    s, st, _ = _lookback(items=2, lookback=True)
    t_i, t_o, b, t_k = st.leaf_axes
    st.reorder(t_k, b)  # the independent axis may move, but not inside a thread's elements
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={"B": 3, "T": 10})
    assert "stage 'O.1': a thread's elements 't_k' must be its innermost loop; reorder the " \
        "independent axes outside it" in str(e.value)
