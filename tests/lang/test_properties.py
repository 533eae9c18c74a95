"""Property tests of the language front end (hypothesis).

  a. printing an expression tree and parsing it back gives the same tree;
  b. printing a whole module and parsing it back gives the same module (random
     modules, and every TC program found in the test suite and tutorials);
  c. mutated programs either parse or raise LangError, never anything else, and
     what parses prints to text that parses to the same text again;
  d. printing a checked op never changes what it computes.
"""
from __future__ import annotations

import ast as pyast
import math
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcomp
from tcomp.lang import builtins, dtypes, expr_to_text, module_to_text, parse_module
from tcomp.lang.ast import (Binary, Call, Cast, Const, Def, ExistsClause, LetClause, Module, Name,
                            OutParam, Param, RangeClause, Select, Stmt, Unary, walk)
from tcomp.lang.lexer import KEYWORDS
from tcomp.lang.parser import INT32_MAX
from tcomp.lang.printer import PREC

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = pathlib.Path(__file__).resolve().parents[2]


def typed(e):
    """`e` as nested tuples that also tell int literals from float literals
    (Const(1) == Const(1.0) under the nodes' own ==)."""
    if isinstance(e, (tuple, list)):
        return tuple(typed(x) for x in e)
    if isinstance(e, Const):
        return ("Const", type(e.value).__name__, e.value)
    if hasattr(e, "__dataclass_fields__"):
        return (type(e).__name__,) + tuple(typed(getattr(e, f)) for f, spec in
                                           e.__dataclass_fields__.items() if spec.compare)
    return e


# ------------------------------------------------------------ tree strategies
RESERVED = set(KEYWORDS) | set(dtypes.BY_NAME)
FIXED_NAMES = ["i", "j", "r_k", "N", "M", "A", "B", "x", "_", "max", "min", "exp", "where_",
               "in2", "defx", "float_", "O"]
identifiers = st.one_of(
    st.sampled_from(FIXED_NAMES),
    st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,6}\Z").filter(lambda s: s not in RESERVED))
type_names = st.sampled_from(sorted(dtypes.BY_NAME))
BINARY_OPS = sorted(PREC)

int_consts = st.one_of(st.integers(0, 9), st.integers(0, INT32_MAX)).map(Const)
float_consts = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False).filter(
    lambda v: math.copysign(1.0, v) > 0).map(Const)
leaves = st.one_of(int_consts, float_consts, identifiers.map(Name))


def extend(children):
    args = st.lists(children, max_size=3).map(tuple)
    return st.one_of(
        st.builds(Call, identifiers, args),  # tensor reads and unknown calls alike
        st.sampled_from(sorted(builtins.ARITY)).flatmap(
            lambda f: st.lists(children, min_size=builtins.ARITY[f],
                               max_size=builtins.ARITY[f]).map(lambda a: Call(f, tuple(a)))),
        st.builds(Cast, type_names, children),
        st.builds(Unary, st.sampled_from(["-", "!"]), children),
        st.builds(Binary, st.sampled_from(BINARY_OPS), children, children),
        st.builds(Select, children, children, children),
    )


exprs = st.recursive(leaves, extend, max_leaves=25)


def depth(e) -> int:
    kids = [getattr(e, f) for f in ("x", "a", "b", "cond") if hasattr(e, f)]
    kids += list(getattr(e, "args", ()))
    return 1 + max((depth(k) for k in kids), default=0)


def parse_rhs(text: str):
    return parse_module(f"def f() -> (O) {{ O(i) = {text} }}").defs[0].stmts[0].rhs


@settings(max_examples=250, **SETTINGS)
@given(exprs)
def test_expression_round_trip(e):
    text = expr_to_text(e)
    back = parse_rhs(text)
    assert back == e, text
    assert typed(back) == typed(e), text
    assert expr_to_text(back) == text


