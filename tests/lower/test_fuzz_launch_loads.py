"""Issue 22's long fuzz run, seed 10 pair 69110: `O` computed at C's loops over a region
whose extent reads a tensor (through the inlined `rsqrtf_o_i`'s `O(i_piece(s) % M)`),
with its loops bound to threads: the block's dimension read a tensor, which no launch
can know before the kernel runs (the sim crashed compiling it). Refused now."""
import json

import pytest

import tcomp

OP = tcomp.op("""def short(half(M, N) A, int32(static_assert_o) i_piece) -> (C) {
    O(static_assert) = ((i_piece(0) >= tanh(N)) * static_assert) where static_assert in 0:M
    rsqrtf_o_i(static_assert) = !((i_piece(static_assert) ? A(i_piece(static_assert) % M, i_piece(static_assert) % N) : A(i_piece(static_assert) % M, 0)) >= O(i_piece(static_assert) % M))
    C(switch, static_assert) = (!(!(rsqrtf_o_i(0) && O(0)) <= ((O(0) != O(0)) ? O(0) : switch))) + a where a = ((i_piece(0) ? switch : i_piece(0)) && !(rsqrtf_o_i(0))), switch in 0:N, static_assert in 0:N
}""")


def d(kind, stage, **kw):
    return dict(kind=kind, stage=stage, **kw)


DIRECTIVES = [
    d("Bind", "rsqrtf_o_i", axis="static_assert", tag="threadIdx.x"),
    d("ComputeInline", "rsqrtf_o_i"),
    d("Split", "C", axis="switch", factor=16, nparts=None),
    d("Split", "O", axis="static_assert", factor=2, nparts=None),
    d("Bind", "O", axis="static_assert_o", tag="threadIdx.x"),
    d("Bind", "C", axis="static_assert", tag="threadIdx.z"),
    d("ComputeAt", "O", target="C", axis="static_assert"),
    d("Split", "O", axis="static_assert_i", factor=5, nparts=None),
    d("Bind", "O", axis="static_assert_i_i", tag="threadIdx.z"),
    d("ComputeAt", "O", target="C", axis="switch_i"),
    d("ComputeAt", "O", target="C", axis="switch_o")]


def test_a_launch_dimension_that_reads_a_tensor_is_refused():
    s = tcomp.Schedule.from_json(OP, json.dumps({"tcomp_schedule": 1,
                                                 "directives": DIRECTIVES}))
    with pytest.raises(tcomp.LoweringError, match=r"^stage '.*': the block's dimension [xyz] "
                       r"\(.*\) reads a tensor; launch dimensions are fixed before the kernel "
                       r"runs: bind loops whose extents depend on sizes only"):
        tcomp.lower(s, sizes={"N": 5, "M": 3, "static_assert_o": 2})
