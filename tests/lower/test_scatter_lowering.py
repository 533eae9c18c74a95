"""Scatters on the sim (lower/scatter_store.py): the lowering picks a plain
read-modify-write where each element is updated by one thread and atomics
where a gathered loop runs in parallel (printed `@atomic`); both agree with
`evaluate` at awkward sizes (no point, one point, every point on one element,
sizes that do not divide the blocks)."""
import numpy as np
import pytest

import tcomp

ADD = """def f(T(N, D) X, int32(N) I, T(M, D) B) -> (O) {
    O(m, d) = B(m, d)
    O(I(i), d) OP X(i, d)
}"""

SCHEDULES = {
    "serial": lambda st, i, d: None,
    "bare-threads": lambda st, i, d: st.bind(d, "threadIdx.x"),
    "gathered-threads": lambda st, i, d: (st.bind(i, "threadIdx.x"), st.bind(d, "threadIdx.y")),
    "fused-blocks": lambda st, i, d: _fused(st, i, d),
}


def _fused(st, i, d):
    o, t = st.split(st.fuse(i, d), 32)
    st.bind(o, "blockIdx.x")
    st.bind(t, "threadIdx.x")


def build(op_text, dtype, schedule):
    op = tcomp.op(ADD.replace("OP", op_text).replace("T(", f"{dtype}("))
    s = tcomp.Schedule(op)
    st = s["O.1"]
    i, d = st.axes
    SCHEDULES[schedule](st, i, d)
    return op, s


def test_ir_dump_shows_the_choice():
    _, s = build("+=", "float", "bare-threads")
    text = str(tcomp.lower(s))
    assert "O[I[i] * D + d] = O[I[i] * D + d] + X[i * D + d]" in text
    assert "@atomic" not in text
    _, s = build("+=", "float", "gathered-threads")
    text = str(tcomp.lower(s))
    assert "O[I[i] * D + d] += X[i * D + d]  @atomic" in text
    assert "check 0 <= I[i] < M  # scatter into 'O(I(i), d)': subscript I(i)" in text
    _, s = build("max=", "float", "fused-blocks")
    assert "max= X[" in str(tcomp.lower(s)) and "@atomic" in str(tcomp.lower(s))


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("op_text, dtype", [("+=", "float"), ("max=", "float"),
                                            ("min=", "int32"), ("+=", "int64"),
                                            ("+=", "double"), ("=", "float")])
@pytest.mark.parametrize("n, m", [(0, 3), (1, 1), (37, 5), (9, 1)])
def test_sim_agrees_with_evaluate(schedule, op_text, dtype, n, m):
    op, s = build(op_text, dtype, schedule)
    rng = np.random.default_rng(n * 7 + m)
    npd = {"float": np.float32, "double": np.float64, "int32": np.int32, "int64": np.int64}[dtype]
    x = (rng.standard_normal((n, 3)) * 8).astype(npd)
    parallel_put = op_text == "=" and schedule in ("gathered-threads", "fused-blocks")
    # (duplicates under a parallel '=' are a race: tests/errors/test_scatter_errors.py)
    idx = (rng.permutation(max(n, m))[:n] % m if parallel_put and n <= m
           else np.zeros(n) if parallel_put else rng.integers(0, m, n)).astype(np.int32)
    if parallel_put and n > m:  # every point on element 0 with one value: no race
        x[:] = x[:1]
    b = (rng.standard_normal((m, 3)) * 8).astype(npd)
    got = tcomp.build(s, target="sim")(x, idx, b)
    want = tcomp.evaluate(op, x, idx, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_half_atomic_add_rounds_each_update():
    op, s = build("+=", "float16", "gathered-threads")
    x = np.ones((3, 2), np.float16)
    idx = np.zeros(3, np.int32)
    b = np.full((1, 2), 2048, np.float16)
    # Every update rounds to float16, as an atomic does: 2048 + 1 is 2048 (ties to even)
    # each time, where one rounding of the float32 sum would give 2052.
    np.testing.assert_array_equal(tcomp.build(s, target="sim")(x, idx, b), b)
    np.testing.assert_array_equal(tcomp.evaluate(op, x, idx, b), b)
    _, serial = build("+=", "float16", "serial")
    np.testing.assert_array_equal(tcomp.build(serial, target="sim")(x, idx, b), b)


def test_scatter_bang_on_the_sim():
    op = tcomp.op("""def hist(int32(N) I, float(N) W, float(M) Z) -> (float(M) H) {
        H(I(i)) +=! W(i)
    }""")
    s = tcomp.Schedule(op)
    io, ii = s["H.1"].split(s["H.1"].axes[0], 8)
    s["H.1"].bind(io, "blockIdx.x")
    s["H.1"].bind(ii, "threadIdx.x")
    idx = np.array([2, 2, 0, 2, 1, 2, 2, 0, 0, 2, 2], np.int32)
    w = np.arange(11, dtype=np.float32)
    got = tcomp.build(s, target="sim")(idx, w, np.zeros(4, np.float32))
    np.testing.assert_array_equal(got, np.bincount(idx, w, minlength=4).astype(np.float32))


def test_automatic_schedule_picks_atomics():
    op = tcomp.op(ADD.replace("OP", "+=").replace("T(", "float("))
    rng = np.random.default_rng(5)
    k = tcomp.build(op, target="sim")
    for n in (5, 0, 33):  # (a call after an empty launch: test_empty_launch_reuse.py)
        x = rng.standard_normal((n, 3)).astype(np.float32)
        idx = rng.integers(0, 2, n).astype(np.int32)
        b = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(k(x, idx, b), tcomp.evaluate(op, x, idx, b), rtol=1e-5)
