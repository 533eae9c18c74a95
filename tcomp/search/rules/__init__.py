"""Sketch rules: each reads a stage's place in the dataflow graph (graph.py)
and, given parameters, applies schedule primitives to it.

A rule is four functions over a `Context` (the op, its graph, the stages'
loop extents at the tuning sizes, the device limits):
  applies(ctx, stage) -> bool          whether the rule fits the stage
  sample(ctx, stage, rng) -> dict      random parameters within device limits
  feasible(ctx, stage, params) -> bool the cheap resource checks (threads,
                                       shared memory, registers) before lowering
  apply(s, ctx, stage, params)         the primitives, on Schedule `s`
Parameters are plain JSON values, so a candidate's parameters can be stored
in a record and mutated later (space.py). The rules:

  simt_tile    a matmul stage: block tile bm x bn, thread tile tm x tn in
               registers (cache_write local), A and B tiles of bk in shared
               memory, per-k register fragments, optional double buffering,
               16-byte vectors, warp lane grid, padding, block rasterization
               (the parameters of bench/schedules.py `gemm`; its schedules
               are points of this rule)
  tc_tile      a product on tensor cores with half inputs: the matmul, and any
               product `tensorize` takes (batched: bmm, attention's per-head
               scores, batch axes on blockIdx.z; either operand transposed):
               block/warp tiles, K tiles of bk in shared memory (padded rows),
               fragment caches, mma_m16n8k16, pipeline depth 2..5
               (bench/schedules.py `tc_gemm`)
  shared_tile  a reduction with two or more spatial axes and affine reads,
               other than the exact matmul (batched and transposed products,
               contractions, convolution windows): tiling.shared_tiles, the
               multi-level tiling of simt_tile derived from the subscripts:
               block tiles of the last two spatial axes (others on blockIdx.z),
               register tiles, every read tensor in shared memory at the
               reduce-tile loop (layout and copy vectors from its subscripts),
               fragments, pipelining
  reg_tile     any reduction with two or more spatial axes (convolutions,
               batched and transposed products): block and thread tiles of the
               last two spatial axes, a register accumulator, the outer
               reduction axis split by bk, outer spatial axes on blockIdx.z
  row          an elementwise stage whose row statistics (reductions over the
               row, read directly or through inlined elementwise temporaries:
               row_group.py) are computed at its row loop as cross-thread
               reductions, kept in registers, the row optionally read once
               into shared memory (bench/schedules.py softmax / layernorm)
  row_regs     the stages of `row`, with the row held in registers across the
               block (templates.row_in_registers; bench/row_schedules.py):
               the row inputs read once into local caches in 16-byte pieces,
               each thread owning the same pieces in every stage, the
               statistics as cross-thread reductions over them; the per-row
               scalar temporaries (rstd) kept as stages in registers, the
               row-shaped ones (softmax's e) too with `keep_rows`; other
               row-shaped outputs (add + layernorm's S) stored at the row;
               optionally 1-D weights of the row's length in shared memory
  row_stream   the stages of `row` with the row streamed (templates.row_streamed;
               bench/row_schedules.py layernorm_streamed): each statistic a
               pass over the row reading the row inputs it reads itself in
               16-byte pieces through per-piece register caches, the output a
               last pass, the per-row scalars kept in registers, the piece
               loops unrolled by 1-8 (unroll factor): few registers a thread,
               several rows per SM, the row re-read from L2
  cross_thread a reduction: its outputs over blocks (rows per block on
               threadIdx.y), its reduction axes fused and spread over
               threadIdx.x, reduced across threads
  rfactor      a reduction: the reduction split by `factor`, the partial
               results over (factor x outputs) in parallel, then reduced across
               threads
  flat         anything: the spatial axes fused, `vec`-wide vectors, `threads`
               threads per block; a reduction runs serially in each thread (of an
               ordered stage, only the independent axes are spread)
  scan         an ordered stage whose recurrence is a scan (schedule/scan.py):
               Stage.scan over `threads` threads, the independent axes over blocks
  tc_epilogue  an elementwise stage over a tensor-core GEMM's temporary result
               (GEMM + bias + GELU): tc_tile's schedule on the epilogue, the
               product as the fragment accumulator (one kernel)
  simt_epilogue an elementwise stage over one or two GEMMs' temporary results
               (GEMM + bias + activation, SwiGLU's silu(X W1) * (X W3)):
               simt_tile's schedule on the epilogue, each product a register
               tile at its thread loop (one kernel)

  hopper_tile  a product C += A . B (either operand in either major order,
               16-bit inputs, float32 accumulation) on a Hopper target
               (Limits.arch sm_90a): the TMA + wgmma schedule of
               kernels/gemm_sm90.hopper_schedule (bn, consumers, stages,
               group_m, persistent, consumer_regs)
  hopper_epilogue an elementwise stage over one such product's temporary,
               read at its own indices: hopper_tile's schedule on the product
               and product.epilogue(stage) (one kernel, rules/hopper.py)

The rules live in one module per family: simple.py (flat, cross_thread,
rfactor), tiles.py (reg_tile, simt_tile, shared_tile, tc_tile), rows.py (row,
row_regs, row_stream), fused.py (the fusion rules), hopper.py (the Hopper rules); base.py holds Limits,
Context and Rule.
"""
from __future__ import annotations

