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


@pytest.fixture
def copy_intrinsic(monkeypatch):
    """A registered intrinsic taking two addresses (`test_copy(&dst, &src)`:
    writes dst, reads src), for tests of how passes treat `Ref` operands. It
    has no target rules: it is registered for the test only."""
    from tcomp.lower import intrinsics as I
    entry = I.Intrinsic("test_copy", "copy one element",
                        (I.Operand("dst", ref=True, access=I.WRITE),
                         I.Operand("src", ref=True, access=I.READ)),
                        frozenset({"reads", "writes"}))
    monkeypatch.setitem(I.REGISTRY, entry.name, entry)
    return entry
