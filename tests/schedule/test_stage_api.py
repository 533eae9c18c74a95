"""The schedule-side API the lowering tests rely on (API.md "Schedules"):
stage names, axes, leaf axes after each primitive, cache stages, JSON replay.
Errors are covered in tests/errors/test_schedule_errors.py.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
MULTI = tcomp.op("""def multi(float(M,N) A) -> (C, D) {
  C(i, j) = A(i, j)
  C(i, j) = C(i, j) * 2.0
  D(i, j) = A(i, j) + 1.0
  C(i, j) = C(i, j) + D(i, j)
}""")


def names(axes):
    return [a.name for a in axes]


def test_stage_names_for_several_writers():
    s = tcomp.Schedule(MULTI)
    assert [st.name for st in s.stages] == ["C", "C.1", "D", "C.2"]
    assert s["C.1"].tensor == "C" and s["D"].tensor == "D"
    assert s[s["C.2"]] == s["C.2"]


def test_axes_and_reduce_axes():
    s = tcomp.Schedule(MM)
    C = s["C"]
    assert names(C.axes) == ["m", "n"]
    assert names(C.reduce_axes) == ["k"]
    assert names(C.leaf_axes) == ["m", "n", "k"]
    assert [a.kind for a in C.leaf_axes] == ["spatial", "spatial", "reduce"]


def test_leaf_axes_follow_the_primitives():
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 8, 4)
    assert names(C.leaf_axes) == ["m_o", "n_o", "m_i", "n_i", "k"]
    ko, ki = C.split(k, nparts=2)
    assert ko.kind == ki.kind == "reduce"
    C.reorder(ko, mi)
    assert names(C.leaf_axes) == ["m_o", "n_o", "k_o", "n_i", "m_i", "k_i"]
    f = C.fuse(mo, no)
    assert names(C.leaf_axes) == ["m_o_n_o_f", "k_o", "n_i", "m_i", "k_i"]
    assert f.name == "m_o_n_o_f"
    # The original axes still name the statement's index variables.
    assert names(C.axes) == ["m", "n"]


def test_cache_read_and_cache_write_stages():
    s = tcomp.Schedule(MM)
    C = s["C"]
    CL = s.cache_write(C, "local")
    assert CL.name == "C.local" and CL.tensor == "C_local"
    assert names(CL.axes) == ["m", "n"] and names(CL.reduce_axes) == ["k"]
    assert names(C.reduce_axes) == []  # C now copies C_local out
    AS = s.cache_read("A", "shared", [CL])
    assert AS.name == "A.shared" and AS.tensor == "A_shared"
    assert names(AS.axes) == ["ax0", "ax1"]
    # Stages are ordered so that every copy comes before its readers.
    assert [st.name for st in s.stages] == ["A.shared", "C.local", "C"]
    # A second copy of the same tensor in the same scope gets a fresh name.
    s2 = tcomp.Schedule(MM)
    a1 = s2.cache_read("A", "shared", [s2["C"]])
    a2 = s2.cache_read("A_shared", "local", [s2["C"]])
    assert (a1.tensor, a2.name, a2.tensor) == ("A_shared", "A_shared.local", "A_shared_local")


@pytest.mark.parametrize("scope", ["shared", "local", "global"])
def test_cache_read_scopes(scope):
    s = tcomp.Schedule(MM)
    X = s.cache_read("B", scope, [s["C"]])
    assert X.tensor == f"B_{scope}"


def test_json_replay_reproduces_leaf_axes_and_ir():
    s = tcomp.Schedule(MM)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    CL.compute_at(C, ni)
    AS = s.cache_read("A", "shared", [CL])
    AS.compute_at(C, no)
    a0, a1 = AS.axes
    AS.storage_align(a0, 8, 1)
    f = AS.fuse(a0, a1)
    fo, fi = AS.split(f, 4)
    AS.bind(fi, "threadIdx.x")
    r = tcomp.Schedule.from_json(MM, s.to_json())
    for st in s.stages:
        assert names(r[st.name].leaf_axes) == names(st.leaf_axes)
    sizes = {"M": 8, "N": 8, "K": 3}
    assert str(tcomp.lower(r, sizes=sizes)) == str(tcomp.lower(s, sizes=sizes))


# ------------------------------------------------------------------ storage_order
def _ordered_mm(variant):
    """Shared A/B tiles at k_o with cooperative fetching; A's tile (and in some
    variants other buffers) laid out with storage_order."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 8, 8)
    mio, mii = C.split(mi, 2)
    nio, nii = C.split(ni, 2)
    C.reorder(mo, no, mio, nio, mii, nii)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    CL.compute_at(C, nio)
    (k,) = CL.reduce_axes
    ko, ki = CL.split(k, 4)
    lm, ln = CL.axes
    CL.reorder(ko, ki, lm, ln)
    if variant == "local":
        CL.storage_order(ln, lm)
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [CL])
        X.compute_at(CL, ko)
        a0, a1 = X.axes
        f = X.fuse(a0, a1)
        fo, fi = X.split(f, 4)
        X.bind(fi, "threadIdx.x")
        foo, foi = X.split(fo, 4)
        X.bind(foi, "threadIdx.y")
        if t == "A":
            # after the fuse: the original axes name the buffer's dimensions
            X.storage_order(a1, a0)
            if variant == "align":
                X.storage_align(a1, 8, 4)
    if variant == "pipeline":
        CL.pipeline(ko)
    return s


