"""Errors around the epilogue through shared memory (tc_gemm smem_epilogue):
a kernel whose shared memory (the operand ring plus the staging tile) exceeds
what its arch lets one block use is refused at build, with its figure and the
limit; the fragment stores into the staging tile follow the accumulator's
rules (pairs of 2 columns), with the same message as stores to global."""
from __future__ import annotations

import pytest

import tcomp

from ..bench.common import S
from .test_schedule_errors import lowering_error


def test_shared_memory_over_the_arch_limit():
    # a 4-stage ring of 256 x 64 and 64 x 256 bf16 tiles is 256 KiB on its own
    s = S.tc_gemm(bm=256, bn=256, wm=64, wn=64, bk=64, pipeline=4, swizzle=True,
                  smem_epilogue=True)[1]
    with pytest.raises(tcomp.CudaError) as e:
        tcomp.build(s, target="cuda:sm_90a", sizes={"M": 256, "N": 256, "K": 256})
    assert str(e.value) == (
        "kernel gemm_C needs 393216 bytes of shared memory per block (384.0 KiB), more than "
        "sm_90a allows (227 KiB); use smaller shared tiles or fewer pipeline stages (a "
        "shared-memory epilogue's staging tile counts too: its bm x bn output elements)")


def test_the_staging_tile_counts_toward_the_limit():
    """128 x 128 blocks, K tiles of 64, 3 stages: 96 KiB of ring fits sm_86's
    99 KiB; with the 32 KiB staging tile it does not."""
    kw = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)
    sizes = {"M": 256, "N": 256, "K": 256}
    assert tcomp.build(S.tc_gemm(**kw)[1], target="cuda:sm_86", sizes=sizes).cubin
    with pytest.raises(tcomp.CudaError, match=r"kernel gemm_C needs 131072 bytes of shared "
                       r"memory per block \(128.0 KiB\), more than sm_86 allows \(99 KiB\)"):
        tcomp.build(S.tc_gemm(**kw, smem_epilogue=True)[1], target="cuda:sm_86", sizes=sizes)


def test_staging_stores_pair_two_columns():
    s = S.tc_gemm(bm=64, bn=64, wm=32, wn=32, bk=32, pipeline=3, smem_epilogue=True)[1]
    CS = s["C.shared"]
    _, v = CS.split(CS.leaf_axes[-1], 4)
    CS.vectorize(v)
    lowering_error(lambda: tcomp.lower(s, sizes={"M": 64, "N": 64, "K": 32}),
                   "fragment 'C_fragment': vectorized loop 'n_i_i' has 4 lanes; "
                   "each lane of the m16n8k16 accumulator holds pairs of 2 adjacent columns, "
                   "so a vectorized loop over it needs 2 (split the column loop by 2 and "
                   "vectorize the inner one)")