@pytest.mark.parametrize("e", [
    Unary("-", Unary("-", Const(1))),  # not '--1'
    Unary("!", Unary("!", Name("x"))),
    Unary("-", Unary("!", Unary("-", Name("x")))),
    Binary("-", Name("a"), Unary("-", Name("b"))),
    Binary("-", Name("a"), Binary("-", Name("b"), Name("c"))),
    Binary("/", Binary("*", Name("a"), Name("b")), Binary("%", Name("c"), Name("d"))),
    Binary("<", Binary("<", Name("a"), Name("b")), Name("c")),
    Binary("==", Name("max"), Name("min")),  # 'max ==' must not lex as 'max='
    Select(Select(Name("a"), Name("b"), Name("c")), Select(Name("d"), Name("e"), Name("f")),
           Select(Name("g"), Name("h"), Name("k"))),
    Binary("+", Select(Name("c"), Const(1), Const(2)), Const(3)),
    Unary("-", Select(Name("c"), Const(1), Const(2.5))),
    Cast("half", Select(Name("c"), Const(1), Const(2))),
    Call("f", ()),
    Const(1e16), Const(5e-324), Const(1.7976931348623157e308), Const(0.1), Const(INT32_MAX),
])
def test_expression_round_trip_edge_cases(e):
    text = expr_to_text(e)
    assert typed(parse_rhs(text)) == typed(e), text


# ----------------------------------------------------------- module strategy
dims = st.lists(st.one_of(identifiers.map(Name), st.integers(0, 2**20).map(Const)),
                max_size=3).map(tuple)
tensor_names = identifiers


small_exprs = st.recursive(leaves, extend, max_leaves=6)
where_clauses = st.lists(st.one_of(
    st.builds(RangeClause, identifiers, small_exprs, small_exprs),
    st.builds(ExistsClause, small_exprs),
    st.builds(LetClause, identifiers, small_exprs),
), max_size=2).map(tuple)
stmt_ops = st.sampled_from(["=", "+=", "*=", "max=", "min="])
lhs_indices = st.lists(identifiers, max_size=3).map(tuple)


@st.composite
def stmts(draw):
    op = draw(stmt_ops)
    init = op != "=" and draw(st.booleans())
    return Stmt(draw(tensor_names), draw(lhs_indices), op, init, draw(small_exprs),
                draw(where_clauses))


@st.composite
def outputs(draw):
    name = draw(tensor_names)
    if draw(st.booleans()):
        return OutParam(name)
    return OutParam(name, draw(type_names), draw(dims))


defs = st.builds(Def, identifiers,
                 st.lists(st.builds(Param, tensor_names, type_names, dims), max_size=3).map(tuple),
                 st.lists(outputs(), max_size=3).map(tuple),
                 st.lists(stmts(), max_size=3).map(tuple))
modules = st.lists(defs, max_size=2).map(lambda ds: Module(tuple(ds)))


@settings(max_examples=50, **SETTINGS)
@given(modules)
def test_module_round_trip(m):
    text = module_to_text(m)
    back = parse_module(text)
    assert back == m, text
    assert typed(back) == typed(m), text
    assert module_to_text(back) == text


