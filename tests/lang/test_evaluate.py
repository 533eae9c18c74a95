"""`tcomp.evaluate` against hand-written float64 NumPy references.

Every run draws fresh random data; the seed is part of each failure message,
so a failure reproduces with `SEED=<seed> pytest ...`.
"""
from __future__ import annotations

import importlib
import os

import ml_dtypes
import numpy as np
import pytest

import tcomp

# The module (tcomp.lang re-exports the function under the same name).
evaluate_mod = importlib.import_module("tcomp.lang.evaluate")

from .programs import CASES, BY_NAME

BIG = [c for c in CASES if c.has_big]

# Half and bfloat16 results are rounded once on store: at least this tolerance.
LOW_PRECISION = {np.dtype(np.float16): 2e-3, np.dtype(ml_dtypes.bfloat16): 1e-2}


def fresh_seed() -> int:
    return int(os.environ.get("SEED") or np.random.SeedSequence().entropy)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check_outputs(case, got, ref, where: str):
    got, ref = as_tuple(got), as_tuple(ref)
    assert len(got) == len(ref), f"{where}: {len(got)} outputs, reference has {len(ref)}"
    if case.dtypes is not None:
        assert tuple(str(g.dtype) for g in got) == case.dtypes, f"{where}: output dtypes"
    for i, (g, r) in enumerate(zip(got, ref)):
        what = f"{where}, output {i}"
        assert isinstance(g, np.ndarray), f"{what}: not an ndarray but {type(g).__name__}"
        r = np.asarray(r)
        assert g.shape == r.shape, f"{what}: shape {g.shape}, reference {r.shape}"
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g.astype(r.dtype), r, err_msg=what)
            if g.dtype.kind != "b":
                assert np.array_equal(g.astype(np.int64), r.astype(np.int64)), what
            continue
        rtol, atol = case.tol(i)
        low = LOW_PRECISION.get(g.dtype, 0)
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=max(rtol, low),
                                   atol=max(atol, low), equal_nan=True, err_msg=what)


def output_dtypes(case):
    """The dtypes the checked op says its outputs have (single-def programs)."""
    prog = case.program()
    if len(prog) != 1:
        return None
    return tuple(t.dtype.numpy for t in next(iter(prog)).outputs)


def test_registry_is_broad():
    assert len(CASES) >= 45
    assert all(c.ref is not None and c.inputs is not None for c in CASES)


def test_registry_uses_every_builtin():
    from tcomp.lang import builtins
    from tcomp.lang.ast import Call, walk
    used = set()
    for case in CASES:
        for op in case.program():
            for st in op.statements:
                exprs = [st.rhs] + list(st.lets.values())
                used |= {x.fn for e in exprs for x in walk(e) if isinstance(x, Call)}
    missing = sorted(set(builtins.ARITY) - used)
    assert not missing, f"builtins no program uses: {missing}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_program(case):
    seed = fresh_seed()
    arrays = case.inputs(np.random.default_rng(seed), False)
    for a in arrays:
        assert np.asarray(a).size == 0 or np.any(np.asarray(a) != 0), "all-zero input"
    got = case.evaluate(*arrays)
    where = f"{case.name} (seed {seed})"
    check_outputs(case, got, case.ref(*arrays), where)
    want = output_dtypes(case)
    if want is not None:
        assert tuple(g.dtype for g in as_tuple(got)) == want, f"{where}: dtypes vs op"


@pytest.mark.parametrize("case", BIG, ids=lambda c: c.name)
def test_program_big(case):
    seed = fresh_seed()
    arrays = case.inputs(np.random.default_rng(seed), True)
    got = case.evaluate(*arrays)
    check_outputs(case, got, case.ref(*arrays), f"{case.name}, big (seed {seed})")


def test_big_cases_exist():
    names = {c.name for c in BIG}
    assert {"matmul", "conv2d_bias", "maxpool", "avgpool"} <= names


