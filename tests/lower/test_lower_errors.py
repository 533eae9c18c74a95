"""Lowering and building: errors a user schedule can reach, and the regressions
behind scratch/bugs_lower.md (scalar inputs, cache stages left at root,
unreadable messages).

Every failure is a `tcomp.TcompError` with a message that says what to change;
never a bare Python exception from inside the compiler.
"""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lower.pipeline import lower as lower_pipeline

from .util import TWO_STAGES, inputs_for, run_sim

MM = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")
SCALE = tcomp.op("def scale(float(M,N) A) -> (O) { O(i, j) = A(i, j) * 2.0 }")
MM_SIZES = {"M": 4, "N": 3, "K": 5}


# ------------------------------------------------------------------ bug 1
SCALAR = tcomp.op("def axpy(float(N) X, float(N) Y, float a) -> (Z) { Z(n) = a * X(n) + Y(n) }")


@pytest.mark.parametrize("bound", [False, True])
def test_scalar_input_runs_on_sim(bound):
    s = tcomp.Schedule(SCALAR)
    Z = s["Z"]
    (n,) = Z.axes
    no, ni = Z.split(n, 4)
    Z.bind(no, "blockIdx.x")
    Z.bind(ni, "threadIdx.x")
    sizes = {"N": 7}
    args = inputs_for(SCALAR, sizes, scalars={"a": 1.5})
    assert args[2].ndim == 0
    run_sim(s, args, sizes=sizes if bound else None)


def test_scalar_input_as_numpy_scalar_and_python_float():
    s = tcomp.Schedule(SCALAR)
    k = tcomp.build(s, target="sim")
    X = np.arange(3, dtype=np.float32)
    for a in (np.float32(2.0), 2.0):
        np.testing.assert_array_equal(k(X, X, a), 2.0 * X + X)


# ------------------------------------------------------------------ bug 2
def _cache_write_at_root():
    s = tcomp.Schedule(MM)
    s.cache_write(s["C"], "local")
    return s


def _cache_read_at_root():
    s = tcomp.Schedule(MM)
    s.cache_read("A", "shared", [s["C"]])
    return s


def _cache_read_local_at_root():
    s = tcomp.Schedule(MM)
    s.cache_read("B", "local", [s["C"]])
    return s


@pytest.mark.parametrize("make", [_cache_write_at_root, _cache_read_at_root,
                                  _cache_read_local_at_root])
@pytest.mark.parametrize("how", ["lower", "check", "sim"])
def test_cache_stage_left_at_root(make, how):
    """A shared/local copy that nobody placed with compute_at cannot live at
    root (its own kernel): a TcompError naming the stage, not a KeyError."""
    s = make()
    args = inputs_for(MM, MM_SIZES)
    with pytest.raises(tcomp.TcompError) as info:
        if how == "lower":
            tcomp.lower(s, sizes=MM_SIZES)
        elif how == "check":
            lower_pipeline(s, MM_SIZES, check=True)
        else:
            tcomp.build(s, target="sim")(*args)
    msg = str(info.value)
    assert ("C.local" in msg or "A.shared" in msg or "B.local" in msg), msg
    assert "compute_at" in msg, msg


def test_global_cache_read_at_root_is_fine():
    """A global copy at root is a legal (if pointless) extra kernel."""
    s = tcomp.Schedule(MM)
    s.cache_read("A", "global", [s["C"]])
    prog = tcomp.lower(s, sizes=MM_SIZES)
    assert str(prog).count("kernel ") == 2
    run_sim(s, inputs_for(MM, MM_SIZES))


# ------------------------------------------------------------------ bug 5
def _unroll_symbolic():
    s = tcomp.Schedule(SCALE)
    i, j = s["O"].axes
    s["O"].unroll(j)
    return s


def _two_thread_extents():
    """threadIdx.x over N in one stage and over 4 in another: one block size."""
    two = TWO_STAGES
    s = tcomp.Schedule(two)
    D = s["D"]
    i, j = D.axes
    D.bind(i, "blockIdx.x")
    D.bind(j, "threadIdx.x")
    C = s["C"]
    C.compute_at(D, i)
    ci, cj = C.axes
    cjo, cji = C.split(cj, 4)
    C.bind(cji, "threadIdx.x")
    return s


