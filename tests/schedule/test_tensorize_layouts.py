"""`tensorize(ax, "mma_m16n8k16")` on batched products and on operands in
either major order (NN, NT, TN, TT): the sim against the NumPy oracle at
small and awkward sizes (bfloat16 and float16 inputs, float32 accumulate),
the ldmatrix form each layout's fragments are loaded with, NVRTC compiles,
and (on a GPU) the CUDA kernels against torch."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp
from tcomp.schedule import templates

from ..bench.common import S as _S


def mm_src(layout: str, dtype: str = "bfloat16", batch: str = "") -> str:
    """C(m, n) += A(m, k) * B(k, n) with A given as (K, M) when layout[0] is
    'T' and B as (N, K) when layout[1] is 'T'; `batch` (e.g. "b") adds a
    leading batch dimension of extent NB to C, A and B."""
    ad, ai = ("K,M", "k, m") if layout[0] == "T" else ("M,K", "m, k")
    bd, bi = ("N,K", "n, k") if layout[1] == "T" else ("K,N", "k, n")
    bs, bv = ("NB,", f"{batch}, ") if batch else ("", "")
    return (f"def mm({dtype}({bs}{ad}) A, {dtype}({bs}{bd}) B) -> (C) "
            f"{{ C({bv}m, n) +=! A({bv}{ai}) * B({bv}{bi}) }}")


ATTENTION = ("def scores(float16(H,I,D) Q, float16(H,J,D) K) -> (S) "
             "{ S(h, i, j) +=! Q(h, i, d) * K(h, j, d) }")


def schedule(src, **kw):
    """bench/schedules.py's tc_gemm tiling (templates.tc_tiles) on any
    product of two inputs (its output the op's only output)."""
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    C = s[op.outputs[0].name]
    CF = s.cache_write(C, "fragment")
    a, b = (t.name for t in op.inputs)
    args = dict(bm=32, bn=32, wm=16, wn=16, bk=16, lanes=32, vector=True, pad=True,
                pipeline=False, unroll_k=False)
    args.update(kw)
    if args.get("swizzle"):
        args["pad"] = False
    templates.tc_tiles(s, C, CF, lambda: s.cache_read(a, "shared", [CF]),
                       lambda: s.cache_read(b, "shared", [CF]), **args)
    return op, s


def inputs(op, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(sizes[d.name] for d in t.shape)).astype(t.dtype.numpy)
            for t in op.inputs]


def check_sim(op, s, sizes):
    """The sim's result against evaluate: both round a float32 sum once to
    the output type, so they differ by at most an ulp of it plus what two
    float32 summation orders may differ by."""
    xs = inputs(op, sizes)
    got = tcomp.build(s, target="sim", sizes=sizes)(*xs).astype(np.float64)
    want = tcomp.evaluate(op, *xs).astype(np.float64)
    assert got.shape == want.shape
    ulp = 2.0 ** -7 if op.inputs[0].dtype.name == "bfloat16" else 2.0 ** -10
    k = sizes.get("K", sizes.get("D"))
    mag = tcomp.evaluate(op, *(np.abs(x) for x in xs)).astype(np.float64)
    assert (np.abs(got - want) <= np.abs(want) * ulp + 2 * k * 2.0 ** -24 * mag + 1e-6).all()


