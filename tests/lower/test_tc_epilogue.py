"""Paired epilogue stores (tc_gemm pair_stores: the output's columns split by 2
and vectorized) and fragments multi-buffered across the k16 steps
(fragment_pipeline: `pipeline` on the loop the A/B fragments are computed at),
on the sim and in the IR:

* both compute bit for bit what the plain schedule computes (the same mma
  chain on the same operands; only how results are stored and when operands
  are loaded change), at sizes the tiles divide and at awkward ones (odd N:
  a pair's second column outside the tensor), and match `evaluate`;
* the vectorize pass stores a pair as one 4-byte (bfloat16x2) or 8-byte
  (float2) vector exactly where every pair is aligned (N even, known at
  compile time) and element by element elsewhere, under the column guard;
* with fragment_pipeline, the ldmatrix of step k+1 comes before the mma of
  step k, into the other ring slot's registers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tcomp
from tcomp.lower import ir
from tcomp.lower.rewriter import walk_stmts

from ..bench.common import S
from .util import check_golden, inputs_for

BF16 = tcomp.lang.dtypes.bfloat16.numpy
GOLDEN = Path(__file__).parent / "golden" / "tc_epilogue"
F32_OUT = S.TC_GEMM_F32_OUT
SMALL = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)


def _inputs(op, sizes, seed=0):
    return inputs_for(op, sizes, seed=seed)


def _run(op, kw, sizes, args):
    return tcomp.build(S.tc_gemm(op, **kw)[1], target="sim", sizes=sizes)(*args)


def _store_loops(prog, out):
    """The vectorized loops that store the output `out` (under a per-lane guard
    or not): (lanes, vector record)."""
    def store(s):
        body = s.body.then if isinstance(s.body, ir.If) else s.body
        return body if isinstance(body, ir.Store) else None
    return [(int(s.extent.value), s.vector) for k in prog.kernels for s in walk_stmts(k.body)
            if isinstance(s, ir.For) and s.kind == "vectorize" and store(s) is not None
            and store(s).buffer == out]


# ------------------------------------------------------------------ paired stores
PAIR_CASES = [  # (op text or None for TC_GEMM, output name, sizes, schedule)
    (None, "C", {"M": 128, "N": 128, "K": 64}, SMALL),
    (None, "C", {"M": 100, "N": 62, "K": 40}, SMALL),          # even N, partial tiles
    (None, "C", {"M": 100, "N": 61, "K": 40}, SMALL),          # odd N: element stores
    (None, "C", {"M": 37, "N": 53, "K": 29}, dict(bm=32, bn=32, wm=16, wn=32, bk=16,
                                                  pipeline=True, swizzle=True)),
    (F32_OUT, "C", {"M": 70, "N": 96, "K": 40}, SMALL),        # float2 stores
    (F32_OUT, "C", {"M": 70, "N": 33, "K": 40}, SMALL),
    (S.TC_GEMM_GELU, "D", {"M": 70, "N": 72, "K": 40}, SMALL),  # float2 bias, bf16x2 D
    (S.TC_GEMM_GELU, "D", {"M": 65, "N": 67, "K": 48}, dict(SMALL, swizzle=True)),
]


@pytest.mark.parametrize("text, out, sizes, kw", PAIR_CASES)
def test_paired_stores_compute_what_element_stores_do(text, out, sizes, kw):
    op = tcomp.op(text or S.TC_GEMM)
    args = _inputs(op, sizes)
    got = _run(op, dict(kw, pair_stores=True), sizes, args)
    assert np.array_equal(got, _run(op, kw, sizes, args))
    want = tcomp.evaluate(op, *args).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("text, out, sizes, kw", PAIR_CASES)
def test_pairs_are_vectors_exactly_where_aligned(text, out, sizes, kw):
    op = tcomp.op(text or S.TC_GEMM)
    prog = tcomp.lower(S.tc_gemm(op, **kw, pair_stores=True)[1], sizes=sizes)
    loops = _store_loops(prog, out)
    assert loops and all(n == 2 for n, _ in loops)  # the pairs are 2-lane loops
    itemsize = op.outputs[0].dtype.numpy.itemsize
    if sizes["N"] % 2:  # a pair may straddle two rows: stored element by element
        assert all(v is None for _, v in loops)
    else:
        assert all(v is not None and v.store_base is not None and v.bytes == 2 * itemsize
                   for _, v in loops)
    if op.name == "gemm_bias_gelu" and sizes["N"] % 2 == 0:
        # the bias pair is one float2 load feeding the bf16x2 store
        assert all([ld.buffer for ld in v.loads] == ["bias"] for _, v in loops)
        assert "load bias[" in str(prog) and "(8 bytes), store D[" in str(prog)


def test_without_the_option_nothing_is_vectorized():
    prog = tcomp.lower(S.tc_gemm(**SMALL)[1], sizes={"M": 128, "N": 128, "K": 64})
    assert _store_loops(prog, "C") == []


# ------------------------------------------------------------------ fragment pipeline
FRAG_CASES = [
    (dict(bm=64, bn=64, wm=32, wn=32, bk=64, pipeline=3, swizzle=True), {"M": 128, "N": 128,
                                                                          "K": 128}),
    (dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3), {"M": 100, "N": 62, "K": 40}),
    (dict(bm=64, bn=64, wm=32, wn=32, bk=48, pipeline=True), {"M": 77, "N": 61, "K": 100}),
    (dict(bm=32, bn=32, wm=16, wn=32, bk=64), {"M": 30, "N": 33, "K": 70}),
    (dict(bm=32, bn=32, wm=16, wn=16, bk=16, pipeline=4), {"M": 50, "N": 33, "K": 17}),
]


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("kw, sizes", FRAG_CASES)
def test_fragment_pipeline_computes_what_the_plain_schedule_does(kw, sizes, stages):
    op = tcomp.op(S.TC_GEMM)
    args = _inputs(op, sizes, seed=sizes["K"])
    got = _run(op, dict(kw, fragment_pipeline=stages, pair_stores=True), sizes, args)
    assert np.array_equal(got, _run(op, kw, sizes, args))
    want = tcomp.evaluate(op, *args).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_fused_epilogue_with_both_options():
    op = tcomp.op(S.TC_GEMM_GELU)
    sizes = {"M": 65, "N": 72, "K": 80}
    args = _inputs(op, sizes, seed=4)
    kw = dict(SMALL, swizzle=True)
    got = _run(op, dict(kw, pair_stores=True, fragment_pipeline=2), sizes, args)
    assert np.array_equal(got, _run(op, kw, sizes, args))


def test_fragment_pipeline_in_the_conv():
    n, h, w, c, kf = 2, 5, 7, 16, 24
    sizes = {"N": n, "H": h, "W": w, "C": c, "K": kf, "R": 9 * c}
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, h, w, c)).astype(np.float16)
    Wt = rng.standard_normal((9 * c, kf)).astype(np.float16)
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3)
    op, s = S.tc_conv2d(**kw, fragment_pipeline=2, pair_stores=True)
    got = tcomp.build(s, target="sim", sizes=sizes)(X, Wt)
    assert np.array_equal(got, tcomp.build(S.tc_conv2d(**kw)[1], target="sim",
                                           sizes=sizes)(X, Wt))


def _steps(prog):
    """The ldmatrix / mma order of A fragments inside the K-tile loop, as a
    string: 'L<slot>' for a run of loads into the A registers of a ring slot
    (16 per lane and slot here), 'M<slot>' for a run of mma reading them."""
    (k,) = prog.kernels
    loop = next(s for s in walk_stmts(k.body) if isinstance(s, ir.For) and s.var == "k_o")
    events = []
    for s in walk_stmts(loop.body):
        if not isinstance(s, ir.Evaluate):
            continue
        fn = s.call.fn
        kind = "L" if fn.startswith("ldmatrix") else ("M" if fn == "mma_m16n8k16" else None)
        ref = s.call.args[0] if kind == "L" else s.call.args[1] if kind == "M" else None
        if ref is None or ref.buffer != "A_shared_fragment":
            continue
        event = f"{kind}{int(ref.indices[0].value) // 16}"
        if not events or events[-1] != event:
            events.append(event)
    return " ".join(events)


def test_next_steps_fragments_load_before_this_steps_mma():
    """bk = 64: four k16 steps. Plain (k16 loop unrolled): load(j), mma(j) in
    turn, all in one set of registers. With two fragment stages: steps 0 and 1
    loaded into slots 0 and 1, then each step's mma runs after the load of the
    next step into the other slot."""
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=64, pipeline=3, swizzle=True)
    sizes = {"M": 128, "N": 128, "K": 256}
    plain = _steps(tcomp.lower(S.tc_gemm(**kw, unroll_k=True)[1], sizes=sizes))
    assert plain == "L0 M0 L0 M0 L0 M0 L0 M0"
    piped = _steps(tcomp.lower(S.tc_gemm(**kw, fragment_pipeline=2)[1], sizes=sizes))
    assert piped == "L0 L1 M0 L0 M1 L1 M0 M1"
    three = _steps(tcomp.lower(S.tc_gemm(**kw, fragment_pipeline=3)[1], sizes=sizes))
    assert three == "L0 L1 L2 M0 L0 M1 M2 M0"


def test_fragment_rings_have_a_slot_per_stage():
    kw = dict(bm=64, bn=64, wm=32, wn=32, bk=64, pipeline=3, swizzle=True)
    for stages, regs in ((2, 32), (3, 48)):  # 32 x 16 bf16 per warp: 16 per lane and slot
        text = str(tcomp.lower(S.tc_gemm(**kw, fragment_pipeline=stages)[1],
                               sizes={"M": 128, "N": 128, "K": 128}))
        assert f"alloc fragment bfloat16 A_shared_fragment[{regs}]" in text


# ------------------------------------------------------------------ golden text
def _golden(name: str, text: str, update: bool):
    check_golden(GOLDEN / name, text, update)


def test_golden_ir_and_cuda(update_golden):
    """A fused bias + GELU kernel with both options: the fragment ring (two
    slots of A and B registers, the ldmatrix of the next k16 step before the
    mma of this one) and the epilogue's pairs (a float2 bias load and a
    bfloat16x2 store per pair, `unsigned` in CUDA). Also compiles with NVRTC."""
    op = tcomp.op(S.TC_GEMM_GELU)
    s = S.tc_gemm(op, bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3, swizzle=True,
                  pair_stores=True, fragment_pipeline=2)[1]
    sizes = {"M": 30, "N": 32, "K": 64}
    text = str(tcomp.lower(s, sizes=sizes))
    _golden("gelu_pairs_fpipe.txt", text, update_golden)
    assert "@vectorize(4 bytes: load bias[" in text
    k = tcomp.build(s, target="cuda", sizes=sizes)
    _golden("gelu_pairs_fpipe.cu", k.source, update_golden)
    assert "*reinterpret_cast<unsigned*>(&D[" in k.source and k.cubin
    args = _inputs(op, sizes, seed=2)
    got = tcomp.build(s, target="sim", sizes=sizes)(*args)
    plain = _run(op, dict(bm=32, bn=32, wm=16, wn=32, bk=32, pipeline=3, swizzle=True), sizes,
                 args)
    assert np.array_equal(got, plain)
