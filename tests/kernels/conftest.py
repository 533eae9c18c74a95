"""Fixtures of the kernel tests (the golden files option is tests/conftest.py's)."""
from tests.lower.conftest import update_golden  # noqa: F401
