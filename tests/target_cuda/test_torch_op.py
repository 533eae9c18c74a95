"""tcomp kernels as torch custom ops, on the CPU: registration, the fake (meta)
implementation with concrete and symbolic shapes, and torch.compile(fullgraph=
True) tracing with no graph break. Skipped where torch is not installed."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import tcomp
from tcomp.target_cuda.torch_op import schema_of, sym_size

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tests.target_cuda.test_index_width import tiled_matmul  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADDMIN = "def addmin(float(N) A, float(M) B) -> (O) { O(i) = A(i) + B(i) }"
TWO = """def two(bfloat16(N, D) X) -> (S, bfloat16(N, D) T) {
  S(n) +=! float(X(n, d))
  T(n, d) = X(n, d) * 2.0
}"""


def build(src_or_schedule, sizes=None):
    s = src_or_schedule
    if isinstance(s, str):
        s = tcomp.Schedule(tcomp.op(s))
    return tcomp.build(s, target="cuda", sizes=sizes)


# ------------------------------------------------------------------ registration
def test_name_schema_and_idempotent_registration():
    k = build(tiled_matmul())
    op = k.torch_op()
    name = op._qualname if hasattr(op, "_qualname") else op._name
    assert re.fullmatch(r"tcomp::matmul_[0-9a-f]{12}", name), name
    assert schema_of(k.meta) == "(Tensor A, Tensor B) -> Tensor"
    assert k.torch_op() is op  # the same kernel: the same operator
    short = name.split("::")[1]
    assert getattr(torch.ops.tcomp, short).default is not None
    # another schedule of the same def: another kernel, another name
    other = build(tiled_matmul(t=4)).torch_op()
    assert other is not op


def test_explicit_names():
    k = build(ADDMIN)
    op = k.torch_op(name="tcomp_test_addmin")
    assert k.torch_op(name="tcomp_test_addmin") is op
    with pytest.raises(tcomp.CudaError, match="torch_op: 'tcomp::tcomp_test_addmin' is already "
                                              "registered for another kernel; choose another name"):
        build(tiled_matmul()).torch_op(name="tcomp_test_addmin")
    with pytest.raises(tcomp.CudaError, match="torch_op: name must be a Python identifier, got "
                                              "'bad name'"):
        k.torch_op(name="bad name")


def test_multi_output_schema():
    k = build(TWO)
    assert schema_of(k.meta) == "(Tensor X) -> (Tensor, Tensor)"


# ------------------------------------------------------------------ fake implementation
def test_fake_shapes_and_dtypes():
    op = build(TWO).torch_op()
    with FakeTensorMode():
        x = torch.empty(6, 10, dtype=torch.bfloat16)
        s, t = op(x)
    assert s.shape == (6,) and s.dtype == torch.float32
    assert t.shape == (6, 10) and t.dtype == torch.bfloat16


def test_fake_errors_are_the_signature_errors_of_every_target():
    op = build(tiled_matmul(), sizes={"K": 24}).torch_op()
    with FakeTensorMode():
        a, b = torch.empty(5, 24), torch.empty(24, 3)
        assert op(a, b).shape == (5, 3)
        with pytest.raises(tcomp.LoweringError, match=r"'matmul' was compiled for K=24, but the "
                                                      r"inputs have K=25"):
            op(torch.empty(5, 25), torch.empty(25, 3))
        with pytest.raises(tcomp.LangError, match=r"input 'B' must have 2 dimension\(s\), got 1 "
                                                  r"\(shape \(24,\)\)"):
            op(a, torch.empty(24))
        with pytest.raises(tcomp.LangError, match=r"input 'A' is float32, but the array passed "
                                                  r"for it is float64; convert it explicitly"):
            op(a.double(), b)


def test_fake_errors_under_symbolic_shapes():
    op = build(ADDMIN).torch_op()
    with pytest.raises(tcomp.LangError, match=r"input 'A' is float32, but the array passed for "
                                              r"it is float64; convert it explicitly \(NumPy: "
                                              r"\.astype\(\), torch: \.to\(\)\), tcomp never "
                                              r"casts arrays"):
        make_fx(lambda a, b: op(a, b), tracing_mode="symbolic")(torch.empty(5).double(),
                                                                torch.empty(7))
    with pytest.raises(tcomp.LangError, match=r"input 'B' must have 1 dimension\(s\), got 2"):
        make_fx(lambda a, b: op(a, b), tracing_mode="symbolic")(torch.empty(5),
                                                                torch.empty(7, 2))


def test_backward_through_the_op_is_an_error():
    s = tiled_matmul()
    mm = tcomp.target_cuda.torch_op.torch_op(CpuKernel(build(s), s.op))
    a = torch.randn(4, 5, requires_grad=True)
    out = mm(a, torch.randn(5, 3))
    assert out.shape == (4, 3) and out.requires_grad
    with pytest.raises(tcomp.CudaError, match=r"torch_op: 'tcomp::matmul_[0-9a-f]{12}' has no "
                                              r"gradient formula: tcomp kernels run forward "
                                              r"only"):
        out.sum().backward()
    with torch.no_grad():  # no autograd at all: the plain call
        assert not mm(a, torch.randn(5, 3)).requires_grad


def test_fake_shapes_are_symbolic_under_dynamic_tracing():
    op = build(ADDMIN).torch_op()
    g = make_fx(lambda a, b: op(a, b), tracing_mode="symbolic")(torch.empty(5), torch.empty(7))
    (call,) = [n for n in g.graph.nodes if n.op == "call_function"]
    a, b = [n.meta["val"].shape[0] for n in g.graph.nodes if n.op == "placeholder"]
    (out,) = call.meta["val"].shape
    assert str(out) == str(torch.sym_min(b, a))  # min(N, M) without a guard on which is smaller
    assert len(g.shape_env.guards) == 0


def test_sym_size_on_ints():
    assert sym_size(["min", "N", ["-", ["+", "M", 1], 2]], {"N": 9, "M": 4}) == 3
    assert sym_size(["%", ["/", "N", 2], 3], {"N": 17}) == 2


# ------------------------------------------------------------------ torch.compile
def test_compile_fullgraph_has_no_graph_break():
    op = build(tiled_matmul()).torch_op()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)

        def run(*args):  # no GPU here: return zeros of the traced output shape
            return (torch.zeros(args[0] if isinstance(args[0], int) else 1),)
        return run

    def f(a, b):
        return torch.relu(op(a * 2, b)) + 1

    cf = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    cf(torch.randn(5, 7), torch.randn(7, 3))
    cf(torch.randn(9, 4), torch.randn(4, 6))  # other sizes: the same graph (dynamic)
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any(t.startswith("tcomp.matmul_") for t in targets), targets
    assert any("relu" in t for t in targets)
    (call,) = [n for n in graphs[0].graph.nodes if str(n.target).startswith("tcomp.")]
    m, n = call.meta["example_value"].shape
    assert isinstance(m, torch.SymInt) and isinstance(n, torch.SymInt)


def test_loaded_kernel_registers_from_metadata(tmp_path):
    path = str(tmp_path / "mm.cubin")
    build(tiled_matmul(), sizes={"K": 8}).export(path)
    k2 = tcomp.load(path)
    op = k2.torch_op()
    with FakeTensorMode():
        assert op(torch.empty(3, 8), torch.empty(8, 11)).shape == (3, 11)


def test_torch_is_imported_lazily():
    code = ("import sys, tcomp, tcomp.target_cuda.torch_op, tcomp.target_cuda.kernel; "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr


# ------------------------------------------------------------------ end to end on the CPU
class CpuKernel:
    """A stand-in for a CUDA kernel that runs on the CPU (the NumPy oracle): the
    operator only needs `meta`, `cubin` and a call, so torch's own checks and an
    executing torch.compile backend can run here."""

    def __init__(self, k, op):
        self.meta, self.cubin, self.op = k.meta, k.cubin + b"cpu", op
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        assert all(a.is_contiguous() for a in args)
        out = tcomp.evaluate(self.op, *[a.numpy() for a in args])
        return torch.from_numpy(out)


def test_opcheck_and_compiled_execution():
    s = tiled_matmul()
    stub = CpuKernel(build(s), s.op)
    mm = tcomp.target_cuda.torch_op.torch_op(stub)
    a, b = torch.randn(12, 5), torch.randn(5, 7)
    torch.library.opcheck(mm, (a, b), test_utils=("test_schema", "test_faketensor",
                                                  "test_aot_dispatch_dynamic"))
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")

    def f(x, b):
        return torch.relu(mm(x.t() * 2, b)) + 1  # a non-contiguous view goes in

    cf = torch.compile(f, backend=cnt, fullgraph=True, dynamic=True)
    for m, kk, n in ((45, 31, 27), (64, 16, 40), (33, 7, 9)):
        x, b = torch.randn(kk, m), torch.randn(kk, n)
        want = torch.relu((x.t() * 2).double() @ b.double()).float() + 1
        torch.testing.assert_close(cf(x, b), want, rtol=1e-4, atol=1e-4)
    assert cnt.frame_count == 1
