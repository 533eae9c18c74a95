"""The refusals of the Hopper stage primitives (schedule/primitives_hopper.py)
and of the statistics epilogue (schedule/statistics_epilogue.py) that
tests/errors/test_hopper_schedule_errors.py and
tests/kernels/test_attention_schedule.py leave out: each reached through the
public API at symbolic sizes (nothing is lowered)."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.errors import ScheduleError
from tcomp.kernels.attention_sm90 import source

from .test_hopper_schedule_errors import _tiled


def _online(src):
    s = tcomp.Schedule(tcomp.op(src))
    s.online_softmax("mx", "l", ["O"])
    return s, s["O.online"]


# ------------------------------------------------------------------ epilogue
def test_a_second_epilogue_is_refused():
    s = tcomp.Schedule(tcomp.op("""def f(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
      T(m, n) +=! float(A(m, k)) * float(B(k, n))
      D(m, n) = T(m, n) + bias(n)
    }"""))
    s["T"].epilogue(s["D"])
    with pytest.raises(ScheduleError, match="epilogue: stage 'T' has the epilogue 'D' already"):
        s["T"].epilogue(s["D"])


# ------------------------------------------------------------------ tensorize wgmma (a GEMM)
@pytest.mark.parametrize("args, body, msg", [
    ("bfloat16(M,N) A, bfloat16(M,N) B", "C(m, n) = float(A(m, n)) * float(B(m, n))",
     "it is not a sum over one reduction axis into two spatial axes"),
    ("bfloat16(M,K) A, bfloat16(K,N) B", "C(m, n) +=! float(A(m, k)) * exp(float(B(k, n)))",
     "its factors are not reads of two tensors at plain loop variables"),
    ("bfloat16(M,N) A, bfloat16(K,N) B", "C(m, n) +=! float(A(m, n)) * float(B(k, n))",
     r"its factors are read at \(m, n\) and \(k, n\), not at \(m, k\) and \(n, k\) in "
     r"either order"),
], ids=["no-reduction", "not-plain-reads", "wrong-subscripts"])
def test_tensorize_wgmma_refuses_what_is_not_a_contraction(args, body, msg):
    s = tcomp.Schedule(tcomp.op(f"def f({args}) -> (C) {{ {body} }}"))
    C = s["C"]
    with pytest.raises(ScheduleError, match=r"tensorize: stage 'C': " + msg + r".* "
                       r"\(wgmma_m64n64k16 computes C\[m, n\] \+= A\[m, k\] \* B\[n, k\] with A "
                       r"and B in either order\)"):
        C.tensorize(C.axes[0], "wgmma_m64n64k16")


def test_tensorize_wgmma_needs_the_k_loop_inside():
    s, C, ax = _tiled(order=("mo", "no", "w", "ko", "ki", "mw", "ni"))
    with pytest.raises(ScheduleError, match="tensorize: no loop of 'k' from 'm_i_i' inward; "
                                            "wgmma_m64n256k16 needs the m, n and k loops"):
        C.tensorize(ax["mw"], "wgmma_m64n256k16")


def test_tensorize_wgmma_over_an_unrolled_loop():
    s, C, ax = _tiled()
    C.unroll(ax["ni"])
    with pytest.raises(ScheduleError, match="tensorize: loop 'n_i' inside 'm_i_i' is bound, "
                                            "unrolled, vectorized or tensorized already"):
        C.tensorize(ax["mw"], "wgmma_m64n256k16")


# ------------------------------------------------------------------ wgmma at another stage's loop
def test_wgmma_at_a_loop_needs_a_sum_over_one_axis():
    s = tcomp.Schedule(tcomp.op("""def f(bfloat16(M,N) A, bfloat16(N,K) B) -> (C) {
      T(m, n) = float(A(m, n)) * 2.0
      C(m, k) +=! T(m, n) * float(B(n, k))
    }"""))
    T, C = s["T"], s["C"]
    T.compute_at(C, C.axes[0])
    with pytest.raises(ScheduleError, match=r"tensorize: stage 'T': it is not a sum over one "
                                            r"reduction axis into rows and columns"):
        T.tensorize(T.axes[0], "wgmma_m64n64k16")


def test_wgmma_at_a_loop_accumulates_in_float32():
    s = tcomp.Schedule(tcomp.op("""def f(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) {
      T(m, n) +=! int32(A(m, k) * B(n, k))
      C(m, n) = float(T(m, n)) * 2.0
    }"""))
    T, C = s["T"], s["C"]
    T.compute_at(C, C.axes[0])
    with pytest.raises(ScheduleError, match="tensorize: wgmma_m64n64k16 accumulates in float32, "
                                            "stage 'T' in int32"):
        T.tensorize(T.axes[0], "wgmma_m64n64k16")


def test_wgmma_at_a_loop_over_an_unrolled_loop():
    """The scores' loops unrolled: the loop is named (checked before the shape check,
    which an unrolled loop would trip with a message naming loops that look right)."""
    s, on = _online(source("bfloat16", d=64))
    sc = s["Sc"]
    sc.compute_at(on, on.reduce_axes[0])
    sc.unroll(sc.reduce_axes[0])
    with pytest.raises(ScheduleError, match="tensorize: loop 'd' inside 'i' is bound, unrolled "
                                            "or vectorized already"):
        sc.tensorize(sc.axes[1], "wgmma_m64n128k16")


# ------------------------------------------------------------------ wgmma_rs (attention's P . V)
def test_wgmma_rs_needs_rows_and_columns():
    s, on = _online("""def f(float(S,T) X, bfloat16(T) V) -> (O) {
      mx(i) max=! X(i, j)
      l(i) +=! exp(X(i, j) - mx(i))
      O(i) +=! exp(X(i, j) - mx(i)) * float(V(j)) / l(i)
    }""")
    with pytest.raises(ScheduleError, match=r"tensorize: stage 'O.online' reduces over j at "
                                            r"\(i\); wgmma_rs_m64n64k16 takes rows, columns and "
                                            r"one key axis"):
        on.tensorize(on.axes[0], "wgmma_rs_m64n64k16")


def test_wgmma_rs_takes_16_bit_weights():
    s, on = _online(source("bfloat16", d=64).replace("bfloat16(Z, T, E) V", "float(Z, T, E) V"))
    with pytest.raises(ScheduleError, match="tensorize: wgmma_rs_m64n64k16 takes bfloat16 or "
                                            "float16 weights; 'V' is float32"):
        on.tensorize(on.axes[1], "wgmma_rs_m64n64k16")


def test_wgmma_rs_over_an_unrolled_loop():
    s, on = _online(source("bfloat16", d=64))
    z, i, e = on.axes
    (j,) = on.reduce_axes
    io, iw = on.split(i, 64)
    jo, ji = on.split(j, 128)
    on.reorder(z, io, jo, iw, e, ji)
    on.unroll(ji)
    with pytest.raises(ScheduleError, match="tensorize: loop 'j_i' inside 'i_i' is bound, "
                                            "unrolled, vectorized or tensorized already"):
        on.tensorize(iw, "wgmma_rs_m64n64k16")


# ------------------------------------------------------------------ the statistics epilogue
LSE = source("bfloat16", d=64, lse=True)


def test_a_statistics_epilogue_must_be_elementwise_over_the_rows():
    src = LSE.replace("float32(Z, S) L", "float32(Z) L").replace(
        "L(z, i) = mx(z, i) + log(l(z, i))", "L(z) +=! mx(z, i) + log(l(z, i))")
    s, on = _online(src)
    with pytest.raises(ScheduleError, match=r"epilogue: stage 'L' reads 'mx', not 'O.online'; "
                                            r"it must be elementwise over the leading indices "
                                            r"\(z, i\) of 'O.online'"):
        on.epilogue(s["L"])


def test_statistics_of_other_values_are_refused():
    """L2 is the log-sum-exp of the unscaled scores: another expsum than O.online's."""
    src = LSE.replace("float32(Z, S) L", "float32(Z, S) L2").replace(
        "    L(z, i) = mx(z, i) + log(l(z, i))\n",
        "    mx2(z, i) max=! Sc(z, i, j)\n"
        "    l2(z, i) +=! exp(Sc(z, i, j) - mx2(z, i))\n"
        "    L2(z, i) = mx2(z, i) + log(l2(z, i))\n")
    s, on = _online(src)
    s.online_softmax("mx2", "l2")
    with pytest.raises(ScheduleError, match="epilogue: stage 'L2' reads 'mx2', which is not the "
                                            "running max and sum of 'O.online'"):
        on.epilogue(s["L2"])
