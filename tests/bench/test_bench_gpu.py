"""The benchmark kernels on the GPU, against float64 torch references.

Each case of bench/suite.py at its full size (built as the suite builds it, sizes
bound), and each schedule at awkward sizes: primes, non-multiples of the tiles
and of the vector width, rows shorter than the block, single elements; built
with the awkward sizes bound, and, where the schedule lowers with symbolic sizes,
once unbound and run at all of them. Inputs are torch CUDA tensors (zero copy).

Checks, as bench/suite.py: the relative L2 error against the float64 reference
is at most max(tol, 4 x that of the torch float32 equivalent); also the largest
elementwise error (relative to the largest reference value), which a handful of
wrong tail elements cannot hide in, and that every element is finite. transpose
must be exact.

About 1.5 minutes on an H200 (NVRTC compilations of ~100 kernels, the
awkward-size GEMMs, and two subprocesses that allocate >8 GiB buffers).
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tcomp

from .common import ROOT, S, SUITE_CASES, SUITE_IDS, import_torch

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def torch():
    t = import_torch()
    prev = t.backends.cuda.matmul.allow_tf32
    t.backends.cuda.matmul.allow_tf32 = False  # the suite compares with cuBLAS without TF32
    yield t
    t.backends.cuda.matmul.allow_tf32 = prev
    t.cuda.empty_cache()


def _freeze(d):
    return tuple(sorted(d.items()))


@functools.lru_cache(maxsize=None)
def _kernel(kind, kw, sizes):
    op, s = getattr(S, kind)({}, **dict(kw))
    return tcomp.build(s, target="cuda", sizes=dict(sizes) if sizes is not None else None)


def kernel(kind, kw, sizes=None):
    """The kernel of schedule `kind` with parameters `kw`, `sizes` bound (None: unbound)."""
    return _kernel(kind, _freeze(kw), None if sizes is None else _freeze(sizes))


# ------------------------------------------------------------------ problems
def problem(torch, kind, sizes, seed=0, scale=1.0, shift=0.0):
    """(inputs, float64 reference, torch float32 equivalent) of `kind` at `sizes`."""
    import torch.nn.functional as F
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g)

    if kind == "gemm":
        a, b = randn(sizes["M"], sizes["K"]), randn(sizes["K"], sizes["N"])
        return (a, b), a.double() @ b.double(), a @ b
    if kind == "transpose":
        a = randn(sizes["M"], sizes["N"])
        return (a,), a.double().t(), a.t().contiguous()
    if kind == "gelu":
        x = randn(sizes["N"])
        w = torch.tensor(0.75, device="cuda")
        b = torch.tensor(-0.25, device="cuda")
        return (x, w, b), F.gelu(x.double() * w.double() + b.double()), F.gelu(x * w + b)
    n, d = sizes["N"], sizes["D"]
    x = randn(n, d) * scale + shift
    if kind == "rowsum":
        return (x,), x.double().sum(-1), x.sum(-1)
    if kind == "softmax":
        return (x,), torch.softmax(x.double(), -1), torch.softmax(x, -1)
    if kind == "layernorm":
        w, b = randn(d), randn(d)
        ref = F.layer_norm(x.double(), (d,), w.double(), b.double(), 1e-5)
        return (x, w, b), ref, F.layer_norm(x, (d,), w, b, 1e-5)
    raise AssertionError(kind)


def errors(torch, out, ref):
    """(relative L2 error, largest elementwise error / largest |reference|)."""
    diff = out.double() - ref
    scale = ref.abs().max().clamp_min(1e-30) if ref.numel() else 1.0
    l2 = float(diff.norm() / ref.norm().clamp_min(1e-30)) if ref.numel() else 0.0
    mx = float(diff.abs().max() / scale) if ref.numel() else 0.0
    return l2, mx


def check(torch, k, kind, sizes, tol=1e-5, **kw):
    args, ref, lib = problem(torch, kind, sizes, **kw)
    with torch.no_grad():
        out = k(*args)
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == torch.float32
    assert tuple(out.shape) == tuple(ref.shape), f"{kind} {sizes}: shape {tuple(out.shape)}"
    torch.cuda.synchronize()
    if kind == "transpose":
        assert torch.equal(out, args[0].t()), f"transpose {sizes}: not exact"
        return
    assert bool(torch.isfinite(out).all()), f"{kind} {sizes}: non-finite outputs"
    l2, mx = errors(torch, out, ref)
    lib_l2, lib_mx = errors(torch, lib, ref)
    assert l2 <= max(tol, 4 * lib_l2), f"{kind} {sizes}: rel L2 error {l2:.2e} (torch {lib_l2:.2e})"
    assert mx <= max(tol, 4 * lib_mx), f"{kind} {sizes}: max error {mx:.2e} (torch {lib_mx:.2e})"


# ------------------------------------------------------------------ full benchmark sizes
@pytest.mark.parametrize("case", SUITE_CASES, ids=SUITE_IDS)
def test_suite_case(torch, case):
    k = kernel(case.kind, case.kwargs, case.sizes)
    check(torch, k, case.kind, case.sizes, tol=case.tol)


def test_softmax_large_inputs(torch):
    """Inputs up to ~260 at the suite's softmax shape: exp overflows unless the
    row maximum is subtracted first."""
    sizes = {"N": 32768, "D": 4096}
    k = kernel("softmax", {"threads": 512, "shared_row": True}, sizes)
    check(torch, k, "softmax", sizes, scale=40.0, shift=60.0)


# ------------------------------------------------------------------ awkward sizes
def run_awkward(torch, kind, kw, size_list, unbound=True):
    """Each size with the sizes bound; and all of them through one unbound kernel."""
    for i, sizes in enumerate(size_list):
        check(torch, kernel(kind, kw, sizes), kind, sizes, seed=i)
        if unbound:
            check(torch, kernel(kind, kw), kind, sizes, seed=i)


def test_gelu_awkward(torch):
    run_awkward(torch, "gelu", {}, [{"N": n} for n in (1, 3, 1027, (1 << 20) + 3, (1 << 24) + 4)])


def test_transpose_awkward(torch):
    run_awkward(torch, "transpose", {}, [{"M": m, "N": n} for m, n in (
        (1, 1), (31, 33), (1, 8192), (8192, 3), (4099, 2053), (8191, 8193))])


@pytest.mark.parametrize("threads", [256, 128])
def test_rowsum_awkward(torch, threads):
    run_awkward(torch, "rowsum", {"threads": threads}, [{"N": n, "D": d} for n, d in (
        (1, 1), (7, threads - 1), (4099, 4093), (3, 32771), (33, 1000), (65537, 5))])


# the suite's (threads, shared_row, row width) configurations
ROW_CONFIGS = [(512, True, 4096, ""), (256, False, 4096, ""), (256, True, 4096, "vec4"),
               (256, True, 4096, "vec4+rcp"), (1024, True, 32768, ""),
               (1024, False, 32768, ""), (1024, True, 32768, "vec4"),
               (1024, True, 32768, "vec4+rcp")]


ROW_CASES = [(kind, *cfg) for kind in ("softmax", "layernorm") for cfg in ROW_CONFIGS
             if kind == "softmax" or "rcp" not in cfg[3]]  # the reciprocal is softmax's


@pytest.mark.parametrize("kind,threads,shared_row,width,variant", ROW_CASES,
                         ids=[f"{k}-{t}t-{'smem' if s else 'L2'}-{w}{'-' + v if v else ''}"
                              for k, t, s, w, v in ROW_CASES])
def test_row_op_awkward(torch, kind, threads, shared_row, width, variant):
    """Rows of 1 element, one short of the block, prime, and a multiple of 4 just
    above the benchmark width (vector fetch with a tail). The shared-row variants
    need D bound (their shared buffer holds the row). Variants as in
    bench/schedules.py `row_variant`."""
    kw = S.row_variant(variant)
    rows = 257 if width == 4096 else 67
    sizes = [{"N": 3, "D": 1}, {"N": 5, "D": threads - 1}, {"N": rows, "D": width + 3},
             {"N": rows, "D": width + 4}, {"N": 1, "D": width - 1}]
    run_awkward(torch, kind, {"threads": threads, "shared_row": shared_row, **kw}, sizes,
                unbound=not shared_row)


@pytest.mark.parametrize("shared_row", [True, False], ids=["smem", "L2"])
@pytest.mark.parametrize("kind", ["softmax", "layernorm"])
def test_row_op_global_temps(torch, kind, shared_row):
    """local_temps=False: the row statistics in global temporaries."""
    kw = {"threads": 512, "shared_row": shared_row, "local_temps": False}
    run_awkward(torch, kind, kw, [{"N": 67, "D": 4099}, {"N": 64, "D": 4096}],
                unbound=not shared_row)


GEMM_VARIANTS = ["frag", "shared", "frag+pipe", "shared+pipe", "frag+scalar",
                 "frag+warp+pad+pipe+g8", "shared+warp+pad+g8"]


@pytest.mark.parametrize("variant", GEMM_VARIANTS)
def test_gemm_awkward(torch, variant):
    """Sizes smaller than one tile, K below bk, primes, a K that leaves a tail of
    3 in the last bk step, sizes just above a tile multiple: all through the
    unbound kernel, three of them also with the sizes bound (the compilations of
    the unrolled 8x8 tiles dominate this test's time). Variants as in
    bench/schedules.py `gemm_variant`."""
    kw = S.gemm_variant(variant)
    sizes = [{"M": m, "N": n, "K": k} for m, n, k in (
        (1, 1, 1), (129, 7, 13), (257, 255, 3), (1031, 1021, 1019), (64, 64, 8195),
        (4097, 4099, 8))]
    for i, sz in enumerate(sizes):
        check(torch, kernel("gemm", kw), "gemm", sz, seed=i)
    for i, sz in enumerate(sizes[1::2]):
        check(torch, kernel("gemm", kw, sz), "gemm", sz, seed=i)


def test_misaligned_vector_input_is_refused(torch):
    """A kernel with float4 accesses refuses a pointer that is not 16-byte aligned
    (here a contiguous view starting one float into its storage)."""
    n = 1 << 20
    k = kernel("gelu", {}, {"N": n})
    assert k.meta["kernels"][0]["aligned_buffers"] == ["O", "X"]
    buf = torch.randn(n + 4, device="cuda")
    w, b = torch.tensor(0.75, device="cuda"), torch.tensor(-0.25, device="cuda")
    with pytest.raises(tcomp.CudaError, match="not 16-byte aligned"):
        k(buf[1:n + 1], w, b)
    check(torch, k, "gelu", {"N": n})


# ------------------------------------------------------------------ limits
def test_shared_row_too_wide_is_a_clear_error(torch):
    """A 65536-float row needs 256 KiB of shared memory, more than a block may
    have (227 KiB on an H200). Expected: a TcompError that says so (at build or
    at call time). Observed: 'cuFuncSetAttribute failed: CUDA_ERROR_INVALID_VALUE
    (invalid argument)' (scratch/bugs_lower.md, 'shared-row kernels wider than
    the device's shared memory')."""
    sizes = {"N": 2, "D": 65536}
    with pytest.raises(tcomp.TcompError, match=r"(?i)shared memory"):
        k = kernel("softmax", {"threads": 1024, "shared_row": True}, sizes)
        k(*problem(torch, "softmax", sizes)[0])
    torch.cuda.synchronize()  # the context is still usable


BIG = textwrap.dedent("""
    import json, sys
    import torch, tcomp
    from tests.bench.common import S
    case = sys.argv[1]
    res = {"case": case}
    try:
        if case == "rowsum-bound":
            n, d = 65536, 32769          # X: 2^31 + 65536 elements
            op, s = S.rowsum({}, threads=256)
            k = tcomp.build(s, target="cuda", sizes={"N": n, "D": d})
            x = torch.ones(n, d, device="cuda")
            y = k(x)
            torch.cuda.synchronize()
            res["wrong"] = int((y != d).sum())
        else:                              # gelu, N unbound: N = 2^31 + 1024
            n = 2**31 + 1024
            op, s = S.gelu({})
            k = tcomp.build(s, target="cuda")
            x = torch.zeros(n, device="cuda")
            one = torch.tensor(1.0, device="cuda")
            y = k(x, one, one)
            torch.cuda.synchronize()
            want = float(torch.nn.functional.gelu(torch.tensor(1.0)))
            res["wrong"] = int(((y - want).abs() > 1e-6).sum())
    except tcomp.TcompError as e:
        res["tcomp_error"] = str(e)[:500]
    except Exception as e:
        res["other_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    print("RESULT " + json.dumps(res))
""")


@pytest.mark.parametrize("case", ["rowsum-bound", "gelu-unbound"])
def test_more_than_2_31_elements(torch, case):
    """A buffer of more than 2^31 - 1 elements (8.6 GB of float32: fits an H200).
    Expected: right results, with 64-bit indices (chosen at build with the sizes
    bound, at the call with N unbound). Observed before 64-bit indexing: an
    illegal memory access with the sizes bound; with N unbound, N passed as a C
    int wrapped negative and the kernel silently wrote nothing
    (scratch/bugs_lower.md, '32-bit index arithmetic'). Runs in a subprocess: an
    illegal address would poison this process' CUDA context."""
    free, _ = torch.cuda.mem_get_info()
    if free < 24 * 2**30:
        pytest.skip("needs 24 GiB of free GPU memory")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", BIG, case], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"subprocess died (rc {p.returncode}):\n{p.stderr[-2000:]}"
    res = json.loads(lines[-1][len("RESULT "):])
    assert "other_error" not in res, res["other_error"]
    assert "tcomp_error" not in res, res["tcomp_error"]
    assert res["wrong"] == 0, f"{res['wrong']} wrong elements"
