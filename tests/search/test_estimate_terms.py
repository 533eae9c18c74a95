"""The terms of the analytic estimate that the H200's times of random
candidates called for (bench/rank.py, 2026-12-03): loads the CUDA compiler
makes once across unrolled copies, warps of fewer than 32 threads, the
register cap of `__launch_bounds__`, and the rules' reference points that
auto_schedule ranks beside its random draws (rules/references.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tcomp
from tcomp.schedule import templates
from tcomp.search import Space, auto, validate
from tcomp.search import features as F

MM = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
SIZES = {"M": 512, "N": 512, "K": 256}


def feats(s, sizes=SIZES):
    v = validate(s.op, s.to_json(), sizes, "cuda")
    assert v.ok, v
    return F.as_dict(F.extract(v, sizes))


def simt(fragments: bool, tm=4, tn=4, bm=64, bn=64):
    op = tcomp.op(MM)
    s = tcomp.Schedule(op)
    templates.simt_gemm(s, "C", "A", "B", bm, bn, 8, tm, tn, fragments=fragments,
                        pipeline=False, vector=True)
    return s


def test_a_shared_load_the_unrolled_copies_share_counts_once():
    # Without fragments the thread tile reads A(k, i) and B(k, j) from shared memory in
    # unrolled i and j loops: A(k, i) is the same address in every j copy, which the
    # compiler loads once; so the shared bytes equal those of explicit fragments.
    plain, frag = feats(simt(False)), feats(simt(True))
    threads, k = (64 // 4) * (64 // 4) * (512 // 64) ** 2, 256
    per_thread = (4 + 4) * k * 4  # tm + tn floats a k step
    assert plain["shared_load_bytes"] == pytest.approx(threads * per_thread)
    assert frag["shared_load_bytes"] == pytest.approx(plain["shared_load_bytes"])


def test_a_block_of_eight_threads_pays_for_a_whole_warp():
    f = {"threads": 32, "blocks": 4096, "occupancy": 0.5, "register_use": 0.5, "waves": 4.0,
         "flops": 1e12, "special": 0.0, "mma_flops": 0.0, "wgmma_flops": 0.0, "mem_instructions": 0.0,
         "unique_global_bytes": 1e6, "global_sector_bytes": 1e6, "memory_efficiency": 1.0,
         "shared_load_bytes": 0.0, "shared_store_bytes": 0.0, "barriers": 0.0,
         "allreduce": 0.0}
    full, eighth = F._kernel_ms(f), F._kernel_ms({**f, "threads": 8})
    assert eighth == pytest.approx(4 * (full - F.LAUNCH_MS) + F.LAUNCH_MS, rel=0.05)


def test_registers_past_the_launch_bound_still_leave_a_block_resident():
    # 1024 threads asking for more than 64 registers each: ptxas caps them at 64 (the
    # kernel's __launch_bounds__), so one block is resident, not none
    op = tcomp.op(MM)
    s = simt(True, tm=2, tn=2, bm=64, bn=64)  # 32 x 32 = 1024 threads
    v = validate(op, s.to_json(), SIZES, "cuda")
    res = v.resources[0]
    assert res.threads == 1024
    f = F.as_dict(F.extract(v, SIZES))
    assert f["blocks_per_sm"] >= 1 and f["occupancy"] > 0


def test_a_gemm_space_offers_the_reference_tile():
    op = tcomp.op(MM)
    sizes = {"M": 4096, "N": 4096, "K": 4096}
    space = Space(op, sizes)
    pool = space.generate(4, np.random.default_rng(0))
    refs = space.references(pool)
    tiles = [json.loads(r.plan)["stages"]["C"] for r in refs if "C:simt_tile" == r.sketch]
    assert tiles, [r.sketch for r in refs]
    t = tiles[0]
    assert (t["bm"], t["bn"], t["bk"], t["tm"], t["tn"], t["lanes"]) == (128, 128, 8, 8, 8,
                                                                          [4, 8])
    assert all(r.schedule not in {c.schedule for c in pool} for r in refs)


def test_small_extents_get_a_smaller_reference_tile():
    op = tcomp.op(MM)
    space = Space(op, {"M": 40, "N": 48, "K": 16})
    from tcomp.search.rules import references as REF
    pts = REF.simt(space.ctx, "C")
    assert [p["bm"] for p in pts] == [64, 32]  # 128 is past 40's power of two


def test_auto_chooses_the_reference_tile_for_a_large_gemm():
    op = tcomp.op(MM)
    c = auto.choose(op, {"M": 4096, "N": 4096, "K": 4096}, "cuda", check=False)
    assert c.sketch == "C:simt_tile"
    assert c.estimate_ms == pytest.approx(2.9, rel=0.1)  # the H200 ran it in 2.97 ms
