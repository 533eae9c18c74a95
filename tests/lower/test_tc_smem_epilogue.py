"""The epilogue through shared memory (tc_gemm smem_epilogue: a
`cache_write(C, "shared")` stage between the fragments and C), on the sim and
in the IR:

* it computes bit for bit what the kernel storing fragments straight to
  global memory computes (the same mma chain, the same rounding to the output
  type; only the way to memory differs), at sizes the tiles divide and at
  awkward ones (edge tiles: guarded stores, zero-filled operand tiles),
  bfloat16 and float16, cp.async rings of 3 and 4, the fused GELU, and
  matches `evaluate`;
* the IR: the staging tile in shared memory (bm x bn of the output type,
  rows padded by 16 bytes with `pad`, swizzled with `swizzle`), each warp's
  accumulators stored into it by their (lane, register) layout (bf16x2 pairs
  with pair_stores), a barrier, then the copy to C spread over all threads in
  16-byte vectors where the rows keep them aligned;
* the fragment stores and the 16-byte reads of the staging tile are free of
  bank conflicts when it is swizzled or padded (and conflicted when not);
* golden IR and CUDA of a small fused kernel.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.printer import expr as expr_text
from tcomp.lower.rewriter import walk_stmts

from ..bench.common import S
from .bank_conflicts import shared_accesses, wavefront_conflicts
from .util import check_golden, inputs_for

GOLDEN = Path(__file__).parent / "golden" / "tc_epilogue"
F16 = S.TC_GEMM.replace("bfloat16", "float16")
SMALL = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)
CASES = [  # (op text, sizes, schedule)
    (S.TC_GEMM, {"M": 128, "N": 128, "K": 64}, SMALL),
    (S.TC_GEMM, {"M": 128, "N": 128, "K": 64}, dict(SMALL, swizzle=True, pair_stores=True)),
    (S.TC_GEMM, {"M": 100, "N": 72, "K": 40}, dict(SMALL, pipeline=4, pair_stores=True)),
    (S.TC_GEMM, {"M": 100, "N": 61, "K": 40}, dict(SMALL, swizzle=True, pair_stores=True)),
    (S.TC_GEMM, {"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16,
                                                   pipeline=True, swizzle=True)),
    (F16, {"M": 70, "N": 96, "K": 48}, dict(SMALL, pipeline=4, swizzle=True)),
    (F16, {"M": 65, "N": 67, "K": 33}, dict(SMALL, pair_stores=True, fragment_pipeline=2)),
    (S.TC_GEMM_GELU, {"M": 70, "N": 72, "K": 40}, dict(SMALL, swizzle=True, pair_stores=True)),
    (S.TC_GEMM_GELU, {"M": 65, "N": 67, "K": 48}, dict(SMALL, pipeline=4)),
]


def _run(op, kw, sizes, args):
    return tcomp.build(S.tc_gemm(op, **kw)[1], target="sim", sizes=sizes)(*args)


@pytest.mark.parametrize("text, sizes, kw", CASES)
def test_staged_epilogue_computes_what_fragment_stores_do(text, sizes, kw):
    op = tcomp.op(text)
    args = inputs_for(op, sizes, seed=sizes["K"])
    got = _run(op, dict(kw, smem_epilogue=True), sizes, args)
    assert np.array_equal(got, _run(op, kw, sizes, args))
    want = tcomp.evaluate(op, *args).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_staged_conv_computes_what_fragment_stores_do():
    n, h, w, c, kf = 2, 5, 7, 16, 24
    sizes = {"N": n, "H": h, "W": w, "C": c, "K": kf, "R": 9 * c}
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, h, w, c)).astype(np.float16)
    Wt = rng.standard_normal((9 * c, kf)).astype(np.float16)
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3, swizzle=True)
    got = tcomp.build(S.tc_conv2d(**kw, smem_epilogue=True)[1], target="sim", sizes=sizes)(X, Wt)
    assert np.array_equal(got, tcomp.build(S.tc_conv2d(**kw)[1], target="sim",
                                           sizes=sizes)(X, Wt))


def _store(loop):
    """The one store of a vectorized loop's body (under a guard or not), or None."""
    body = loop.body.then if isinstance(loop.body, ir.If) else loop.body
    return body if isinstance(body, ir.Store) else None


