"""Golden IR and CUDA of the schedule-built Hopper kernels (issue 24: a golden
per primitive's kernel): the GEMM with A given as (K, M) (MN-major operand),
ping-pong consumers, a batched product, the fused bias + GELU epilogue, the
convolution through TMA im2col copies, and attention with the log-sum-exp.
Rewrite with `pytest tests/kernels/test_hopper_goldens.py --update-golden`
after an intended change, and read the diff."""
from __future__ import annotations

from pathlib import Path

import pytest

import tcomp
from tcomp.kernels.attention_sm90 import AttentionConfig, attention_schedule
from tcomp.kernels.conv_sm90 import conv2d_schedule, conv2d_source
from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule
from tcomp.target_cuda.codegen import program_source
from tests.lower.util import check_golden

from .hopper_ops import op

GOLDEN = Path(__file__).parent / "golden"


def _fused():
    from .test_hopper_schedule import BIAS_GELU
    s = hopper_schedule(tcomp.op(BIAS_GELU), GemmConfig(bm=64, bn=256, pingpong=True),
                        stage="T")
    s["T"].epilogue(s["D"])
    return s, {"M": 256, "N": 512, "K": 128}


def _batched():
    from .test_hopper_schedule import batched
    o, _ = batched("bmm_nn")
    return (hopper_schedule(o, GemmConfig(bm=64, bn=256, pingpong=True)),
            {"Z": 3, "M": 128, "N": 256, "K": 64})


CASES = {
    "hopper_tn": lambda: (hopper_schedule(op("TN"), GemmConfig(bn=128, stages=3)),
                          {"M": 256, "N": 256, "K": 128}),
    "hopper_pingpong": lambda: (hopper_schedule(op("NT"), GemmConfig(bm=128, bn=128,
                                                                     pingpong=True)),
                                {"M": 256, "N": 256, "K": 128}),
    "hopper_batched": _batched,
    "hopper_bias_gelu": _fused,
    "hopper_conv2d": lambda: (conv2d_schedule(tcomp.op(conv2d_source()),
                                              GemmConfig(bm=128, bn=64, stages=3)),
                              {"N": 2, "H": 5, "W": 7, "C": 64, "K": 64, "RSC": 576}),
    "attention_lse": lambda: (attention_schedule(AttentionConfig(lse=True), {"D": 64, "E": 64}),
                              {"D": 64, "E": 64}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_golden_ir_and_cuda(name, update_golden):
    s, sizes = CASES[name]()
    prog = tcomp.lower(s, sizes=sizes)
    check_golden(GOLDEN / f"{name}.txt", str(prog), update_golden)
    src, _ = program_source(prog)
    check_golden(GOLDEN / f"{name}.cu", src, update_golden)