def _max_box(case, arrays) -> int:
    """Elements in the largest statement box (spatial x reduction extents)."""
    from tcomp.lang.evaluate import bind_inputs
    from tcomp.lang.symbolic import eval_int
    biggest = 0
    for op in case.program():
        if len(op.inputs) != len(arrays):
            continue
        _, sizes = bind_inputs(op, arrays)
        for st in op.statements:
            n = 1
            for r in st.ranges:
                n *= max(0, eval_int(r.hi, sizes) - eval_int(r.lo, sizes))
            biggest = max(biggest, n)
    return biggest


def test_big_variants_take_the_chunked_path():
    """The pooling and padded-conv big variants (no einsum) exceed CHUNK."""
    for name in ("maxpool", "avgpool", "conv2d_padded"):
        case = BY_NAME[name]
        arrays = case.inputs(np.random.default_rng(0), True)
        assert _max_box(case, arrays) > evaluate_mod.CHUNK, name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_chunked_equals_unchunked(case, monkeypatch):
    """Splitting statement boxes into small chunks gives the same result."""
    seed = fresh_seed()
    arrays = case.inputs(np.random.default_rng(seed), False)
    whole = as_tuple(case.evaluate(*arrays))
    monkeypatch.setattr(evaluate_mod, "CHUNK", 23)
    chunked = as_tuple(case.evaluate(*arrays))
    for i, (a, b) in enumerate(zip(whole, chunked)):
        what = f"{case.name} output {i} (seed {seed})"
        assert a.dtype == b.dtype and a.shape == b.shape, what
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            # Only the summation order may differ.
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-5,
                                       atol=1e-5, equal_nan=True, err_msg=what)


def test_chunked_big_matches_reference(monkeypatch):
    """A tiny CHUNK on a mid-sized padded conv: many chunks along several axes."""
    case = BY_NAME["conv2d_padded"]
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    from .programs import normal
    arrays = (normal(rng, 2, 3, 9, 8), normal(rng, 4, 3, 3, 2))
    monkeypatch.setattr(evaluate_mod, "CHUNK", 50)
    check_outputs(case, case.evaluate(*arrays), case.ref(*arrays), f"chunked (seed {seed})")


# ------------------------------------------------------- calling convention
def test_scalar_result_is_0d_ndarray():
    op = tcomp.op("def total(float(N) A) -> (s) { s +=! A(i) }")
    s = tcomp.evaluate(op, np.arange(5, dtype=np.float32))
    assert isinstance(s, np.ndarray) and s.shape == () and s.dtype == np.float32
    assert float(s) == 10.0


def test_scalar_inputs_accept_python_numbers_and_0d_arrays():
    op = tcomp.op(BY_NAME["scalars"].src)
    X, Y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    a = tcomp.evaluate(op, 2.0, X, -1, Y)
    b = tcomp.evaluate(op, np.array(2.0, np.float32), X, np.float32(-1), Y)
    np.testing.assert_array_equal(a, 2 * X - 1)
    np.testing.assert_array_equal(a, b)


def test_tuple_outputs_follow_def_order_not_statement_order():
    op = tcomp.op("""
def f(float(M, N) A) -> (last, first, middle) {
    first(i) +=! A(i, j)
    middle(i, j) = A(i, j) * 2.0
    last = 7
}
""")
    A = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = tcomp.evaluate(op, A)
    assert isinstance(out, tuple) and len(out) == 3
    last, first, middle = out
    assert last.shape == () and last.dtype == np.int32 and int(last) == 7
    np.testing.assert_array_equal(first, [3, 12])
    np.testing.assert_array_equal(middle, A * 2)


def test_single_output_is_not_a_tuple():
    out = tcomp.evaluate(tcomp.op(BY_NAME["matvec"].src), np.eye(3, dtype=np.float32),
                         np.ones(3, np.float32))
    assert isinstance(out, np.ndarray)