def _kernel(text, kw, sizes):
    (k,) = tcomp.lower(S.tc_gemm(tcomp.op(text), **kw)[1], sizes=sizes).kernels
    return k


def _staging(k):
    (b,) = [x.buffer for x in walk_stmts(k.body) if isinstance(x, ir.Alloc)
            and x.buffer.scope == "shared" and x.buffer.name[0] in "CD"]
    return b


@pytest.mark.parametrize("mode, row", [(dict(swizzle=True), 128), (dict(pad=True), 136)])
def test_the_staging_tile_and_its_barrier(mode, row):
    k = _kernel(S.TC_GEMM, dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3,
                                pair_stores=True, smem_epilogue=True, **mode),
                {"M": 256, "N": 256, "K": 64})
    b = _staging(k)
    assert b.name == "C_shared" and b.dtype.name == "bfloat16"
    assert [int(d.value) for d in b.shape] == [128, row]
    body = [s for s in walk_stmts(k.body)]
    stores = [i for i, s in enumerate(body) if isinstance(s, ir.For) and s.vector is not None
              and isinstance(s.body, ir.Store) and s.body.buffer == "C_shared"]
    copies = [i for i, s in enumerate(body) if isinstance(s, ir.For) and s.vector is not None
              and isinstance(s.body, ir.Store) and s.body.buffer == "C"]
    # 64 x 64 accumulators per warp: 64 bf16x2 pairs a lane; the copy: 128 x 128 bf16 in
    # 16-byte pieces over 128 threads, 16 a thread (a loop of 16 around one vector)
    assert len(stores) == 64 and all(body[i].vector.bytes == 4 for i in stores)
    assert len(copies) == 1 and body[copies[0]].vector.bytes == 16
    assert body[copies[0]].vector.loads[0].buffer == "C_shared"
    barrier = [i for i, s in enumerate(body) if isinstance(s, ir.Barrier)]
    assert any(max(stores) < i < copies[0] for i in barrier)


def test_copy_out_vectors_only_where_rows_keep_them_aligned():
    kw = dict(SMALL, swizzle=True, pair_stores=True, smem_epilogue=True)
    for n, vec in ((72, 16), (68, None), (61, None)):
        k = _kernel(S.TC_GEMM, kw, {"M": 100, "N": n, "K": 40})
        (copy,) = [s for s in walk_stmts(k.body) if isinstance(s, ir.For)
                   and s.kind == "vectorize" and _store(s) is not None
                   and _store(s).buffer == "C"]
        got = copy.vector.bytes if copy.vector is not None and \
            copy.vector.store_base is not None else None
        assert got == vec, (n, copy.vector)


def test_fused_gelu_is_computed_from_fragments_before_staging():
    k = _kernel(S.TC_GEMM_GELU, dict(SMALL, pair_stores=True, smem_epilogue=True),
                {"M": 128, "N": 128, "K": 64})
    b = _staging(k)
    assert (b.name, b.dtype.name) == ("D_shared", "bfloat16")
    staging = [s for s in walk_stmts(k.body) if isinstance(s, ir.Store) and s.buffer == "D_shared"]
    # (C, the GEMM's stage, is the fragment itself here: set_scope("fragment"))
    assert staging and all("erf(" in expr_text(s.value) and
                           {x.buffer for x in ir.walk(s.value) if isinstance(x, ir.Load)} ==
                           {"C", "bias"} for s in staging)
    out = [s for s in walk_stmts(k.body) if isinstance(s, ir.Store) and s.buffer == "D"]
    assert out and all(expr_text(s.value).startswith("D_shared[") for s in out)


