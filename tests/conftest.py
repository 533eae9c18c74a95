"""Test-wide setup: tests marked `cuda` run only where a CUDA driver and GPU answer."""
import functools

import pytest


@functools.lru_cache(maxsize=None)
def cuda_available() -> bool:
    try:
        from cuda.bindings import driver
    except Exception:
        return False
    try:
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA driver/GPU on this machine")
    for item in items:
        if item.get_closest_marker("cuda") is not None:  # (not a parameter id that says cuda)
            item.add_marker(skip)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files (tests/lang/golden, tests/lower/golden, "
                          "tests/bench/golden) and the output blocks of docs/ and the README "
                          "from the current output")
