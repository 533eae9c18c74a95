"""Every error of tuple (monoid) reductions and of Schedule.online_softmax:
the exception type and its message text."""
from __future__ import annotations

import pytest

import tcomp

ARGMAX = "def f(float(N, D) X) -> (mx, ix) { mx(n), ix(n) argmax=! X(n, d), d }"


@pytest.mark.parametrize("src, message", [
    ("def f(float(N, D) X) -> (a, b) { a(n), b(n) max=! X(n, d) }",
     "several tensors on the left-hand side need a tuple reduction (argmax=!, argmin=!, "
     "welford=!, expsum=!), not 'max=!'"),
    ("def f(float(N, D) X) -> (a, b) { a(n), b(n) argmax=! X(n, d) }",
     "'argmax=!' takes a value and its payload (the index), got 1 value"),
    ("def f(float(N, D) X) -> (a) { a(n) argmax=! X(n, d), d }",
     "'argmax=!' with 2 values writes 2 tensors (max, payload), got 1"),
    ("def f(float(N, D) X) -> (a, b) { a(n), b(n) expsum=! X(n, d), X(n, d), d }",
     "'expsum=!' takes a value (and optionally a weight), got 3 values"),
    ("def f(float(N, D) X) -> (a, b) { a(n), b(d) argmax=! X(n, d), d }",
     "the components of a tuple reduction are written at the same indices: 'b(d)' differs "
     "from 'a(n)'"),
    ("def f(float(N, D) X) -> (a) { a(n), a(n) argmax=! X(n, d), d }",
     "'a' is written twice by this tuple reduction"),
    ("def f(float(N, D) X) -> (a, b) { a(n, d), b(n, d) argmax=! X(n, d), d }",
     "'argmax=!' has no reduction index: every index on its right-hand side is on its left"),
    ("def f(float(N, D) X) -> (a, b) {\n a(n) = X(n, 0)\n"
     " a(n), b(n) argmax=! X(n, d), d }",
     "'a' is written by an earlier statement (line 2); a component of a tuple reduction is "
     "written by no other statement"),
    ("def f(float(N, D) X) -> (a, b) {\n a(n), b(n) argmax=! X(n, d), d\n a(n) = 2.0 }",
     "'a' is written by the tuple reduction on line 2; a component of a tuple reduction is "
     "written by no other statement"),
    ("def f(float(N, D) X) -> (a, int8(N) b) { a(n), b(n) argmax=! X(n, d), d }",
     "type mismatch: 'argmax=!' computes int32 for 'b' but it is int8 (declared); cast the "
     "value explicitly"),
    ("def f(bool(N, D) X) -> (a, b) { a(n), b(n) argmax=! X(n, d), d }",
     "'argmax=!' needs a numeric value, got bool; cast it, e.g. int32(...)"),
    ("def f(int32(N, D) X) -> (a, b, c) { a(n), b(n), c(n) welford=! X(n, d) }",
     "'welford=!' needs a float value, got int32; cast it, e.g. float(...)"),
    ("def f(int32(N, D) X) -> (a, b) { a(n), b(n) expsum=! X(n, d) }",
     "'expsum=!' needs a float value, got int32; cast it, e.g. float(...)"),
    ("def f(float(N, D) X) -> (a, b, c) { a(n), b(n), c(n) expsum=! X(n, d), X(n, d) > 0.0 }",
     "'expsum=!' needs a numeric weight, got bool; cast it, e.g. float(...)"),
])
def test_lang_errors(src, message):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.op(src)
    assert message in str(e.value)


def _tuple_stage():
    s = tcomp.Schedule(tcomp.op(ARGMAX))
    return s, s["mx"]


WHY = "stage 'mx' computes a tuple reduction ('argmax=!' of mx, ix); "