BANK_MODES = [dict(swizzle=True), dict(pad=True), dict(swizzle=True, pair_stores=True),
              dict(pad=True, pair_stores=True)]


@pytest.mark.parametrize("text", [S.TC_GEMM, S.TC_GEMM_GELU], ids=["gemm", "gelu"])
@pytest.mark.parametrize("mode", BANK_MODES, ids=["swz", "pad", "swz_pairs", "pad_pairs"])
def test_staging_is_free_of_bank_conflicts(text, mode):
    kw = dict(SMALL, pipeline=3, smem_epilogue=True, **mode)
    k = _kernel(text, kw, {"M": 64, "N": 64, "K": 32})
    name = _staging(k).name
    accesses, _ = shared_accesses(k, name)
    kinds = {(kind, width) for (_, kind, _, _), (width, _) in accesses.items()}
    width = 4 if mode.get("pair_stores") else 2
    assert kinds == {("store", width), ("load", 16)}  # fragment stores, 16-byte reads
    assert wavefront_conflicts(k, name) == []


@pytest.mark.parametrize("pairs", [False, True])
def test_an_unpadded_staging_tile_has_conflicts(pairs):
    """Rows of 128 bytes: the 8 rows of an accumulator store (lanes 4 apart) hit
    the same banks: 8-way conflicts, what the swizzle or padding removes."""
    kw = dict(SMALL, smem_epilogue=True, pad=False, pair_stores=pairs)
    bad = wavefront_conflicts(_kernel(S.TC_GEMM, kw, {"M": 64, "N": 64, "K": 32}), "C_shared")
    assert bad and all("8-way bank conflict" in b and " store of C_shared" in b for b in bad)


def test_shared_memory_is_the_ring_plus_the_staging_tile():
    sizes = {"M": 256, "N": 256, "K": 128}

    def shared(**kw):
        (k,) = tcomp.lower(S.tc_gemm(**kw)[1], sizes=sizes).kernels
        return sum(int(np.prod([int(d.value) for d in x.buffer.shape])) * x.buffer.dtype.bits // 8
                   for x in walk_stmts(k.body) if isinstance(x, ir.Alloc)
                   and x.buffer.scope == "shared")
    kw = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)
    assert shared(**kw) == 3 * (128 * 64 + 64 * 128) * 2  # 96 KiB
    assert shared(**kw, smem_epilogue=True) == shared(**kw) + 128 * 128 * 2  # + 32 KiB
    kw = dict(kw, swizzle=False, pad=True)
    assert shared(**kw, smem_epilogue=True) == shared(**kw) + 128 * 136 * 2


# ------------------------------------------------------------------ golden text
def _golden(name: str, text: str, update: bool):
    check_golden(GOLDEN / name, text, update)


def test_golden_ir_and_cuda(update_golden):
    """A fused bias + GELU kernel staged in shared memory: the GELU of each
    accumulator pair (a float2 bias load) stored as bf16x2 into the swizzled
    D_shared, a barrier, and D copied out in 16-byte vectors (float4 in
    CUDA). Also compiles with NVRTC."""
    op = tcomp.op(S.TC_GEMM_GELU)
    kw = dict(bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3, swizzle=True, pair_stores=True)
    s = S.tc_gemm(op, **kw, smem_epilogue=True)[1]
    sizes = {"M": 30, "N": 32, "K": 64}
    text = str(tcomp.lower(s, sizes=sizes))
    _golden("gelu_smem_epilogue.txt", text, update_golden)
    assert "@vectorize(16 bytes: load D_shared[" in text
    k = tcomp.build(s, target="cuda", sizes=sizes)
    _golden("gelu_smem_epilogue.cu", k.source, update_golden)
    assert "*reinterpret_cast<unsigned*>(&D_shared[" in k.source and k.cubin
    assert "*reinterpret_cast<float4*>(&D[" in k.source
    args = inputs_for(op, sizes, seed=2)
    got = tcomp.build(s, target="sim", sizes=sizes)(*args)
    assert np.array_equal(got, _run(op, kw, sizes, args))