# Valid programs exercising every construct of the language.
PROGRAMS = [
    """def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}""",
    """def conv2d(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) Bias) -> (O) {
    O(n, f, h, w) +=! I(n, c, h + r_kh, w + r_kw) * Wt(f, c, r_kh, r_kw)
    O(n, f, h, w) = O(n, f, h, w) + Bias(f)
}""",
    """def softmax(float(N, D) X) -> (mx, e, s, Y) {
    mx(n) max=! X(n, d)
    e(n, d) = exp(X(n, d) - mx(n))
    s(n) +=! e(n, d)
    Y(n, d) = e(n, d) / s(n)   # normalise
}""",
    """def gather(float(N, D) T, int32(M) Idx) -> (O) {
    O(m, d) = T(Idx(m), d)
}""",
    """def typed(float(M, N) A) -> (int32(M, N) O1, bool(M) Any) {
    O1(i, j) = int32(A(i, j) * 2.5e1)
    Any(i) max=! A(i, j) > 0.0
}""",
    """def clauses(float(N) A, float(N, 8) B) -> (O, P) {
    O(i) = x + y * A(i) where x = 1.5, y = float(i % 3), i in 0:N
    P(i) +=! B(i, k) * 2 where exists A(i), k in 0:8 <=> P(i)
}""",
    """def scalars(float a, double(N) v) -> (s, t) {
    s +=! v(i) * a
    t() = s > 0.5 ? -s : s * s;
}""",
    """def mix(float(N) A, float(N) B) -> (O) {
    # comments anywhere
    O(i) = fmax(A(i), B(i)) + pow(A(i), 2.0) - nextafter(A(i), 0.0) * sigmoid(B(i)) # trailing
        + (i < N / 2 && !(A(i) <= B(i)) || i == 0 ? min(A(i), 1) : max(-B(i), 0.25))
}""",
    """def two_a(half(N) X) -> (Y) { Y(i) = X(i) * X(i) }
def two_b(uint8(N, N) X) -> (Y, Z) {
    Y(i) +=! X(i, j)
    Y(i) *= X(i, i)
    Z(i) min=! int64(X(j, i)) - 3
}""",
    """def stencil(float(H, W) I) -> (O) {
    O(y, x) = (I(y, x) + I(y + 1, x) + I(y, x + 1) + I(y + 2, x + 2)) / 4.0
}""",
    """def noinputs() -> (R) {
    R(i, j) = i * 4 + j where i in 0:3, j in 0:4
    R(i, j) += 1 - j % 2
}""",
]


@pytest.mark.parametrize("src", PROGRAMS, ids=[p.split("(")[0][4:] for p in PROGRAMS])
def test_corpus_programs_check_and_round_trip(src):
    m = parse_module(src)
    text = module_to_text(m)
    assert parse_module(text) == m
    prog = tcomp.parse(src)
    assert str(tcomp.parse(str(prog))) == str(prog)


def _tc_sources():
    """Every string literal in the test suite and tutorials that looks like TC."""
    found = []
    files = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "tutorials").rglob("*.py"))
    for path in files:
        try:
            tree = pyast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # a file someone is editing right now
        for node in pyast.walk(tree):
            if isinstance(node, pyast.Constant) and isinstance(node.value, str) and \
                    node.value.lstrip().startswith("def ") and "->" in node.value:
                found.append(node.value)
    return found


def test_round_trip_every_program_in_the_tests():
    sources = sorted(set(_tc_sources()))
    assert len(sources) > 30
    valid = []
    for src in sources:
        try:
            m = parse_module(src)
        except tcomp.LangError:
            continue  # a deliberately malformed program
        text = module_to_text(m)
        assert parse_module(text) == m, src
        assert module_to_text(parse_module(text)) == text
        valid.append(src)
    assert len(valid) > 30
    # checking is slower (range inference): print and re-check an even sample
    checked = 0
    for src in valid[::max(1, len(valid) // 30)]:
        try:
            prog = tcomp.parse(src)
        except tcomp.LangError:
            continue  # well formed, but semantically wrong on purpose
        assert str(tcomp.parse(str(prog))) == str(prog), src
        checked += 1
    assert checked > 10


# -------------------------------------------------------------- mutations
TOKENS = ["(", ")", ",", "+", "-", "*", "/", "%", "?", ":", "!", "=", "+=", "+=!", "*=!", "max=",
          "min=!", "<=>", "->", "==", "!=", "<=", ">=", "&&", "||", "<", ">", "{", "}", ";",
          "where", "in", "exists", "def", "i", "j", "N", "A", "O", "float", "int32", "bool",
          "half", "exp", "min", "j0", "0", "1", "7", "2147483648", "1.5", "1e3", ".5", "1e999",
          "inf", "nan", "1.00000005960464477539062500001",
          "#", "\n", " ", "\t", "\r", "\x00", "é"]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(PROGRAMS)).encode())
    for _ in range(draw(st.integers(1, 4))):
        k = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "token", "splice"]))
        if kind == "insert":
            data[k:k] = bytes([draw(st.integers(0, 255))])
        elif kind == "delete":
            del data[k:k + draw(st.integers(1, 8))]
        elif kind == "replace":
            data[k:k + 1] = bytes([draw(st.integers(0, 255))])
        elif kind == "token":
            data[k:k + draw(st.integers(0, 3))] = draw(st.sampled_from(TOKENS)).encode()
        else:  # copy a piece of the program somewhere else
            a = draw(st.integers(0, len(data)))
            data[k:k] = data[a:a + draw(st.integers(1, 30))]
    return bytes(data)


