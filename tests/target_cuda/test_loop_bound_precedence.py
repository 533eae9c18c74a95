"""A loop whose bound is a ternary (a ragged loop under a tail guard) prints
the bound bracketed: `j < (guard ? n : 0)`, not `j < guard ? n : 0`, which C
reads as `(j < guard) ? n : 0` (on the H200: an illegal address in the
embedding bag of tests/target_cuda/test_ragged_cuda.py)."""
import tcomp


BAG = """def bag(float(V, D) T, int32(L) J, int32(B1) Off) -> (O) {
    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)
}"""


def test_a_ternary_loop_bound_is_bracketed():
    s = tcomp.Schedule(tcomp.op(BAG))
    st = s["O"]
    b, d = st.axes
    st.bind(b, "blockIdx.x")
    do, di = st.split(d, 32)
    st.bind(di, "threadIdx.x")
    src = tcomp.build(s, target="cuda").source
    (line,) = [x.strip() for x in src.splitlines() if x.strip().startswith("for (int j")]
    assert line == "for (int j = 0; j < (d_o * 32 + d_i < D ? max(Off[b + 1] - Off[b], 0) : 0); ++j) {"
