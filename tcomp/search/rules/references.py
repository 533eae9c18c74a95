"""Reference points of the tiling rules: the parameters of the hand
schedules of bench/ that the H200 measured best (BENCHMARKS.md), offered
to the search and to `auto_schedule` beside the random draws
(Space.referenced), so that a good tile is a candidate whatever the draws.

  simt_tile, simt_epilogue  bench/schedules.py `gemm` 'frag+warp+pad+pipe':
                 128 x 128 x 8 blocks, 8 x 8 register tiles, 4 x 8 lanes,
                 fragments, double buffering, 16-byte vectors, padded A
                 rows (fp32 4096^3: 0.90x cuBLAS without TF32); then 64 x 64
                 and 32 x 32 blocks for small extents or two products
  tc_tile, tc_epilogue      bench/schedules.py TC_BEST: 128 x 128 x 64 blocks,
                 64 x 64 warps, a 3-stage cp.async ring, swizzled tiles,
                 paired stores; then 64 x 64 blocks of 32 x 32 warps
  hopper_tile, hopper_epilogue  kernels/gemm_sm90 GemmConfig's defaults:
                 two cooperating consumers on 128 x 256 tiles, 4 stages, a
                 persistent grid in groups of 8 (bf16 4096^3: 0.99x cuBLAS);
                 then 128 x 128 tiles

Each function returns the points that fit the stage's extents (a block
tile no larger than the extent's power of two), best first; the space
keeps the first its rule's `feasible` accepts (Space.referenced), merged
over the drawn parameters (so rule-specific keys, tc_tile's `a_stage`,
keep their draw).
"""
from __future__ import annotations

from .base import pow2_upto

_SIMT = (
    dict(bm=128, bn=128, bk=8, tm=8, tn=8),
    dict(bm=64, bn=64, bk=8, tm=4, tn=4),
    dict(bm=32, bn=32, bk=8, tm=2, tn=2),
)
_SIMT_COMMON = dict(fragments=True, pipeline=True, vector=True, lanes=[4, 8], group=None,
                    pad=True)
_TC = (
    dict(bm=128, bn=128, wm=64, wn=64, bk=64),
    dict(bm=64, bn=64, wm=32, wn=32, bk=32),
)
_TC_COMMON = dict(pad=False, vector=True, pipeline=3, unroll_k=False, swizzle=True,
                  pair_stores=True, smem_epilogue=False, fragment_pipeline=0)
_HOPPER = (
    dict(bn=256, consumers=2, pingpong=False, bm=128, stages=4, group_m=8, persistent=True,
         consumer_regs=232),
    dict(bn=128, consumers=2, pingpong=False, bm=128, stages=4, group_m=8, persistent=True,
         consumer_regs=232),
)


def _fits(e: dict, axes, ref: dict, keys, lo) -> bool:
    return all(ref[k] in pow2_upto(e[a], l, 256) for a, k, l in zip(axes, keys, lo))


def simt(ctx, stage) -> list[dict]:
    """The SIMT GEMM points for matmul stage `stage` (simt_tile) or for the
    first product of epilogue `stage` (simt_epilogue)."""
    from .fused import products
    prods = products(ctx, stage)
    prod = prods[0] if prods else stage
    n, e = ctx.node(prod), ctx.extents[prod]
    m, nn = n["spatial"]
    (k,) = n["reduce"]
    return [{**ref, **_SIMT_COMMON} for ref in _SIMT
            if _fits(e, (m, nn, k), ref, ("bm", "bn", "bk"), (8, 8, 4))]


def tc(ctx, stage) -> list[dict]:
    """The mma.sync points for tc_tile's `stage` or tc_epilogue's product."""
    from .fused import products
    prods = products(ctx, stage)
    prod = prods[0] if prods else stage
    n, e = ctx.node(prod), ctx.extents[prod]
    shape = n.get("tc_product")
    if n["kind"] == "matmul" or shape is None:
        (m, nn), (k,) = n["spatial"], n["reduce"]
    else:
        m, nn, k = shape.m, shape.n, shape.k
    return [{**ref, **_TC_COMMON} for ref in _TC
            if _fits(e, (m, nn, k), ref, ("bm", "bn", "bk"), (16, 16, 16))]


def hopper(ctx, stage) -> list[dict]:
    """The TMA + wgmma points (their tiles are guarded at any extent)."""
    return [dict(ref) for ref in _HOPPER]
