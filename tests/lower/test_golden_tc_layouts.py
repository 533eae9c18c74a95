"""Golden Kernel IR of tensorized products in the other layouts
(tests/lower/golden/tc_layouts/<name>.txt; `pytest tests/lower
--update-golden` rewrites them: review the diff). Each is also run on the sim
against tcomp.evaluate.

- tn_bmm: C(b, m, n) += A(b, k, m) * B(b, k, n). The batch axis is
  blockIdx.z; the fragments hold one product's tiles (C_fragment[16], no
  batch dimension); A's shared tile is k rows of m (its own major order), so
  its fragment is loaded with ldmatrix_x4_trans, like B's.
- nt_attention: S(h, i, j) += Q(h, i, d) * K(h, j, d), per head. K's shared
  tile is j rows of d: both fragments load with plain ldmatrix_x4 (B from
  rows along the fragment's k), in a cp.async ring of 3.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import tcomp

from ..schedule.test_tensorize_layouts import ATTENTION, mm_src, schedule
from .util import inputs_for, run_sim

GOLDEN = Path(__file__).parent / "golden" / "tc_layouts"

EXAMPLES = {
    "tn_bmm": (mm_src("TN", batch="b"), {"NB": 2, "M": 32, "N": 32, "K": 32}, dict(wn=16)),
    "nt_attention": (ATTENTION, {"H": 2, "I": 32, "J": 32, "D": 48}, dict(pipeline=3, wn=32)),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_golden(name, update_golden):
    src, sizes, kw = EXAMPLES[name]
    op, s = schedule(src, **kw)
    text = str(tcomp.lower(s, sizes=sizes))
    path = GOLDEN / f"{name}.txt"
    if update_golden:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    else:
        assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
        assert text == path.read_text(), (
            f"lowered IR of '{name}' differs from {path} (rerun with --update-golden if the "
            f"change is intended, and review the diff)")
    assert "blockIdx.z" in text
    if name == "tn_bmm":
        assert "ldmatrix_x4_trans(&A_shared_fragment[" in text
        assert "alloc fragment float32 C_fragment[8]" in text
    else:
        assert "ldmatrix_x4(&K_shared_fragment[" in text and "cp_async_wait(" in text
    run_sim(s, inputs_for(op, sizes), sizes=sizes)
