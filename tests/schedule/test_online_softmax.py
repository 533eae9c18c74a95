"""Schedule.online_softmax on the sim against tcomp.evaluate: log-sum-exp,
softmax, cross-entropy and attention (causal, fully masked rows, large
scores, rows shorter than a tile, sizes not a multiple of the tile), its JSON
replay, its golden IR, and random chains where it applies or is refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tcomp

GOLDEN = Path(__file__).parent / "golden" / "online_softmax_lse.txt"

LSE = tcomp.op("""def lse(float(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    sm(n) +=! exp(X(n, d) - mx(n))
    O(n) = mx(n) + log(sm(n))
}""")
SOFTMAX = tcomp.op("""def softmax(float(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    P(n, d) = exp(X(n, d) - mx(n))
    sm(n) +=! P(n, d)
    O(n, d) = P(n, d) / sm(n)
}""")
XENT = tcomp.op("""def xent(float(N, D) X, int32(N) Label) -> (Loss) {
    mx(n) max=! X(n, d)
    sm(n) +=! exp(X(n, d) - mx(n))
    Loss(n) = log(sm(n)) + mx(n) - X(n, Label(n))
}""")
ATTN = tcomp.op("""def attn(float(S, D) Q, float(T, D) K, float(T, E) V) -> (O) {
    Sc(i, j) +=! Q(i, d) * K(j, d)
    Sm(i, j) = j > i ? -inf : Sc(i, j)
    mx(i) max=! Sm(i, j)
    P(i, j) = exp(Sm(i, j) - mx(i))
    l(i) +=! P(i, j)
    O(i, e) +=! P(i, j) * V(j, e) / l(i)
}""")


def scores(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * 4).astype(np.float32)
    if n > 2:
        X[0, :] = -np.inf                           # a fully masked row
        X[1, : d // 2] = -np.inf                    # half masked
        X[2, :] = X[2, :] * 1e36                    # large magnitudes
    return X


def tiled(s, stage, tile):
    st_ = s[stage]
    (r,) = st_.reduce_axes
    ro, ri = st_.split(r, tile)
    st_.unroll(ri)
    st_.bind(st_.axes[0], "threadIdx.x")


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("n, d, tile", [(5, 7, 4), (3, 3, 8), (6, 33, 16), (1, 1, 4)])
def test_lse(n, d, tile):
    s = tcomp.Schedule(LSE)
    (ms,) = s.online_softmax("mx", "sm")
    assert ms.name == "mx" and [x.name for x in s.stages] == ["mx", "O"]
    tiled(s, "mx", tile)
    X = scores(n, d)
    close(tcomp.build(s, target="sim")(X), tcomp.evaluate(LSE, X))


@pytest.mark.parametrize("n, d", [(4, 5), (7, 17)])
def test_softmax_keeps_p_for_its_other_reader(n, d):
    s = tcomp.Schedule(SOFTMAX)
    s.online_softmax("mx", "sm")
    assert [x.name for x in s.stages] == ["mx", "P", "O"]  # O still reads P
    tiled(s, "mx", 4)
    X = scores(n, d, 1)
    close(tcomp.build(s, target="sim")(X), tcomp.evaluate(SOFTMAX, X))


def test_cross_entropy():
    s = tcomp.Schedule(XENT)
    s.online_softmax("mx", "sm")
    tiled(s, "mx", 8)
    X = scores(6, 11, 2)
    lab = np.array([0, 3, 10, 2, 5, 1], np.int32)
    close(tcomp.build(s, target="sim")(X, lab), tcomp.evaluate(XENT, X, lab))


@pytest.mark.parametrize("S, T, tile", [(5, 7, 4), (9, 9, 4), (3, 2, 8)])
def test_causal_attention(S, T, tile):
    s = tcomp.Schedule(ATTN)
    new = s.online_softmax("mx", "l", ["O"])
    assert [x.name for x in new] == ["O.online", "O"]
    assert [x.name for x in s.stages] == ["Sc", "O.online", "O"]  # the mask inside the pass
    tiled(s, "O.online", tile)
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((S, 4)).astype(np.float32)
    K = rng.standard_normal((T, 4)).astype(np.float32)
    V = rng.standard_normal((T, 3)).astype(np.float32)
    want = tcomp.evaluate(ATTN, Q, K, V)
    close(tcomp.build(s, target="sim")(Q, K, V), want)
    replay = tcomp.Schedule.from_json(ATTN, s.to_json())
    close(tcomp.build(replay, target="sim")(Q, K, V), want)


def test_attention_fully_masked_rows_are_nan_as_in_evaluate():
    op = tcomp.op("""def attn(float(S, T) Sc, float(T, E) V) -> (O) {
        Sm(i, j) = j > i - 2 ? -inf : Sc(i, j)
        mx(i) max=! Sm(i, j)
        l(i) +=! exp(Sm(i, j) - mx(i))
        W(i, e) +=! exp(Sm(i, j) - mx(i)) * V(j, e)
        O(i, e) = W(i, e) / l(i)
    }""")
    s = tcomp.Schedule(op)
    s.online_softmax("mx", "l", "W")
    Sc = np.random.default_rng(4).standard_normal((5, 6)).astype(np.float32)
    V = np.ones((6, 2), np.float32)
    want = tcomp.evaluate(op, Sc, V)
    assert np.isnan(want[:2]).all() and not np.isnan(want[2:]).any()
    close(tcomp.build(s, target="sim")(Sc, V), want)


def test_golden_ir(request):
    s = tcomp.Schedule(LSE)
    before = str(tcomp.lower(s, sizes={"N": 4, "D": 8}))
    s.online_softmax("mx", "sm")
    after = str(tcomp.lower(s, sizes={"N": 4, "D": 8}))
    text = f"# before\n{before}\n# after\n{after}\n# json\n{s.to_json()}\n"
    if request.config.getoption("--update-golden"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


# ------------------------------------------------------------------ random chains
SHIFTS = ["mx(n)", "2.0 * mx(n)", "mx(0)"]
VALUES = ["X(n, d)", "X(n, d) * 2.0", "Y(n, d)"]
SUMOPS = ["+=!", "max=!"]


@settings(max_examples=25, deadline=None)
@given(value=st.sampled_from(VALUES[:2]), sum_value=st.sampled_from(VALUES),
       shift=st.sampled_from(SHIFTS), sumop=st.sampled_from(SUMOPS),
       through_p=st.booleans(), weighted=st.booleans(), divide=st.booleans(),
       n=st.integers(1, 4), d=st.integers(1, 9), seed=st.integers(0, 99))
def test_random_chains(value, sum_value, shift, sumop, through_p, weighted, divide, n, d, seed):
    e = f"exp({sum_value} - {shift})"
    p = f"\n    P(n, d) = {e}" if through_p else ""
    term = "P(n, d)" if through_p else e
    w = (f"\n    W(n, k) +=! {term} * V(d, k)" + (" / sm(n)" if divide else "")) if weighted else ""
    outs = "O, W" if weighted else "O"
    op = tcomp.op(f"""def f(float(N, D) X, float(N, D) Y, float(D, K) V) -> ({outs}) {{
    mx(n) max=! {value}{p}
    sm(n) {sumop} {term}{w}
    O(n) = mx(n) + log(sm(n))
}}""")
    legal = sum_value == value and shift == "mx(n)" and sumop == "+=!"
    s = tcomp.Schedule(op)
    try:
        s.online_softmax("mx", "sm", ["W"] if weighted else [])
    except tcomp.ScheduleError as err:
        assert not legal, err
        assert str(err).startswith("online_softmax: ")
        return
    assert legal
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * 3).astype(np.float32)
    X[rng.random((n, d)) < 0.3] = -np.inf
    Y = rng.standard_normal((n, d)).astype(np.float32)
    V = rng.standard_normal((d, 2)).astype(np.float32)
    want = tcomp.evaluate(op, X, Y, V)
    got = tcomp.build(s, target="sim")(X, Y, V)
    for g, w_ in zip(got if weighted else (got,), want if weighted else (want,)):
        close(g, w_)


@pytest.mark.cuda
@pytest.mark.parametrize("op,stages", [(LSE, ("mx", "sm"))])
def test_online_softmax_on_the_gpu(op, stages):
    """The rewritten chain on the GPU gives evaluate's result, masked rows
    (NaN), large magnitudes and a ragged last tile included."""
    s = tcomp.Schedule(op)
    s.online_softmax(*stages)
    tiled(s, "mx", 16)
    X = scores(67, 45)
    close(tcomp.build(s, target="cuda")(X), tcomp.evaluate(op, X))
