"""64-bit indexing: which width a kernel gets, the widened Kernel IR and CUDA
(index arithmetic in `long long`, int32 data left alone), PTX for both widths,
and export/load of both variants. No GPU needed."""
from __future__ import annotations

import json
import os
import re

import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.pipeline import lower
from tcomp.lower.rewriter import walk_stmts
from tcomp.target_cuda.codegen import CodegenOptions, program_source
from tcomp.target_cuda.kernel import CudaKernel
from tcomp.target_cuda.index_width import LIMIT, index_bits_for, static_index_bits, widen
from tests.target_cuda.test_gpu_runtime import tiled_matmul as _tiled_matmul

ROWSUM = "def rowsum(bfloat16(N, D) X) -> (S) { S(n) +=! float(X(n, d)) }"
DATA = """def f(int32(N) B, float(M) A) -> (O, P, Q) {
  O(i) = A(B(i))
  P(i) = B(i) * 3 + i
  Q(i) = i < 5 ? float(i / 2) : A(i % M) where i in 0:N
}"""
MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
SCALE = "def scale(bfloat16(N, D) X) -> (bfloat16(N, D) O) { O(n, d) = X(n, d) * 2.0 + 1.0 }"


def rowsum_schedule(threads=256):
    op = tcomp.op(ROWSUM)
    s = tcomp.Schedule(op)
    S = s["S"]
    (n,) = S.axes
    (d,) = S.reduce_axes
    do, di = S.split(d, threads)
    S.reorder(n, di, do)
    S.bind(n, "blockIdx.x")
    S.bind(di, "threadIdx.x")
    return s


def data_schedule():
    s = tcomp.Schedule(tcomp.op(DATA))
    for t in ("O", "P", "Q"):
        st = s[t]
        (i,) = st.axes
        io, ii = st.split(i, 128)
        st.bind(io, "blockIdx.x")
        st.bind(ii, "threadIdx.x")
    return s


def tiled_matmul(t=8):
    return _tiled_matmul(tcomp.op(MM), t)


def scale_schedule():
    s = tcomp.Schedule(tcomp.op(SCALE))
    O = s["O"]
    n, d = O.axes
    do, di = O.split(d, 256)
    O.bind(n, "blockIdx.y")
    O.bind(do, "blockIdx.x")
    O.bind(di, "threadIdx.x")
    return s


# ------------------------------------------------------------------ selection
def test_index_bits_for_tensors_threads_and_sizes():
    small = {"X": (32768, 65535)}
    assert index_bits_for(small, [("k", (32768, 1, 1), (256, 1, 1))])[0] == 32
    assert index_bits_for({"X": (LIMIT - 1,)}, [])[0] == 32
    assert index_bits_for({"X": (32768, 131072)}, []) == (64, "'X' has 4294967296 elements")
    assert index_bits_for({"X": (LIMIT,)}, [])[0] == 64
    assert index_bits_for({}, [("k", (2 ** 23, 1, 1), (256, 1, 1))]) == (
        64, "kernel k launches 2147483648 threads")
    # an empty tensor with a huge size variable: the size itself does not fit an int
    assert index_bits_for({"X": (0, 3 * 2 ** 30)}, [], {"D": 3 * 2 ** 30}) == (
        64, "size D is 3221225472")


def test_fixed_sizes_choose_the_width_at_build():
    big = tcomp.build(rowsum_schedule(), target="cuda", sizes={"N": 32768, "D": 131072})
    assert big.index_bits == 64 and big.meta["index_bits"] == 64
    assert "long long" in big.source
    small = tcomp.build(rowsum_schedule(), target="cuda", sizes={"N": 32768, "D": 4096})
    assert small.index_bits == 32 and "long long" not in small.source
    symbolic = tcomp.build(rowsum_schedule(), target="cuda")
    assert symbolic.index_bits == 32 and list(symbolic._variants) == [32]


def test_static_index_bits_from_the_program():
    s = rowsum_schedule()
    assert static_index_bits(lower(s, {"N": 32768, "D": 131072})) == 64
    assert static_index_bits(lower(s, {"N": 32768, "D": 4096})) is None
    assert static_index_bits(lower(s, {"D": 131072})) is None  # N decides at call time
    # one fixed dimension large enough on its own
    assert static_index_bits(lower(s, {"D": LIMIT})) == 64


def test_codegen_options_are_checked():
    with pytest.raises(tcomp.CudaError, match="codegen: index_bits must be 32 or 64, got 16"):
        CodegenOptions(index_bits=16)
    assert CodegenOptions() == CodegenOptions(32) and hash(CodegenOptions(64))


# ------------------------------------------------------------------ widened IR
def _index_nodes(e):
    """Nodes an index expression computes with, down to (not into) casts and loads."""
    yield e
    if isinstance(e, (ir.Cast, ir.Load)):
        return
    for c in ir.expr_children(e):
        if isinstance(e, ir.Select) and c is e.cond:
            continue
        yield from _index_nodes(c)


