"""XOR-swizzled shared-memory layouts (`Stage.swizzle`, ir.Swizzle): the
layout of the tensor-core GEMM's and conv's tiles, applied in flattening.

* Every ldmatrix phase and every quarter warp of cp.async / 16-byte vector
  stores hits 8 distinct groups of banks (computed from the final IR, lane by
  lane: bank_conflicts.py), and unswizzled unpadded tiles do not (the check
  sees conflicts where they exist).
* A swizzled kernel computes exactly what the unswizzled one does (sim,
  bit for bit) at dividing and awkward sizes, and matches evaluate; a
  hypothesis property over SIMT shared-tile GEMM schedules says the same.
* The layout itself: offsets are a permutation within each row, the
  Hopper 128-byte form is chunk c ^ (r & 7).
* Golden IR and CUDA of a swizzled kernel; the CUDA compiles with NVRTC.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcomp
from tcomp.lower import ir
from tcomp.schedule import templates

from ..bench.common import S
from .bank_conflicts import PHASES, addresses, conflicts, value
from .util import check_golden

GOLDEN = Path(__file__).parent / "golden" / "swizzle"
BF = tcomp.op(S.TC_GEMM)
BF16 = tcomp.lang.dtypes.bfloat16.numpy
LDSM = ("ldmatrix_x4", "ldmatrix_x4_trans", "ldmatrix_x2_trans")

# (tc_gemm arguments) the 4096^3 benchmark's tiles and smaller ones: rows of 128
# and 256 bytes (bk = 64, bn = 128), 64 bytes (bk = 32), 32 bytes (bk = 16)
TILES = [dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3),
         dict(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=4),
         dict(bm=128, bn=256, wm=64, wn=64, bk=32, pipeline=3),
         dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=True),
         dict(bm=64, bn=32, wm=32, wn=16, bk=32)]


def lowered(kw, mode, sizes=None):
    op, s = S.tc_gemm(**kw, **mode)
    sizes = sizes or {"M": kw["bm"], "N": kw["bn"], "K": 2 * kw["bk"]}
    return tcomp.lower(s, sizes=sizes).kernels[0]


# ------------------------------------------------------------------ bank conflicts
@pytest.mark.parametrize("kw", TILES, ids=lambda kw: "_".join(f"{k}{v}" for k, v in kw.items()))
def test_swizzled_ldmatrix_and_copies_are_conflict_free(kw):
    k = lowered(kw, dict(swizzle=True))
    stores = ("cp_async",) if kw.get("pipeline", 0) not in (False, True) else ("vector_store",)
    seen = addresses(k, LDSM + stores)
    assert {key[1] for key in seen} == {"ldmatrix_x4", "ldmatrix_x4_trans", stores[0]}
    for fns in (LDSM, stores):
        assert conflicts(k, fns, 2, PHASES[fns[0]]) == []


@pytest.mark.parametrize("kw", TILES[:2] + TILES[3:4], ids=["k64", "k32", "k16"])
def test_the_check_sees_the_conflicts_of_plain_tiles(kw):
    """Rows of 128, 64 or 32 bytes without padding or swizzle: the 8 rows of an
    ldmatrix phase share 1, 2 or 4 bank groups."""
    k = lowered(kw, dict(pad=False))
    bad = conflicts(k, LDSM, 2, PHASES["ldmatrix_x4"])
    assert bad and "ldmatrix_x4 into A_shared" in bad[0]


def test_padding_k32_tiles_conflicts_where_the_swizzle_does_not():
    """Rows padded to 40 elements (80 bytes): a quarter warp's 16-byte cp.async
    stores span two rows and meet in one bank group; the swizzle keeps them
    apart (this is one reason to prefer it)."""
    kw = TILES[1]
    bad = conflicts(lowered(kw, dict(pad=True)), ("cp_async",), 2, PHASES["cp_async"])
    assert bad and "cp_async into A_shared" in bad[0]
    assert conflicts(lowered(kw, dict(swizzle=True)), ("cp_async",), 2, PHASES["cp_async"]) == []


def test_the_swizzle_uses_no_padding():
    text = str(tcomp.lower(S.tc_gemm(**TILES[0], swizzle=True)[1],
                           sizes={"M": 128, "N": 128, "K": 128}))
    assert "alloc shared bfloat16 A_shared[3, 128, 64] swizzle(128)" in text
    assert "alloc shared bfloat16 B_shared[3, 64, 128] swizzle(128)" in text


# ------------------------------------------------------------------ the layout
def swizzled_offsets(shape, dtype, span):
    """{(indices): flat offset} of a 2-d or 3-d swizzled shared buffer, by
    lowering a copy that writes every element (through the flatten pass)."""
    from tcomp.lower import flatten
    buf = ir.Buffer("T", dtype, tuple(ir.const(n) for n in shape), "shared",
                    layout=ir.Swizzle(span))
    names = [f"i{d}" for d in range(len(shape))]
    body = ir.Store("T", tuple(ir.Var(n) for n in names), ir.Imm(0.0, dtype))
    for n, ext in reversed(list(zip(names, shape))):
        body = ir.For(n, ir.const(0), ir.const(ext), "serial", body)
    k = ir.Kernel("k", (), (), (ir.ONE,) * 3, (ir.ONE,) * 3, ir.Alloc(buf, body))
    prog = ir.Program("p", (), (k,), (), (), ())
    flat = flatten.run(k, prog)
    store = next(x for x in ir.walk(flat.body) if isinstance(x, ir.Store))
    out = {}
    for idx in np.ndindex(*shape):
        out[idx] = value(store.indices[0], dict(zip(names, idx)))
    return out


def test_hopper_128_byte_swizzle_is_chunk_xor_row():
    """Rows of 128 bytes, span 128: element (r, j) at r*64 + ((j/8) ^ (r%8))*8 + j%8."""
    offs = swizzled_offsets((16, 64), tcomp.lang.dtypes.bfloat16, 128)
    for (r, j), o in offs.items():
        assert o == r * 64 + ((j // 8) ^ (r % 8)) * 8 + j % 8


@pytest.mark.parametrize("shape,dt,span", [
    ((3, 16, 64), "bfloat16", 128), ((2, 8, 128), "bfloat16", 128), ((8, 32), "bfloat16", 128),
    ((8, 16), "bfloat16", 64), ((6, 32), "float32", 32), ((4, 64), "float32", 64),
    ((5, 96), "float16", 64), ((16, 8), "float32", 128)])
def test_the_layout_permutes_chunks_within_each_row(shape, dt, span):
    """A bijection of the buffer onto itself that moves whole 16-byte chunks
    and keeps each row in place: the same shape and size hold the tile."""
    dtype = tcomp.lang.dtypes.BY_NAME[dt]
    item = dtype.numpy.itemsize
    offs = swizzled_offsets(shape, dtype, span)
    width = shape[-1]
    assert sorted(offs.values()) == list(range(int(np.prod(shape))))
    e = 16 // item
    for idx, o in offs.items():
        row = int(np.ravel_multi_index(idx[:-1], shape[:-1])) if len(shape) > 1 else 0
        assert o // width == row and o % e == idx[-1] % e  # same row, same place in its chunk


def test_tma_64_byte_swizzle_on_64_byte_rows():
    """Rows of 64 bytes, span 64 (TMA's 64B mode): chunk c of row r at
    c ^ ((r / 2) % 4), the 16-byte chunk bits XORed with the 128-byte line's."""
    offs = swizzled_offsets((16, 32), tcomp.lang.dtypes.bfloat16, 64)
    for (r, j), o in offs.items():
        byte = (r * 64 + j * 2)
        want = byte ^ (((byte >> 7) & 3) << 4)
        assert o * 2 == want


# ------------------------------------------------------------------ same results
GEMM_CASES = [  # (tc_gemm arguments, sizes)
    (dict(bm=64, bn=64, wm=32, wn=32, bk=32), {"M": 64, "N": 64, "K": 64}),
    (dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3), {"M": 67, "N": 45, "K": 83}),
    (dict(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=True), {"M": 61, "N": 70, "K": 37}),
    (dict(bm=64, bn=128, wm=32, wn=64, bk=64, pipeline=4), {"M": 64, "N": 128, "K": 256}),
    (dict(bm=64, bn=128, wm=32, wn=64, bk=64, pipeline=3, unroll_k=True),
     {"M": 71, "N": 130, "K": 100}),
    (dict(bm=32, bn=32, wm=16, wn=16, bk=16), {"M": 50, "N": 33, "K": 17}),
]