AWKWARD = {"M": 37, "N": 45, "K": 40}  # no tile divides M or N; K not a multiple of bk=16
LAYOUT_CASES = [  # (layout, schedule arguments): each layout with several schedule features
    ("NN", dict(pipeline=3)),
    ("NT", dict(pipeline=3, swizzle=True, pair_stores=True)),
    ("TN", dict(pipeline=4, swizzle=True, fragment_pipeline=2)),
    ("TT", dict(pipeline=2, wn=8, unroll_k=True)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout, kw", LAYOUT_CASES)
def test_sim_layouts_match_evaluate(layout, kw, dtype):
    op, s = schedule(mm_src(layout, dtype), **kw)
    check_sim(op, s, AWKWARD)


BATCHED_CASES = [  # (source, sizes, schedule arguments)
    (mm_src("NN", batch="b"), {"NB": 3, "M": 40, "N": 24, "K": 40}, dict(pipeline=3)),
    (mm_src("TT", "float16", batch="b"), {"NB": 2, "M": 37, "N": 45, "K": 24},
     dict(pipeline=3, swizzle=True, pair_stores=True, smem_epilogue=True)),
    (ATTENTION, {"H": 3, "I": 37, "J": 45, "D": 40},
     dict(pipeline=4, swizzle=True, fragment_pipeline=2)),
    # two batch axes, read in different orders by A and B; an operand shared by the batch
    ("def f(bfloat16(P,Q,M,K) A, bfloat16(Q,P,N,K) B) -> (C) "
     "{ C(p, q, m, n) +=! A(p, q, m, k) * B(q, p, n, k) }",
     {"P": 2, "Q": 2, "M": 32, "N": 16, "K": 32}, dict(wn=8)),
    ("def f(bfloat16(K,M) A, bfloat16(NB,K,N) B) -> (C) { C(b, m, n) +=! A(k, m) * B(b, k, n) }",
     {"NB": 2, "M": 32, "N": 40, "K": 48}, dict(pipeline=2)),
]


@pytest.mark.parametrize("src, sizes, kw", BATCHED_CASES)
def test_sim_batched_matches_evaluate(src, sizes, kw):
    op, s = schedule(src, **kw)
    check_sim(op, s, sizes)


def test_sim_bench_schedule_batched_tt():
    """bench/schedules.py's best tc_gemm arguments (128 x 128 blocks of four
    64 x 64 warps, K tiles of 64 in a swizzled cp.async ring of 3, paired
    stores) on a batched TT product whose sizes no tile divides: the
    schedule the cuda-marked tests below run on the GPU."""
    op, s = _S.tc_gemm(tcomp.op(mm_src("TT", batch="b")), **_S.TC_BEST)
    check_sim(op, s, {"NB": 2, "M": 136, "N": 130, "K": 72})


def test_batch_axes_are_blockidx_z():
    op, s = schedule(mm_src("NN", batch="b"))
    text = str(tcomp.lower(s, sizes={"NB": 5, "M": 64, "N": 64, "K": 32}))
    assert "grid=(2, 2, 5)" in text and "let b = blockIdx.z" in text
    # the fragments hold one product's tiles: the batch dimension (extent 1) is dropped
    assert "alloc fragment float32 C_fragment[8]" in text
    assert "alloc fragment bfloat16 A_shared_fragment[8]" in text


LDMATRIX = {  # layout -> (ldmatrix form of A, of B: two B tiles side by side, wn=16)
    "NN": ("ldmatrix_x4", "ldmatrix_x4_trans"),
    "NT": ("ldmatrix_x4", "ldmatrix_x4"),
    "TN": ("ldmatrix_x4_trans", "ldmatrix_x4_trans"),
    "TT": ("ldmatrix_x4_trans", "ldmatrix_x4"),
}


@pytest.mark.parametrize("layout", list(LDMATRIX))
def test_each_layout_loads_fragments_with_ldmatrix(layout):
    """A shared tile whose 8-element rows run along the fragment's rows (A
    stored (K, M), B stored (N, K)) is loaded with ldmatrix's other form:
    never element by element."""
    op, s = schedule(mm_src(layout))
    text = str(tcomp.lower(s, sizes={"M": 64, "N": 64, "K": 32}))
    fa, fb = LDMATRIX[layout]
    assert re.search(rf"\b{fa}\(&A_shared_fragment\[", text), text
    assert re.search(rf"\b{fb}\(&B_shared_fragment\[", text), text
    assert not re.search(r"_fragment\[\d+\] = (bfloat16\()?[AB]_shared\[", text)


def test_one_b_tile_per_warp_uses_x2():
    for layout, form in (("NN", "ldmatrix_x2_trans"), ("NT", "ldmatrix_x2")):
        op, s = schedule(mm_src(layout), wn=8)
        text = str(tcomp.lower(s, sizes={"M": 32, "N": 32, "K": 32}))
        assert re.search(rf"\b{form}\(&B_shared_fragment\[", text), (layout, text)


def test_transposed_operand_tile_rows_padded_by_its_own_width():
    """A(K, M) in shared memory is bk rows of bm (+ 8 padding) elements; B(N, K)
    bn rows of bk (+ 8)."""
    op, s = schedule(mm_src("TT"), bm=64, bn=32, wm=32, wn=16, bk=16)
    text = str(tcomp.lower(s, sizes={"M": 64, "N": 64, "K": 32}))
    assert "alloc shared bfloat16 A_shared[16, 72]" in text
    assert "alloc shared bfloat16 B_shared[32, 24]" in text


@pytest.mark.parametrize("src, wn, form", [
    (mm_src("NT"), 32, "x4"), (mm_src("NT", "float16"), 8, "x2"),  # B (N, K): plain ldmatrix
    (mm_src("TN", "float16"), 32, "x4.trans"), (mm_src("TT", batch="b"), 32, "x4.trans"),
    (ATTENTION, 32, "x4")])
def test_nvrtc_compiles(src, wn, form):
    names = {"NB": 4, "M": 256, "N": 128, "K": 64, "H": 4, "I": 128, "J": 128, "D": 64}
    op = tcomp.op(src)
    sizes = {v.name: names[v.name] for t in op.inputs for v in t.shape}
    op, s = schedule(src, bm=64, bn=64, wm=32, wn=wn, bk=32, pipeline=3, swizzle=True,
                     pair_stores=True)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    assert f"ldmatrix.sync.aligned.m8n8.{form}.shared.b16" in k.source
    assert "mma.sync.aligned.m16n8k16" in k.source
    assert len(k.cubin) > 0


# ------------------------------------------------------------------ GPU (torch)
GPU_LAYOUTS = [(layout, sizes) for layout in ("NN", "NT", "TN", "TT")
               for sizes in ({"M": 2048, "N": 2048, "K": 1024}, {"M": 1000, "N": 1032, "K": 520})]


def _torch_inputs(op, sizes, dtype):
    import torch
    return [torch.randn(*(sizes[d.name] for d in t.shape), device="cuda", dtype=dtype)
            for t in op.inputs]


def _check_torch(got, exact):
    err = ((got.double() - exact).abs() / (exact.abs() + 1)).max().item()
    assert err < 2e-2, err


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout, sizes", GPU_LAYOUTS)
def test_gpu_layouts_match_torch(layout, sizes, dtype):
    import torch
    op, s = _S.tc_gemm(tcomp.op(mm_src(layout, dtype)), **_S.TC_BEST)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    A, B = _torch_inputs(op, sizes, getattr(torch, dtype))
    a = A.t() if layout[0] == "T" else A
    b = B.t() if layout[1] == "T" else B
    _check_torch(k(A, B), a.double() @ b.double())


GPU_BATCHED = [
    (mm_src("NN", batch="b"), {"NB": 64, "M": 512, "N": 512, "K": 64}),
    (mm_src("NN", batch="b"), {"NB": 8, "M": 2048, "N": 2048, "K": 128}),
    (mm_src("NT", batch="b"), {"NB": 5, "M": 300, "N": 260, "K": 72}),
    (mm_src("TT", batch="b"), {"NB": 3, "M": 520, "N": 130, "K": 200}),
]


@pytest.mark.cuda
@pytest.mark.parametrize("src, sizes", GPU_BATCHED)
def test_gpu_batched_matches_torch(src, sizes):
    import torch
    op, s = _S.tc_gemm(tcomp.op(src), **_S.TC_BEST)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    A, B = _torch_inputs(op, sizes, torch.bfloat16)
    a = A.transpose(1, 2) if "(NB,K,M)" in src else A
    b = B.transpose(1, 2) if "(NB,N,K)" in src else B
    _check_torch(k(A, B), torch.bmm(a.double(), b.double()))


@pytest.mark.cuda
@pytest.mark.parametrize("sizes", [{"H": 32, "I": 1024, "J": 1024, "D": 128},
                                   {"H": 3, "I": 200, "J": 77, "D": 64}])
def test_gpu_attention_scores_match_torch(sizes):
    import torch
    op, s = _S.tc_gemm(tcomp.op(ATTENTION), **_S.TC_BEST)
    k = tcomp.build(s, target="cuda", sizes=sizes)
    Q, K = _torch_inputs(op, sizes, torch.float16)
    _check_torch(k(Q, K), torch.bmm(Q.double(), K.double().transpose(1, 2)))
