"""The machine model's user errors (tcomp/arch/target.py): a target that is
not an architecture, and a feature a target lacks, each naming the remedy."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.arch import target


@pytest.mark.parametrize("name", ["sm90", "sm_9", "compute_90", "", "cuda:h200", None])
def test_not_an_architecture(name):
    with pytest.raises(tcomp.LoweringError) as e:
        target.resolve(name) if name is not None else target.parse(name)
    shown = name[len("cuda:"):] if isinstance(name, str) and name.startswith("cuda:") else name
    assert str(e.value) == (f"target {shown!r} is not a GPU architecture name (expected e.g. "
                            f"'sm_80' or 'sm_90a')")


def test_missing_feature_names_what_needs_it_and_where_it_is():
    with pytest.raises(tcomp.LoweringError) as e:
        target.SM80.require("wgmma", "stage 'C': tensorize with wgmma_m64n128k16")
    assert str(e.value) == (
        "stage 'C': tensorize with wgmma_m64n128k16 needs wgmma.mma_async: warpgroup-wide MMA "
        "from shared-memory descriptors (target feature 'wgmma'), which target sm_80 does not "
        "have; build for sm_90a")
    with pytest.raises(tcomp.LoweringError, match=r"target sm_80 does not have; build for "
                                                  r"sm_90 or later"):
        target.SM80.require("tma", "a TMA copy")
