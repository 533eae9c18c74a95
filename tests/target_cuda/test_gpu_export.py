"""On a GPU: an exported kernel loads and computes what the built one does, and
`tcomp.load` asks the driver for each entry point's parameters
(cuFuncGetParamInfo), so a sidecar whose launches disagree with the cubin is
refused even where the cubin's own records say nothing."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.target_cuda import cubin_info, cuda_api

from . import sidecars as S

pytestmark = pytest.mark.cuda


def test_export_load_run_two_launches(tmp_path):
    s = S.normalize()
    path = str(tmp_path / "n.cubin")
    tcomp.build(s, target="cuda").export(path)
    k = tcomp.load(path)
    rng = np.random.default_rng(0)
    x = rng.random((70, 5), dtype=np.float32) + 0.5
    y = rng.random(70, dtype=np.float32)
    got = k(x, y)
    want = tcomp.evaluate(s.op, x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_the_driver_reports_the_parameters_the_sidecar_lists(tmp_path):
    path = str(tmp_path / "n.cubin")
    tcomp.build(S.normalize(), target="cuda").export(path)
    k = tcomp.load(path)
    assert k._variants[32].module.param_sizes("f_S") == [8, 8, 4, 4]  # the check is live
    assert k._variants[32].module.param_sizes("f_O") == [8, 8, 8, 8, 4, 4]
    assert k._variants[64].module.param_sizes("f_O") == [8] * 6


def test_a_parameter_count_mismatch_is_caught_by_the_driver(tmp_path, monkeypatch):
    path = str(tmp_path / "n.cubin")
    tcomp.build(S.normalize(), target="cuda").export(path)
    meta = S.read(path)
    for kernels in (meta["kernels"], meta["index64"]["kernels"]):
        kernels[0]["params"].pop()  # drop N's size: the launch would read garbage
    S.write(path, meta, reseal=True)
    # a cubin whose .nv.info says nothing of its parameters (a newer toolchain's records)
    real = cubin_info.entry_points
    monkeypatch.setattr(cubin_info, "entry_points", lambda b: {
        n: cubin_info.Entry(n, None, e.max_threads) for n, e in real(b).items()})
    with pytest.raises(tcomp.CudaError) as e:
        tcomp.load(path)
    assert str(e.value) == (
        f"{path}: kernel f_S takes 4 parameter(s) of (8, 8, 4, 4) bytes by the driver's account, "
        f"but the launch passes 3 of (8, 8, 4) bytes; export the kernel again (k.export or "
        f"tcomp compile)")
    assert cuda_api.have_device()
