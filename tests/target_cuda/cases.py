"""Replays the schedule tests of tests/lower/test_sim_schedules.py with another
runner (GPU execution, or NVRTC compilation), every parametrisation included."""
from __future__ import annotations

import inspect
import itertools

from tests.lower import test_sim_schedules as cases

NAMES = sorted(n for n, f in vars(cases).items() if n.startswith("test_") and callable(f))


def calls(name: str, first_only: bool = False):
    """The keyword-argument sets the test's @pytest.mark.parametrize marks give."""
    fn = getattr(cases, name)
    axes = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = [v if len(names) > 1 else (v,) for v in values]
        axes.append([dict(zip(names, r)) for r in rows])
    combos = [{}] if not axes else [
        {k: v for d in combo for k, v in d.items()} for combo in itertools.product(*axes)]
    if set(inspect.signature(fn).parameters) - set(combos[0]):
        return None  # needs fixtures
    return combos[:1] if first_only else combos


def replay(name: str, monkeypatch, runner, first_only: bool = False):
    monkeypatch.setattr(cases, "run_sim", runner)
    fn = getattr(cases, name)
    combos = calls(name, first_only)
    if combos is None:
        import pytest
        pytest.skip(f"{name} takes fixtures")
    for kw in combos:
        fn(**kw)