def _shared_under_runtime_threads():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "blockIdx.x")
    O.bind(j, "threadIdx.x")
    AS = s.cache_read("A", "shared", [O])
    AS.compute_at(O, i)
    return s


@pytest.mark.parametrize("make, text", [
    (_two_thread_extents, "'j_i' (4) and 'j' (N)"),
    (_shared_under_runtime_threads, "'j' bound to threadIdx.x runs N threads")])
def test_messages_print_expressions(make, text):
    with pytest.raises(tcomp.LoweringError) as info:
        tcomp.lower(make())
    msg = str(info.value)
    assert text in msg, msg
    assert "Var(" not in msg and "DType(" not in msg, msg


# ------------------------------------------------------------------ launch-shape errors
def test_thread_tag_with_two_extents_in_one_kernel():
    two = TWO_STAGES
    s = tcomp.Schedule(two)
    D = s["D"]
    i, j = D.axes
    D.bind(i, "blockIdx.x")
    jo, ji = D.split(j, 4)
    D.bind(ji, "threadIdx.x")
    C = s["C"]
    C.compute_at(D, i)
    ci, cj = C.axes
    cjo, cji = C.split(cj, 2)
    C.bind(cji, "threadIdx.x")
    with pytest.raises(tcomp.LoweringError, match=r"threadIdx.x is bound to loops of different "
                                                  r"extents in one kernel: 'C_j_i' \(2\) and "
                                                  r"'j_i' \(4\)"):
        tcomp.lower(s, sizes={"M": 4, "N": 8})


def test_block_loop_inside_serial_loop():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(j, "blockIdx.x")
    with pytest.raises(tcomp.LoweringError, match=r"loop 'j' bound to blockIdx.x is nested "
                                                  r"inside a serial loop; reorder it outward"):
        tcomp.lower(s, sizes={"M": 4, "N": 4})


def test_too_many_threads_per_block():
    s = tcomp.Schedule(SCALE)
    O = s["O"]
    i, j = O.axes
    O.bind(i, "threadIdx.y")
    O.bind(j, "threadIdx.x")
    with pytest.raises(tcomp.LoweringError, match="64x32x1 threads per block exceed 1024"):
        tcomp.lower(s, sizes={"M": 32, "N": 64})
    tcomp.lower(s, sizes={"M": 32, "N": 32})  # exactly 1024 is fine


def test_unroll_limit():
    s = _unroll_symbolic()
    with pytest.raises(tcomp.LoweringError, match=r"unrolled loop 'j' has 200 iterations "
                                                  r"\(at most 128\)"):
        tcomp.lower(s, sizes={"M": 2, "N": 200})
    tcomp.lower(s, sizes={"M": 2, "N": 128})


def test_shared_cache_needs_constant_region():
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    mo, mi = C.split(m, 4)
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, mo)
    with pytest.raises(tcomp.LoweringError, match=r"stage 'A.shared' \(shared\) computed at "
                                                  r"'C.m_o' needs a region of non-constant "
                                                  r"extent K in dimension 1"):
        tcomp.lower(s)
    run_sim(s, inputs_for(MM, {"M": 6, "N": 3, "K": 5}), sizes={"K": 5})


def test_memory_accumulation_needs_accumulation_dtype():
    h = tcomp.op("def h(half(M,K) A, half(K,N) B) -> (half(M,N) C) { C(m,n) +=! A(m,k)*B(k,n) }")
    s = tcomp.Schedule(h)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.reorder(m, k, n)
    with pytest.raises(tcomp.LoweringError, match=r"accumulate in 'C' \(float16\), but the "
                                                  r"reduction needs float32; use "
                                                  r"cache_write\(\.\.\., 'local'\)"):
        tcomp.lower(s)


# ------------------------------------------------------------------ storage_order in global memory
# storage_order refuses a stage in global memory (ScheduleError), but set_scope
# may move a stage back to global memory afterwards: lowering refuses that.
TMP = tcomp.op("""def tmp(float(M,N) A) -> (D) {
  T(m, n) = exp(A(m, n))
  D(m, n) = T(m, n) + 1.0
}""")
TMP_SIZES = {"M": 4, "N": 3}
ORDER_GLOBAL = (r"stage '{stage}': storage_order lays out shared and local buffers only, but "
                r"'{tensor}' is in global memory")


