"""The register-row kernels (bench/row_schedules.py) on the GPU against float64
torch references: the benchmark row lengths and awkward ones (not multiples of
the vector width or of the thread count), float32 and bfloat16, built with the
sizes bound as bench/rows.py builds them; and the harness itself on one case.

Checks: relative L2 error and largest elementwise error (relative to the
largest reference value) within the dtype's tolerance, every element finite.
About a minute on an H200.
"""
from __future__ import annotations

import pytest

import tcomp

from .common import BENCH, _load, import_torch

pytestmark = pytest.mark.cuda

R = _load("bench_row_schedules", BENCH / "row_schedules.py")
TOL = {"float32": 1e-5, "bfloat16": 1e-2}
LENGTHS = [4096, 32768, 8192, 1000, 4099, 257, 8200]


@pytest.fixture(scope="module")
def torch():
    return import_torch()


def check(torch, got, want, tol, what):
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape), what
        g = g.double()
        assert torch.isfinite(g).all(), what
        rel = float((g - w).norm() / w.norm())
        worst = float((g - w).abs().max() / w.abs().max())
        assert rel <= tol and worst <= 4 * tol, (what, rel, worst)


def make_row(torch, kind, dt, n, d):
    F = torch.nn.functional
    t = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dt]
    g = torch.Generator(device="cuda").manual_seed(d)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g).to(t)
    x = rand(n, d) * 2 + 0.25
    if kind == "softmax":
        return (x,), (torch.softmax(x.double(), -1),)
    if kind == "rmsnorm":
        w = rand(d)
        xd = x.double()
        return (x, w), (xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double(),)
    w, b = rand(d), rand(d)
    if kind == "layernorm":
        return (x, w, b), (F.layer_norm(x.double(), (d,), w.double(), b.double(), 1e-5),)
    r = rand(n, d)
    s = x.double() + r.double()
    return (x, r, w, b), (s, F.layer_norm(s, (d,), w.double(), b.double(), 1e-5))


@pytest.mark.parametrize("d", LENGTHS)
@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("kind", sorted(R.ROW_KINDS))
def test_row_kernel(torch, kind, dtype, d):
    n = 37 if d <= 8200 else 9
    op, s = R.ROW_KINDS[kind](d, dtype)
    k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
    args, want = make_row(torch, kind, dtype, n, d)
    check(torch, k(*args), want, TOL[dtype], (kind, dtype, d))


@pytest.mark.parametrize("n,d,dtype,rows,threads,stages", [
    (300, 32768, "bfloat16", 3, 512, 3), (300, 32768, "bfloat16", 3, 1024, 2),
    (1000, 4096, "float32", 9, 256, 3), (1000, 4096, "bfloat16", 7, 256, 3),
    (37, 4099, "bfloat16", 5, 128, 3), (37, 1000, "float32", 4, 64, 2),
    (37, 257, "bfloat16", 6, 32, 4), (5, 8200, "float32", 2, 256, 3)])
@pytest.mark.parametrize("kind", ["softmax", "layernorm", "rmsnorm", "layernorm x", "rmsnorm x",
                                  "softmax e twice"])
def test_pipelined_rows(torch, kind, n, d, dtype, rows, threads, stages):
    """Persistent blocks prefetching rows into a shared ring (row_pipelined):
    ragged last blocks (n not a multiple of `rows`), rows not a multiple of the
    vector width or of the threads' span, ring depths 2 to 4; the row in
    float32 registers ("x"), softmax's exponentials inlined ("e twice")."""
    base = kind.split()[0]
    op, s = R.pipelined(base, n, dtype, rows, threads, stages, x_regs=kind.endswith(" x"),
                        e_regs=not kind.endswith("twice"))
    k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
    args, want = make_row(torch, base, dtype, n, d)
    check(torch, k(*args), want, TOL[dtype], (kind, dtype, n, d, rows, threads, stages))


@pytest.mark.parametrize("n,d,dtype,rows,threads,stages", [
    (300, 8192, "bfloat16", 3, 512, 3), (37, 4099, "bfloat16", 5, 128, 3),
    (37, 1000, "float32", 4, 64, 2), (9, 257, "bfloat16", 2, 32, 4)])
def test_pipelined_add_layernorm(torch, n, d, dtype, rows, threads, stages):
    """Two inputs, two rings; the sum in registers, stored (S) from them."""
    op, s = R.pipelined("add_layernorm", n, dtype, rows, threads, stages)
    k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
    args, want = make_row(torch, "add_layernorm", dtype, n, d)
    check(torch, k(*args), want, TOL[dtype], (n, d, dtype, rows, threads, stages))


@pytest.mark.parametrize("kind", ["softmax", "layernorm"])
@pytest.mark.parametrize("threads", [256, 512])
def test_row_kernel_other_thread_counts(torch, kind, threads):
    op, s = R.ROW_KINDS[kind](32768, "float32", threads)
    k = tcomp.build(s, target="cuda", sizes={"N": 5, "D": 32768})
    args, want = make_row(torch, kind, "float32", 5, 32768)
    check(torch, k(*args), want, TOL["float32"], (kind, threads))


@pytest.mark.parametrize("v,chunk,threads", [(128256, 16384, 1024), (128256, 8192, 512),
                                             (50257, 16384, 1024), (1000, 8192, 512)])
