"""Every schedule of bench/schedules.py on the CPU sim against `tcomp.evaluate`.

Each schedule function and each of its variants (softmax/layernorm: shared_row x
local_temps; gemm: the variants of GEMM_VARIANTS) runs at small sizes that divide its tiles, at sizes
that do not (primes, rows shorter than the block, single elements), with the
small parameters that keep the sim fast and, where the sim stays fast, with the
benchmark's own parameters (512/1024-thread rows, 128x128x8 GEMM tiles).
Sizes are bound at build time as bench/suite.py binds them; the schedules that
lower with symbolic sizes are also run unbound. Every case of bench/suite.py also
runs with its own parameters (test_suite_case_on_sim): the value check of the
cases whose CUDA source test_bench_golden_cuda.py checks by structure only.

The sim checks races and uninitialised reads besides the values; the lowered IR
is checked for the cross-thread reductions (`allreduce_*`), the shared/local
allocations and the padded transpose tile.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tcomp
from tests.lower.util import inputs_for, run_sim

from .common import S, SUITE_CASES

GELU_SCALARS = {"w": 0.75, "b": -0.25}  # as bench/suite.py passes them


def lowered(s, sizes):
    return str(tcomp.lower(s, sizes=sizes))


def make_inputs(op, sizes, seed=0, scale=1.0, shift=0.0):
    """Random inputs at `sizes`; X (where there is one) as X * scale + shift."""
    args = inputs_for(op, sizes, seed=seed, scalars=GELU_SCALARS)
    return [a * np.float32(scale) + np.float32(shift) if t.name == "X" and a.ndim else a
            for t, a in zip(op.inputs, args)]


def run(s, sizes, bind=True, seed=0, scale=1.0, shift=0.0):
    """Run on the sim (sizes bound or not) and compare with the oracle."""
    return run_sim(s, make_inputs(s.op, sizes, seed, scale, shift), sizes if bind else None)


def allreduces(text):
    """[(kind, thread axis, thread count)] of the cross-thread reductions in IR text."""
    return re.findall(r"allreduce_(\w+)\(\w+\[0\]\) over (threadIdx\.\w) \((\d+) threads\)", text)


# ------------------------------------------------------------------ softmax / layernorm
ROW_FNS = {"softmax": (S.softmax, ("mx", "sm"), ["max", "sum"]),
           "layernorm": (S.layernorm, ("mean", "var"), ["sum", "sum"])}

# (N, D, threads)
ROW_SIZES = [
    (2, 64, 16),    # D = 4 * threads: one float4 of the row per thread
    (2, 128, 32),   # two float4 per thread
    (3, 67, 16),    # prime row: tail of the vector fetch and of the thread split
    (2, 131, 32),
    (2, 3, 16),     # a row shorter than one vector / than the block
    (1, 1, 32),
]
VARIANTS = [(sr, lt) for sr in (True, False) for lt in (True, False)]
VARIANT_IDS = [f"{'smem' if sr else 'L2'}-{'local' if lt else 'global'}" for sr, lt in VARIANTS]


@pytest.mark.parametrize("n,d,threads", ROW_SIZES, ids=[f"{n}x{d}-{t}t" for n, d, t in ROW_SIZES])
@pytest.mark.parametrize("shared_row,local_temps", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("kind", sorted(ROW_FNS))
def test_row_op(kind, shared_row, local_temps, n, d, threads):
    fn, temps, reds = ROW_FNS[kind]
    op, s = fn({}, threads=threads, shared_row=shared_row, local_temps=local_temps)
    sizes = {"N": n, "D": d}
    text = lowered(s, sizes)
    # both row statistics are cross-thread reductions over the block's threads
    assert allreduces(text) == [(r, "threadIdx.x", str(threads)) for r in reds], text
    assert f"block=({threads}, 1, 1)" in text and f"grid=({n}, 1, 1)" in text
    # the row once in shared memory, fetched with 4-wide vectors
    assert ("alloc shared float32 X_shared" in text) == shared_row
    if shared_row:
        assert re.search(r"for ax1_i in 0:4 +@vectorize", text), text
    # the statistics in registers, or in global temporaries (one per row)
    for t in temps:
        if local_temps:
            assert f"alloc local float32 {t}[1]" in text
        else:
            assert f"buffer temp global float32 {t}[{n}]" in text
    run(s, sizes)


@pytest.mark.parametrize("shared_row,local_temps", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("kind", sorted(ROW_FNS))
def test_row_op_unbound_sizes(kind, shared_row, local_temps):
    """The L2 variants lower with symbolic N and D; the shared-row variants need
    D bound (the row's shared buffer has D elements), with a clear error."""
    fn, _, _ = ROW_FNS[kind]
    op, s = fn({}, threads=16, shared_row=shared_row, local_temps=local_temps)
    if shared_row:
        with pytest.raises(tcomp.LoweringError, match="non-constant extent"):
            tcomp.build(s, target="sim")
    else:
        for n, d in ((3, 67), (2, 64), (1, 5)):
            run(s, {"N": n, "D": d}, bind=False)


# The vectorized passes (and softmax's reciprocal): every row size, the row in
# shared memory (vec applies to the passes over the shared row).
VEC_VARIANTS = [("softmax", "vec4"), ("softmax", "vec4+rcp"), ("layernorm", "vec4")]


@pytest.mark.parametrize("n,d,threads", ROW_SIZES, ids=[f"{n}x{d}-{t}t" for n, d, t in ROW_SIZES])
@pytest.mark.parametrize("kind,variant", VEC_VARIANTS, ids=[f"{k}-{v}" for k, v in VEC_VARIANTS])
def test_row_op_vectorized(kind, variant, n, d, threads):
    fn, temps, reds = ROW_FNS[kind]
    kw = S.row_variant(variant)
    op, s = fn({}, threads=threads, **kw)
    sizes = {"N": n, "D": d}
    text = lowered(s, sizes)
    assert allreduces(text) == [(r, "threadIdx.x", str(threads)) for r in reds], text
    # the output pass writes 4-wide vectors; the fetch loop over the row is unrolled
    # (expanded by the unroll pass: no loop over the row's chunks is left)
    assert re.search(r"for d_i in 0:4 +@vectorize", text), text
    assert "for ax1_o_o" not in text
    if kw.get("rcp"):
        assert "alloc local float32 rs[1]" in text
    run(s, sizes)


# The suite's thread counts and variants at one and two rows: D = 4 * threads
# (the whole row in one float4 pass) and a prime D just above it.
BENCH_ROWS = [(threads, shared_row, d) for threads, shared_row in
              ((512, True), (256, False), (1024, True), (512, False), (1024, False))
              for d in (4 * threads, {256: 1031, 512: 2053, 1024: 4099}[threads])]


@pytest.mark.parametrize("threads,shared_row,d", BENCH_ROWS,
                         ids=[f"{t}t-{'smem' if sr else 'L2'}-D{d}" for t, sr, d in BENCH_ROWS])
@pytest.mark.parametrize("kind", sorted(ROW_FNS))
def test_row_op_bench_parameters(kind, threads, shared_row, d):
    fn, _, reds = ROW_FNS[kind]
    op, s = fn({}, threads=threads, shared_row=shared_row)
    sizes = {"N": 2, "D": d}
    assert allreduces(lowered(s, sizes)) == [(r, "threadIdx.x", str(threads)) for r in reds]
    run(s, sizes)


@pytest.mark.parametrize("shared_row", [True, False], ids=["smem", "L2"])
def test_softmax_large_inputs(shared_row):
    """Inputs up to ~250: exp overflows float32 unless the row maximum is subtracted first."""
    op, s = S.softmax({}, threads=16, shared_row=shared_row)
    k = run(s, {"N": 3, "D": 67}, scale=40.0, shift=60.0)
    (x,) = make_inputs(op, {"N": 3, "D": 67}, scale=40.0, shift=60.0)
    assert x.max() > 89.0  # exp(x) alone would overflow float32
    out = k(x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_layernorm_offset_rows():
    """Rows with a large common offset (X ~ 100 + N(0, 1)): the two-pass
    variance stays accurate."""
    op, s = S.layernorm({}, threads=32)
    run(s, {"N": 3, "D": 131}, shift=100.0)


# ------------------------------------------------------------------ rowsum
# (N, D, threads, unroll)
ROWSUM_SIZES = [
    (2, 128, 16, 2), (3, 67, 16, 2), (2, 300, 16, 8), (1, 1, 16, 8),
    (2, 4096, 256, 8), (2, 4099, 256, 8), (3, 1031, 128, 8),  # the suite's parameters
]


@pytest.mark.parametrize("bind", [True, False], ids=["bound", "unbound"])
@pytest.mark.parametrize("n,d,threads,unroll", ROWSUM_SIZES,
                         ids=[f"{n}x{d}-{t}t-u{u}" for n, d, t, u in ROWSUM_SIZES])
def test_rowsum(n, d, threads, unroll, bind):
    op, s = S.rowsum({}, threads=threads, unroll=unroll)
    sizes = {"N": n, "D": d}
    text = lowered(s, sizes if bind else {})
    assert allreduces(text) == [("sum", "threadIdx.x", str(threads))], text
    run(s, sizes, bind=bind)


# ------------------------------------------------------------------ transpose
TRANSPOSE_SIZES = [((64, 64), {}), ((37, 29), {}), ((1, 1), {}), ((33, 65), {}), ((96, 32), {}),
                   ((48, 32), {"tile": 16, "rows": 4}), ((37, 29), {"tile": 16, "rows": 4})]


@pytest.mark.parametrize("bind", [True, False], ids=["bound", "unbound"])
@pytest.mark.parametrize("mn,kw", TRANSPOSE_SIZES,
                         ids=[f"{m}x{n}" + (f"-t{kw['tile']}" if kw else "")
                              for (m, n), kw in TRANSPOSE_SIZES])
def test_transpose(mn, kw, bind):
    op, s = S.transpose({}, **kw)
    tile, rows = kw.get("tile", 32), kw.get("rows", 8)
    sizes = {"M": mn[0], "N": mn[1]}
    text = lowered(s, sizes if bind else {})
    # the tile padded to tile + 1 floats per row (storage_align(a0, tile, 1))
    assert f"alloc shared float32 A_shared[{tile}, {tile + 1}]" in text, text
    assert f"block=({tile}, {rows}, 1)" in text
    assert "allreduce_" not in text
    run(s, sizes, bind=bind)


# ------------------------------------------------------------------ gelu
GELU_SIZES = [(256, 16), (67, 16), (1, 16), (4096, 256), (4099, 256), (1 << 14, 256)]


@pytest.mark.parametrize("bind", [True, False], ids=["bound", "unbound"])
@pytest.mark.parametrize("n,threads", GELU_SIZES, ids=[f"{n}-{t}t" for n, t in GELU_SIZES])
def test_gelu(n, threads, bind):
    op, s = S.gelu({}, threads=threads)
    sizes = {"N": n}
    text = lowered(s, sizes if bind else {})
    assert re.search(r"for i_i in 0:4 +@vectorize", text), text
    if bind and n % (4 * threads) == 0:
        assert " if " not in text, "no tail guard when 4 * threads divides N"
    run(s, sizes, bind=bind)


def test_gelu_random_scalars():
    op, s = S.gelu({}, threads=16)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(67).astype(np.float32), np.float32(-1.3), np.float32(0.4)]
    run_sim(s, args, {"N": 67})


# ------------------------------------------------------------------ gemm
SMALL = dict(bm=16, bn=16, bk=4, tm=4, tn=4)       # 4x4 threads, 4x4 register tiles
ODD_FETCH = dict(bm=16, bn=16, bk=3, tm=2, tn=4)   # 8x4 threads; 48-element tiles: not a
#                                                    multiple of the 32 threads that fetch them
BENCH = {}                                         # the suite's 128x128x8, 8x8 per thread

GEMM_CASES = [
    ("small", SMALL, (32, 32, 16)),
    ("small", SMALL, (37, 29, 23)),
    ("small", SMALL, (16, 16, 3)),   # K below one bk step
    ("small", SMALL, (1, 1, 1)),
    ("odd-fetch", ODD_FETCH, (13, 11, 7)),
    ("bench", BENCH, (128, 128, 16)),
    ("bench", BENCH, (131, 7, 9)),
]
# name -> (schedule arguments, lanes per case kind): 'warp' variants use a warp-shaped
# thread grid (fused threadIdx.x) and rasterized blocks (group of 2 block rows)
GEMM_VARIANTS = {
    "frag": {}, "frag+pipe": {"pipeline": True},
    "shared": {"fragments": False}, "shared+pipe": {"fragments": False, "pipeline": True},
    "frag+scalar": {"vector": False}, "frag+scalar+pipe": {"vector": False, "pipeline": True},
    "frag+warp+pad+pipe+g2": {"lanes": True, "pad": True, "pipeline": True, "group": 2},
    "shared+warp+pad+g2": {"fragments": False, "lanes": True, "pad": True, "group": 2},
    "frag+warp+pad": {"lanes": True, "pad": True},
    "shared+warp+pad+pipe+g2": {"fragments": False, "lanes": True, "pad": True, "pipeline": True,
                                "group": 2},
}
LANES = {"small": (2, 2), "odd-fetch": (2, 4), "bench": (4, 8)}


def gemm_kw(name, variant, kw):
    v = dict(GEMM_VARIANTS[variant])
    if v.pop("lanes", False):
        v["lanes"] = LANES[name]
    return {**kw, **v}


def gemm_threads(kw):
    p = {**dict(bm=128, bn=128, bk=8, tm=8, tn=8, fragments=True, pipeline=False,
                vector=True, pad=False), **kw}
    return p["bn"] // p["tn"], p["bm"] // p["tm"], p


@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
@pytest.mark.parametrize("name,kw,mnk", GEMM_CASES,
                         ids=[f"{n}-{m}x{nn}x{k}" for n, _, (m, nn, k) in GEMM_CASES])
def test_gemm(name, kw, mnk, variant):
    kw = gemm_kw(name, variant, kw)
    op, s = S.gemm({}, **kw)
    m, n, k = mnk
    sizes = {"M": m, "N": n, "K": k}
    tx, ty, p = gemm_threads(kw)
    text = str(run(s, sizes).program)  # the IR the sim ran (lowering the 8x8-unrolled tiles twice is slow)
    pipeline = p["pipeline"]
    assert f"block=({tx * ty}, 1, 1)" in text if p.get("lanes") else f"block=({tx}, {ty}, 1)" in text
    bufs = "2, " if pipeline else ""  # double-buffered tiles
    if p["vector"]:  # k-major A tile, rows padded to 4 mod 32 elements with `pad`
        row = next(w for w in range(p["bm"], p["bm"] + 33) if w % 32 == 4) if p["pad"] else p["bm"]
        assert f"alloc shared float32 A_shared[{bufs}{p['bk']}, {row}]" in text
    else:
        assert f"alloc shared float32 A_shared[{bufs}{p['bm']}, {p['bk']}]" in text
    assert f"alloc shared float32 B_shared[{bufs}{p['bk']}, {p['bn']}]" in text
    assert f"alloc local float32 C_local[{p['tm']}, {p['tn']}]" in text
    assert ("alloc local float32 A_shared_local" in text) == p["fragments"]
    if pipeline:
        # the next tile goes through registers: ceil(tile / threads) elements per thread
        # (whole float4s of it when vectorized)
        per = -(-p["bm"] * p["bk"] // (tx * ty))
        if p["vector"] and p["bk"] % 4 == 0:
            per = 4 * -(-p["bm"] * p["bk"] // (4 * tx * ty))
        assert f"alloc local float32 A_shared_prefetch[{per}]" in text
    else:
        assert "_prefetch" not in text
    if k > p["bk"]:  # (a single K step leaves no loop)
        loop = text[text.index("for k_o"):]
        assert loop.count("barrier()") == (1 if pipeline else 2)  # per K step
    assert "allreduce_" not in text  # the k reduction stays inside each thread


@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
def test_gemm_unbound_sizes(variant):
    op, s = S.gemm({}, **gemm_kw("small", variant, SMALL))
    for m, n, k in ((21, 19, 7), (16, 16, 8), (37, 29, 23)):
        run(s, {"M": m, "N": n, "K": k}, bind=False)


# ------------------------------------------------------------------ the suite's own cases
def suite_small_sizes(c):
    """Small sizes for suite case `c` that divide its tiles as the benchmark sizes
    do: two 128 x 128 GEMM block rows and columns and three K steps, two rows of
    two float4 chunks per thread (one for the 1024-thread rows), four blocks of gelu."""
    fixed = {"gemm": {"M": 256, "N": 256, "K": 24}, "transpose": {"M": 64, "N": 96},
             "gelu": {"N": 4096}}
    if c.kind in fixed:
        return fixed[c.kind]
    threads = c.kwargs["threads"]
    if c.kind == "rowsum":  # two trips of the 8-times unrolled loop
        return {"N": 2, "D": threads * 8 * 2}
    return {"N": 2, "D": 4 * threads * (1 if threads >= 1024 else 2)}


@pytest.mark.parametrize("case", SUITE_CASES, ids=[c.slug for c in SUITE_CASES])
def test_suite_case_on_sim(case):
    """Every case of bench/suite.py, with the suite's own schedule parameters (as
    test_bench_golden_cuda.py builds them), computes the oracle's values on the
    sim: the value check behind the structural checks of its CUDA source (only
    a few cases keep a golden file)."""
    op, s = case.schedule()
    sizes = suite_small_sizes(case)
    assert set(sizes) == set(case.sizes)
    run(s, sizes)