@settings(max_examples=300, **SETTINGS)
@given(mutated())
def test_mutated_programs_fail_cleanly(src):
    try:
        prog = tcomp.parse(src)
    except tcomp.LangError as e:
        text = str(e)  # renders without raising
        assert e.message in text
        if e.line is not None:
            lines = src.decode().split("\n")
            assert 1 <= e.line <= len(lines) and 1 <= e.col <= len(lines[e.line - 1]) + 1
        return
    printed = str(prog)
    again = tcomp.parse(printed)
    assert str(again) == printed
    assert [op.name for op in again] == [op.name for op in prog]


# ------------------------------------------------- printing keeps the meaning
INPUTS = {"A": dtypes.float32, "B": dtypes.float64, "C": dtypes.int32, "D": dtypes.uint8,
          "E": dtypes.bool_, "H": dtypes.float16}
FLOAT_FUNS = [f for f, n in builtins.ARITY.items() if n <= 2 and builtins.returns_float(f)]
SAME_FUNS = ["min", "max", "abs"]


def _read(t, sub=None):
    return Call(t, (sub if sub is not None else Name("i"),))


REVERSED = Binary("-", Binary("-", Name("N"), Const(1)), Name("i"))  # N - 1 - i
GATHER = Binary("%", _read("C"), Name("N"))  # C(i) % N: always in bounds
LEAVES = {
    "num": [_read(t) for t in "ABCDH"] + [_read(t, REVERSED) for t in "AC"] +
           [_read(t, GATHER) for t in "AB"] + [Name("i"), Name("N")],
    "logic": [_read("C"), _read("D"), _read("E"), _read("E", GATHER), Name("i"), Name("N")],
}
LEAVES["any"] = LEAVES["num"] + LEAVES["logic"]


PICK = {n: st.integers(0, n - 1) for n in (2, 4, 6)}
COMPARE = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
LOGIC = st.sampled_from(["&&", "||"])
ARITH = st.sampled_from(["+", "-", "*", "/", "%"])
INT_CASTS = st.sampled_from(["int32", "bool", "uint8", "int64"])
NUM_CASTS = st.sampled_from(["float", "double", "half", "int32", "int8", "uint16", "float16",
                             "bfloat16"])
FLOAT_FUN = st.sampled_from(FLOAT_FUNS)
SAME_FUN = st.sampled_from(SAME_FUNS)
LEAF = {k: st.sampled_from(v) for k, v in LEAVES.items()}
INT_CONST = st.integers(0, 300).map(Const)
FLOAT_CONST = st.sampled_from([0.0, 0.5, 1.0, 2.5, 1e-3, 3e38, 65504.0]).map(Const)


