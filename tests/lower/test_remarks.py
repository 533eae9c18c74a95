"""Lowering says what it declined: a pipelined ring whose copies are not cp.async runs on
ordinary stores with no empty cp.async groups, and a remark names each copy and why."""
import ml_dtypes
import numpy as np
import pytest

import tcomp
from bench.schedules import tc_gemm

BF = "def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
KW = dict(bm=32, bn=32, wm=16, wn=32, bk=16, pipeline=3)


def _check(op, k, sizes):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((sizes["M"], sizes["K"])).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((sizes["K"], sizes["N"])).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(k(A, B).astype(np.float64),
                               tcomp.evaluate(op, A, B).astype(np.float64), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("sizes, kw, why", [
    ({"M": 64, "N": 64, "K": 96}, dict(KW, vector=False),
     "'A_shared': its copy loop is not vectorized (vectorize the innermost copy axis: 4, 8 or "
     "16 bytes); 'B_shared': its copy loop is not vectorized"),
    ({"M": 37, "N": 53, "K": 29}, KW,
     "'A_shared': 'A' is not aligned to 16 bytes at these sizes; 'B_shared': 'B' is not "
     "aligned to 16 bytes at these sizes"),
    (None, KW, "'A_shared': 'A' is not contiguous along the vector loop, or its row length is "
               "not a constant (symbolic sizes)"),
])
def test_a_ring_without_cp_async_is_plain_stores_and_a_remark(sizes, kw, why):
    op, s = tc_gemm(tcomp.op(BF), **kw)
    ir_text = str(tcomp.lower(s, sizes=sizes))
    assert "cp_async" not in ir_text  # no commit or wait around no copy
    k = tcomp.build(s, target="cuda", sizes=sizes)
    assert "cp.async" not in k.source and "commit_group" not in k.ptx
    head = ("mm_C: pipeline: loop 'k_o' (stages=3): no copy into the ring is a cp.async, so it "
            "is filled by ordinary stores with no asynchronous overlap (")
    ring = [r for r in k.remarks if r.startswith(head)]
    assert len(ring) == 1 and why in ring[0], k.remarks
    assert "# remark: pipeline: loop 'k_o' (stages=3): no copy" in ir_text
    at = sizes or {"M": 37, "N": 53, "K": 29}
    _check(op, tcomp.build(s, target="sim", sizes=sizes), at)
    with pytest.raises(tcomp.LoweringError, match="build\\(strict=True\\)"):
        tcomp.build(s, target="cuda", sizes=sizes, strict=True)


def test_an_aligned_ring_is_cp_async_with_no_remark():
    op, s = tc_gemm(tcomp.op(BF), **KW)
    sizes = {"M": 64, "N": 64, "K": 96}
    k = tcomp.build(s, target="cuda", sizes=sizes, strict=True)
    assert "cp.async" in k.source and not any("pipeline:" in r for r in k.remarks)
    _check(op, tcomp.build(s, target="sim", sizes=sizes), sizes)