@pytest.mark.parametrize("variant", ["plain", "align", "pipeline", "local"])
def test_json_replay_of_storage_order(variant):
    s = _ordered_mm(variant)
    text = s.to_json()
    assert '"kind": "StorageOrder"' in text
    r = tcomp.Schedule.from_json(MM, text)
    assert r.to_json() == text
    for st in s.stages:
        assert names(r[st.name].leaf_axes) == names(st.leaf_axes)
        assert r.states[st.name].storage == s.states[st.name].storage
    assert r.states["A.shared"].storage == ("ax1", "ax0")
    for sizes in ({"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 11, "K": 7}, {"K": 9}):
        ir_s = str(tcomp.lower(s, sizes=sizes))
        assert str(tcomp.lower(r, sizes=sizes)) == ir_s
    # The replayed layout is the k-major one (not a no-op).
    ir_r = str(tcomp.lower(r, sizes={"M": 16, "N": 16, "K": 8}))
    assert ("A_shared[2, 4, 8]" if variant == "pipeline" else
            "A_shared[4, 12]" if variant == "align" else "A_shared[4, 8]") in ir_r
    if variant == "local":
        assert "alloc local float32 C_local[2, 2]" in ir_r


def test_storage_order_replaces_an_earlier_order():
    """A second storage_order sets the layout again (both are recorded and replayed)."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, m)
    a0, a1 = AS.axes
    AS.storage_order(a1, a0)
    AS.storage_order(a0, a1)
    assert s.states["A.shared"].storage == ("ax0", "ax1")
    r = tcomp.Schedule.from_json(MM, s.to_json())
    assert r.to_json().count("StorageOrder") == 2
    assert r.states["A.shared"].storage == ("ax0", "ax1")
    sizes = {"M": 3, "N": 4, "K": 5}
    assert str(tcomp.lower(r, sizes=sizes)) == str(tcomp.lower(s, sizes=sizes))
    assert "alloc shared float32 A_shared[1, 5]" in str(tcomp.lower(s, sizes=sizes))


# ------------------------------------------------------------------ rasterize
def _rasterized(group):
    s = tcomp.Schedule(MM)
    C = s["C"]
    mo, no, mi, ni = C.tile(*C.axes, 4, 4)
    b = C.rasterize(mo, no, group)
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    return s, b


def test_rasterize_is_recorded_as_the_primitives_it_stands_for():
    s, b = _rasterized(3)
    C = s["C"]
    assert b == C.leaf_axes[0] and b.name == "m_o_o_n_o_f_m_o_i_f"
    assert names(C.leaf_axes) == ["m_o_o_n_o_f_m_o_i_f", "m_i", "n_i", "k"]
    kinds = [d["kind"] for d in json.loads(s.to_json())["directives"]]
    assert kinds == ["Tile", "Split", "Reorder", "Fuse", "Fuse", "Bind", "Bind", "Bind"]
    r = tcomp.Schedule.from_json(MM, s.to_json())
    assert names(r["C"].leaf_axes) == names(C.leaf_axes)
    sizes = {"M": 20, "N": 12, "K": 3}
    assert str(tcomp.lower(r, sizes=sizes)) == str(tcomp.lower(s, sizes=sizes))


def test_rasterized_block_numbering():
    """M = 20, N = 12, 4 x 4 tiles: 5 block rows, 3 block columns; group 2 ->
    ceil(5 / 2) * 3 * 2 = 18 blocks on blockIdx.x; block b computes block row
    b / 6 * 2 + b % 2 (guarded: < 5) and block column b / 2 % 3."""
    s, _ = _rasterized(2)
    text = str(tcomp.lower(s, sizes={"M": 20, "N": 12, "K": 3}))
    assert "grid=(18, 1, 1)" in text and "block=(4, 4, 1)" in text
    order = []
    for blk in range(18):
        row, col = blk // 6 * 2 + blk % 2, blk // 2 % 3
        if row < 5:
            order.append((row, col))
    # every (row, column) block exactly once, two rows at a time, column by column
    assert sorted(order) == [(r, c) for r in range(5) for c in range(3)]
    assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    a = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    bm = np.random.default_rng(1).standard_normal((3, 12)).astype(np.float32)
    out = tcomp.build(s, target="sim", sizes={"M": 20, "N": 12, "K": 3})(a, bm)
    np.testing.assert_allclose(out, a.astype(np.float64) @ bm, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [np.int64, np.int32, np.uint16, np.int8])
def test_numpy_integers_are_factors(make):
    """Factors from NumPy (a shape, an arange) work wherever a primitive takes an
    int, and are recorded as Python ints so the schedule still serialises."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    ko, ki = C.split(k, make(4))
    mo, no, mi, ni = C.tile(m, n, make(8), make(8))
    C.reorder(mo, no, ko, mi, ni, ki)
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, ko)
    AS.storage_align(AS.axes[0], make(8), make(1))
    C.pipeline(ko, make(2))
    f = C.rasterize(mo, no, make(2))
    assert f.name in names(C.leaf_axes)
    s2 = tcomp.Schedule(MM)
    s2["C"].split(s2["C"].axes[0], nparts=make(3))
    for sched in (s, s2):
        text = sched.to_json()  # would raise TypeError on an np.int64 field
        for d in json.loads(text)["directives"]:
            for v in d.values():
                assert not isinstance(v, np.generic)
        assert tcomp.Schedule.from_json(MM, text).to_json() == text
    A = np.arange(35, dtype=np.float32).reshape(5, 7) / 9
    B = np.arange(21, dtype=np.float32).reshape(7, 3) / 9
    np.testing.assert_allclose(tcomp.build(s, "sim")(A, B), tcomp.evaluate(MM, A, B), rtol=1e-5)


@pytest.mark.parametrize("value", [True, np.bool_(True), np.float64(4.0), "4"])
def test_bools_and_non_integers_are_not_factors(value):
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    for fn, text in [
            (lambda: C.split(m, value), f"split: factor must be a positive int, got {value!r}"),
            (lambda: C.split(m, nparts=value), f"split: nparts must be a positive int, got "
                                               f"{value!r}"),
            (lambda: C.tile(m, n, value, 4), f"tile: x_factor must be a positive int, got "
                                             f"{value!r}"),
            (lambda: C.rasterize(m, n, value), f"rasterize: group must be a positive int, got "
                                               f"{value!r}"),
            (lambda: C.pipeline(m, value), f"pipeline: stages must be an int from 2 to 5, got "
                                           f"{value!r}")]:
        with pytest.raises(tcomp.ScheduleError) as info:
            fn()
        assert str(info.value) == text
    AS = s.cache_read("A", "shared", [C])
    with pytest.raises(tcomp.ScheduleError) as info:
        AS.storage_align(AS.axes[0], value, 0)
    assert str(info.value) == (f"storage_align: need factor > 0 and 0 <= offset < factor, got "
                               f"{value!r}, 0")
    assert json.loads(s.to_json())["directives"] == [
        {"kind": "CacheRead", "tensor": "A", "scope": "shared", "readers": ["C"]}]


def test_fuse_several_adjacent_axes():
    # fuse(a, b, c) is fuse(fuse(a, b), c), recorded so (it was a TypeError).
    op = tcomp.op("def t(float(A, B, C, D) X) -> (O) { O(a, b, c, d) = X(a, b, c, d) * 2.0 }")
    s = tcomp.Schedule(op)
    O = s["O"]
    a, b, c, d = O.axes
    f = O.fuse(a, b, c)
    assert names(O.leaf_axes) == [f.name, "d"] and f.name == "a_b_f_c_f"
    assert [x["kind"] for x in json.loads(s.to_json())["directives"]] == ["Fuse", "Fuse"]
    fo, fi = O.split(f, 8)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    X = np.arange(2 * 3 * 5 * 4, dtype=np.float32).reshape(2, 3, 5, 4)
    np.testing.assert_array_equal(tcomp.build(s, target="sim")(X), tcomp.evaluate(op, X))
    assert tcomp.Schedule.from_json(op, s.to_json()).to_json() == s.to_json()
