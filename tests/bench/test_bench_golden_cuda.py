"""The CUDA C++ of the benchmark kernels: a few reviewed golden files, and the
properties every kernel is timed for, asserted by structure.

Golden files. tests/bench/golden/<case>.cu holds `k.source` of the cases in
REVIEWED only (one per kind of kernel: elementwise, row op, GEMM), built as
bench/suite.py builds them: the schedule of bench/schedules.py with the suite's
parameters, full sizes, every size bound, compiled by NVRTC for sm_90a (the
H200's arch, pinned so the files do not depend on the machine). An intended
codegen change rewrites just these few files: run
`pytest tests/bench --update-golden`, then review the diff with the notes of
REVIEWED in hand.

Every other case of the suite is checked by structure (what must and must not
appear in its source and PTX, below) and by value: each suite case runs on the
sim at small sizes with its own schedule parameters
(test_bench_schedules_sim.py::test_suite_case_on_sim), and the generated CUDA
of some runs on the g++ CUDA emulator (test_bench_emulated_cuda.py). The
structural checks: float4 accesses (gelu, the row fetch of softmax/layernorm,
the GEMM's tiles, fragments and C stores), warp-shuffle all-reduces, the
reciprocal of `rcp`, dynamic shared memory for the 128 KiB rows, the k-major
and padded GEMM tiles, the pipeline's prefetch registers, the rasterized block
index, the 33-float transpose stride, no local memory, `__launch_bounds__`,
grids and blocks.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

import tcomp

from .common import BENCH, S, SUITE_CASES, SUITE_IDS

GOLDEN = Path(__file__).parent / "golden"
ARCH = "sm_90a"
BY_SLUG = {c.slug: c for c in SUITE_CASES}

# The cases kept as golden files, and what a reviewer of a diff to each should
# look for. Everything else is asserted by the structural tests below.
REVIEWED = {
    "gelu_2p28": (
        "elementwise: one float4 load of X and one float4 store of O per thread and trip, "
        "no scalar access and no bounds check (N is a multiple of 1024), erff not expf, "
        "__launch_bounds__(256), no shared memory"),
    "softmax_32768x4096_256t_smem_vec4_rcp": (
        "row op: the row fetched once into X_shared[4096] with unrolled float4 loads; "
        "two all-reduces (max, then sum), each a 5-step __shfl_xor_sync butterfly, one "
        "partial per warp in shared memory, a second butterfly over the 8 partials; "
        "mx/sm/rs in registers; one reciprocal `1.0f / sm[0]` per row, the output pass a "
        "multiply, reading X_shared and writing O as float4; the barriers between passes"),
    "gemm_4096_frag_warp_pad_pipe": (
        "GEMM, the best variant: 256 threads in 4 x 8-lane warps; A tile k-major and padded "
        "(A_shared[2 * 8 * 132]), B_shared[2 * 1024], double-buffered; tile 0 stored before "
        "the k_o loop, the next tile prefetched into A/B_shared_prefetch[4] as one float4 "
        "each under `if (k_o + 1 < 512)`; 8 x 8 fma from A/B_shared_local[8] fragments, "
        "each loaded as 2 float4 per k; one barrier per K step; C stored as 16 float4; "
        "all register arrays indexed by constants (no local memory)"),
}


@functools.lru_cache(maxsize=None)
def kernel(slug: str):
    c = BY_SLUG[slug]
    op, s = c.schedule()
    return tcomp.build(s, target=f"cuda:{ARCH}", sizes=c.sizes)


def body(src: str) -> str:
    """The kernel function (without the helper templates in front of it)."""
    i = src.index('extern "C" __global__')
    return src[i:]


def slugs(kind: str, **kw):
    return [c.slug for c in SUITE_CASES
            if c.kind == kind and all(c.kwargs.get(k) == v for k, v in kw.items())]


# ------------------------------------------------------------------ the suite's cases
def suite_calls():
    """The calls in bench/suite.py:main()'s `cases` list, evaluated with q=False."""
    tree = ast.parse((BENCH / "suite.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    lst = next(n.value for n in ast.walk(main) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "cases" for t in n.targets))
    calls = []
    for lam in lst.elts:
        assert isinstance(lam, ast.Lambda)
        body_ = lam.body.elts if isinstance(lam.body, ast.Tuple) else [lam.body]
        for call in body_:
            args = [eval(compile(ast.Expression(a), "suite.py", "eval"), {"q": False})
                    for a in call.args]
            calls.append((call.func.id, *args))
    return calls


def test_suite_cases_in_sync():
    """tests/bench/common.py:SUITE_CASES lists exactly the suite's cases."""
    assert [c.call for c in SUITE_CASES] == suite_calls()


# ------------------------------------------------------------------ golden files
def test_reviewed_cases_exist():
    assert set(REVIEWED) <= set(SUITE_IDS)


@pytest.mark.parametrize("slug", sorted(REVIEWED))
def test_golden_source(slug, request):
    src = kernel(slug).source
    path = GOLDEN / f"{slug}.cu"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        if not path.exists() or path.read_text() != src:
            path.write_text(src)
    else:
        assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
        assert src == path.read_text(), (
            f"CUDA source of '{slug}' differs from {path} (rerun with --update-golden if the "
            f"change is intended, and review the diff: {REVIEWED[slug]})")


def test_no_stale_golden_files():
    """Only the reviewed cases have golden files (the others are checked by structure)."""
    assert sorted(p.stem for p in GOLDEN.glob("*.cu")) == sorted(REVIEWED)


@pytest.mark.parametrize("slug", SUITE_IDS)
def test_no_local_memory(slug):
    """Every per-thread array (register tiles, fragments, prefetch registers,
    row statistics) stays in registers: NVRTC's PTX declares and accesses no
    local memory. (The source alone cannot tell: frag+scalar indexes C_local by
    a constant-trip loop variable, which NVRTC unrolls.)"""
    k = kernel(slug)
    assert re.search(r"^  float \w+\[\d+\];$", body(k.source), re.M) or "gelu" in slug \
        or "transpose" in slug, "expected per-thread arrays"
    for s in (".local", "ld.local", "st.local", "__local_depot"):
        assert s not in k.ptx, f"{slug}: local memory in the PTX ({s})"


@pytest.mark.parametrize("slug", SUITE_IDS)
def test_launch_geometry(slug):
    """__launch_bounds__ equals the block size; the grid covers the sizes exactly
    (every benchmark size divides its tiles); sm_90a cubin."""
    c, k = BY_SLUG[slug], kernel(slug)
    (kd,) = k.meta["kernels"]
    block = kd["block"]
    nthreads = block[0] * block[1] * block[2]
    assert re.findall(r"__launch_bounds__\((\d+)\)", k.source) == [str(nthreads)]
    sz = c.sizes
    if c.kind == "gemm":
        blocks = (sz["N"] // 128, sz["M"] // 128)
        assert block == ([256, 1, 1] if c.kwargs.get("lanes") else [16, 16, 1])
        # rasterized grids number the blocks on one axis (the group divides the rows)
        assert kd["grid"] == ([blocks[0] * blocks[1], 1, 1] if c.kwargs.get("group") else
                              [*blocks, 1])
    elif c.kind == "transpose":
        assert block == [32, 8, 1] and kd["grid"] == [sz["M"] // 32, sz["N"] // 32, 1]
    elif c.kind == "gelu":
        assert block == [256, 1, 1] and kd["grid"] == [sz["N"] // 1024, 1, 1]
    else:  # one block per row
        assert block == [c.kwargs["threads"], 1, 1] and kd["grid"] == [sz["N"], 1, 1]
    assert kd["params"] == [{"buffer": t.name} for t in k_op(c).inputs + k_op(c).outputs], \
        "all sizes are bound: buffers only, no size parameters"
    assert k.meta["arch"] == ARCH and k.cubin[:4] == b"\x7fELF"
    # benchmark sizes divide every tile: no bounds checks anywhere (the pipelined GEMMs:
    # see test_gemm_pipeline_no_redundant_guards)
    if not c.kwargs.get("pipeline"):
        assert "if (" not in body(k.source).replace("if ((threadIdx.x & 31) == 0)", "")


def k_op(c):
    return c.schedule()[0]


# ------------------------------------------------------------------ gelu
def test_gelu_float4():
    k = kernel("gelu_2p28")
    src = body(k.source)
    assert "*reinterpret_cast<float4*>(tc_vec4_0) = *reinterpret_cast<const float4*>(&X[" in src
    assert re.search(r"\*reinterpret_cast<float4\*>\(&O\[i_o_o \* 1024 \+ i_o_i \* 4\]\) = ", src)
    assert "X[" not in src.replace("&X[", "")  # no scalar loads of X
    assert "erff(" in src and "expf(" not in src
    assert k.meta["kernels"][0]["aligned_buffers"] == ["O", "X"]
    assert k.meta["kernels"][0]["dynamic_smem"] == 0 and "__shared__" not in src


# ------------------------------------------------------------------ transpose
def test_transpose_padded_tile():
    k = kernel("transpose_8192x8192")
    src = body(k.source)
    # storage_align(a0, 32, 1): 32 rows of 33 floats
    assert "__shared__ __align__(16) float A_shared[1056];" in src
    # written by rows (threadIdx.x along A's contiguous axis, stride 33 between the 8 rows
    # of threadIdx.y) ...
    assert "A_shared[ax0_o * 264 + ax0_i * 33 + ax1] = A[i_o * 262144 + ax0_o * 65536 + " \
           "ax0_i * 8192 + j_o * 32 + ax1];" in src
    # ... read by columns: threadIdx.x (i_i) steps 33 floats = one bank apart, and O is
    # written along its contiguous axis
    assert "O[j_o * 262144 + j_i_o * 65536 + j_i_i * 8192 + i_o * 32 + i_i] = " \
           "A_shared[i_i * 33 + j_i_o * 8 + j_i_i];" in src
    assert src.count("__syncthreads()") == 1
    assert k.meta["kernels"][0]["dynamic_smem"] == 0


# ------------------------------------------------------------------ reductions
def shuffle_reductions(src):
    """(op, warps) of each block-wide reduction: the warp-level __shfl_xor_sync
    butterfly, then one partial per warp through shared memory, reduced by a
    second butterfly in every warp."""
    out = []
    for m in re.finditer(r"float (tc_red\d+) = \w+\[0\];\n\s*for \(int tc_off = 16; tc_off > 0; "
                         r"tc_off >>= 1\) \{\n\s*\1 = (.*)__shfl_xor_sync\(0xffffffffu, \1, "
                         r"tc_off\)", src):
        name, expr = m.group(1), m.group(2)
        op = "max" if expr.startswith("fmaxf") else "sum" if expr.endswith("+ ") else expr
        w = re.search(rf"__shared__ float {name}_part\[(\d+)\];", src)
        if w:
            # the per-warp partials: lane i reads warp i's, a second butterfly over them
            warps = int(w.group(1))
            assert re.search(rf"{name} = {name}_part\[\(threadIdx\.x & "
                             rf"{warps - 1}\)\];\n\s*for \(int tc_off = {warps // 2}; tc_off > 0; "
                             rf"tc_off >>= 1\) \{{\n\s*{name} = .*__shfl_xor_sync", src), name
        out.append((op, int(w.group(1)) if w else 1))
    return out


@pytest.mark.parametrize("slug", slugs("rowsum"))
def test_rowsum_shuffle_reduction(slug):
    c, src = BY_SLUG[slug], body(kernel(slug).source)
    threads = c.kwargs["threads"]
    assert shuffle_reductions(src) == [("sum", threads // 32)]
    assert src.count("__shfl_xor_sync") == 2 and "atomic" not in src
    # unroll=8: eight coalesced loads per trip, the rows' stride apart
    d = c.sizes["D"]
    assert src.count(f"X[n * {d} + d_o_o * {threads * 8} + d_i") == 8
    assert f"for (int d_o_o = 0; d_o_o < {d // (threads * 8)}; ++d_o_o)" in src


ROW_SLUGS = slugs("softmax") + slugs("layernorm")


@pytest.mark.parametrize("slug", ROW_SLUGS)
def test_row_op_kernel(slug):
    c, k = BY_SLUG[slug], kernel(slug)
    src, (kd,) = body(k.source), k.meta["kernels"]
    threads, shared, d = c.kwargs["threads"], c.kwargs["shared_row"], c.sizes["D"]
    temps = ("mx", "sm") if c.kind == "softmax" else ("mean", "var")
    reds = ["max", "sum"] if c.kind == "softmax" else ["sum", "sum"]
    # both statistics: shuffle butterflies, then a partial per warp
    assert shuffle_reductions(src) == [(r, threads // 32) for r in reds]
    if c.kwargs.get("rcp"):
        # one reciprocal per row, in a register; the row multiplied by it
        assert "  float rs[1];" in src and "rs[0] = 1.0f / sm[0];" in src
        assert re.search(r"\) \* rs\[0\]", src) and src.count("/ sm[0]") == 1
    # in registers (local_temps), not in global temporaries
    for t in temps:
        assert f"  float {t}[1];" in src
    assert [p["buffer"] for p in kd["params"]] == [t.name for t in k_op(c).inputs] + \
        [k_op(c).outputs[0].name]
    loads = re.findall(r"reinterpret_cast<const float4\*>\(&X\[", src)
    vec = c.kwargs.get("vec", 1)
    out = k_op(c).outputs[0].name
    if shared:
        # the row is read once, with float4 loads, into shared memory (with `vec`,
        # the fetch loop unrolled: all of a thread's loads in flight together) ...
        chunks = d // (4 * threads)
        if vec > 1:
            assert len(loads) == chunks and "for (int ax1_o_o" not in src
        else:
            assert len(loads) == 1
            assert f"for (int ax1_o_o = 0; ax1_o_o < {chunks}; ++ax1_o_o)" in src
        assert re.search(r"\*reinterpret_cast<float4\*>\(&X_shared\[", src)
        # ... written out as float4s with `vec` (and read back from shared memory as
        # float4s in that pass)
        stores = re.findall(r"\*reinterpret_cast<float4\*>\(&%s\[" % out, src)
        assert len(stores) == (1 if vec > 1 else 0)
        # (layernorm's gamma and beta are read as float4s in that pass too)
        vec_bufs = [out, "X"] + (["beta", "gamma"] if c.kind == "layernorm" else [])
        assert kd["aligned_buffers"] == (sorted(vec_bufs) if vec > 1 else ["X"])
        # ... and every later pass reads the shared copy
        assert len(re.findall(r"[^&]X\[", src)) == 0
        if d * 4 > 48 * 1024:
            # 128 KiB: above the 48 KiB static limit, so dynamic shared memory
            assert "extern __shared__ __align__(16) unsigned char tc_smem[];" in src
            assert "float* X_shared = reinterpret_cast<float*>(tc_smem + 0);" in src
            assert kd["dynamic_smem"] == d * 4
        else:
            assert f"__shared__ __align__(16) float X_shared[{d}];" in src
            assert kd["dynamic_smem"] == 0
    else:
        # re-read through L2 by each pass (3 for softmax, 3 for layernorm), scalar, coalesced
        assert not loads and "X_shared" not in src and kd["dynamic_smem"] == 0
        assert len(re.findall(r"X\[n \* %d \+ \w+ \* %d \+ \w+\]" % (d, threads), src)) >= 3


# ------------------------------------------------------------------ gemm
@pytest.mark.parametrize("slug", slugs("gemm"))
def test_gemm_kernel(slug):
    c, k = BY_SLUG[slug], kernel(slug)
    src, (kd,) = body(k.source), k.meta["kernels"]
    n, kw = c.sizes["N"], c.kwargs
    frag, pipe, vector = kw["fragments"], kw.get("pipeline", False), kw.get("vector", True)
    pad = kw.get("pad", False)
    # A and B tiles of bk = 8 in shared memory (128 x 8 and 8 x 128), two of each when
    # pipelined; with vectors A is k-major (8 rows of 128, padded to 132 with `pad`)
    halves = 2 if pipe else 1
    a_tile = 8 * 132 if pad else 1024
    assert f"__shared__ __align__(16) float A_shared[{halves * a_tile}];" in src
    assert f"__shared__ __align__(16) float B_shared[{halves * 1024}];" in src
    assert kd["dynamic_smem"] == 0
    # the 8 x 8 register tile of each thread, fully unrolled
    assert "  float C_local[64];" in src and "C_local[63] = 0.0f;" in src
    assert f"for (int k_o = 0; k_o < {n // 8}; ++k_o) {{" in src
    loop = src[src.index("for (int k_o"):]
    if pipe:
        # tile 0 stored before the loop; in the loop: load k_o + 1 into registers, compute
        # from buffer k_o % 2, store the registers into buffer (k_o + 1) % 2, one barrier
        assert "  float A_shared_prefetch[4];" in src and "  float B_shared_prefetch[4];" in src
        assert src.count("__syncthreads()") == 2 and loop.count("__syncthreads()") == 1
        assert loop.count(f"if (k_o + 1 < {n // 8}) {{") == 2
        reads = re.findall(r"A_shared\[k_o % 2 \* (\d+) \+ ", loop)
        assert reads and set(reads) == {str(a_tile)}
    else:
        # a barrier before refilling the tiles and one before reading them
        assert src.count("__syncthreads()") == 2 and "_prefetch" not in src
    # bk x 64 multiply-adds per k_o, from register fragments or straight from shared memory
    fmas = re.findall(r"C_local\[(\d+)\] = C_local\[\1\] \+ (\w+)\[.*?\] \* (\w+)\[", src)
    assert len(fmas) == 8 * 64
    if frag:
        assert "  float A_shared_local[8];" in src and "  float B_shared_local[8];" in src
        assert {f[1:] for f in fmas} == {("A_shared_local", "B_shared_local")}
    else:
        assert "_shared_local" not in src
        assert {f[1:] for f in fmas} == {("A_shared", "B_shared")}
    vec_loads = lambda buf: len(re.findall(  # noqa: E731
        r"\*reinterpret_cast<const float4\*>\(&%s\[" % buf, loop))
    if vector:
        # per K step, each thread fetches one float4 of A and one of B from global memory
        # (the next step's when pipelined) ...
        assert vec_loads("A") == 1 and vec_loads("B") == 1
        # ... and, with fragments, loads its 8 values of A and of B per k as 2 float4 each
        assert vec_loads("A_shared") == vec_loads("B_shared") == (16 if frag else 0)
        # B goes to shared memory as one float4; A (transposed) as 4 scalars
        assert len(re.findall(r"\*reinterpret_cast<float4\*>\(&B_shared\[", src)) == (
            2 if pipe else 1)
        assert "reinterpret_cast<float4*>(&A_shared[" not in src
    else:
        vec = re.findall(r"reinterpret_cast<(?:const )?float4\*>\(&(\w+)\[", src)
        assert set(vec) == {"C"}
    # C written with float4 stores: 8 rows x 2 vectors per thread
    stores = re.findall(r"\*reinterpret_cast<float4\*>\(&C\[", src)
    assert len(stores) == 16
    assert kd["aligned_buffers"] == (["A", "B", "C"] if vector else ["C"])


@pytest.mark.parametrize("slug", slugs("gemm", pipeline=True))
def test_gemm_pipeline_no_redundant_guards(slug):
    """At the benchmark sizes the only bounds check a pipelined GEMM needs is the
    pipeline's own `if (k_o + 1 < K / 8)` around the prefetch and its store.
    Observed: each of the 8 prefetch loads and 8 shared stores in the hot loop
    also keeps `if (k_o * 8 + f % 8 + 8 < K)` (A) or `k_o * 8 + f / 128 + 8 < K`
    (B), implied by the enclosing condition (f % 8 <= 7, f / 128 <= 7) but not
    removed (scratch/bugs_lower.md, 'pipeline: redundant guards')."""
    c, src = BY_SLUG[slug], body(kernel(slug).source)
    conds = re.findall(r"if \((.*)\) \{", src)
    assert conds == [f"k_o + 1 < {c.sizes['K'] // 8}"] * 2, sorted(set(conds))


@pytest.mark.parametrize("slug", slugs("gemm", lanes=(4, 8), fragments=True))
def test_gemm_warp_lanes(slug):
    """With lanes=(4, 8) a warp is 4 x 8 threads of 8 x 8 outputs: the thread's
    rows start at (t / 128) * 64 + (t / 4 % 8) * 8 and its columns at
    (t / 32 % 4) * 32 + (t % 4) * 8, so the fragment loads of a warp read 8
    distinct float4 pairs of A and 4 of B per k."""
    src = body(kernel(slug).source)
    (t,) = re.findall(r"const int (\w+) = threadIdx\.x;", src[:src.index("for (int k_o")])[:1]
    assert re.search(r"&A_shared\[(k_o %% 2 \* \d+ \+ )?%s / 128 \* 64 \+ %s / 4 %% 8 \* 8\]"
                     % (t, t), src)
    assert re.search(r"&B_shared\[(k_o %% 2 \* \d+ \+ )?%s / 32 %% 4 \* 32 \+ %s %% 4 \* 8\]"
                     % (t, t), src)


@pytest.mark.parametrize("slug", slugs("gemm"))
def test_gemm_block_index(slug):
    """group=8: block b computes block row (b / (8 * NB)) * 8 + b % 8 and block
    column b / 8 % NB (NB = N / 128 column blocks): 8 consecutive blocks share
    a column of B, and a wave of blocks covers 8 block rows at a time. Without
    a group: blockIdx.y is the block row, blockIdx.x the block column."""
    c, src = BY_SLUG[slug], body(kernel(slug).source)
    n = c.sizes["N"]
    nb = n // 128
    (store,) = set(re.findall(r"&C\[([^\]]*)\]", src)[:1])
    terms = store.split(" + ")
    if c.kwargs.get("group"):
        assert c.kwargs["group"] == 8
        (b,) = re.findall(r"const int (\w+) = blockIdx\.x;", src)
        assert "blockIdx.y" not in src
        assert f"{b} / {8 * nb} * {8 * 128 * n}" in terms  # group of 8 block rows
        assert f"{b} % 8 * {128 * n}" in terms             # block row within the group
        assert f"{b} / 8 % {nb} * 128" in terms            # block column
    else:
        assert re.findall(r"const int (\w+) = blockIdx\.(\w);", src) == [("m_o", "y"),
                                                                            ("n_o", "x")]
        assert f"m_o * {128 * n}" in terms and "n_o * 128" in terms


# ------------------------------------------------------------------ vector accesses only where aligned
@pytest.mark.parametrize("kind,kw,sizes", [
    ("gelu", {}, {"N": (1 << 20) + 3}),
    ("gelu", {}, {}),
    ("softmax", {"threads": 512}, {"N": 7, "D": 4099}),
    ("layernorm", {"threads": 1024}, {"N": 7, "D": 32771}),
    ("gemm", {}, {"M": 1031, "N": 1021, "K": 1019}),
    ("gemm", {}, {}),
], ids=["gelu-prime", "gelu-unbound", "softmax-prime", "layernorm-prime", "gemm-prime",
        "gemm-unbound"])
def test_no_float4_where_misaligned(kind, kw, sizes):
    """At sizes that are not multiples of 4 (or unknown), rows and tails are not
    16-byte aligned: the global accesses fall back to scalars and the kernel asks
    for no aligned pointers; every access is guarded."""
    op, s = getattr(S, kind)({}, **kw)
    k = tcomp.build(s, target=f"cuda:{ARCH}", sizes=sizes)
    src = body(k.source)
    # (shared buffers have constant, aligned strides: their float4 accesses stay.
    # gemm-prime: the first of each thread's 8 rows of C starts at row m = 8 i, at
    # offset 8 i * 1021, a multiple of 4: those stores are aligned vectors, their row
    # guard moved outside the vector loop; the 7 rows after it stay scalar.)
    vec = re.findall(r"reinterpret_cast<(?:const )?float4\*>\(&(\w+)\[", src)
    aligned = ["C"] if kind == "gemm" and sizes else []
    assert all(b.endswith("_shared") or b in aligned for b in vec), sorted(set(vec))
    assert k.meta["kernels"][0]["aligned_buffers"] == aligned
    if aligned:
        assert len(re.findall(r"float4\*>\(&C\[", src)) == 2  # rows 0 of the 2 pieces
    assert "if (" in src
