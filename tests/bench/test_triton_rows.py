"""bench/triton_rows.py, the Triton peer of the memory-bound benchmark rows. Skipped where
torch or triton is missing (CI has neither).

- Its configurations, cases, byte counts and argument checks (no kernel runs).
- test_interpreted_kernels: interpreted_triton_rows.py in a process of its own under Triton's
  interpreter (every kernel, both row paths, awkward shapes, on CPU tensors).
- Compilation for sm_90 (no GPU needed: Triton compiles and runs ptxas on the host): every
  configuration autotuning may pick at the issue's shapes compiles without spilling, and rows
  whose length is a multiple of the vector width use 16-byte loads and stores.
- @pytest.mark.cuda: the autotuned functions and every candidate configuration on the GPU at
  moderate awkward sizes, against the float64 references.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

from .common import ROOT, import_torch

try:
    import_torch()
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)
pytest.importorskip("triton")

from .triton_rows_helpers import (ROW_CASES, check, check_case, load_triton_rows,  # noqa: E402
                                  torch, triton)


@pytest.fixture(scope="module")
def G():
    """The module with compiled kernels."""
    if triton.knobs.runtime.interpret:
        pytest.skip("TRITON_INTERPRET=1: these tests need compiled kernels")
    return load_triton_rows()


def test_interpreted_kernels():
    """interpreted_triton_rows.py, in a process where Triton's interpreter is on from the start."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x",
                        "tests/bench/interpreted_triton_rows.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]


# ---------------------------------------------------------------- configurations, cases, bytes

@pytest.mark.parametrize("D", [1, 5, 100, 1000, 4096, 4099, 8192, 20000, 32768, 50257, 128256])
@pytest.mark.parametrize("elem", [4, 2])
def test_row_configs(G, D, elem):
    """Register path for rows up to MAX_REGISTER_ROW (one 16-byte vector to 64 elements per
    thread), chunk loops (chunks shorter than the row) only for rows of WIDE_ROW or more."""
    cfgs = G.row_configs(D, elem)
    full = triton.next_power_of_2(D)
    vec = 16 // elem
    assert cfgs and len({tuple(c.items()) for c in cfgs}) == len(cfgs)
    reg = [c for c in cfgs if c["CHUNK"] >= D]
    loop = [c for c in cfgs if c["CHUNK"] < D]
    assert bool(reg) == (full <= G.MAX_REGISTER_ROW)
    assert bool(loop) == (full >= G.WIDE_ROW)
    for c in reg:
        assert c["CHUNK"] == full
        per = full // (32 * c["num_warps"])
        assert (vec <= per <= 64) or cfgs == [dict(CHUNK=full, num_warps=1)]
    for c in loop:
        assert vec <= c["CHUNK"] // (32 * c["num_warps"]) <= 32