def _typed(draw, kind, budget):
    """A well-typed expression over the inputs of INPUTS: kind 'num' is never
    bool, 'logic' never float (a condition or a logic operand), 'any' is either."""
    if kind == "any":
        kind = ("num", "logic")[draw(PICK[2])]
    if budget <= 0 or draw(PICK[4]) == 0:
        if kind == "logic" or draw(PICK[2]):
            return draw(LEAF[kind]) if draw(PICK[2]) else draw(INT_CONST)
        return draw(FLOAT_CONST)
    sub = budget - 1

    def arg(k, share=1):
        return _typed(draw, k, sub // share)

    choice = draw(PICK[6])
    if kind == "logic":
        if choice == 0:
            return Binary(draw(COMPARE), arg("any", 2), arg("any", 2))
        if choice == 1:
            return Binary(draw(LOGIC), arg("logic", 2), arg("logic", 2))
        if choice == 2:
            return Unary("!", arg("logic"))
        if choice == 3:
            return Cast(draw(INT_CASTS), arg("any"))
        if choice == 4:
            return Binary(draw(ARITH), arg("logic", 2), arg("logic", 2))
        return Select(arg("logic", 3), arg("logic", 3), arg("logic", 3))
    if choice == 0:
        return Binary(draw(ARITH), arg("any", 2), arg("any", 2))
    if choice == 1:
        return Unary("-", arg("num"))
    if choice == 2:
        return Select(arg("logic", 3), arg("num", 3), arg("num", 3))
    if choice in (3, 4):
        f = draw(FLOAT_FUN if choice == 3 else SAME_FUN)
        return Call(f, tuple(arg("any", 2) for _ in range(builtins.ARITY[f])))
    return Cast(draw(NUM_CASTS), arg("any"))


typed_exprs = st.composite(lambda draw: _typed(draw, "any", 12))()


def _data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 65504.0, 3e38])
    arrays = []
    for name, t in INPUTS.items():
        if t.is_float:
            v = rng.normal(0, 10, n)
            mask = rng.random(n) < 0.25
            v[mask] = rng.choice(special, mask.sum())
            with np.errstate(over="ignore"):
                arrays.append(v.astype(t.numpy))
        elif t.is_bool:
            arrays.append(rng.random(n) < 0.5)
        else:
            info = np.iinfo(t.numpy)
            arrays.append(rng.integers(max(info.min, -200), min(info.max, 200), n,
                                       endpoint=True).astype(t.numpy))
    return arrays


def _outcome(op, arrays):
    try:
        return "ok", tcomp.evaluate(op, *arrays)
    except tcomp.LangError as e:
        return "error", (e.message, e.line, e.col)


@settings(max_examples=150, **SETTINGS)
@given(typed_exprs, st.sampled_from(["=", "+=!", "*=!", "max=!", "min=!"]),
       st.integers(0, 2**32 - 1), st.integers(1, 9))
def test_printing_keeps_the_meaning(rhs, op_text, seed, n):
    params = ", ".join(f"{t.name}(N) {name}" for name, t in INPUTS.items())
    text = expr_to_text(rhs)
    if op_text in ("+=!", "*=!"):
        typed = tcomp.op(f"def f({params}) -> (O) {{ O(i) = {text} where i in 0:N }}")
        if typed.outputs[0].dtype.is_bool:  # bool sums/products are refused: count in int32
            text = f"int32({text})"
    if op_text == "=":
        stmt = f"O(i) = {text} where i in 0:N"
    elif any(isinstance(x, Name) and x.name == "i" for x in walk(rhs)):
        stmt = f"O(j) {op_text} {text} where j in 0:2, i in 0:N"  # reduced over i
    else:
        stmt = f"O(j) {op_text} {text} where j in 0:2"
    src = f"def f({params}) -> (O) {{\n    {stmt}\n}}"
    op = tcomp.op(src)  # well typed by construction: must be accepted
    printed = str(op)
    again = tcomp.op(printed)
    assert str(again) == printed
    assert again.definition == op.definition
    arrays = _data(seed, n)
    (k1, v1), (k2, v2) = _outcome(op, arrays), _outcome(again, arrays)
    assert k1 == k2
    if k1 == "error":
        # the same error (the printed op has comment lines, so not the same line)
        assert v1[0] == v2[0] and v1[0].startswith("integer division by zero in "), v1
        return
    assert v1.dtype == v2.dtype and v1.shape == v2.shape
    assert v1.tobytes() == v2.tobytes()  # bit for bit, NaNs and signed zeros included
