"""`tcomp.auto_schedule` and `tcomp.build(op, ...)`: a schedule chosen without
measuring, checked, explained in `remarks`; lowering remarks and strict=True."""
import json
import re

import numpy as np
import pytest

import tcomp
from tcomp.search import auto
from tcomp.search import features as F
from tcomp.search.space import Space

MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
SOFTMAX = """def sm(float(N,D) X) -> (O) {
    mx(i) max=! X(i, j)
    e(i, j) = exp(X(i, j) - mx(i))
    s(i) +=! e(i, j)
    O(i, j) = e(i, j) / s(i)
}"""
STENCIL = ("def st(float(H,W) X) -> (O) { O(i, j) = X(i+1, j+1) * 4 - X(i, j+1) - X(i+2, j+1)"
           " - X(i+1, j) - X(i+1, j+2) }")
ROWSUM = "def rs(float(N,D) X) -> (S) { S(i) +=! X(i, j) }"
EW = "def ew(float(N) X, float(N) Y) -> (O) { O(i) = X(i) * 2 + Y(i) }"

OPS = {  # name -> (source, sizes of the choice, awkward sizes the sim checks)
    "mm": (MM, {"M": 4096, "N": 4096, "K": 4096}, {"M": 37, "N": 45, "K": 29}),
    "softmax": (SOFTMAX, {"N": 4096, "D": 4096}, {"N": 7, "D": 99}),
    "stencil": (STENCIL, {"H": 4098, "W": 4098}, {"H": 13, "W": 70}),
    "rowsum": (ROWSUM, {"N": 8192, "D": 8192}, {"N": 5, "D": 300}),
    "ew": (EW, {"N": 1 << 24}, {"N": 1001}),
}


def _inputs(op, sizes, seed=0):
    from tcomp.search.oracle import random_inputs
    return random_inputs(op, sizes, np.random.default_rng(seed))


def _threads(prog):
    n = 1
    for k in prog.kernels:
        b = k.const_block()
        n = max(n, 1 if b is None else b[0] * b[1] * b[2])
    return n


@pytest.mark.parametrize("name", sorted(OPS))
def test_auto_schedule_is_parallel_and_estimated_far_faster_than_the_default(name):
    src, sizes, _ = OPS[name]
    op = tcomp.op(src)
    c = auto.choose(op, sizes)
    assert c.source == "estimate" and c.sketch != "default"
    assert _threads(tcomp.lower(c.schedule, sizes)) >= 32
    space = Space(op, sizes)
    d = space.default()
    space.analyse(d)
    default_ms = F.analytic_ms(space.features[d.schedule])
    assert c.estimate_ms * 100 <= default_ms, (c.estimate_ms, default_ms)
    assert any(r.startswith(f"auto_schedule: {c.sketch} chosen from") for r in c.remarks)


@pytest.mark.parametrize("name", sorted(OPS))
def test_build_of_an_op_is_right_on_the_sim_at_awkward_sizes(name):
    src, sizes, small = OPS[name]
    op = tcomp.op(src)
    k = tcomp.build(op, target="sim", sizes=small)
    arrays = _inputs(op, small)
    np.testing.assert_allclose(k(*arrays), tcomp.evaluate(op, *arrays), rtol=2e-5, atol=1e-5)
    assert k.remarks and k.remarks[0].startswith("auto_schedule: ")


def test_the_choice_is_deterministic_and_a_plain_schedule():
    op = tcomp.op(MM)
    sizes = {"M": 512, "N": 512, "K": 512}
    a = tcomp.auto_schedule(op, sizes)
    b = tcomp.auto_schedule(op, sizes)
    assert isinstance(a, tcomp.Schedule) and a.to_json() == b.to_json()
    again = tcomp.Schedule.from_json(op, a.to_json())  # schedules are data
    assert again.to_json() == a.to_json()


