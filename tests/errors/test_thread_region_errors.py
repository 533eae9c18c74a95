"""Issue 22's long fuzz run (seed 1 pair 3854): a producer that binds a loop to a thread,
computed where its region changes size with a loop bound to a block or a thread, is refused
when built (its block's extent would name that loop)."""
import json

import pytest

import tcomp


def schedule(op, *directives):
    return tcomp.Schedule.from_json(op, json.dumps({"tcomp_schedule": 1,
                                                    "directives": list(directives)}))


def d(kind, stage, **kw):
    return dict(kind=kind, stage=stage, **kw)



@pytest.mark.parametrize("tag", ["blockIdx.x", "threadIdx.y"])
def test_a_thread_bound_producer_whose_region_moves_with_a_bound_loop_is_refused(tag):
    """The same region growing with a loop bound to a block or a thread cannot be widened
    (other blocks or threads would write the same elements at the same time): refused."""
    op = tcomp.op("""def f(float(N) A) -> (C) {
    O(i) = A(i) * 2
    C(t) = O(0) + O(t)
}""")
    s = schedule(op, d("Bind", "O", axis="i", tag="threadIdx.x"),
                 d("Split", "C", axis="t", factor=2, nparts=None),
                 d("Bind", "C", axis="t_o", tag=tag),
                 d("ComputeAt", "O", target="C", axis="t_i"))
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(s, "sim", sizes={"N": 4})
    assert str(e.value) == (
        f"stage 'O' binds a loop to a thread and is computed at 'C.t_i', where the region it "
        f"must compute changes size with loop variable 't_o', bound to {tag} (extent "
        f"max(0, t_o * 2 + t_i) - min(0, t_o * 2 + t_i) + 1); a thread loop's extent is "
        f"fixed at launch: compute 'O' at a loop where its region has a fixed size, or do "
        f"not bind its loops")