def _check_widened(k: ir.Kernel):
    wk = widen(k)
    stores, loops = 0, 0
    for s in walk_stmts(wk.body):
        exprs = []
        if isinstance(s, ir.Store):
            stores += 1
            exprs = [s.value]
            for i in s.indices:
                assert i.dtype == tcomp.lang.dtypes.int64
                assert all(x.dtype == tcomp.lang.dtypes.int64 for x in _index_nodes(i)), i
        if isinstance(s, ir.For):
            loops += 1
            assert s.lo.dtype == s.extent.dtype == tcomp.lang.dtypes.int64
        if isinstance(s, ir.If):
            exprs = [s.cond]
        for e in exprs:
            for x in ir.walk_expr(e):
                if isinstance(x, ir.Load):
                    assert x.indices[0].dtype == tcomp.lang.dtypes.int64
                    assert all(y.dtype == tcomp.lang.dtypes.int64
                               for y in _index_nodes(x.indices[0])), x
    return wk


@pytest.mark.parametrize("schedule", [rowsum_schedule, data_schedule, tiled_matmul,
                                      scale_schedule])
def test_every_subscript_is_computed_in_64_bits(schedule):
    prog = lower(schedule())
    for k in prog.kernels:
        wk = _check_widened(k)
        # the values stored keep their types
        before = [s.value.dtype for s in walk_stmts(k.body) if isinstance(s, ir.Store)]
        after = [s.value.dtype for s in walk_stmts(wk.body) if isinstance(s, ir.Store)]
        assert before == after


def test_int32_data_stays_int32():
    src, _ = program_source(lower(data_schedule()), CodegenOptions(64))
    # int32 tensors stay `int`, sizes become `long long`
    assert ("f_P(const int* __restrict__ B, int* P, long long N)" in src)
    # the gathered int32 subscript is widened before use, the int32 value is not
    assert "O[i_o * 128LL + i_i] = A[((long long)(B[i_o * 128LL + i_i]))];" in src
    assert ("P[i_o * 128LL + i_i] = B[i_o * 128LL + i_i] * 3 + ((int)(i_o)) * 128 + "
            "((int)(i_i));") in src
    # a comparison on an index is done in 64 bits; the index as data is an int again
    assert "i_o * 128LL + i_i < 5LL ? ((float)(((int)(i_o)) * 64 + " in src


def test_no_32_bit_index_declarations_left():
    for schedule in (rowsum_schedule, data_schedule, tiled_matmul):
        src, _ = program_source(lower(schedule()), CodegenOptions(64))
        body = src.split("tc_floormod", 2)[-1]  # past the prelude's templates
        params = re.findall(r"__global__ void __launch_bounds__\(\d+\) \w+\(([^)]*)\)", body)
        assert params and all(re.search(r"\bint [A-Z]", p) is None for p in params)
        # loop variables and lets of indices: only the all-reduce's own lane
        # arithmetic (tc_off, tc_group) may stay int
        decls = re.findall(r"(?:for \(|const )int (\w+)", body)
        assert set(decls) <= {"tc_off", "tc_group"}, decls
        assert re.search(r"for \(long long \w+ = ", body) or "for" not in body


GOLDEN_SCALE_64 = """\
extern "C" __global__ void __launch_bounds__(256) scale_O(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* O, long long N, long long D) {
  const long long n = ((long long)blockIdx.y);
  const long long d_o = ((long long)blockIdx.x);
  const long long d_i = ((long long)threadIdx.x);
  if (d_o * 256LL + d_i < D) {
    O[n * D + d_o * 256LL + d_i] = __float2bfloat16_rn((float)(((float)(__bfloat162float(X[n * D + d_o * 256LL + d_i]))) * 2.0f + 1.0f));
  }
}
"""


def test_golden_elementwise_in_64_bit_mode():
    src, _ = program_source(lower(scale_schedule()), CodegenOptions(64))
    assert src.split("}\n", 2)[-1].lstrip("\n") == GOLDEN_SCALE_64
    src32, _ = program_source(lower(scale_schedule()))
    assert "long long" not in src32 and "O[n * D + d_o * 256 + d_i]" in src32


def test_lets_of_other_types_are_left_alone():
    k = ir.Kernel("k", ("O",), ("N",), (ir.Var("N"), ir.ONE, ir.ONE), (ir.ONE, ir.ONE, ir.ONE), ir.Let(
        "i", ir.Var("blockIdx.x"), ir.Let("x", ir.Cast(tcomp.lang.dtypes.float32, ir.Var("i")),
                                          ir.Store("O", (ir.Var("i"),), ir.Var(
                                              "x", tcomp.lang.dtypes.float32)))))
    wk = widen(k)
    let_i = wk.body
    let_x = let_i.body
    assert let_i.value == ir.Var("blockIdx.x", tcomp.lang.dtypes.int64)
    assert let_x.value == ir.Cast(tcomp.lang.dtypes.float32,
                                  ir.Cast(ir.int32, ir.Var("i", tcomp.lang.dtypes.int64)))
    assert let_x.body.value == ir.Var("x", tcomp.lang.dtypes.float32)


