"""Issue 22's long fuzz run (seed 1 pair 4617): a pipelined loop bound to a thread
afterwards. Every thread indexed the ring of shared buffers by its own index while
thread 0 filled it, and the sim read shared memory no thread wrote. `pipeline` refused a
bound loop; bind now refuses a pipelined one."""
import json

import pytest

import tcomp

OP = tcomp.op("def f(float(N) X) -> (C) { C max=! X(j) + X(0) }")


def msg(p, ax, stages=3):
    return (f"{p}: axis {ax} is pipelined ({stages} stages) and must stay a loop; "
            f"{p} another loop, or pipeline a loop that is not bound")


@pytest.mark.parametrize("stages", [2, 3])
def test_a_pipelined_loop_is_not_bound(stages):
    s = tcomp.Schedule(OP)
    C = s["C"]
    (j,) = C.reduce_axes
    C.pipeline(j, stages=stages)
    with pytest.raises(tcomp.ScheduleError) as e:
        C.bind(j, "threadIdx.y")
    assert str(e.value) == msg("bind", "Axis(C.j, reduce)", stages)
    assert C.leaf_axes == (j,)  # (the refused bind left the schedule as it was)
    assert s.to_json() == tcomp.Schedule.from_json(OP, s.to_json()).to_json()


def test_the_fuzz_finding_s_schedule_is_refused_when_replayed():
    text = json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "Pipeline", "stage": "C", "axis": "j", "stages": 3},
        {"kind": "Bind", "stage": "C", "axis": "j", "tag": "threadIdx.y"},
        {"kind": "CacheRead", "tensor": "X", "scope": "shared", "readers": ["C"]},
        {"kind": "ComputeAt", "stage": "X.shared", "target": "C", "axis": "j"}]})
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.Schedule.from_json(OP, text)
    assert msg("bind", "Axis(C.j, reduce)") in str(e.value)
