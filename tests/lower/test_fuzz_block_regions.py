"""Issue 22's long fuzz runs, group B of tests/fuzz/open_findings.txt (seed 4 pair
11495): a global stage computed at a consumer's loop bound to blockIdx.T computes its
region once in each block. The region must move one-to-one with the block index: a
block loop fused from loops the region does not all read, or a region wider than its
step from one block to the next, makes blocks write the same elements in no fixed
order (the sim: "block (0, 2, 0) overwrites O[0], which block (0, 0, 0) read"; the GPU:
a silent race). Refused when built (lower/block_regions.py), naming the loops."""
import json

import numpy as np
import pytest

import tcomp


def schedule(op, *directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": list(directives)}))


def d(kind, stage=None, **kw):
    return dict(kind=kind, **({"stage": stage} if stage else {}), **kw)


FUSED = tcomp.op("""def f(float(M) X, float(M, K) A) -> (C) {
    O(j) +=! A(j, k) * 2.0
    C(j, k) = O(j) + X(j) * A(j, k)
}""")


def _fused(*extra):
    return schedule(FUSED, d("Split", "C", axis="j", factor=2, nparts=None),
                    d("Reorder", "C", axes=["j_o", "k", "j_i"]),
                    d("Fuse", "C", outer="j_o", inner="k"),
                    d("Fuse", "C", outer="j_o_k_f", inner="j_i"),
                    d("Bind", "C", axis="j_o_k_f_j_i_f", tag="blockIdx.y"),
                    d("ComputeAt", "O", target="C", axis="j_o_k_f_j_i_f"), *extra)


@pytest.mark.parametrize("sizes", [{"M": 4, "K": 3}, None])
def test_a_block_loop_fused_from_a_loop_the_region_does_not_read_is_refused(sizes):
    """Seed 4 pair 11495: C's loops j_o, k, j_i fused into one loop bound to blockIdx.y,
    O(j) computed there: its region reads j_o and j_i but not k, so the K blocks that
    differ only in k computed (and accumulated into) the same O(j). The check of pair
    32738 saw the fused variable in the region and passed it; the fused loop is taken
    apart now. Refused at fixed and at symbolic sizes."""
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(_fused(), "sim", sizes=sizes)
    assert str(e.value) == (
        "stage 'O' (global scope) is computed at a loop of 'C' in each block of its loop "
        "'j_o_k_f_j_i_f' (bound to blockIdx.y, fused from 'j_o', 'k', 'j_i'), but the "
        "region it computes there does not move with 'k': blocks that differ only in 'k' "
        "would write the same elements of 'O' in no fixed order (a race between blocks). "
        "Compute 'O' at root, give it shared or local scope (a copy in each block), or do "
        "not fuse 'k' into the block loop")


def test_the_remedies_of_the_fused_block_loop_run_correctly():
    """The remedies the message names: O local (a copy in each block), or the block
    loop fused only from loops the region reads (j_o and j_i, with k serial)."""
    X = np.arange(4, dtype=np.float32)
    A = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    want = tcomp.evaluate(FUSED, X, A)
    local = _fused(d("SetScope", "O", scope="local"))
    np.testing.assert_array_equal(tcomp.build(local, "sim", sizes={"M": 4, "K": 3})(X, A), want)
    readable = schedule(FUSED, d("Split", "C", axis="j", factor=2, nparts=None),
                        d("Reorder", "C", axes=["j_o", "j_i", "k"]),
                        d("Fuse", "C", outer="j_o", inner="j_i"),
                        d("Bind", "C", axis="j_o_j_i_f", tag="blockIdx.x"),
                        d("ComputeAt", "O", target="C", axis="j_o_j_i_f"))
    np.testing.assert_array_equal(tcomp.build(readable, "sim", sizes={"M": 4, "K": 3})(X, A),
                                  want)
    assert "blockIdx.x" in str(tcomp.lower(readable))


def test_a_region_wider_than_its_step_between_blocks_is_refused_where_it_accumulates():
    """C(j) reads O(j) and O(j + 1) at a loop j bound to blockIdx.x: O's region there,
    two elements from j, overlaps the next block's. Where O accumulates in memory (its
    reduction loop outside its spatial one), block j + 1 zeroed O(j + 1) while block j
    read it (the sim: "block (1, 0, 0) overwrites O[1], which block (0, 0, 0) read")."""
    op = tcomp.op("""def f(float(N) A) -> (C) {
    O(j) +=! A(j) * A(k)
    C(j) = O(j) + O(j + 1) where j in 0:N-1
}""")
    s = schedule(op, d("ComputeAt", "O", target="C", axis="j"),
                 d("Reorder", "O", axes=["k", "j"]),
                 d("Bind", "C", axis="j", tag="blockIdx.x"))
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, "sim", sizes={"N": 4})
    assert str(e.value) == (
        "stage 'O' (global scope) is computed at a loop of 'C' in each block of its loop "
        "'j' (bound to blockIdx.x), where its region is 2 elements wide in dimension 0 "
        "(j: from j) but moves by only 1 from one block of 'j' to the next, and it "
        "accumulates in 'O' (a spatial loop inside its reduction loops): neighbouring "
        "blocks would sum into the same elements of 'O' in no fixed order (a race between "
        "blocks). Compute 'O' at root, give it shared or local scope (a copy in each "
        "block), or reorder its reduction loops innermost (it then stores each element "
        "once, the same in both blocks)")
    A = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    want = tcomp.evaluate(op, A)
    # the remedy: accumulating in registers, each block stores O(j + 1) once, the same
    # value as its neighbour's (a halo computed twice, as test_sim_batches allows)
    registers = schedule(op, d("ComputeAt", "O", target="C", axis="j"),
                         d("Bind", "C", axis="j", tag="blockIdx.x"))
    np.testing.assert_array_equal(tcomp.build(registers, "sim", sizes={"N": 4})(A), want)
    local = schedule(op, d("ComputeAt", "O", target="C", axis="j"),
                     d("Reorder", "O", axes=["k", "j"]),
                     d("Bind", "C", axis="j", tag="blockIdx.x"),
                     d("SetScope", "O", scope="local"))
    np.testing.assert_array_equal(tcomp.build(local, "sim", sizes={"N": 4})(A), want)
