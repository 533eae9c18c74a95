"""bench/first_contact.py without a GPU: its float64 references against
`tcomp.evaluate` at small sizes (numpy), its torch peers against the
references where torch is installed (the GPU machine), the plain default's
probe and extrapolation, the timing rule, the table, the argument errors, and
`--dry-run` on one op (NVRTC builds, no GPU)."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import tcomp
from tcomp.search.identity import small_sizes, work_of
from tcomp.search.oracle import random_inputs

from .common import BENCH


def _load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FC = _load("first_contact")
refs = FC.refs
OPS = FC.auto_time.OPS


def _small(name, budget=1 << 12):
    op = tcomp.op(OPS[name][0])
    return op, small_sizes(op, OPS[name][1], budget)


def test_the_seven_ops_of_the_issue():
    assert FC.NAMES == ("group_norm", "depthwise_conv", "bmm_fp16", "stencil", "swiglu",
                        "add_rmsnorm", "gemm_bias_gelu")
    assert set(refs.PEERS) == set(FC.NAMES)


@pytest.mark.parametrize("name", FC.NAMES)
def test_reference_matches_evaluate(name):
    op, sizes = _small(name)
    rng = np.random.default_rng(7)
    xs = random_inputs(op, sizes, rng)
    want = tcomp.evaluate(op, *xs)
    want = want if isinstance(want, tuple) else (want,)
    got = refs.REFERENCES[name](np, *[x.astype(np.float64) for x in xs])
    assert [g.shape for g in got] == [w.shape for w in want]
    err = refs.max_error(got, tuple(w.astype(np.float64) for w in want))
    assert err <= refs.TOLERANCE[op.outputs[0].dtype.name], (name, sizes, err)


def test_max_error_sees_a_nan_and_a_wrong_value():
    w = (np.array([1.0, -2.0]),)
    assert refs.max_error((np.array([1.0, -2.0]),), w) == 0.0
    assert refs.max_error((np.array([1.0, np.nan]),), w) == float("inf")
    assert refs.max_error((np.array([1.0, -1.0]),), w) == pytest.approx(0.5)


@pytest.mark.parametrize("name", FC.NAMES)
def test_torch_peer_matches_reference(name):
    torch = pytest.importorskip("torch")
    op, sizes = _small(name)
    xs = random_inputs(op, sizes, np.random.default_rng(3))
    ts = [torch.from_numpy(x) for x in xs]
    got = refs.PEERS[name][1](*ts)
    got = got if isinstance(got, tuple) else (got,)
    want = refs.REFERENCES[name](torch, *[t.double() for t in ts])
    assert refs.max_error(tuple(g.double() for g in got), want) <= \
        refs.TOLERANCE[op.outputs[0].dtype.name]


@pytest.mark.parametrize("name", FC.NAMES)
def test_plain_probe_is_small_and_shrinks_only(name):
    p = FC.plan(name)
    assert work_of(p["op"], p["probe"]) <= FC.PROBE_WORK
    assert all(p["probe"][v] <= p["sizes"][v] for v in p["sizes"])
    assert p["work_ratio"] >= 1


def test_extrapolation_is_linear_in_the_work():
    op = tcomp.op("def inc(float(N) X) -> (O) { O(i) = X(i) + 1 }")  # work: 2 N elements
    assert FC.extrapolate_ms(1.5, op, {"N": 1000}, {"N": 4000}) == pytest.approx(6.0)


def test_timing_rule():
    assert FC.timing_rule(7000.0) == "first"    # over 5 s: that one call
    assert FC.timing_rule(300.0) == "again"     # over 50 ms: one more call
    assert FC.timing_rule(0.2) == "timer"


def test_the_default_run_fits_six_minutes():
    a = FC.parser().parse_args([])
    assert FC.estimate_s(len(FC.NAMES), a.tune_s, a.plain_max_s) <= 360
    assert FC.estimate_s(7, 30, 12) > FC.estimate_s(7, 20, 12)


def test_table_cells_and_ratios():
    rows = [{"op": "stencil", "auto_cpu_s": 0.17, "auto_sketch": "O:flat",
             "plain": {"ms": 2000.0, "extrapolated": True}, "auto": {"ms": 0.5},
             "tuned": {"ms": 0.25, "trials": 64}, "torch": {"ms": 1.0}},
            {"op": "swiglu", "auto": {"wrong": True, "err": 0.03}, "tuned": {"error": "x"}}]
    lines = FC.table(rows).splitlines()
    assert len(lines) == 4 and lines[0].count("|") == len(FC.COLUMNS) + 1
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells == ["stencil", "~2000", "0.5", "0.25 (64)", "1", "-", "2", "4,000", "2",
                     "0.17", "`O:flat`"]
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[2:4] == ["wrong (err 3.0e-02)", "failed"] and cells[6:9] == ["-", "-", "-"]


@pytest.mark.parametrize("argv, message", [
    (["--only", "nope"], "unknown op(s) nope"),
    (["--trials", "0"], "--trials, --reps and --batch must be positive"),
])
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit):
        FC.main(argv)
    assert message in capsys.readouterr().err


def test_dry_run_builds_and_prints_the_plan(capsys):
    assert FC.main(["--dry-run", "--only", "stencil"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("estimate: at most ~")
    assert "stencil: H=4098,W=4098; auto O:" in out and "plain probe H=1025,W=1025" in out
    assert "built 3 kernels" in out
