"""The machine model's user errors (tcomp/arch/target.py): a target that is
not an architecture, and a feature a target lacks, each naming the remedy;
and what `tcomp.lower(..., target=)` refuses for the Target it is given."""
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


# ---------------------------------------------- lower(..., target=): the Target it reads
SMALL = {"M": 64, "N": 64, "K": 64}


def _tc_gemm():
    from ..bench.common import S
    return S.tc_gemm(bm=64, bn=64, wm=32, wn=32, bk=16, pipeline=3)[1]


def test_lowering_for_a_target_without_an_intrinsics_feature():
    """The program after the passes (software_pipeline added the cp.async)
    needs each intrinsic's feature of the target (lower/target_features.py)."""
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(_tc_gemm(), sizes=SMALL, target="sm_75")
    assert str(e.value) == (
        "kernel gemm_C: cp_async needs cp.async: asynchronous global-to-shared copies in "
        "commit groups (target feature 'cp_async'), which target sm_75 does not have; build "
        "for sm_80 or later")
    assert str(tcomp.lower(_tc_gemm(), sizes=SMALL, target="cuda:sm_80")) == \
        str(tcomp.lower(_tc_gemm(), sizes=SMALL))


@pytest.mark.parametrize("arch", ["sm_90", "sm_100a"])
def test_lowering_register_reallocation_for_a_target_without_setmaxnreg(arch):
    from tcomp.kernels.gemm_sm90 import SOURCE, GemmConfig, hopper_schedule
    s = hopper_schedule(tcomp.op(SOURCE), GemmConfig())
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes={"M": 256, "N": 256, "K": 128}, target=arch)
    assert str(e.value) == (
        f"kernel gemm_sm90_C: role 'producer' (regs=40) needs setmaxnreg: per-warpgroup "
        f"register reallocation (target feature 'setmaxnreg'), which target {arch} does not "
        f"have; build for sm_90a")


def test_the_default_target_is_sm_90a():
    s = _tc_gemm()
    assert str(tcomp.lower(s, sizes=SMALL, target=target.SM90A)) == \
        str(tcomp.lower(s, sizes=SMALL))


def test_an_attention_plan_reads_the_shared_memory_of_its_target():
    """hopper_attention_plan.py checks the ring against the target's shared
    memory per block (arch/limits.py): 227 KiB on sm_90a, 163 KiB on sm_80."""
    from tcomp.kernels.attention_sm90 import AttentionConfig, attention_schedule
    sizes = {"D": 128, "E": 128}
    s = attention_schedule(AttentionConfig(), sizes)
    assert tcomp.lower(s, sizes=sizes, target="sm_90a").kernels
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s, sizes=sizes, target="sm_80")
    assert str(e.value) == (
        "tensorize wgmma_rs: stage 'O.online': 128 queries x 176 keys per step with a 2-slot "
        "ring at D=128, E=128 need 230480 bytes of shared memory; a block may have 166912 on "
        "sm_80 (fewer stages, or split 'j' by less)")
