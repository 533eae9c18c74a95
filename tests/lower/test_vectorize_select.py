"""A load inside a branch of a select (the zero-filled edge of a tensor-core
tile) runs only where the condition holds: it must never become a vector load
(which would read past the tensor)."""
from __future__ import annotations

import tcomp

from ..bench.common import S


def test_conditional_loads_are_not_vectors():
    op, s = S.tc_gemm(bm=64, bn=64, wm=32, wn=32, bk=32)
    awkward = tcomp.build(s, target="cuda", sizes={"M": 300, "N": 136, "K": 200}).source
    assert "? " in awkward and "reinterpret_cast<const float4*>(&A" not in awkward
    whole = tcomp.build(s, target="cuda", sizes={"M": 256, "N": 256, "K": 256}).source
    assert "reinterpret_cast<const float4*>(&A" in whole  # no select: 16-byte loads