def test_cross_entropy(torch, v, chunk, threads):
    op, s = R.cross_entropy(chunk, threads)
    n = 11
    k = tcomp.build(s, target="cuda", sizes={"N": n, "V": v})
    g = torch.Generator(device="cuda").manual_seed(v)
    x = (torch.randn(n, v, device="cuda", generator=g) * 4).to(torch.bfloat16)
    t = torch.randint(0, v, (n,), device="cuda", dtype=torch.int64, generator=g)
    want = torch.nn.functional.cross_entropy(x.double(), t, reduction="none")
    check(torch, k(x, t), (want,), 1e-5, ("cross_entropy", v, chunk))


@pytest.mark.parametrize("d", [32768, 4096, 1000, 4099, 257])
@pytest.mark.parametrize("dtype", R.DTYPES)
def test_softmax_exp2(torch, dtype, d):
    n = 37 if d <= 8200 else 9
    op, s = R.softmax(d, dtype, exp2=True)
    k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
    args, want = make_row(torch, "softmax", dtype, n, d)
    check(torch, k(*args), want, TOL[dtype], ("softmax exp2", dtype, d))


@pytest.mark.parametrize("d", [32768, 4096, 1000, 4099, 257])
@pytest.mark.parametrize("dtype", R.DTYPES)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_shared_weights(torch, kind, dtype, d):
    """Weights staged in shared memory; float32 at 32768 needs 256 KiB for
    layernorm's two (more than a block may have): 16384 there instead."""
    if dtype == "float32" and kind == "layernorm" and d == 32768:
        d = 16384
    n = 37 if d <= 8200 else 9
    op, s = R.ROW_KINDS[kind](d, dtype, shared_weights=True)
    k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
    args, want = make_row(torch, kind, dtype, n, d)
    check(torch, k(*args), want, TOL[dtype], (kind, "shared weights", dtype, d))


@pytest.mark.parametrize("v,threads,per_thread,exp2", [
    (128256, 512, 32, True), (128256, 1024, 32, True), (128256, 512, 32, False),
    (128256, 256, 64, True), (50257, 512, 32, True), (1000, 512, 32, True), (7, 32, 8, True)])
def test_cross_entropy_one_kernel(torch, v, threads, per_thread, exp2):
    op, s = R.cross_entropy_one_kernel(threads, per_thread, exp2=exp2)
    n = 11
    k = tcomp.build(s, target="cuda", sizes={"N": n, "V": v})
    g = torch.Generator(device="cuda").manual_seed(v)
    x = (torch.randn(n, v, device="cuda", generator=g) * 4).to(torch.bfloat16)
    t = torch.randint(0, v, (n,), device="cuda", dtype=torch.int64, generator=g)
    want = torch.nn.functional.cross_entropy(x.double(), t, reduction="none")
    check(torch, k(x, t), (want,), 1e-5, ("cross_entropy one kernel", v, threads, per_thread))


@pytest.mark.parametrize("m,n", [(8192, 8192), (1000, 4099), (64, 130)])
def test_transpose_vec(torch, m, n):
    op, s = R.transpose_vec(64, 16, 4)
    k = tcomp.build(s, target="cuda", sizes={"M": m, "N": n})
    a = torch.randn(m, n, device="cuda")
    got = k(a)
    assert torch.equal(got, a.t().contiguous())


@pytest.mark.parametrize("d", [4096, 32768, 1000, 4099])
def test_rowsum(torch, d):
    op, s = R.rowsum(d)
    k = tcomp.build(s, target="cuda", sizes={"N": 13, "D": d})
    x = torch.randn(13, d, device="cuda")
    check(torch, k(x), (x.double().sum(-1),), 1e-5, ("rowsum", d))


@pytest.mark.parametrize("n", [1 << 20, 1000, 4099])
@pytest.mark.parametrize("dtype", R.DTYPES)
def test_chain(torch, dtype, n):
    op, s = R.chain(dtype)
    k = tcomp.build(s, target="cuda", sizes={"N": n})
    t = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    x = torch.randn(n, device="cuda").to(t)
    w, b = torch.tensor(0.75, device="cuda"), torch.tensor(-0.25, device="cuda")
    want = torch.nn.functional.gelu(x.double() * 0.75 - 0.25)
    check(torch, k(x, w, b), (want,), TOL[dtype], ("chain", dtype, n))


def test_the_harness_checks_and_times_a_case(torch, monkeypatch, tmp_path):
    """bench/rows.py end to end on two cases: checked ok, every peer timed
    (Triton when bench/triton_rows.py imports), $OUT/rows.json written."""
    import json
    rows = _load("bench_rows", BENCH / "rows.py")
    monkeypatch.setenv("OUT", str(tmp_path))
    results = rows.main(["--only", "rowsum_float32_32768x4096,rmsnorm_bfloat16_32768x4096",
                         "--reps", "3"])
    assert len(results) == 2
    for r in results:
        assert r["ok"], r
        for peer in ("tcomp", "torch", "copy"):
            assert r[f"{peer}_tbps"] > 0.1, r
        assert r["vs_copy"] > 0
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert [r["case"] for r in saved["results"]] == [r["case"] for r in results]