def test_arrays_must_have_the_declared_dtype():
    """Arrays (and NumPy scalars) are never cast: float64 or int32 data for a `float`
    input is an error naming the input and both dtypes (tcomp/lang/signature.py)."""
    op = tcomp.op(BY_NAME["matmul"].src)
    B = np.ones((3, 5), np.float32)
    for bad in (np.ones((4, 3)), np.ones((4, 3), np.int32), np.ones((4, 3), np.float16)):
        with pytest.raises(tcomp.LangError, match=f"input 'A' is float32, but the array passed "
                                                  f"for it is {bad.dtype}; convert it explicitly"):
            tcomp.evaluate(op, bad, B)
    sop = tcomp.op("def f(float a) -> (O) { O = a * 2.0 }")
    with pytest.raises(tcomp.LangError, match="is float32, but the array passed for it is float64"):
        tcomp.evaluate(sop, np.float64(1.5))  # a NumPy scalar has a dtype: it must match
    assert float(tcomp.evaluate(sop, np.float32(1.5))) == 3.0
    iop = tcomp.op("def f(int32(N) A) -> (O) { O(i) = A(i) + 1 }")
    with pytest.raises(tcomp.LangError, match="is int32, but the array passed for it is int64"):
        tcomp.evaluate(iop, np.array([1, 2], np.int64))


def test_python_data_converts_when_its_kind_fits():
    """Python numbers and nested lists: floats for float inputs, ints for integer and
    float inputs, bools for bool inputs."""
    op = tcomp.op(BY_NAME["matmul"].src)
    got = tcomp.evaluate(op, [[1, 2]], [[3.0], [4.5]])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [[12.0]])
    sop = tcomp.op("def f(float a, int32 n, bool b) -> (O) { O = b ? a * float(n) : 0.0 }")
    assert float(tcomp.evaluate(sop, 1.5, 4, True)) == 6.0
    assert float(tcomp.evaluate(sop, 2, -1, False)) == 0.0
    for args, what in (((1.5, 2.5, True), "'n' is int32, but the Python data passed for it "
                                          "holds float values; pass int values"),
                       ((1.5, 2, 1), "'b' is bool, but the Python data passed for it holds "
                                     "int values; pass bool values"),
                       ((True, 2, True), "'a' is float32, but the Python data passed for it "
                                         "holds bool values; pass float or int values"),
                       (("x", 2, True), "'a' is float32, but the Python data passed for it "
                                        "holds a str")):
        with pytest.raises(tcomp.LangError, match=what):
            tcomp.evaluate(sop, *args)
    with pytest.raises(tcomp.LangError, match="cannot read a list as an array"):
        tcomp.evaluate(op, [[1, 2], [3]], [[1.0], [2.0]])


def test_integer_inputs_convert_only_when_the_values_fit():
    op = tcomp.op("def f(int8(N) A, uint8(N) B) -> (O) { O(i) = A(i) + B(i) }")
    # Python lists are int64 arrays: fine when every value fits.
    np.testing.assert_array_equal(tcomp.evaluate(op, [-128, 127], [255, 0]), [127, 127])
    with pytest.raises(tcomp.LangError, match="outside its range"):
        tcomp.evaluate(op, [200, 0], [0, 0])  # would wrap to -56
    with pytest.raises(tcomp.LangError, match="outside its range"):
        tcomp.evaluate(op, [0, 0], [-1, 0])  # would wrap to 255
    with pytest.raises(tcomp.LangError, match="uint8"):
        tcomp.evaluate(op, [0, 0], [0.5, 1.0])