@pytest.mark.parametrize("call, message", [
    (lambda s, st: st.bind(st.reduce_axes[0], "threadIdx.x"),
     "bind: " + WHY + "its reduction axes run in one thread (a cross-thread reduction of a "
     "tuple state is not supported yet); bind its spatial axes, split the reduction and "
     "unroll it"),
    (lambda s, st: st.rfactor(st.reduce_axes[0]),
     "rfactor: " + WHY + "a combine of partial tuple states is not supported yet"),
    (lambda s, st: st.compute_inline(), "compute_inline: " + WHY + "it writes several tensors"),
    (lambda s, st: st.set_scope("local"), "set_scope: " + WHY + "its components live in global"),
    (lambda s, st: s.cache_write(st, "local"), "cache_write: " + WHY + "it already accumulates"),
    (lambda s, st: st.vectorize(st.reduce_axes[0]),
     "vectorize: " + WHY + "its update is not a vector operation; unroll the loop instead"),
    (lambda s, st: st.tensorize(st.reduce_axes[0], "mma_m16n8k16"),
     "tensorize: " + WHY + "no tensor-core intrinsic computes a tuple reduction"),
])
def test_tuple_stage_refusals(call, message):
    s, st = _tuple_stage()
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        call(s, st)
    assert message in str(e.value)
    assert s.to_json() == before


def test_tuple_stage_compute_at_refused():
    op = tcomp.op("def f(float(N, D) X) -> (mx, ix, O) {\n mx(n), ix(n) argmax=! X(n, d), d\n"
                  " O(n) = mx(n) + 1.0 }")
    s = tcomp.Schedule(op)
    with pytest.raises(tcomp.ScheduleError, match="compute_at: stage 'mx' computes a tuple "
                       "reduction .* it writes several tensors and stays at root"):
        s["mx"].compute_at(s["O"], s["O"].axes[0])


def test_tuple_reduction_loops_innermost():
    s, st = _tuple_stage()
    st.reorder(st.reduce_axes[0], st.axes[0])
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.lower(s)
    assert ("stage 'mx' computes a tuple reduction ('argmax=!'): its reduction loops must be "
            "inside every spatial loop; reorder the reduction axes innermost") in str(e.value)


# ------------------------------------------------------------------ online_softmax
def chain(sum_rhs="exp(X(n, d) - mx(n))", w_rhs=None, extra="", mx_rhs="max=! X(n, d)",
          outs="O"):
    w = f"\n    W(n, e) +=! {w_rhs}" if w_rhs else ""
    return tcomp.op(f"""def f(float(N, D) X, float(D, E) V, float(N, D) Y) -> ({outs}) {{
    mx(n) {mx_rhs}
    sm(n) +=! {sum_rhs}{w}{extra}
    O(n) = mx(n) + log(sm(n))
}}""")