def _ordered_then_global(first: str, at: bool):
    s = tcomp.Schedule(TMP)
    T = s["T"]
    m, n = T.axes
    T.set_scope(first)
    T.storage_order(n, m)
    T.set_scope("global")
    if at:
        T.compute_at(s["D"], s["D"].axes[0])
    return s


@pytest.mark.parametrize("first", ["shared", "local"])
@pytest.mark.parametrize("at", [False, True], ids=["root", "compute_at"])
@pytest.mark.parametrize("how", ["lower", "check", "sim", "symbolic"])
def test_storage_order_of_a_stage_moved_to_global_memory(first, at, how):
    """T laid out n-major in shared/local memory, then set_scope('global'): its
    own kernel (at root) or its nest inside D (compute_at) is refused."""
    s = _ordered_then_global(first, at)
    with pytest.raises(tcomp.LoweringError,
                       match=ORDER_GLOBAL.format(stage="T", tensor="T")):
        if how == "lower":
            tcomp.lower(s, sizes=TMP_SIZES)
        elif how == "check":
            lower_pipeline(s, TMP_SIZES, check=True)
        elif how == "symbolic":
            tcomp.lower(s)
        else:
            tcomp.build(s, target="sim")(*inputs_for(TMP, TMP_SIZES))


@pytest.mark.parametrize("at", [False, True], ids=["root", "compute_at"])
def test_storage_order_of_a_cache_moved_to_global_memory(at):
    s = tcomp.Schedule(MM)
    C = s["C"]
    AS = s.cache_read("A", "shared", [C])
    a0, a1 = AS.axes
    AS.storage_order(a1, a0)
    AS.set_scope("global")
    if at:
        AS.compute_at(C, C.axes[0])
    with pytest.raises(tcomp.LoweringError,
                       match=ORDER_GLOBAL.format(stage=r"A\.shared", tensor="A_shared")):
        tcomp.lower(s, sizes=MM_SIZES)
    # The replayed schedule gets the same error.
    replay = tcomp.Schedule.from_json(MM, s.to_json())
    with pytest.raises(tcomp.LoweringError, match="storage_order lays out shared and local"):
        tcomp.lower(replay, sizes=MM_SIZES)


def test_storage_order_then_global_then_shared_again_is_fine():
    """Only the final scope counts: back in shared memory the layout applies."""
    s = tcomp.Schedule(TMP)
    D, T = s["D"], s["T"]
    m, n = T.axes
    T.set_scope("shared")
    T.storage_order(n, m)
    T.set_scope("global")
    T.set_scope("local")
    T.compute_at(D, D.axes[0])
    text = str(tcomp.lower(s, sizes=TMP_SIZES))
    assert "alloc local float32 T[3, 1]" in text, text
    run_sim(s, inputs_for(TMP, TMP_SIZES), sizes=TMP_SIZES)


def test_storage_ordered_global_stage_inlined_is_fine():
    """An inlined stage has no buffer at all, so its layout is never used."""
    s = _ordered_then_global("shared", at=False)
    s["T"].compute_inline()
    run_sim(s, inputs_for(TMP, TMP_SIZES), sizes=TMP_SIZES)


# ------------------------------------------------------------------ lower() / build() arguments
def test_lower_argument_errors():
    s = tcomp.Schedule(MM)
    with pytest.raises(tcomp.LoweringError, match="'X' is not a size variable of 'mm'"):
        tcomp.lower(s, sizes={"X": 3})
    with pytest.raises(tcomp.LoweringError, match="size M must be a non-negative int"):
        tcomp.lower(s, sizes={"M": -1})
    with pytest.raises(tcomp.LoweringError, match="size M must be a non-negative int"):
        tcomp.lower(s, sizes={"M": 2.5})
    with pytest.raises(tcomp.LoweringError, match="needs a tcomp.Schedule"):
        tcomp.lower(MM)