from .base import Context, Limits, Rule, extents_of, pick, pow2_upto  # noqa: F401
from .rows import (_rr_apply, _rr_applies, _rr_claims, _rr_feasible, _rr_keeps,  # noqa: F401
                   _rr_registers, _rr_sample, _rr_threads, _row_applies, _row_apply,
                   _row_feasible, _row_sample, _rs_applies, _rs_apply, _rs_claims,
                   _rs_feasible, _rs_keeps, _rs_sample, row_producers)
from .simple import (_scan_applies, _scan_apply, _scan_feasible, _scan_sample,  # noqa: F401
                     _ct_apply, _ct_feasible, _ct_sample, _flat_applies,
                     _flat_apply, _flat_feasible, _flat_sample, _reduction, _rf_applies,
                     _rf_apply, _rf_feasible, _rf_sample)
from .tiles import (LANES, _rt_applies, _rt_apply, _rt_feasible, _rt_sample,  # noqa: F401
                    _sh_applies, _sh_apply, _sh_feasible, _sh_sample, _st_applies,
                    _st_apply, _st_feasible, _st_sample, _tc_applies, _tc_apply,
                    _tc_feasible, _tc_keeps, _tc_sample)
from .hopper import (_he_applies, _he_apply, _he_claims, _he_feasible,  # noqa: F401
                     _he_keeps, _he_sample, _ht_applies, _ht_apply, _ht_feasible, _ht_keeps,
                     _ht_sample)
from . import references as REF
from .fused import (_se_applies, _se_apply, _se_feasible, _se_sample, _te_applies,  # noqa: F401
                    _te_apply, _te_feasible, _te_keeps, _te_sample, products)

RULES = {r.name: r for r in (
    Rule("tc_tile", _tc_applies, _tc_sample, _tc_feasible, _tc_apply, keeps=_tc_keeps,
         reference=REF.tc, weight=4.0),
    Rule("simt_tile", _st_applies, _st_sample, _st_feasible, _st_apply, reference=REF.simt,
         weight=3.0),
    Rule("shared_tile", _sh_applies, _sh_sample, _sh_feasible, _sh_apply, weight=3.0),
    Rule("reg_tile", _rt_applies, _rt_sample, _rt_feasible, _rt_apply, weight=2.0),
    Rule("row", _row_applies, _row_sample, _row_feasible, _row_apply, claims=row_producers,
         weight=3.0),
    Rule("row_regs", _rr_applies, _rr_sample, _rr_feasible, _rr_apply, claims=_rr_claims,
         keeps=_rr_keeps, weight=2.0),
    Rule("row_stream", _rs_applies, _rs_sample, _rs_feasible, _rs_apply, claims=_rs_claims,
         keeps=_rs_keeps, weight=1.0),
    Rule("cross_thread", _reduction, _ct_sample, _ct_feasible, _ct_apply, weight=2.0),
    Rule("rfactor", _rf_applies, _rf_sample, _rf_feasible, _rf_apply, weight=1.0),
    Rule("flat", _flat_applies, _flat_sample, _flat_feasible, _flat_apply, weight=1.0),
    # (last: a rule's place changes the draws of the stages it applies to, and only there)
    Rule("tc_epilogue", _te_applies, _te_sample, _te_feasible, _te_apply, claims=products,
         keeps=_te_keeps, reference=REF.tc, weight=6.0),
    Rule("simt_epilogue", _se_applies, _se_sample, _se_feasible, _se_apply, claims=products,
         reference=REF.simt, weight=4.0),
    Rule("hopper_tile", _ht_applies, _ht_sample, _ht_feasible, _ht_apply, keeps=_ht_keeps,
         reference=REF.hopper, weight=6.0),
    Rule("hopper_epilogue", _he_applies, _he_sample, _he_feasible, _he_apply, claims=_he_claims,
         keeps=_he_keeps, reference=REF.hopper, weight=8.0),
    Rule("scan", _scan_applies, _scan_sample, _scan_feasible, _scan_apply, weight=2.0),
)}
