"""What NVRTC makes of paired epilogue stores and multi-buffered fragments
(tc_gemm pair_stores / fragment_pipeline), no GPU needed: the PTX, and the
SASS where cuobjdump is found (on the PATH or in the nvidia pip wheels, as
bench/tc_sass.py uses it).

The benchmark's best kernel (128 x 128 blocks, 64 x 64 warps, K tiles of 64,
a 3-stage cp.async ring, swizzled tiles) at 4096^3: each thread stores its
128 accumulator elements as 64 32-bit bfloat16x2 stores instead of 128
16-bit ones, the fused epilogue reads its bias as float2, and with two
fragment stages the registers stay in registers (no spills)."""
from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import tcomp

from ..bench.common import S

SIZES = {"M": 4096, "N": 4096, "K": 4096}
BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True)


def _build(op=None, **kw):
    return tcomp.build(S.tc_gemm(op, **BEST, **kw)[1], target="cuda", sizes=SIZES)


def _ptx_stores(ptx: str) -> collections.Counter:
    return collections.Counter(re.findall(r"\bst\.global[.\w]*", ptx))


def test_ptx_pairs_are_32_bit_stores():
    assert _ptx_stores(_build().ptx) == {"st.global.u16": 128}
    assert _ptx_stores(_build(pair_stores=True).ptx) == {"st.global.v2.u16": 64}


def test_ptx_of_the_fused_epilogue():
    k = _build(tcomp.op(S.TC_GEMM_GELU), pair_stores=True)
    assert _ptx_stores(k.ptx) == {"st.global.v2.u16": 64}
    assert re.search(r"ld\.global\.nc\.v2\.f32", k.ptx)  # the bias pair


def test_ptx_of_a_float32_output_pairs_is_float2():
    op = tcomp.op(S.TC_GEMM_F32_OUT)
    assert _ptx_stores(_build(op, pair_stores=True).ptx) == {"st.global.v2.f32": 64}


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for sub in ("cu13", "cuda_cuobjdump"):
            path = os.path.join(root, sub, "bin", "cuobjdump")
            if os.access(path, os.X_OK):
                return path
    return None


def _sass(cubin: bytes) -> tuple[dict, list[str]]:
    """(REG / LOCAL from the resource usage, the opcodes in order)."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (pip install nvidia-cuda-cuobjdump, or put it on the PATH)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
        code = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    usage = {k: int(v) for k, v in re.findall(r"(REG|LOCAL):(\d+)", res)}
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", code, re.M)
    return usage, ops


def test_sass_pairs_are_stg_e():
    usage, ops = _sass(_build(pair_stores=True).cubin)
    stores = collections.Counter(op for op in ops if op.startswith("STG"))
    assert stores == {"STG.E": 64} and usage["LOCAL"] == 0
    _, plain = _sass(_build().cubin)
    assert collections.Counter(op for op in plain if op.startswith("STG")) == {"STG.E.U16": 128}


def test_sass_fragment_pipeline_keeps_registers_and_interleaves_ldsm():
    """Two fragment stages (A and B of two k16 steps) fit in registers: no
    local memory; the K-tile loop's LDSM run between its HMMAs."""
    usage, ops = _sass(_build(fragment_pipeline=2, pair_stores=True).cubin)
    assert usage["LOCAL"] == 0 and usage["REG"] <= 255
    hmma = [i for i, op in enumerate(ops) if op.startswith("HMMA")]
    ldsm = [i for i, op in enumerate(ops) if op.startswith("LDSM")]
    assert len(hmma) == 128 and len(ldsm) == 32
    between = [i for i in ldsm if hmma[0] < i < hmma[-1]]
    assert len(between) >= 16  # at least the later steps' loads overlap earlier mma
