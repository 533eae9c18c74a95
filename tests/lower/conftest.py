"""Shared fixtures of the lowering tests.

`--update-golden` is defined in tests/conftest.py; the fallback below only
registers it when that file does not (so `pytest tests/lower --update-golden`
works either way).
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    try:
        parser.addoption("--update-golden", action="store_true", default=False,
                         help="rewrite the golden files (tests/lang/golden, tests/lower/golden) "
                              "from the current output")
    except ValueError:  # already added by tests/conftest.py
        pass


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden", default=False))