def test_schedule_of_an_op_stays_the_plain_default():
    op = tcomp.op(EW)
    assert json.loads(tcomp.Schedule(op).to_json())["directives"] == []
    k = tcomp.build(tcomp.Schedule(op), target="sim")
    assert k.remarks == ()
    assert _threads(k.program) == 1


def test_symbolic_sizes_are_assumed_for_the_choice_and_said():
    op = tcomp.op(MM)
    k = tcomp.build(op, target="sim")  # no sizes: chosen at M=N=K=1024, built symbolic
    assert k.remarks[0].startswith("auto_schedule: sizes M=1024,K=1024,N=1024 assumed")
    A, B = _inputs(op, {"M": 9, "N": 17, "K": 5})
    np.testing.assert_allclose(k(A, B), tcomp.evaluate(op, A, B), rtol=1e-5, atol=1e-6)


def test_cuda_build_of_an_op_compiles_with_remarks():
    k = tcomp.build(tcomp.op(EW), target="cuda", sizes={"N": 1 << 20})
    assert "__global__" in k.source and k.cubin
    assert k.remarks[0].startswith("auto_schedule: ")


def test_a_candidate_that_fails_the_check_is_passed_over(monkeypatch):
    op = tcomp.op(EW)
    sizes = {"N": 4096}
    first = auto.choose(op, sizes).schedule.to_json()
    real = auto.compare
    calls = []

    def wrong_once(op_, got, want):
        calls.append(1)
        return "planted difference" if len(calls) == 1 else real(op_, got, want)
    monkeypatch.setattr(auto, "compare", wrong_once)
    c = auto.choose(op, sizes)
    assert any("passed over: on the sim at N=2048 it differs from tcomp.evaluate "
               "(planted difference)" in r for r in c.remarks), c.remarks
    assert len(calls) == 2 and c.schedule.to_json() != first  # the next best was taken
    arrays = _inputs(op, {"N": 100})
    np.testing.assert_allclose(tcomp.build(c.schedule, target="sim", sizes={"N": 100})(*arrays),
                               tcomp.evaluate(op, *arrays), rtol=1e-6)


def test_records_win_over_the_estimate(tmp_path):
    op = tcomp.op(EW)
    sizes = {"N": 256}
    path = tmp_path / "ew.jsonl"
    res = tcomp.tune(op, sizes=sizes, trials=4, records=str(path), target="sim", seed=0)
    c = auto.choose(op, sizes, target="sim", records=str(path))
    assert c.source == "records"
    assert c.schedule.to_json() == tcomp.search.best(str(path), op, sizes, "sim").to_json()
    assert res.schedule is not None
    k = tcomp.build(op, target="sim", sizes=sizes, records=str(path))
    # the kernel's remarks say what was chosen, records included (they said nothing)
    assert k.remarks[0] == (f"auto_schedule: the best record of {path} chosen (tuning records "
                            f"win over the estimate)"), k.remarks
    arrays = _inputs(op, sizes)
    np.testing.assert_allclose(k(*arrays), tcomp.evaluate(op, *arrays), rtol=1e-6)