@pytest.mark.parametrize("op, weighted, message", [
    (chain(mx_rhs="min=! X(n, d)"), (),
     "online_softmax: stage 'mx' must be a max=! reduction (the running max), not a min=! "
     "reduction"),
    (chain(sum_rhs="exp(X(n, d) - mx(n)) * 2.0"), (),
     "online_softmax: the sum 'sm' must add exp(x - mx(n)) with x the max's value X(n, d); "
     "it adds exp(X(n, d) - mx(n)) * 2.0"),
    (chain(sum_rhs="exp(X(n, d) - 2.0 * mx(n))"), (),
     "online_softmax: the sum 'sm' adds exp(X(n, d) - 2.0 * mx(n)); its exponent must be "
     "shifted by the max, '... - mx(n)' (read at the stage's own indices)"),
    (chain(sum_rhs="exp(Y(n, d) - mx(n))"), (),
     "online_softmax: the sum 'sm' adds exp(Y(n, d) - mx(n)), but the max 'mx' is over "
     "X(n, d): the shifted values must be the max's"),
    (tcomp.op("""def f(float(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    sm(n) +=! exp(X(n, d) - mx(n)) where d in 0:D-1
    O(n) = mx(n) + log(sm(n))
}"""), (),
     "online_softmax: the sum 'sm' runs 'd' over 0:D - 1, the max 'mx' runs 'd' over 0:D: "
     "the chain must reduce over the same axis"),
    (tcomp.op("""def f(float(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    sm(n, d) +=! exp(X(n, d) - mx(n))
    O(n) = mx(n) + log(sm(n, 0))
}"""), (), "online_softmax: the sum 'sm' must be a +=! reduction, not a plain assignment"),
    (tcomp.op("""def f(float(N, D) X, float(N, K) Z) -> (O) {
    mx(n) max=! X(n, d)
    sm(n) +=! exp(X(n, d) - mx(n)) * Z(n, k)
    O(n) = mx(n) + log(sm(n))
}"""), (),
     "online_softmax: the sum 'sm' reduces over d, k at (n); the max 'mx' reduces over "
     "d at (n): the sum needs the same points first and 1 reduction index"),
    (chain(sum_rhs="X(n, d)", mx_rhs="+=! X(n, d)"), (),
     "online_softmax: stage 'mx' must be a max=! reduction (the running max), not a +=! "
     "reduction"),
    (chain(w_rhs="exp(X(n, d) - mx(n)) * V(d, e) / mx(n)"), ("W",),
     "online_softmax: the weighted sum 'W' divides by mx(n); it may divide only by the sum "
     "sm(n)"),
    (chain(w_rhs="V(d, e) * X(n, d)"), ("W",),
     "online_softmax: the weighted sum 'W' must add a product with one factor exp(x - mx(n)); "
     "it adds V(d, e) * X(n, d)"),
    (chain(w_rhs="exp(X(n, d) - mx(n)) * mx(n) * V(d, e)"), ("W",),
     "online_softmax: the weight mx(n) of 'W' reads 'mx', which the rewrite computes in the "
     "same pass"),
    (chain(w_rhs="exp(X(n, d) - mx(n)) * V(d, e)", extra="\n    sm(n) += 1.0"), (),
     "online_softmax: 'sm' (sum) is also written by stage 'sm.1'; the rewrite needs the "
     "tensor written once"),
    (chain(), ("sm",), "online_softmax: a stage appears twice in the chain (mx, sm, sm)"),
    (chain(), 5, "online_softmax: weighted must be a stage or a list of stages, got 5"),
    (tcomp.op("""def f(float(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    P(n, d) = exp(X(n, d) - mx(n))
    sm(n) +=! P(n, d)
    O(n) = mx(n) + log(sm(n))
}""").__class__ and tcomp.op("""def f(float16(N, D) X) -> (O) {
    mx(n) max=! X(n, d)
    P(n, d) = exp(X(n, d) - mx(n))
    sm(n) +=! P(n, d)
    O(n) = mx(n) + log(sm(n))
}"""), (),
     "online_softmax: 'P' is stored as float16, rounding its values; the rewrite computes "
     "them in float32 inside the pass and would not round them; store 'P' as float32"),
    (tcomp.op("def f(int32(N, D) X) -> (mx, sm) {\n mx(n) max=! X(n, d)\n"
              " sm(n) +=! exp(X(n, d) - mx(n)) }"), (),
     "online_softmax: the max of 'mx' is over int32 values; the rewrite needs float values"),
])
def test_online_softmax_errors(op, weighted, message):
    s = tcomp.Schedule(op)
    before = s.to_json()
    with pytest.raises(tcomp.ScheduleError) as e:
        s.online_softmax("mx", "sm", weighted)
    assert message in str(e.value)
    assert s.to_json() == before and [st.name for st in s.stages] == \
        [st.name for st in tcomp.Schedule(op).stages]


def test_online_softmax_needs_unscheduled_stages():
    s = tcomp.Schedule(chain())
    s["sm"].split(s["sm"].reduce_axes[0], 4)
    with pytest.raises(tcomp.ScheduleError) as e:
        s.online_softmax("mx", "sm")
    assert ("online_softmax: stage 'sm' (sum) is already scheduled; call online_softmax "
            "before other primitives on the stages of the chain") in str(e.value)
    s = tcomp.Schedule(chain())
    s.online_softmax("mx", "sm")
    with pytest.raises(tcomp.ScheduleError) as e:
        s.online_softmax("mx", "sm")
    assert "online_softmax: stage 'mx' (max) already computes a tuple reduction" in str(e.value)
    with pytest.raises(tcomp.ScheduleError, match="online_softmax: no stage named 'nope'"):
        s.online_softmax("nope", "sm")