# ------------------------------------------------------------------ compile, export, load
def test_both_widths_compile_to_ptx():
    k = tcomp.build(tiled_matmul(), target="cuda")
    wide = k.variant(64)
    assert wide.cubin and wide.cubin != k.cubin
    params = re.findall(r"\.param \.(\w+) \w+_param_\d+", wide.ptx)
    assert params == ["u64"] * 6  # A, B, C and M, N, K all 64-bit
    params32 = re.findall(r"\.param \.(\w+) \w+_param_\d+", k.ptx)
    assert params32 == ["u64"] * 3 + ["u32"] * 3


def test_export_writes_both_widths_and_load_reads_them(tmp_path):
    k = tcomp.build(tiled_matmul(), target="cuda", sizes={"K": 24})
    path = str(tmp_path / "mm.cubin")
    k.export(path)
    meta = json.load(open(tmp_path / "mm.json"))
    assert meta["index_bits"] == 32
    assert meta["index64"]["cubin"] == "mm.i64.cubin"
    assert [kd["name"] for kd in meta["index64"]["kernels"]] == ["matmul_C"]
    assert (tmp_path / "mm.i64.cubin").read_bytes() == k.variant(64).cubin
    k2 = tcomp.load(path)
    assert k2.index_bits == 32 and sorted(k2._variants) == [32, 64]
    assert k2.variant(64).cubin == k.variant(64).cubin
    assert k2.variant(64).kernels == meta["index64"]["kernels"]

    # without the 64-bit file the sidecar's promise is broken: a clear error
    os.remove(tmp_path / "mm.i64.cubin")
    with pytest.raises(tcomp.TcompError, match=r"load: .*mm.json names the 64-bit variant "
                                               r"'mm.i64.cubin', which cannot be read"):
        tcomp.load(path)

    # a kernel without its 64-bit variant (one a tuning worker made from a cubin alone): a
    # call that needs 64 bits says what to do
    bare = CudaKernel(dict(k.meta), k.cubin)
    assert bare.index_bits == 32
    with pytest.raises(tcomp.CudaError, match="'matmul' needs 64-bit indexing for these sizes, "
                                              "but it was loaded from files without the 64-bit "
                                              "variant; export it again"):
        bare.variant(64)


def test_export_of_a_64_bit_kernel(tmp_path):
    k = tcomp.build(rowsum_schedule(), target="cuda", sizes={"N": 32768, "D": 131072})
    k.export(str(tmp_path / "rs.cubin"))
    meta = json.load(open(tmp_path / "rs.json"))
    assert meta["index_bits"] == 64 and "index64" not in meta
    assert not (tmp_path / "rs.i64.cubin").exists()
    k2 = tcomp.load(str(tmp_path / "rs.cubin"))
    assert k2.index_bits == 64 and list(k2._variants) == [64] and k2.cubin == k.cubin


def test_fixed_small_sizes_export_one_width(tmp_path):
    k = tcomp.build(rowsum_schedule(), target="cuda", sizes={"N": 64, "D": 512})
    k.export(str(tmp_path / "rs.cubin"))
    meta = json.load(open(tmp_path / "rs.json"))
    assert meta["index_bits"] == 32 and "index64" not in meta


# ------------------------------------------------------------------ every language program
def _lang_cases():
    from tests.lang.programs import CASES
    return {c.name: c for c in CASES}


@pytest.mark.parametrize("name", sorted(_lang_cases()))
def test_every_language_program_compiles_with_64_bit_indices(name):
    """All dtypes, builtins, gathers, ternaries, integer division: the widened
    CUDA is valid C++ (no int/long long overloads left ambiguous)."""
    for op in _lang_cases()[name].program():
        k = tcomp.build(tcomp.Schedule(op), target="cuda")
        wide = k.variant(64)
        assert wide.cubin and [kd["name"] for kd in wide.kernels] == [
            kd["name"] for kd in k.meta["kernels"]]
        for kern in lower(tcomp.Schedule(op)).kernels:
            _check_widened(kern)


def test_vector_accesses_survive_widening():
    from tests.target_cuda.test_codegen_vectors import tiled, vec_accesses
    k = tcomp.build(tiled(True, True), target="cuda", sizes={"M": 128, "N": 128, "K": 64})
    wide = k.variant(64)
    assert vec_accesses(wide.source) == vec_accesses(k.source) == (
        {"A": 1, "B": 1, "A_shared": 8, "B_shared": 8}, {"B_shared": 1})
    assert wide.kernels[0]["aligned_buffers"] == k.meta["kernels"][0]["aligned_buffers"] == [
        "A", "B"]
