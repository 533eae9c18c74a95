"""What NVRTC makes of the epilogue through shared memory (tc_gemm
smem_epilogue), no GPU needed: the PTX, and the SASS where cuobjdump is found
(test_tc_epilogue_cuda.py finds it). The benchmark's kernel (128 x 128
blocks, 64 x 64 warps, K tiles of 64, a 3-stage cp.async ring, swizzled
tiles) at 4096^3: each thread stores its 128 accumulators into the staging
tile as 64 bf16x2 shared stores (STS), and the block's 128 x 128 tile goes
out as 16 16-byte global stores a thread (STG.E.128: a warp writes four whole
128-byte lines per store) instead of 64 scattered 4-byte ones; registers and
spills as without the staging (none)."""
from __future__ import annotations

import collections
import re

import tcomp

from ..bench.common import S
from .test_tc_epilogue_cuda import _sass

SIZES = {"M": 4096, "N": 4096, "K": 4096}
BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)


def _build(op=None, **kw):
    return tcomp.build(S.tc_gemm(op, **BEST, **kw)[1], target="cuda", sizes=SIZES)


def _ptx(ptx: str, space: str) -> collections.Counter:
    return collections.Counter(re.findall(rf"\bst\.{space}[.\w]*", ptx))


def test_ptx_stores_fragments_to_shared_and_16_bytes_to_global():
    k = _build(pair_stores=True, smem_epilogue=True)
    assert _ptx(k.ptx, "global") == {"st.global.v4.f32": 16}  # (a float4 of 8 bf16)
    assert _ptx(k.ptx, "shared")["st.shared.v2.u16"] == 64


def test_ptx_of_the_fused_epilogue():
    k = _build(tcomp.op(S.TC_GEMM_GELU), pair_stores=True, smem_epilogue=True)
    assert _ptx(k.ptx, "global") == {"st.global.v4.f32": 16}  # (a float4 of 8 bf16)
    assert _ptx(k.ptx, "shared")["st.shared.v2.u16"] == 64
    assert re.search(r"ld\.global\.nc\.v2\.f32", k.ptx)  # the bias pair


def test_sass_stg_128_sts_and_no_spills():
    usage, ops = _sass(_build(pair_stores=True, smem_epilogue=True).cubin)
    count = collections.Counter(ops)
    assert {op: n for op, n in count.items() if op.startswith("STG")} == {"STG.E.128": 16}
    assert count["STS"] == 64 and count["LDS.128"] == 16
    assert usage["LOCAL"] == 0
    plain, _ = _sass(_build(pair_stores=True).cubin)
    assert usage["REG"] <= plain["REG"]  # staging adds no registers