def test_records_without_a_match_fall_back_to_the_estimate(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    c = auto.choose(tcomp.op(EW), {"N": 256}, records=str(path))
    assert c.source == "estimate"
    assert any(r.startswith(f"auto_schedule: records {path} give no schedule here") for r in
               c.remarks), c.remarks


VECTOR = "def v(float(N) X) -> (O) { O(i) = X(i) * 2 }"


def _vectorized(op):
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    _, inner = O.split(i, 4)
    O.vectorize(inner)
    return s


def test_a_vectorize_that_lowering_declines_is_a_remark_in_the_ir_and_on_the_kernel():
    s = _vectorized(tcomp.op(VECTOR))
    k = tcomp.build(s, target="sim")  # N symbolic: the tail guard differs between lanes
    want = ("v_O: vectorize: loop 'i_i' runs lane by lane (no vector access): its guard "
            "(i_o * 4 + i_i < N) is not the same for every lane")
    assert len(k.remarks) == 1 and k.remarks[0].startswith(want), k.remarks
    assert "  # remark: vectorize: loop 'i_i' runs lane by lane" in str(tcomp.lower(s))
    assert tcomp.build(s, target="sim", sizes={"N": 4096}).remarks == ()  # aligned: vectors


def test_strict_makes_a_declined_vectorize_an_error():
    s = _vectorized(tcomp.op(VECTOR))
    with pytest.raises(tcomp.LoweringError, match=r"build\(strict=True\): lowering declined what "
                       r"the schedule asked for:\n  v_O: vectorize: loop 'i_i' runs lane by lane"):
        tcomp.build(s, target="cuda", strict=True)
    tcomp.build(s, target="cuda", sizes={"N": 4096}, strict=True)  # nothing declined


@pytest.mark.parametrize("call, message", [
    (lambda: tcomp.auto_schedule("C(m) = A(m)"), "auto_schedule: needs a tcomp Op"),
    (lambda: tcomp.auto_schedule(tcomp.op(EW), target="tpu"),
     "auto_schedule: unknown target 'tpu' (targets: cuda, sim)"),
    (lambda: tcomp.auto_schedule(tcomp.op(EW), candidates=0),
     "auto_schedule: candidates must be a positive int, got 0"),
    (lambda: tcomp.auto_schedule(tcomp.op(EW), sizes=[4]),
     "auto_schedule: sizes must be a mapping of size variables to ints"),
    (lambda: tcomp.auto_schedule(tcomp.op(EW), sizes={"Q": 4}),
     "auto_schedule: 'Q' is not a size variable of 'ew' (sizes: N)"),
    (lambda: tcomp.auto_schedule(tcomp.op(EW), sizes={"N": -1}),
     "auto_schedule: size N must be a non-negative int, got -1"),
    (lambda: tcomp.build(tcomp.Schedule(tcomp.op(EW)), target="sim", records="x.jsonl"),
     "build: records= chooses a schedule for an Op; this call passes a Schedule"),
])
def test_errors(call, message):
    with pytest.raises(tcomp.TcompError) as e:
        call()
    assert str(e.value).startswith(message), str(e.value)


def test_a_vectorized_choice_at_symbolic_sizes_is_specialised_for_its_vectors():
    """softmax with D symbolic: row_stream's 16-byte loads need D % 4 == 0, which lowering
    cannot know; the choice gets a variant for it, checked on the sim, and stays general."""
    op = tcomp.op(SOFTMAX)
    c = auto.choose(op, None, "cuda")
    assert [cond.text for cond, _ in c.schedule.specializations] == ["D % 4 == 0"]
    said = [r for r in c.remarks if "specialized on" in r]
    assert len(said) == 1 and re.fullmatch(
        r"auto_schedule: specialized on D % 4 == 0: there, (\d+) of the \1 vectorized loops "
        r"that run lane by lane at symbolic sizes get their vector accesses; other sizes run "
        r"the same schedule lane by lane", said[0]), said
    assert not hasattr(tcomp.build(op, target="sim"), "variants")  # one kernel by default
    k = tcomp.build(op, target="sim", specialize=True)
    assert [v.name for v in k.variants] == ["when D % 4 == 0", "otherwise"]
    assert not [r for r in k.remarks if r.startswith("[when D % 4 == 0]")], k.remarks
    rng = np.random.default_rng(0)
    for D, ran in ((8, "when D % 4 == 0"), (6, "otherwise")):
        X = rng.standard_normal((3, D)).astype(np.float32)
        np.testing.assert_allclose(k(X), tcomp.evaluate(op, X), rtol=1e-5, atol=1e-6)
        assert k.ran == ran
    # fixed sizes decide at lowering, and specialize=False keeps the plain choice
    assert not auto.auto_schedule(op, {"N": 64, "D": 64}).specializations
    assert not auto.auto_schedule(op, None, specialize=False).specializations