@pytest.mark.parametrize("kw,sizes", GEMM_CASES)
def test_swizzled_gemm_computes_what_the_plain_one_does(kw, sizes):
    rng = np.random.default_rng(sizes["K"])
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(BF16)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(BF16)
    got = {}
    for name, mode in (("swizzle", dict(swizzle=True)), ("pad", dict(pad=True)),
                       ("plain", dict(pad=False))):
        op, s = S.tc_gemm(**kw, **mode)
        got[name] = tcomp.build(s, target="sim", sizes=sizes)(A, B)
    assert np.array_equal(got["swizzle"], got["plain"]) and \
        np.array_equal(got["swizzle"], got["pad"])
    exact = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(got["swizzle"].astype(np.float64), exact, rtol=2e-2, atol=2e-2)


def test_swizzled_fused_epilogue():
    op = tcomp.op(S.TC_GEMM_GELU)
    sizes = {"M": 70, "N": 72, "K": 40}
    rng = np.random.default_rng(1)
    args = (rng.standard_normal((70, 40)).astype(BF16), rng.standard_normal((40, 72)).astype(BF16),
            rng.standard_normal(72).astype(np.float32))
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)
    swz = tcomp.build(S.tc_gemm(op, **kw, swizzle=True)[1], target="sim", sizes=sizes)(*args)
    pad = tcomp.build(S.tc_gemm(op, **kw)[1], target="sim", sizes=sizes)(*args)
    assert np.array_equal(swz, pad)


