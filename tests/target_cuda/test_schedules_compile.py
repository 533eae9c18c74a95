"""Every schedule of tests/lower/test_sim_schedules.py compiles through NVRTC
to a valid cubin for sm_80 and sm_90a (no GPU needed): an ELF file holding
every kernel's entry symbol."""
from __future__ import annotations

import pytest

import tcomp
from tests.lower.util import run_sim

from .cases import NAMES, replay
from .test_cpu_cuda import elf_symbols


def compile_both(s, args, sizes=None, tol=None):
    for arch in ("sm_80", "sm_90a"):
        k = tcomp.build(s, target=f"cuda:{arch}", sizes=sizes)
        syms = elf_symbols(k.cubin)
        for kd in k.meta["kernels"]:
            assert kd["name"] in syms, f"{kd['name']} missing from the {arch} cubin"
        assert f".target {arch}" in k.ptx
    return run_sim(s, args, sizes=sizes, tol=tol)


@pytest.mark.parametrize("name", NAMES)
def test_schedule_compiles(name, monkeypatch):
    replay(name, monkeypatch, compile_both, first_only=True)
