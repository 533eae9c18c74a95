"""Ragged loops on a GPU (lower/ragged_loops.py) against torch's EmbeddingBag
(offsets, sum and max, empty bags) and a masked variable-length sum."""
import numpy as np
import pytest

import tcomp

pytestmark = pytest.mark.cuda

BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) OP T(J(j), d) where j in Off(b):Off(b + 1)
}"""


def schedule(op, per_thread=False):
    s = tcomp.Schedule(op)
    st = s["O"]
    b, d = st.axes
    if per_thread:  # threads of one block run different trip counts
        bo, bi = st.split(b, 8)
        st.reorder(bo, bi, d)
        st.bind(bo, "blockIdx.x")
        st.bind(bi, "threadIdx.y")
    else:
        st.bind(b, "blockIdx.x")
    do, di = st.split(d, 32)
    st.bind(di, "threadIdx.x")
    return s


@pytest.mark.parametrize("mode, op_text", [("sum", "+=!"), ("max", "max=!")])
@pytest.mark.parametrize("per_thread", [False, True])
def test_embedding_bag_matches_torch(mode, op_text, per_thread):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    v, d, bags = 1000, 72, 301
    lengths = torch.randint(0, 9, (bags,), generator=g)
    lengths[::7] = 0  # empty bags
    off = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    idx = torch.randint(0, v, (int(off[-1]),), generator=g)
    table = torch.randn(v, d, generator=g)
    want = torch.nn.functional.embedding_bag(idx, table, off[:-1], mode=mode,
                                             include_last_offset=False)
    op = tcomp.op(BAG.replace("OP", op_text))
    k = tcomp.build(schedule(op, per_thread), target="cuda")
    got = np.asarray(k(table.numpy(), idx.int().numpy(), off.int().numpy()))
    want = want.numpy()
    if mode == "max":  # torch gives 0 for an empty bag; tcomp the identity, -inf
        empty = (lengths == 0).numpy()
        assert np.all(got[empty] == -np.inf)
        got[empty] = 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