CONV_CASES = [  # (N, H, W, C, K), tc_conv2d arguments
    ((1, 8, 8, 16, 64), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)),  # cp.async gather
    ((2, 7, 5, 16, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=True)),
    ((2, 5, 7, 4, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=4)),  # ring stores
    ((2, 5, 7, 12, 24), dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)),
    ((1, 11, 13, 8, 16), dict(bm=64, bn=32, wm=32, wn=32, bk=16, pipeline=3, unroll_k=True)),
]


@pytest.mark.parametrize("dims,kw", CONV_CASES)
def test_swizzled_conv_computes_what_the_padded_one_does(dims, kw):
    n, h, w, c, kf = dims
    sizes = {"N": n, "H": h, "W": w, "C": c, "K": kf, "R": 9 * c}
    rng = np.random.default_rng(h)
    X = rng.standard_normal((n, h, w, c)).astype(np.float16)
    Wt = rng.standard_normal((9 * c, kf)).astype(np.float16)
    op, s = S.tc_conv2d(**kw, swizzle=True)
    got = tcomp.build(s, target="sim", sizes=sizes)(X, Wt)
    pad = tcomp.build(S.tc_conv2d(**kw)[1], target="sim", sizes=sizes)(X, Wt)
    assert np.array_equal(got, pad)
    want = tcomp.evaluate(op, X, Wt).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_swizzling_simt_shared_tiles_never_changes_the_result(data):
    """SIMT GEMM schedules (templates.simt_gemm: shared A and B tiles fetched by
    all threads, as 16-byte vectors or not, A k-major or not, register
    fragments or not, double-buffered or not) at awkward sizes, with either
    tile swizzled at any span: the sim gives bit for bit what the unswizzled
    schedule gives, and matches evaluate."""
    draw = data.draw
    bm, bn, bk = (draw(st.sampled_from([8, 16, 32]), label=x) for x in ("bm", "bn", "bk"))
    tm = draw(st.sampled_from([t for t in (2, 4) if bm // t * (bn // 4) <= 256]), label="tm")
    kw = dict(bm=bm, bn=bn, bk=bk, tm=tm, tn=4, fragments=draw(st.booleans(), label="frag"),
              pipeline=draw(st.booleans(), label="pipeline"),
              vector=draw(st.booleans(), label="vector"))
    which = draw(st.sampled_from([("A",), ("B",), ("A", "B")]), label="swizzled")
    span = draw(st.sampled_from([32, 64, 128]), label="span")
    sizes = {v: draw(st.integers(1, 70), label=v) for v in ("M", "N", "K")}
    rng = np.random.default_rng(sizes["K"])
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(np.float32)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(np.float32)

    def build(swizzled):
        s = tcomp.Schedule(MM)
        templates.simt_gemm(s, "C", "A", "B", **kw)
        for t in swizzled:
            s[f"{t}.shared"].swizzle(span)
        return s, tcomp.build(s, target="sim", sizes=sizes)(A, B)
    s, got = build(which)
    assert all(isinstance(d, tcomp.schedule.directives.Swizzle) for d in s.directives[-len(which):])
    _, plain = build(())
    assert np.array_equal(got, plain)
    np.testing.assert_allclose(got, tcomp.evaluate(MM, A, B), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ golden text
def _golden(name: str, text: str, update: bool):
    check_golden(GOLDEN / name, text, update)


def _small_swizzled():
    op = tcomp.op("def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                  "{ C(m, n) +=! A(m, k) * B(k, n) }")
    return S.tc_gemm(op, bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3, unroll_k=True,
                     swizzle=True)[1], \
        {"M": 30, "N": 32, "K": 64}


def test_golden_ir_and_cuda_of_a_swizzled_kernel(update_golden):
    """A cp.async ring of 3 swizzled K tiles (rows of 64 bytes: chunk c of row r
    at c ^ ((r >> 1) & 3)); the k16 steps' ldmatrix offsets differ from the
    first step's by an XOR with a constant. Also compiles with NVRTC."""
    s, sizes = _small_swizzled()
    text = str(tcomp.lower(s, sizes=sizes))
    _golden("tensorize_swizzle.txt", text, update_golden)
    assert "alloc shared bfloat16 A_shared[3, 32, 32] swizzle(128)" in text
    assert "((threadIdx.x >> 1) & 3)" in text
    k = tcomp.build(s, target="cuda", sizes=sizes)
    _golden("tensorize_swizzle.cu", k.source, update_golden)
    assert ") ^ 16])" in k.source  # the second k16 step of A: the first's offset ^ 16
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in k.source and k.cubin
    A = np.random.default_rng(0).standard_normal((30, 64)).astype(BF16)
    B = np.random.default_rng(1).standard_normal((64, 32)).astype(BF16)
    got = tcomp.build(s, target="sim", sizes=sizes)(A, B)
    plain = tcomp.build(S.tc_gemm(s.op, bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3,
                                  unroll_k=True, pad=False)[1], target="sim", sizes=sizes)(A, B)
    assert np.array_equal(got, plain)


def test_the_schedule_round_trips_through_json():
    s, sizes = _small_swizzled()
    text = s.to_json()
    assert '"kind": "Swizzle"' in text and '"span": 128' in text
    s2 = tcomp.Schedule.from_json(s.op, text)
    assert s2.to_json() == text
    assert str(tcomp.lower(s2, sizes=sizes)) == str(tcomp.lower(s, sizes=sizes))
