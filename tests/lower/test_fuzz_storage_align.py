"""Issue 22's long fuzz run, seed 7 pair 10924: storage_align(j, 6, 4) on a local
buffer of shape (j, 1, 3). The stride of dimension 0 is its padded row times 3, a
multiple of 3, never 4 modulo 6: lowering padded the row forever (30 minutes of the
fuzz run, the row at 13 billion elements). An offset no padding reaches is a
LoweringError naming the stage, the axis and the reachable offsets."""
import json

import numpy as np
import pytest

import tcomp

OP = tcomp.op("""def f(float(N) B) -> (C) {
    C(j, h, i) = B(h) + j where j in 0:N, i in 0:3
}""")


def _schedule(offset):
    return tcomp.Schedule.from_json(OP, json.dumps({"tcomp_schedule": 1, "directives": [
        {"kind": "CacheWrite", "stage": "C", "scope": "local"},
        {"kind": "StorageAlign", "stage": "C.local", "axis": "j", "factor": 6,
         "offset": offset},
        {"kind": "ComputeAt", "stage": "C.local", "target": "C", "axis": "h"}]}))


def test_an_offset_no_padding_reaches_is_refused():
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(_schedule(4), sizes={"N": 3})
    assert str(e.value) == (
        "storage_align: stage 'C.local' wants the stride of its buffer's dimension 0 "
        "(axis 'j') to be 4 modulo 6 elements, but that stride is the length of dimension "
        "1 times 3 (the elements of the dimensions inside that one, 3), and no multiple of "
        "3 is 4 modulo 6: choose an offset that is a multiple of gcd(3, 6) = 3, or a factor "
        "prime to 3")


@pytest.mark.parametrize("offset, shape", [(3, "[1, 1, 3]"), (0, "[1, 2, 3]")])
def test_a_reachable_offset_pads_the_row_and_runs(offset, shape):
    """Offset 3 = 3 x 1 modulo 6: the row of one element is kept (stride 3); offset 0
    = 3 x 2 modulo 6: the row is padded to two elements (stride 6)."""
    s = _schedule(offset)
    assert f"alloc local float32 C_local{shape}" in str(tcomp.lower(s, sizes={"N": 3}))
    B = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes={"N": 3})(B),
                                  tcomp.evaluate(OP, B))