def test_low_precision_inputs_from_python_floats():
    op = tcomp.op(BY_NAME["half_ops"].src)
    A = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(tcomp.LangError, match="'A' is float16, but the array passed for it is "
                                              "float32"):
        tcomp.evaluate(op, A, A + 1)
    O, H, R, S = tcomp.evaluate(op, A.tolist(), (A + 1).tolist())  # Python floats: rounded
    assert O.dtype == np.float16
    want = (A.astype(np.float16).astype(np.float32) * (A + 1).astype(np.float16).astype(np.float32)
            + A.astype(np.float16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(O, want)
    bop = tcomp.op("def f(bfloat16(N) A) -> (O) { O(i) = A(i) * A(i) }")
    out = tcomp.evaluate(bop, [1.5, 3.0])
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [2.25, 9.0])


def test_inconsistent_sizes_are_refused():
    op = tcomp.op(BY_NAME["matmul"].src)
    with pytest.raises(tcomp.LangError, match="K"):
        tcomp.evaluate(op, np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(tcomp.LangError, match="dimension"):
        tcomp.evaluate(op, np.ones(3, np.float32), np.ones((3, 2), np.float32))
    with pytest.raises(tcomp.LangError, match="input"):
        tcomp.evaluate(op, np.ones((2, 3), np.float32))
    with pytest.raises(tcomp.LangError):
        tcomp.evaluate(tcomp.parse(BY_NAME["matmul"].src), np.ones((1, 1)), np.ones((1, 1)))


def test_literal_dimensions_are_checked():
    op = tcomp.op("def f(float(N, 3) A) -> (O) { O(i) +=! A(i, j) }")
    np.testing.assert_array_equal(tcomp.evaluate(op, np.ones((2, 3), np.float32)), [3, 3])
    with pytest.raises(tcomp.LangError, match="dimension 1 must be 3, got 4"):
        tcomp.evaluate(op, np.ones((2, 4), np.float32))


# ------------------------------------------------------------- semantics
def test_outputs_start_zero_filled():
    op = tcomp.op("def f(float(N) A) -> (O) { O(i) = A(i) + 1.0 where i in 2:N }")
    np.testing.assert_array_equal(tcomp.evaluate(op, np.ones(4, np.float32)), [0, 0, 2, 2])


def test_update_reads_the_value_from_before_the_statement():
    op = tcomp.op("""
def f(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) = O(N - 1 - i) + O(i) * 10.0
}
""")
    np.testing.assert_array_equal(tcomp.evaluate(op, np.float32([1, 2, 3])), [13, 22, 31])


def test_ternary_is_lazy():
    op = tcomp.op("""
def f(float(N) A, int32(M) idx) -> (O, P) {
    O(i) = i < N ? A(i) : -1.0 where i in 0:N + 2
    P(j) = idx(j) >= 0 && idx(j) < N && A(idx(j)) > 0.0 ? 1 : idx(j) < 0 || A(idx(j)) < 0.0 ? 2 : 3
}
""")
    A = np.float32([1, -1, 0])
    O, P = tcomp.evaluate(op, A, np.int32([0, 1, 2, -5]))
    np.testing.assert_array_equal(O, [1, -1, 0, -1, -1])
    np.testing.assert_array_equal(P, [1, 2, 3, 2])
    # idx 7 gets past `idx(j) < 0 ||` to the read A(7): that read is taken.
    with pytest.raises(tcomp.LangError, match="out of bounds"):
        tcomp.evaluate(op, A, np.int32([0, 7]))


def test_taken_out_of_bounds_read_is_an_error():
    op = tcomp.op("def f(float(N) A, int32(N) idx) -> (O) { O(i) = A(idx(i)) }")
    with pytest.raises(tcomp.LangError, match="out of bounds"):
        tcomp.evaluate(op, np.ones(3, np.float32), np.int32([0, 3, 1]))


def test_integer_division_floors_and_zero_divisor_raises_only_when_taken():
    op = tcomp.op("def f(int32(N) A, int32(N) B) -> (Q, R) {\n Q(i) = A(i) / B(i)\n"
                  " R(i) = B(i) != 0 ? A(i) % B(i) : 99 }")
    Q, R = tcomp.evaluate(op, np.int32([-7, 7, -7, 7]), np.int32([2, -2, -2, 2]))
    np.testing.assert_array_equal(Q, [-4, -4, 3, 3])
    np.testing.assert_array_equal(R, [1, -1, -1, 1])
    with pytest.raises(tcomp.LangError, match="division by zero"):
        tcomp.evaluate(op, np.int32([1]), np.int32([0]))
    op2 = tcomp.op("def f(int32(N) A, int32(N) B) -> (R) { R(i) = B(i) != 0 ? A(i) / B(i) : 99 }")
    np.testing.assert_array_equal(tcomp.evaluate(op2, np.int32([5, 5]), np.int32([0, 2])), [99, 2])


def test_float_modulo_is_fmod():
    op = tcomp.op("def f(float(N) A) -> (R) { R(i) = A(i) % -3.0 }")
    np.testing.assert_array_equal(tcomp.evaluate(op, np.float32([-7, 7, -1])), [-1, 1, -1])


def test_integer_overflow_wraps():
    op = tcomp.op("def f(int32(N) A) -> (O) { O(i) = A(i) * A(i) + 1 }")
    got = tcomp.evaluate(op, np.int32([65536, 2**31 - 1]))
    np.testing.assert_array_equal(got, np.int32([1, 2]))


def test_half_arithmetic_rounds_once_on_store():
    op = tcomp.op("def f(half(N) A, half(N) B, half(N) C) -> (O) { O(i) = A(i) * B(i) + C(i) }")
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    A, B, C = (rng.standard_normal(257).astype(np.float16) for _ in range(3))
    want = (A.astype(np.float32) * B.astype(np.float32) + C.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(tcomp.evaluate(op, A, B, C), want, err_msg=f"seed {seed}")


def test_bfloat16_arithmetic_rounds_once_on_store():
    bf = ml_dtypes.bfloat16
    op = tcomp.op("def f(bfloat16(N) A, bfloat16(N) B) -> (O) { O(i) = A(i) * B(i) - A(i) }")
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    A, B = (rng.standard_normal(131).astype(bf) for _ in range(2))
    want = (A.astype(np.float32) * B.astype(np.float32) - A.astype(np.float32)).astype(bf)
    got = tcomp.evaluate(op, A, B)
    assert got.dtype == bf
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32),
                                  err_msg=f"seed {seed}")


def test_half_reduction_accumulates_in_float32():
    # 3000 ones: a float16 accumulator would stop at 2048; the float32 one reaches 3000,
    # which float16 holds exactly. The output keeps the right-hand side's type (TC,
    # cuBLAS); a typed output overrides it.
    for form in ("+=! A(i, j)", "+=! A(i, j) * A(i, j)"):
        for out, dt in (("S", np.float16), ("float32(M) S", np.float32)):
            op = tcomp.op(f"def f(half(M, N) A) -> ({out}) {{ S(i) {form} }}")
            S = tcomp.evaluate(op, np.ones((2, 3000), np.float16))
            assert S.dtype == dt
            np.testing.assert_array_equal(S, [3000, 3000])


def test_float_literal_takes_the_type_it_meets_in_every_evaluation_path():
    # `A * 0.1` (a product: einsum) and `A * 0.1 + 0.0` (element-wise) agree, and 0.1 is
    # the double 0.1 in float64 arithmetic (issue 22: it was float32(0.1), off by 1.5e-9).
    op = tcomp.op("def f(double(N, K) A) -> (O, P, Q) {\n O(i) +=! A(i, k) * 0.1\n"
                  " P(i) +=! A(i, k) * 0.1 + 0.0\n Q(i, k) = A(i, k) * 0.1 }")
    O, P, Q = tcomp.evaluate(op, np.ones((2, 3)))
    np.testing.assert_array_equal(Q, np.full((2, 3), 0.1))
    np.testing.assert_array_equal(O, [0.1 * 3] * 2)
    np.testing.assert_array_equal(P, [0.1 + 0.1 + 0.1] * 2)


def test_builtins_are_exact_where_c_is():
    op = tcomp.op("def f(float(N) X) -> (S, C, R, L) {\n S(i) = sinpi(X(i))\n"
                  " C(i) = cospi(X(i))\n R(i) = round(X(i))\n L(i) = logb(X(i)) }")
    X = np.float32([0, 1, -3, 8388609, 0.5, 1.5, 2.5, 0.49999997, 16777215, 0.25])
    S, C, R, L = tcomp.evaluate(op, X)
    np.testing.assert_array_equal(S[:4], 0)
    np.testing.assert_array_equal(S[4:6], [1, -1])
    np.testing.assert_array_equal(C[:4], [1, -1, -1, -1])
    np.testing.assert_array_equal(C[4:7], 0)
    np.testing.assert_array_equal(R, [0, 1, -3, 8388609, 1, 2, 3, 0, 16777215, 0])
    np.testing.assert_array_equal(L, [-np.inf, 0, 1, 23, -1, 0, 1, -2, 23, -2])
    assert np.signbit(tcomp.evaluate(op, np.float32([-2]))[0][0])  # sinpi(-2) = -0


def test_bool_counts_and_logic_reductions():
    # `+=` on bool is refused (tests/errors); counting casts, or accumulates in a typed output.
    A = np.float32([1, -1, 2, 3, 0])
    for src in ("def f(float(N) A) -> (c) { c +=! int32(A(i) > 0.0) }",
                "def f(float(N) A) -> (int32 c) { c +=! A(i) > 0.0 }"):
        c = tcomp.evaluate(tcomp.op(src), A)
        assert c.dtype == np.int32 and int(c) == 3
    op = tcomp.op("def f(float(N) A) -> (any, all) { any max=! A(i) > 0.0\n all min=! A(i) > 0.0 }")
    assert tuple(bool(x) for x in tcomp.evaluate(op, A)) == (True, False)


def test_empty_reduction_gives_the_identity():
    op = tcomp.op("def f(float(N) A) -> (s, p, mx, mn) {\n s +=! A(i)\n p *=! A(i)\n"
                  " mx max=! A(i)\n mn min=! A(i) }")
    s, p, mx, mn = tcomp.evaluate(op, np.zeros(0, np.float32))
    assert (float(s), float(p), float(mx), float(mn)) == (0.0, 1.0, -np.inf, np.inf)
    iop = tcomp.op("def f(int32(N) A) -> (mx) { mx max=! A(i) }")
    assert int(tcomp.evaluate(iop, np.zeros(0, np.int32))) == np.iinfo(np.int32).min


def test_max_reduction_ignores_nan_like_fmax():
    op = tcomp.op("def f(float(N) A) -> (mx) { mx max=! A(i) }")
    assert float(tcomp.evaluate(op, np.float32([1, np.nan, 3]))) == 3.0


def test_typed_output_shape_is_enforced():
    op = tcomp.op("def f(float(N) A) -> (float(N) O) { O(i) = 1.0 where i in 0:N + 1 }")
    with pytest.raises(tcomp.LangError, match="declared"):
        tcomp.evaluate(op, np.ones(3, np.float32))


def test_evaluate_needs_an_op():
    with pytest.raises(tcomp.LangError, match="Op"):
        tcomp.evaluate(BY_NAME["matmul"].src, np.ones((1, 1)), np.ones((1, 1)))


def test_sum_of_products_with_infinities_is_not_factored():
    """`O(i) += O(i) * A(i, j)` is the sum of the products: with O = inf and
    A(i, :) = [inf, -0.5, -1], inf + inf - inf - inf is NaN; einsum would sum A
    over j first (inf * (inf - 1.5) = inf). The sim agrees with the oracle."""
    op = tcomp.op("def f(float(M, N) A) -> (O) {\n  O(i) = A(i, 0)\n"
                  "  O(i) += O(i) * A(i, r_j)\n}")
    a = np.float32([[np.inf, -0.5, -1.0], [2.0, 0.5, -1.0]])
    got = tcomp.evaluate(op, a)
    assert np.isnan(got[0]) and got[1] == np.float32(2 + 2 * 2 + 2 * 0.5 - 2 * 1)
    sim = tcomp.build(tcomp.Schedule(op), "sim", sizes={"M": 2, "N": 3})(a)
    assert np.isnan(sim[0]) and sim[1] == got[1]
    mm = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    assert np.isnan(tcomp.evaluate(mm, np.float32([[np.inf, 1]]), np.float32([[1], [-np.inf]])))


def test_tgamma_of_infinities_and_poles():
    """tgamma(-inf) raised OverflowError from evaluate (math.floor(-inf) on the pole
    check; found by test_printing_keeps_the_meaning). C's tgamma: -inf and negative
    integers are domain errors (NaN), +-0 gives +-inf, +inf gives +inf."""
    import numpy as np
    import tcomp
    op = tcomp.op("def g(float(N) X) -> (O) { O(i) = tgamma(X(i)) }")
    X = np.array([-np.inf, np.inf, -2.0, 0.0, -0.0, 3.0], dtype=np.float32)
    got = tcomp.evaluate(op, X)
    np.testing.assert_array_equal(got, np.array([np.nan, np.inf, np.nan, np.inf, -np.inf, 2.0],
                                                dtype=np.float32))