def test_autotune_prune_keeps_exactly_the_candidates(G):
    x = torch.empty(2, 20000, dtype=torch.bfloat16)
    kept = G._prune_rows(G._ROW_CONFIGS, {"X": x}, D=20000)
    got = sorted((c.kwargs["CHUNK"], c.num_warps) for c in kept)
    assert got == sorted((c["CHUNK"], c["num_warps"]) for c in G.row_configs(20000, 2))
    kept = G._prune_gelu(G._GELU_CONFIGS, {"X": x})
    assert sorted((c.kwargs["BLOCK"], c.num_warps) for c in kept) == sorted(
        (c["BLOCK"], c["num_warps"]) for c in G.gelu_configs(2))
    assert all(c["BM"] * c["BN"] // (32 * c["num_warps"]) <= 64 for c in G.transpose_configs(4))


def test_cases_make_their_inputs(G):
    assert set(G.CASES) == {"softmax", "layernorm", "rmsnorm", "add_layernorm", "cross_entropy",
                            "rowsum", "transpose", "gelu"}
    x, w, b = G.CASES["layernorm"].make((3, 8), torch.bfloat16, device="cpu")
    assert x.shape == (3, 8) and w.shape == b.shape == (8,)
    assert x.dtype == w.dtype == b.dtype == torch.bfloat16
    logits, t = G.CASES["cross_entropy"].make((5, 11), torch.bfloat16, device="cpu")
    assert t.dtype == torch.int64 and int(t.min()) >= 0 and int(t.max()) < 11
    x, a, b = G.CASES["gelu"].make((4, 5), torch.float32, device="cpu")
    assert x.shape == (4, 5) and a.dim() == b.dim() == 0


def test_bytes_moved(G):
    """Every input read once, every output written once: the suite's row counts plus weights,
    targets and the loss."""
    f32, bf16 = torch.float32, torch.bfloat16
    assert G.bytes_moved("softmax", (32768, 4096), f32) == 2 * 32768 * 4096 * 4
    assert G.bytes_moved("softmax", (4096, 32768), bf16) == 2 * 4096 * 32768 * 2
    assert G.bytes_moved("layernorm", (32768, 4096), f32) == 2 * 32768 * 4096 * 4 + 2 * 4096 * 4
    assert G.bytes_moved("rmsnorm", (4096, 32768), bf16) == 2 * 4096 * 32768 * 2 + 32768 * 2
    assert (G.bytes_moved("add_layernorm", (16384, 8192), bf16)
            == 4 * 16384 * 8192 * 2 + 2 * 8192 * 2)
    assert G.bytes_moved("cross_entropy", (4096, 128256), bf16) == 4096 * 128256 * 2 + 4096 * 12
    assert G.bytes_moved("rowsum", (4096, 4096), f32) == 4096 * 4096 * 4 + 4096 * 4
    assert G.bytes_moved("transpose", (8192, 8192), f32) == 2 * 8192 * 8192 * 4
    assert G.bytes_moved("gelu", (1 << 28,), f32) == 2 * (1 << 28) * 4 + 8


# ---------------------------------------------------------------- errors

def _errors(G):
    x = torch.randn(2, 8)
    w = torch.ones(8)
    return [
        (lambda: G.softmax(x, config={"CHUNK": 8}), ValueError,
         "softmax: config must be a dict with exactly the keys ['CHUNK', 'num_warps']"),
        (lambda: G.softmax(x, config={"CHUNK": 12, "num_warps": 4}), ValueError,
         "softmax: config['CHUNK'] must be a positive power of two"),
        (lambda: G.softmax(x, config={"CHUNK": 8, "num_warps": 64}), ValueError,
         "softmax: config['num_warps'] is at most 32 (1024 threads per block); got 64"),
        (lambda: G.transpose(x, config={"BM": 8, "num_warps": 1}), ValueError,
         "transpose: config must be a dict with exactly the keys ['BM', 'BN', 'num_warps']"),
        (lambda: G.softmax(x.numpy()), TypeError, "softmax: x must be a torch.Tensor; got ndarray"),
        (lambda: G.softmax(x.double()), TypeError,
         "softmax: x has dtype torch.float64; expected one of"),
        (lambda: G.rowsum(torch.tensor(1.0)), ValueError,
         "rowsum: x must have at least one dimension"),
        (lambda: G.layernorm(x, torch.ones(7), w), ValueError,
         "layernorm: w must have shape (8,) (the row length of x); got (7,)"),
        (lambda: G.rmsnorm(x, torch.ones(8, device="meta")), ValueError,
         "rmsnorm: w is on meta but x is on cpu; move both to one device"),
        (lambda: G.layernorm(x, w, w, eps=-1.0), ValueError,
         "layernorm: eps must be a finite number >= 0; got -1.0"),
        (lambda: G.add_layernorm(x, x[:1], w, w), ValueError,
         "add_layernorm: r must match x in shape and dtype ((2, 8), torch.float32); got (1, 8)"),
        (lambda: G.cross_entropy(x[0], torch.zeros(8, dtype=torch.int64)), ValueError,
         "cross_entropy: logits must be 2-D (rows, V) with V >= 1; got shape (8,)"),
        (lambda: G.cross_entropy(x, torch.zeros(2)), ValueError,
         "cross_entropy: targets must be an integer tensor of shape (2,)"),
        (lambda: G.transpose(x[0]), ValueError, "transpose: x must be 2-D; got shape (8,)"),
        (lambda: G.gelu(x, torch.ones(2), 0.0), ValueError,
         "gelu: a must be a number or a one-element numeric tensor; got torch.float32 of "
         "shape (2,)"),
        (lambda: G.gelu(x, 1.0, "0"), TypeError,
         "gelu: b must be a number or a one-element tensor; got str"),
        (lambda: G.make_softmax((5,), torch.float32, device="cpu"), ValueError,
         "softmax: shape must be (rows, row length); got (5,)"),
        (lambda: G.bytes_moved("conv", (2, 2), torch.float32), ValueError,
         "bytes_moved: unknown case 'conv'; expected one of"),
        (lambda: G.tuned_configs("conv"), ValueError, "tuned_configs: unknown case 'conv'"),
    ]


def test_error_messages(G):
    for i, (call, exc, text) in enumerate(_errors(G)):
        with pytest.raises(exc, match=re.escape(text)):
            call()


# ---------------------------------------------------------------- sm_90 compilation (no GPU)

def _compile(fn, ty, consts, num_warps, scalars=()):
    """Compile `fn` for sm_90 with pointers of element type `ty` (16-byte aligned, as torch
    allocations are), `consts`, and the `scalars` as float32 values; returns (ptx, registers,
    stack bytes)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    special = {"T": "*i64", "L": "*fp32", "eps": "fp32", "M": "i32", "N": "i32", "n": "i32",
               **{name: "fp32" for name in scalars}}
    sig = {p.name: ("constexpr" if p.is_constexpr else special.get(p.name, "*" + ty))
           for p in fn.params}
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(fn.params)
             if not p.is_constexpr and sig[p.name] != "fp32"}
    k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps})
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    regs, stack = re.search(r"REG:(\d+) STACK:(\d+)", usage).groups()
    return k.asm["ptx"], int(regs), int(stack)


def _v4(op, ptx):
    """How many 16-byte global loads ("ld") or stores ("st") the PTX has."""
    return len(re.findall(rf"{op}\.global\S*\.v4\.b32", ptx))


_KERNELS = {"softmax": "_softmax_kernel", "layernorm": "_layernorm_kernel",
            "rmsnorm": "_rmsnorm_kernel", "add_layernorm": "_add_layernorm_kernel",
            "cross_entropy": "_cross_entropy_kernel", "rowsum": "_rowsum_kernel"}
_ISSUE_ROWS = [(c, D, ty) for c in ("softmax", "layernorm", "rmsnorm", "rowsum")
               for D in (4096, 32768) for ty in ("fp32", "bf16")] + [
    ("add_layernorm", 8192, "bf16"), ("add_layernorm", 32768, "fp32"),
    ("cross_entropy", 128256, "bf16")]


@pytest.mark.parametrize("case,D,ty", _ISSUE_ROWS, ids=str)
def test_every_candidate_compiles_for_sm90_without_spilling(G, case, D, ty):
    fn = getattr(G, _KERNELS[case])
    for cfg in G.row_configs(D, 4 if ty == "fp32" else 2):
        ptx, regs, stack = _compile(fn, ty, {"D": D, "CHUNK": cfg["CHUNK"]}, cfg["num_warps"])
        assert stack == 0, f"{case} D={D} {ty} {cfg}: {regs} registers, {stack} bytes of stack"
        assert _v4("ld", ptx), f"{case} D={D} {ty} {cfg}: no 16-byte loads"


@pytest.mark.parametrize("ty", ["fp32", "bf16"])
def test_register_path_uses_16_byte_accesses(G, ty):
    """Softmax at D=4096, 8 warps: each thread's 16 elements are 16-byte loads and stores
    (4 of 4 fp32 or 2 of 8 bf16), not scalar ones; the unaligned D=4099 cannot be."""
    per = 4 if ty == "fp32" else 2
    ptx, _, _ = _compile(G._softmax_kernel, ty, {"D": 4096, "CHUNK": 4096}, 8)
    assert _v4("ld", ptx) == _v4("st", ptx) == per
    ptx, _, _ = _compile(G._softmax_kernel, ty, {"D": 4099, "CHUNK": 8192}, 8)
    assert _v4("ld", ptx) == _v4("st", ptx) == 0


def test_transpose_and_gelu_compile_with_16_byte_accesses(G):
    for cfg in G.transpose_configs(4):
        ptx, _, stack = _compile(G._transpose_kernel, "fp32", {"BM": cfg["BM"], "BN": cfg["BN"]},
                                 cfg["num_warps"])
        assert stack == 0 and _v4("ld", ptx) and _v4("st", ptx), cfg
    for ptr in (True, False):
        ptx, _, stack = _compile(G._gelu_kernel, "bf16",
                                 {"A_PTR": ptr, "B_PTR": ptr, "BLOCK": 4096}, 8,
                                 scalars=() if ptr else ("A", "B"))
        assert stack == 0 and _v4("ld", ptx) and _v4("st", ptx)


# ---------------------------------------------------------------- GPU

GPU_DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(33, 4099), (8, 20000), (64, 4096)], ids=str)
@pytest.mark.parametrize("case", ROW_CASES)
def test_gpu_autotuned(G, case, shape, dtype):
    """The autotuned kernel (whichever configuration wins on this GPU) at awkward sizes."""
    torch.manual_seed(3)
    fn, make, _ = G.CASES[case]
    args = make(shape, dtype)
    check_case(G, case, args, fn(*args), interpreted=False)
    torch.cuda.synchronize()
    chosen = list(G.tuned_configs(case).values())
    assert chosen and all(c["num_warps"] in G.ROW_WARPS for c in chosen)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", ROW_CASES)
def test_gpu_every_candidate(G, case, dtype):
    """Each configuration autotuning may pick is correct (the winner changes with the shape and
    the machine): rows of 20000 (register path and chunk loops, a partial last chunk) and, for
    cross-entropy, the 128256 of the issue (loops only)."""
    torch.manual_seed(4)
    fn, make, _ = G.CASES[case]
    D = 128256 if case == "cross_entropy" else 20000
    args = make((5, D), dtype)
    for cfg in G.row_configs(D, args[0].element_size()):
        check_case(G, case, args, fn(*args, config=cfg), interpreted=False)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16"])
def test_gpu_cross_entropy_issue_vocabulary(G, dtype):
    torch.manual_seed(5)
    logits, t = G.make_cross_entropy((64, 128256), dtype)
    check_case(G, "cross_entropy", (logits, t), G.cross_entropy(logits, t), interpreted=False)
    bad = torch.tensor([-1, 128256], device="cuda")
    assert torch.isnan(G.cross_entropy(logits[:2], bad)).all()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(1000, 4099), (512, 2048), (7, 1)], ids=str)
def test_gpu_transpose(G, shape, dtype):
    """The autotuned transpose at each shape; every candidate tile at the awkward one."""
    x = G.make_transpose(shape, dtype)[0]
    assert torch.equal(G.transpose(x).double(), G.transpose_ref(x))
    if shape == (1000, 4099):
        for cfg in G.transpose_configs(x.element_size()):
            assert torch.equal(G.transpose(x, config=cfg).double(), G.transpose_ref(x)), cfg


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", [100003, 1 << 20])
def test_gpu_gelu(G, n, dtype):
    torch.manual_seed(6)
    x, a, b = G.make_gelu((n,), dtype)
    check(G.gelu(x, a, b), G.gelu_ref(x, a, b), dtype, interpreted=False)
    check(G.gelu(x, 0.75, -0.25), G.gelu_ref(x, 0.75, -0.25), dtype, interpreted=False)
    for cfg in G.gelu_configs(x.element_size()):
        check(G.gelu(x, a, b, config=cfg), G.gelu_ref(x, a, b), dtype, interpreted=False)

