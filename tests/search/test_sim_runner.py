"""SimRunner, the measurement interface, the oracle check and the check sizes."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.search import (ERROR_KINDS, MeasureInput, MeasureResult, OracleError, SimProgram,
                          SimRunner, small_sizes)
from tcomp.search.identity import canonical_schedule, op_hash, work_of
from tcomp.search.oracle import compare, make_case
from tests.search.fake_programs import MM
from tests.target_cuda.test_gpu_runtime import tiled_matmul


def tiled(op, t=8):
    """t x t output tiles, A and B tiles in shared memory (the runtime tests' schedule)."""
    return tiled_matmul(op, t)


@pytest.fixture(scope="module")
def op():
    return tcomp.op(MM)


def test_valid_and_failing_candidates(op):
    big = {"M": 4096, "N": 4096, "K": 4096}
    bad_bind = tcomp.Schedule(op)
    bad_bind["C"].bind(bad_bind["C"].axes[0], "threadIdx.x")  # 4096 threads: lowering refuses
    batch = [MeasureInput.of(tiled(op), big, "sim"),
             MeasureInput.of(tcomp.Schedule(op), {"M": 13, "N": 7, "K": 5}, "sim"),
             MeasureInput(op, big, "not json", "sim"),
             MeasureInput.of(bad_bind, big, "sim")]
    seen = []
    res = SimRunner().run(batch, on_result=lambda i, r: seen.append((i, r)))
    assert [r.error for r in res] == [None, None, "schedule", "lowering"]
    assert seen == list(enumerate(res))
    assert all(r.times_ms is None and r.device == "sim" for r in res)
    assert res[2].message.startswith("ScheduleError: from_json: not a tcomp schedule")
    assert res[3].message.startswith("LoweringError: ")


def test_a_wrong_result_is_caught(op, monkeypatch):
    from tcomp.search import sim_runner
    prog = SimProgram()
    inp = MeasureInput.of(tiled(op), {"M": 16, "N": 9, "K": 4}, "sim")
    payload = prog.prepare(inp, sim_runner.SIM_DEVICE)
    kernel = payload[2]
    wrong = lambda *a: kernel(*a) * 1.01  # noqa: E731
    with pytest.raises(tcomp.search.CandidateFailed) as e:
        prog.run(payload[:2] + (wrong,) + payload[3:])
    assert e.value.kind == "wrong_result"
    assert e.value.message.startswith("output 'C': ")
    assert "beyond the float32 tolerance 0.0001" in e.value.message
    assert e.value.message.endswith("(checked at M=16,K=4,N=9 on random inputs)")


def test_a_sim_error_is_a_runtime_failure(op):
    from tcomp.search.runner import measure_here
    from tcomp.search.sim_runner import SIM_DEVICE

    class Racy(SimProgram):
        def run(self, payload):
            def fails(*a):
                raise tcomp.SimError("shared-memory race on A_shared")
            return super().run(payload[:2] + (fails,) + payload[3:])
    r = measure_here(Racy(), MeasureInput.of(tiled(op), {"M": 8, "N": 8, "K": 8}, "sim"),
                     SIM_DEVICE)
    assert (r.error, r.message) == ("runtime", "SimError: shared-memory race on A_shared")


def test_an_internal_error_fails_the_candidate_and_says_so(op, monkeypatch):
    from tcomp.search import sim_runner

    def broken(*a, **k):
        raise KeyError("stage")
    monkeypatch.setattr(sim_runner, "build", broken)
    (r,) = SimRunner().run([MeasureInput.of(tiled(op), {"M": 8, "N": 8, "K": 8}, "sim")])
    assert r.error == "lowering"
    assert r.message == ("internal error in tcomp (KeyError: 'stage'); please report it with "
                         "this schedule")


def test_an_oracle_that_fails_on_random_inputs_needs_inputs():
    g = tcomp.op("def g(float(N) X, int32(M) I) -> (O) { O(i) = X(I(i)) }")
    s = tcomp.Schedule(g).to_json()
    with pytest.raises(OracleError) as e:
        SimRunner().run([MeasureInput(g, {"N": 2, "M": 3}, s, "sim")])
    assert str(e.value).startswith(
        "cannot check candidates of 'g' at N=2,M=3: the oracle (tcomp.evaluate) fails on random "
        "inputs; give the runner inputs= a module-level function (op, sizes, rng) -> arrays "
        "that makes valid inputs. The oracle's error:\n<tc>:1:47: error: X(I(i)) reads 'X' out "
        "of bounds")
    (r,) = SimRunner(inputs=in_range).run([MeasureInput(g, {"N": 2, "M": 3}, s, "sim")])
    assert r.ok


def in_range(op, sizes, rng):
    return [rng.uniform(-1, 1, sizes["N"]).astype(np.float32),
            rng.integers(0, sizes["N"], sizes["M"]).astype(np.int32)]


# ------------------------------------------------------------------ check sizes
def test_small_sizes_halve_the_largest_until_the_work_fits(op):
    assert small_sizes(op, {"M": 8, "N": 8, "K": 8}, 1 << 15) == {"M": 8, "N": 8, "K": 8}
    small = small_sizes(op, {"M": 4096, "N": 4096, "K": 4096}, 1 << 15)
    assert small == {"M": 32, "N": 32, "K": 32} and work_of(op, small) <= 1 << 15
    assert small_sizes(op, {"M": 4096, "N": 3, "K": 1000}, 1 << 12) == {"M": 32, "N": 3,
                                                                        "K": 32}


def test_small_sizes_keep_ranges_non_empty():
    conv = tcomp.op("def conv(float(H) X, float(R) W) -> (O) "
                    "{ O(i) +=! X(i + r) * W(r) }")
    small = small_sizes(conv, {"H": 1 << 20, "R": 9}, 64)
    assert small == {"H": 16, "R": 5} and work_of(conv, small) <= 64
    # H = 5 would leave O empty (it has H - R + 1 elements) while R = 9: R shrinks first
    small = small_sizes(conv, {"H": 10, "R": 9}, 1)
    assert small == {"H": 1, "R": 1}
    # nothing can shrink further: the result may exceed the budget
    assert small_sizes(conv, {"H": 1, "R": 1}, 1) == {"H": 1, "R": 1}


# ------------------------------------------------------------------ the oracle check
def test_compare_messages(op):
    arrays, (want,) = make_case(op, {"M": 3, "N": 2, "K": 4})
    assert compare(op, want.copy(), [want]) is None
    assert compare(op, (want, want), [want]) == "the kernel returned 2 outputs, the op has 1"
    assert compare(op, want[:2], [want]) == "output 'C' has shape (2, 2), expected (3, 2)"
    bad = want.copy()
    bad[1, 1] = np.nan
    assert compare(op, bad, [want]).startswith(
        "output 'C': 1 of 6 elements differ beyond the float32 tolerance 0.0001 (relative to "
        "the output's scale ")
    assert "first at (1, 1): got nan, expected " in compare(op, bad, [want])
    ints = tcomp.op("def f(int32(N) X) -> (O) { O(i) = X(i) * 2 }")
    _, (w,) = make_case(ints, {"N": 4})
    assert compare(ints, w + np.array([0, 0, 1, 0], np.int32), [w]) == \
        f"output 'O': 1 of 4 elements differ; first at (2,): got {w[2] + 1}, expected {w[2]}"


def test_nan_and_inf_must_meet_their_like(op):
    f = tcomp.op("def f(float(N) X) -> (O) { O(i) = X(i) }")
    want = np.array([np.nan, np.inf, 1.0], np.float32)
    assert compare(f, want.copy(), [want]) is None
    assert compare(f, np.array([np.nan, -np.inf, 1.0], np.float32), [want]).startswith(
        "output 'O': 1 of 3 elements differ")


def test_random_inputs_are_the_same_for_every_candidate(op):
    a1, w1 = make_case(op, {"M": 3, "N": 2, "K": 4})
    a2, w2 = make_case(op, {"M": 3, "N": 2, "K": 4})
    assert all(np.array_equal(x, y) for x, y in zip(a1, a2))
    assert -1 <= a1[0].min() and a1[0].max() < 1 and a1[0].dtype == np.float32


# ------------------------------------------------------------------ the interface
def test_measure_input_checks_its_arguments(op):
    s = tcomp.Schedule(op).to_json()
    for kwargs, message in [
        (dict(op="x", sizes={}, schedule=s), "MeasureInput: op must be a tcomp.Op (from tcomp.op), "
                                             "got str"),
        (dict(op=op, sizes=[1], schedule=s), "MeasureInput: sizes must be a dict of size name to "
                                             "int (e.g. {'M': 1024}), got list"),
        (dict(op=op, sizes={"M": 1, "N": 1}, schedule=s),
         "MeasureInput: sizes must give every size of 'matmul' (M, K, N); missing K"),
        (dict(op=op, sizes={"M": 1, "N": 1, "K": 1, "Q": 2}, schedule=s),
         "MeasureInput: 'matmul' has no size named 'Q' (its sizes: M, K, N)"),
        (dict(op=op, sizes={"M": 1, "N": 0, "K": 1}, schedule=s),
         "MeasureInput: size N must be a positive int, got 0"),
        (dict(op=op, sizes={"M": 1, "N": True, "K": 1}, schedule=s),
         "MeasureInput: size N must be a positive int, got True"),
        (dict(op=op, sizes={"M": 1, "N": 1, "K": 1}, schedule=tcomp.Schedule(op)),
         "MeasureInput: schedule must be the text of Schedule.to_json(), got Schedule"),
        (dict(op=op, sizes={"M": 1, "N": 1, "K": 1}, schedule=s, target="gpu"),
         "MeasureInput: target must be 'sim', 'cuda' or 'cuda:<arch>', got 'gpu'"),
    ]:
        with pytest.raises(tcomp.TcompError) as e:
            MeasureInput(**kwargs)
        assert str(e.value) == message
    with pytest.raises(tcomp.TcompError, match="MeasureInput.of: needs a tcomp.Schedule, got Op"):
        MeasureInput.of(op, {"M": 1, "N": 1, "K": 1})


def test_measure_result_checks_its_fields():
    assert MeasureResult((3.0, 1.0, 2.0)).median_ms == 2.0
    assert MeasureResult(None, "timeout").median_ms is None
    for args, message in [
        ((None, "slow"), "MeasureResult: error must be None or one of " + ", ".join(ERROR_KINDS)
         + ", got 'slow'"),
        (((1.0,), "crash"), "MeasureResult: times_ms must be a non-empty sequence for a "
                            "candidate without error, and None for a failed one"),
        (((),), "MeasureResult: times_ms must be a non-empty sequence for a candidate without "
                "error, and None for a failed one"),
        (((1.0, float("nan")),), "MeasureResult: times_ms must be finite and >= 0, got [1.0, "
                                 "nan]"),
    ]:
        with pytest.raises(tcomp.TcompError) as e:
            MeasureResult(*args)
        assert str(e.value) == message


def test_a_sim_runner_measures_only_sim(op):
    with pytest.raises(tcomp.TcompError, match=r"SimRunner.run: batch\[0\] is for target 'cuda', "
                                               r"but this runner measures target 'sim'"):
        SimRunner().run([MeasureInput.of(tiled(op), {"M": 8, "N": 8, "K": 8}, "cuda")])


def test_identity_ignores_json_formatting(op):
    s = tcomp.Schedule(op).to_json()
    again = json.dumps(json.loads(s), indent=4, sort_keys=True)
    a = MeasureInput(op, {"M": 1, "N": 2, "K": 3}, s, "sim")
    b = MeasureInput(op, {"K": 3, "N": 2, "M": 1}, again, "sim")
    assert a.key == b.key and canonical_schedule(s) == canonical_schedule(again)
    assert op_hash(op) == op_hash(tcomp.op(op.to_text())) and len(op_hash(op)) == 16
    with pytest.raises(tcomp.TcompError, match=r"schedule: not JSON text from Schedule.to_json\(\) "
                                               r"\(JSONDecodeError: "):
        canonical_schedule("{")


def test_an_inputs_function_that_fails():
    g = tcomp.op("def g(float(N) X, int32(M) I) -> (O) { O(i) = X(I(i)) }")
    with pytest.raises(OracleError) as e:
        SimRunner(inputs=broken_inputs).run([MeasureInput(g, {"N": 2, "M": 3},
                                                          tcomp.Schedule(g).to_json(), "sim")])
    assert str(e.value) == ("cannot check candidates of 'g' at N=2,M=3: the inputs= function "
                            "broken_inputs failed (KeyError: 'Q')")


def broken_inputs(op, sizes, rng):
    return [sizes["Q"]]


# ------------------------------------------------------------------ the time limit
SERIAL = {"M": 128, "N": 128, "K": 128}  # a serial matmul: about a minute on the sim, unbudgeted


def _unguarded(monkeypatch):
    """SERIAL is past the sim's work guard (2.1M instances in one thread: refused before
    it starts, target_sim/work.py); these tests are about what stops a run once it runs."""
    from tcomp.target_sim import work
    monkeypatch.setattr(work, "MAX_THREAD_STEPS", None)


def test_a_candidate_that_runs_past_the_limit_is_a_timeout_and_the_batch_goes_on(op, monkeypatch):
    """The sim runs in this process: a slow candidate is stopped from inside
    (deadline.py) after its own limit (MeasureInput.timeout_s) or the runner's
    timeout_s, and the next one runs."""
    _unguarded(monkeypatch)
    serial = tcomp.Schedule(op).to_json()
    r = SimRunner(budget=1 << 40)
    res = r.run([MeasureInput(op, SERIAL, serial, "sim", timeout_s=0.5),
                 MeasureInput(op, {"M": 4, "N": 4, "K": 4}, serial, "sim")])
    assert [x.error for x in res] == ["timeout", None]
    assert res[0].message == ("checking it on the sim (replay, lowering, the sim run) took "
                              "longer than 0.5 s, the limit the search set for this candidate; "
                              "it was stopped")
    assert res[0].times_ms is None and res[0].device == "sim" and res[0].build_s >= 0.5
    (own,) = SimRunner(budget=1 << 40, timeout_s=0.25).run([MeasureInput(op, SERIAL, serial,
                                                                         "sim")])
    assert own.message == ("checking it on the sim (replay, lowering, the sim run) took longer "
                           "than timeout_s=0.25 s (a hang?); it was stopped")


def test_the_limit_holds_in_a_thread_and_nothing_escapes_after_it(op, monkeypatch):
    import threading
    _unguarded(monkeypatch)
    out = []
    serial = tcomp.Schedule(op).to_json()

    def work():
        r = SimRunner(budget=1 << 40, timeout_s=0.25)
        out.append(r.run([MeasureInput(op, SERIAL, serial, "sim")])[0].error)
        sum(range(10 ** 6))  # no late DeadlineExceeded after the runner returned
        out.append("after")
    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out == ["timeout", "after"]


class Hangs(SimProgram):
    """Every candidate after the first hangs in its sim run (a loop that never ends)."""

    def __init__(self):
        super().__init__()
        self.runs = 0

    def run(self, payload):
        self.runs += 1
        while self.runs > 1:
            pass
        return super().run(payload)


def test_a_tune_on_the_sim_goes_past_hanging_candidates(op, tmp_path):
    runner = SimRunner(timeout_s=0.5)
    runner.program = Hangs()
    res = tcomp.tune(op, {"M": 16, "N": 16, "K": 16}, trials=3, target="sim", batch=3,
                     runner=runner, records=str(tmp_path / "r.jsonl"))
    assert [t.error for t in res.history] == [None, "timeout", "timeout"]
    assert res.stopped == "trials" and res.best is res.history[0]


@pytest.mark.parametrize("bad", [0, -1, "5", True])
def test_a_sim_runner_time_limit_must_be_positive(bad):
    with pytest.raises(tcomp.TcompError) as e:
        SimRunner(timeout_s=bad)
    assert str(e.value) == f"SimRunner: timeout_s must be a positive number of seconds, got {bad!r}"


def test_small_sizes_keep_a_convolution_on_the_hopper_path():
    """The channels of an im2col stage stay a multiple of 64 and the filter bank's
    height stays R S C (the Hopper plan's requirements), so a candidate valid at
    the tuning sizes is checkable at the small ones."""
    from tcomp.kernels.conv_sm90 import conv2d_source
    op = tcomp.op(conv2d_source())
    small = small_sizes(op, {"N": 32, "H": 56, "W": 56, "C": 256, "K": 256, "RSC": 2304},
                        1 << 22)
    assert small["C"] % 64 == 0 and small["RSC"] == 9 * small["C"], small
    assert small["N"] * small["H"] * small["W"] < 32 * 56 * 56
    odd = small_sizes(op, {"N": 4, "H": 8, "W": 8, "C": 96, "K": 64, "RSC": 864}, 1 << 12)
    assert odd["RSC"] == 9 * odd["C"], odd  # 96 is not a multiple of 64: it shrinks freely


def test_an_fp8_product_is_compared_at_float16_tolerance():
    """Hopper's fp8 wgmma accumulates in fewer bits than float32: a float32
    output of an fp8 reduction (and what is computed from it) 5e-3 off
    (relative to its scale) passes; 2e-2 off does not; the same error on a
    copy of fp8 values, or a float32 op, fails at 1e-4 (found in review: the
    floor applied to any op with fp8 inputs)."""
    fp8 = tcomp.op("def f(float8_e4m3fn(N, K) X) -> (T, Y) { T(i) +=! float(X(i, k))\n"
                   " Y(i) = T(i) * 2.0 }")
    want = [np.linspace(-1.0, 1.0, 16).astype(np.float32)] * 2
    assert compare(fp8, (want[0] + 5e-3, want[1] + 5e-3), want) is None
    assert "tolerance 0.01" in compare(fp8, (want[0] + 2.5e-2, want[1]), want)
    copy = tcomp.op("def f(float8_e4m3fn(N) X) -> (Y) { Y(i) = float(X(i)) * 2.0 }")
    assert compare(copy, want[0] + 5e-3, want[:1]) is not None