def test_build_accepts_an_op_and_rejects_unknown_targets():
    args = inputs_for(MM, MM_SIZES)
    np.testing.assert_allclose(tcomp.build(MM, target="sim")(*args), tcomp.evaluate(MM, *args),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(tcomp.TcompError, match="unknown target"):
        tcomp.build(tcomp.Schedule(MM), target="opencl")


def test_sim_kernel_checks_bound_sizes_against_inputs():
    k = tcomp.build(tcomp.Schedule(MM), target="sim", sizes={"M": 4})
    args = inputs_for(MM, {"M": 5, "N": 3, "K": 2})
    with pytest.raises(tcomp.LoweringError, match="compiled for M=4, but the inputs have M=5"):
        k(*args)


@pytest.mark.parametrize("sizes", [{"M": 0, "N": 3, "K": 2}, {"M": 3, "N": 2, "K": 0}])
def test_empty_sizes(sizes):
    """Zero-size dimensions: empty grids and empty reductions (identity results)."""
    s = tcomp.Schedule(MM)
    C = s["C"]
    m, n = C.axes
    mo, mi = C.split(m, 4)
    C.bind(mo, "blockIdx.x")
    C.bind(mi, "threadIdx.x")
    args = inputs_for(MM, sizes)
    run_sim(s, args)
    run_sim(s, args, sizes=sizes)


def test_lowering_is_deterministic_and_replayable():
    """Same schedule -> same IR; to_json/from_json replays to the same IR."""
    def make():
        s = tcomp.Schedule(MM)
        C = s["C"]
        m, n = C.axes
        (k,) = C.reduce_axes
        mo, no, mi, ni = C.tile(m, n, 4, 4)
        ko, ki = C.split(k, 4)
        C.reorder(mo, no, ko, mi, ni, ki)
        C.bind(mo, "blockIdx.y")
        C.bind(no, "blockIdx.x")
        C.bind(mi, "threadIdx.y")
        C.bind(ni, "threadIdx.x")
        AS = s.cache_read("A", "shared", [C])
        AS.compute_at(C, ko)
        a0, a1 = AS.axes
        AS.bind(a0, "threadIdx.y")
        AS.bind(a1, "threadIdx.x")
        return s
    sizes = {"M": 8, "N": 8, "K": 8}
    a, b = make(), make()
    assert str(tcomp.lower(a, sizes=sizes)) == str(tcomp.lower(b, sizes=sizes))
    replay = tcomp.Schedule.from_json(MM, a.to_json())
    assert str(tcomp.lower(replay, sizes=sizes)) == str(tcomp.lower(a, sizes=sizes))
    # Lowering does not change the schedule.
    before = a.to_json()
    tcomp.lower(a, sizes=sizes)
    assert a.to_json() == before


# ------------------------------------------------------------------ dump= and sizes=
def test_dump_to_an_unwritable_path_is_a_lowering_error(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a folder")
    folder = str(blocker / "dumps")
    with pytest.raises(tcomp.LoweringError) as info:
        tcomp.lower(tcomp.Schedule(MM), dump=folder)
    path = str(blocker / "dumps" / "00_build.txt")
    assert str(info.value) == (f"lower: cannot write the IR dump {path!r}: Not a directory; "
                               f"pass dump= a folder you can write to")


def test_dump_must_be_a_path():
    with pytest.raises(tcomp.LoweringError) as info:
        tcomp.lower(tcomp.Schedule(MM), dump=7)
    assert str(info.value) == "lower: dump must be a folder path (str), got 7"


def test_numpy_integer_sizes_are_accepted():
    A = np.ones((4, 5), np.float32)
    sizes = {"M": np.int64(A.shape[0]), "K": np.int32(A.shape[1]), "N": np.uint8(3)}
    prog = tcomp.lower(tcomp.Schedule(MM), sizes=sizes)
    assert prog.bound_sizes == {"M": 4, "K": 5, "N": 3}
    assert all(type(v) is int for v in prog.bound_sizes.values())
    with pytest.raises(tcomp.LoweringError) as info:
        tcomp.lower(tcomp.Schedule(MM), sizes={"M": np.bool_(True)})
    assert str(info.value) == "lower: size M must be a non-negative int, got np.True_"
