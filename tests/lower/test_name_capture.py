"""Issue 22, defect 2 (first part): a size or tensor named like a loop variable that
split generates (`k_o`, `k_i`) was captured by it: `for (int k_o = 0; k_o < (k_o + 3) / 4;
...)`, and the sim and the GPU returned zeros. Generated names now avoid the op's names."""
import numpy as np
import pytest

import tcomp


@pytest.mark.parametrize("src", [
    "def f(float(k_o) X) -> (O) { O(k) = X(k) * 2 }",
    "def f(float(N) k_o, float(N) k_i) -> (O) { O(k) = k_o(k) + k_i(k) }",
    "def f(float(k_i) X) -> (k_o) { k_o(k) = X(k) * 2 }",
])
@pytest.mark.parametrize("target", ["sim", "cuda"], ids=["to-sim", "to-nvrtc"])
def test_generated_loop_names_never_capture_user_names(src, target):
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    st = s[op.outputs[0].name]
    (k,) = st.axes
    ko, ki = st.split(k, 4)
    st.bind(ko, "blockIdx.x")
    st.bind(ki, "threadIdx.x")
    k = tcomp.build(s, target=target)
    if target == "cuda":
        users = set(op.size_vars) | {t.name for t in op.inputs + op.outputs}
        assert not [u for u in users if f"int {u} = " in k.source], k.source
        return
    arrays = [np.arange(10, dtype=np.float32) + i for i in range(len(op.inputs))]
    np.testing.assert_array_equal(k(*arrays), tcomp.evaluate(op, *arrays))
