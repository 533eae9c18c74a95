"""Malformed comprehensions: every error the lexer, parser, checker, range
inference and the NumPy oracle can raise, with its exact text and location.

Each case is (source, expected message substring, line, column); the column is
1-based and points at the offending token. A few cases also pin the complete
rendered error (`<tc>:L:C: error: ...`, the source line and the caret).
"""
import numpy as np
import pytest

import tcomp
from tcomp.lang import parser as tc_parser

MAX = tc_parser.MAX_DEPTH
LEN = tc_parser.MAX_LENGTH
TOO_LONG = (f"expression more than {LEN} operations long (a sum of more than {LEN} terms is); "
            f"compute part of it in a separate statement")
HDR = "def f(float(N) A) -> (B) {"  # 26 characters: a statement after it starts at column 28


def one(stmt: str) -> str:
    """A one-line def around `stmt` (which starts at column 28)."""
    return f"{HDR} {stmt} }}"


# (id, source, message substring, line, col)
PARSE_ERRORS = [
    # ------------------------------------------------------------------ lexer
    ("unexpected-char", one("B(i) = A(i) $ 2"), "unexpected character '$'", 1, 40),
    ("unexpected-nul", "def f(float(N) A) -> (B) {\n B(i) = A(i) \x00\n}",
     "unexpected character '\\x00'", 2, 14),
    ("unexpected-unicode", "def f(float(N) A) -> (B) {\n  B(i) = A(i) + é\n}",
     "unexpected character 'é'", 2, 17),
    ("unexpected-backtick", "def f(float(N) A) -> (B) {\n  B(i) = `A(i)\n}",
     "unexpected character '`'", 2, 10),
    ("number-suffix-int", one("B(i) = A(i) * 2x"), "invalid number literal '2x'", 1, 42),
    ("number-suffix-float", one("B(i) = A(i) * 1.5f"), "invalid number literal '1.5f'", 1, 42),
    ("number-bad-exponent", one("B(i) = A(i) * 1.5e"), "invalid number literal '1.5e'", 1, 42),
    ("number-hex", one("B(i) = A(i) * 0x10"), "invalid number literal '0x'", 1, 42),
    ("number-ident-underscore", one("B(i) = A(i) * 3_0"), "invalid number literal '3_'", 1, 42),
    ("int-too-large", one("B(i) = A(i) * 2147483648"),
     "integer literal 2147483648 does not fit in int32", 1, 42),
    ("int-too-large-dim", "def f(float(4294967296) A) -> (B) { B(i) = A(i) }",
     "integer literal 4294967296 does not fit in int32", 1, 13),
    # ----------------------------------------------------------------- parser
    ("missing-rparen", one("B(i) = (A(i) * 2"), "expected ')', found '}'", 1, 45),
    ("missing-rparen-call", one("B(i) = A(i * 2"), "expected ')', found '}'", 1, 43),
    ("missing-rparen-params", "def f(float(N) A -> (B) { B(i) = A(i) }",
     "expected ')', found '->'", 1, 18),
    ("missing-comma-params", "def f(float(N) A float(N) C) -> (B) { B(i) = A(i) }",
     "expected ')', found 'float'", 1, 18),
    ("missing-arrow", "def f(float(N) A) (B) { B(i) = A(i) }", "expected '->', found '('", 1, 19),
    ("missing-lbrace", "def f(float(N) A) -> (B) B(i) = A(i) }", "expected '{', found 'B'", 1, 26),
    ("missing-rbrace", "def f(float(N) A) -> (B) {\n  B(i) = A(i)\n",
     "expected '}' to close the def, found end of input", 3, 1),
    ("missing-def", "B(i) = 1.0", "expected 'def', found 'B'", 1, 1),
    ("missing-def-name", "def (float(N) A) -> (B) { B(i) = A(i) }",
     "expected a def name, found '('", 1, 5),
    ("missing-type", "def f(A) -> (B) { B(i) = A(i) }",
     "expected a type name (float, half, int32, ...), found 'A'", 1, 7),
    ("bad-dim", "def f(float(N + 1) A) -> (B) { B(i) = A(i) }", "expected ')', found '+'", 1, 15),
    ("type-as-dim", "def f(float(float) A) -> (B) { B(i) = A(i) }",
     "expected a size variable or integer, found 'float'", 1, 13),
    ("keyword-input-name", "def f(float(N) in) -> (B) { B(i) = 1 }",
     "expected an input tensor name, found 'in'", 1, 16),
    ("missing-output-name", "def f(float(N) A) -> (float(N)) { B(i) = A(i) }",
     "expected an output tensor name, found ')'", 1, 31),
    ("type-as-input-name", "def f(float(N) int32) -> (B) { B(i) = 1.0 where i in 0:N }",
     "'int32' is a type name and cannot name a tensor", 1, 16),
    ("type-as-output-name", "def f(float(N) A) -> (float(N) half) { half(i) = A(i) }",
     "'half' is a type name and cannot name a tensor", 1, 32),
    ("missing-assign", one("B(i) A(i)"),
     "expected an assignment operator (=, +=, *=, max=, min=, or their ! forms), found 'A'", 1, 33),
    ("not-a-statement", one("3 = A(i)"),
     "expected a statement (tensor name) or '}', found '3'", 1, 28),
    ("missing-rhs", one("B(i) ="), "expected an expression, found '}'", 1, 35),
    ("truncated-rhs", "def f(float(N) A) -> (B) {\n  B(i) = A(i) +",
     "expected an expression, found end of input", 2, 16),
    ("select-missing-colon", one("B(i) = i > 0 ? A(i)"), "expected ':', found '}'", 1, 48),
    ("where-empty", one("B(i) = A(i) where"),
     "expected an index name or 'exists' after 'where', found '}'", 1, 46),
    ("where-bad-clause", one("B(i) = A(i) where i < 3"),
     "expected 'in' (range) or '=' (binding) in where clause, found '<'", 1, 48),
    ("range-missing-colon", one("B(i) = A(i) where i in 0 N"), "expected ':', found 'N'", 1, 53),
    ("range-select-bound", one("B(i) = A(i) where i in 0:N > 1 ? 1 : 2"),
     "expected a statement (tensor name) or '}', found '?'", 1, 59),
    ("type-name-as-value", one("B(i) = A(i) + float"),
     "type name 'float' used as a value; casts are written float(x)", 1, 42),
    ("type-name-as-value-alias", one("B(i) = half * A(i)"),
     "type name 'half' used as a value; casts are written half(x)", 1, 35),
    ("cast-two-args", one("B(i) = float(A(i), 2)"), "cast to float takes 1 argument, got 2", 1, 35),
    ("cast-no-args", one("B(i) = A(i) + int32()"), "cast to int32 takes 1 argument, got 0", 1, 42),
    ("type-name-written", one("float(i) = A(i)"),
     "'float' is a type name and cannot be written", 1, 28),
    ("type-name-lhs-index", one("B(float) = 1.0 where float in 0:N"),
     "type name 'float' cannot be an index variable", 1, 30),
    # (`B(A(i)) = ...` is a scatter since issue 27: tests/errors/test_scatter_errors.py)
    ("lhs-subscript-sum", one("B(i + 1) = A(i)"),
     "left-hand side subscripts must be plain index variables", 1, 30),
    ("lhs-subscript-const", "def f(float(N) A) -> (B) {\n  B(i, 0) = A(i)\n}",
     "left-hand side subscripts must be plain index variables", 2, 8),
    ("lhs-subscript-neg", one("B(-i) = A(i)"),
     "left-hand side subscripts must be plain index variables", 1, 30),
    ("nested-parens", one("B(i) = " + "(" * (MAX + 5) + "A(i)" + ")" * (MAX + 5)),
     f"expression nested more than {MAX} levels deep", 1, 35 + MAX),
    ("nested-calls", one("B(i) = " + "exp(" * (MAX + 5) + "A(i)" + ")" * (MAX + 5)),
     f"expression nested more than {MAX} levels deep", 1, 35 + 4 * MAX),
    ("nested-unary", one("B(i) = " + "-" * (MAX + 5) + "A(i)"),
     f"expression nested more than {MAX} levels deep", 1, 35 + MAX),
    # a long flat chain is one nesting level, but a tree as long as the chain: a + a + ...
    # nests its left operands, and the passes recurse that far (at `i` of the first A(i))
    ("long-sum", one("B(i) = " + " + ".join(["A(i)"] * (LEN + 1))), TOO_LONG, 1, 37),
    ("long-sum-in-parens", one("B(i) = exp(" + " - ".join(["A(i)"] * (LEN + 1)) + ")"),
     TOO_LONG, 1, 39),
    ("nested-select", one("B(i) = " + "i > 0 ? " * (MAX + 5) + "A(i)" + " : 0.0" * (MAX + 5)),
     f"expression nested more than {MAX} levels deep", 1, 35 + 8 * MAX),
    # ----------------------------------------------------------- names, defs
    # `inf` and `nan` are float literals (issue 22), reserved: no name may be one
    ("reserved-lhs-index", one("B(inf) = A(0)"), "'inf' is a reserved word (the float literal "
     "infinity) and cannot be an index variable; choose another name", 1, 30),
    ("reserved-input", "def f(float(N) inf) -> (B) { B(i) = inf(i) }",
     "'inf' is a reserved word (the float literal infinity) and cannot be an input tensor name",
     1, 16),
    ("reserved-size", "def f(float(nan) A) -> (B) { B(i) = A(i) }",
     "'nan' is a reserved word (the float literal NaN) and cannot be a size variable", 1, 13),
    ("reserved-output", "def f(float(N) A) -> (nan) { nan(i) = A(i) }",
     "'nan' is a reserved word (the float literal NaN) and cannot be an output tensor name",
     1, 23),
    ("reserved-temporary", one("inf(i) = A(i)"),
     "'inf' is a reserved word (the float literal infinity) and cannot be a tensor name", 1, 28),
    ("reserved-call", one("B(i) = nan(i)"),
     "'nan' is a reserved word (the float literal NaN) and cannot be a tensor or function name",
     1, 35),
    ("reserved-where-range", one("B(i) = A(i) where inf in 0:N"),
     "'inf' is a reserved word (the float literal infinity) and cannot be an index variable or "
     "a where-binding", 1, 46),
    ("reserved-where-let", one("B(i) = A(i) where nan = 1.0"),
     "'nan' is a reserved word (the float literal NaN) and cannot be an index variable or a "
     "where-binding", 1, 46),
    ("reserved-def", "def inf(float(N) A) -> (B) { B(i) = A(i) }",
     "'inf' is a reserved word (the float literal infinity) and cannot be a def name", 1, 5),
    ("inf-subscript", one("B(i) = A(inf)"), "subscript of 'A' must be an integer, got float32",
     1, 37),
    ("unknown-tensor", one("B(i) = A(i) * D(i)"), "unknown tensor or function 'D'", 1, 42),
    ("unknown-function", one("B(i) = expf(A(i))"), "unknown tensor or function 'expf'", 1, 35),
    ("call-index", one("B(i) = A(i) + i(0)"),
     "'i' is not a tensor or function and cannot be called", 1, 42),
    ("call-size", one("B(i) = A(i) + N(0)"),
     "'N' is not a tensor or function and cannot be called", 1, 42),
    ("wrong-index-count", one("B(i) = A(i, i)"),
     "tensor 'A' has 1 dimension but is indexed with 2", 1, 35),
    ("wrong-index-count-2d", "def f(float(N, M) A) -> (B) {\n  B(i) +=! A(i, j, 0)\n}",
     "tensor 'A' has 2 dimensions but is indexed with 3", 2, 12),
    ("scalar-indexed", "def f(float A) -> (B) { B = A(0) }",
     "tensor 'A' has 0 dimensions but is indexed with 1", 1, 29),
    ("read-without-indices", "def f(float(N, M) A) -> (B) { B(i) = A }",
     "tensor 'A' has 2 dimensions but is read without indices", 1, 38),
    ("write-input", one("A(i) = 1.0"), "input 'A' cannot be written", 1, 28),
    # a tensor written but not declared is a temporary (tcomp extension); a size
    # variable cannot be one
    ("write-size-variable", one("N(i) = A(i)"),
     "'N' is a size variable and cannot be written", 1, 28),
    ("write-temporary-only", one("C(i) = A(i)"), "output 'B' is declared but never written", 1, 23),
    ("output-never-written", "def f(float(N) A) -> (B, C) {\n  B(i) = A(i)\n}",
     "output 'C' is declared but never written", 1, 26),
    ("input-declared-twice", "def f(float(N) A, float(M) A) -> (B) { B(i) = A(i) }",
     "tensor 'A' is declared twice", 1, 28),
    ("output-declared-twice", "def f(float(N) A) -> (B, B) { B(i) = A(i) }",
     "output 'B' is already declared as an output", 1, 26),
    ("output-is-input", "def f(float(N) A) -> (A) { A(i) = A(i) }",
     "output 'A' is already declared as an input", 1, 23),
    ("def-twice",
     "def f(float(N) A) -> (B) { B(i) = A(i) }\n\ndef f(float(N) A) -> (C) { C(i) = A(i) }",
     "def 'f' is defined twice", 3, 1),
    ("size-is-input", "def f(float(N) A, float(N) N) -> (B) { B(i) = A(i) }",
     "'N' is both a size variable and a tensor name", 1, 28),
    ("size-is-output", "def f(float(N) A) -> (N) { N(i) = A(i) }",
     "'N' is both a size variable and a tensor name", 1, 23),
    # --------------------------------------------------------------- indices
    ("lhs-index-twice", "def f(float(N, N) A) -> (B) { B(i, i) = A(i, i) }",
     "index 'i' appears twice on the left-hand side", 1, 31),
    ("size-as-index", one("B(N) = A(N)"),
     "'N' is a size variable and cannot be used as an index", 1, 28),
    ("tensor-as-index", "def f(float(N) A, float(N) C) -> (B) { B(C) = A(0) }",
     "'C' is a tensor and cannot be used as an index", 1, 40),
    ("assign-with-reduction-index", one("B(i) = A(i) + A(j)"),
     "index 'j' appears only on the right-hand side of '=': it would be a reduction index; "
     "use a reduction such as '+=!'", 1, 44),
    ("assign-with-reduction-index-in-let", one("B(i) = A(i) * x where x = A(k)"),
     "index 'k' appears only on the right-hand side of '='", 1, 56),
    ("reduction-without-init", one("B(i) += A(i, j)").replace("float(N)", "float(N, M)"),
     "reduction '+=' continues an earlier definition of 'B', but there is none; write '+=!' to "
     "start from the identity", 1, 31),
    ("max-reduction-without-init", "def f(float(N, M) A) -> (B) {\n  B(i) max= A(i, j)\n}",
     "reduction 'max=' continues an earlier definition of 'B', but there is none; write 'max=!'",
     2, 3),
    ("rank-mismatch", "def f(float(N) A) -> (B) {\n  B(i) = A(i)\n  B(i, j) +=! A(i) * A(j)\n}",
     "'B' is written with 2 indices here but with 1 by an earlier statement", 3, 3),
    ("typed-output-rank", "def f(float(N) A) -> (float(N, N) B) {\n  B(i) = A(i)\n}",
     "'B' is written with 1 index here but declared with 2 dimensions", 2, 3),
    ("typed-scalar-output-rank", "def f(float(N) A) -> (float S) { S(i) = A(i) }",
     "'S' is written with 1 index here but declared with 0 dimensions", 1, 34),
    ("write-after-read",
     "def f(float(N) A) -> (B, C) {\n  B(i) = A(i)\n  C(i) = B(i)\n  B(i) = 2.0 * A(i)\n}",
     "'B' is written here after a statement read it (line 3); reads must see a tensor's final "
     "value",
     4, 3),
    ("write-after-read-in-let",
     "def f(float(N) A) -> (B, C) {\n  B(i) = A(i)\n  C(i) = x where x = B(i)\n  B(i) += 1.0\n}",
     "'B' is written here after a statement read it (line 3)", 4, 3),
    ("read-before-write", "def f(float(N) A) -> (B, C) {\n  C(i) = B(i)\n  B(i) = A(i)\n}",
     "output 'B' is read before any statement writes it", 2, 10),
    ("read-self-first", one("B(i) = B(i) + A(i)"),
     "output 'B' is read before any statement writes it", 1, 35),
    ("read-scalar-before-write", "def f(float A) -> (B, C) {\n  C = B\n  B = A\n}",
     "output 'B' is read before any statement writes it", 2, 7),
    # ----------------------------------------------------------------- types
    ("float-subscript", one("B(i) = A(1.5)"),
     "subscript of 'A' must be an integer, got float32", 1, 37),
    # a binary expression is located at its operator
    ("float-subscript-expr", "def f(float(N) A, float(N) X) -> (B) { B(i) = A(i + X(i)) }",
     "subscript of 'A' must be an integer, got float32", 1, 51),
    ("float-gather", "def f(float(N) A, float(M) I) -> (B) { B(m) = A(I(m)) }",
     "subscript of 'A' must be an integer, got float32", 1, 49),
    ("float-condition", one("B(i) = A(i) ? 1.0 : 0.0"),
     "type mismatch: condition of '?:' must be bool or integer, got float32 (compare explicitly, "
     "e.g. x != 0.0)", 1, 35),
    ("float-and-left", one("B(i) = A(i) && 1"),
     "type mismatch: left operand of '&&' must be bool or integer, got float32", 1, 35),
    ("float-and-right", one("B(i) = i > 0 && A(i) * 2.0"),
     "type mismatch: right operand of '&&' must be bool or integer, got float32", 1, 49),
    ("double-or-right", "def f(double(N) A) -> (B) { B(i) = i > 0 || A(i) }",
     "type mismatch: right operand of '||' must be bool or integer, got float64", 1, 45),
    ("not-float", one("B(i) = !A(i)"),
     "type mismatch: operand of '!' must be bool or integer, got float32", 1, 36),
    ("neg-bool", one("B(i) = -(A(i) > 0)"), "type mismatch: unary '-' on a bool", 1, 35),
    ("float-into-int32", "def f(float(N) A) -> (int32(N) B) { B(i) = A(i) }",
     "type mismatch: the statement computes float32 but 'B' is int32 (declared); cast explicitly, "
     "e.g. int32(...)", 1, 37),
    ("int32-into-int8", "def f(float(N) A) -> (int8(N) B) {\n  B(i) = 1 where i in 0:N\n}",
     "type mismatch: the statement computes int32 but 'B' is int8 (declared)", 2, 3),
    ("float-into-earlier-int", "def f(int32(N) A) -> (B) {\n  B(i) = A(i)\n  B(i) = 1.5\n}",
     "type mismatch: the statement computes float32 but 'B' is int32 (from its first definition, "
     "line 2); cast explicitly, e.g. int32(...)", 3, 3),
    # ---------------------------------------------------------- where clauses
    ("where-not-an-index", one("B(i) = A(i) where j in 0:N"),
     "where clause constrains 'j', which is not an index of this statement", 1, 46),
    ("where-two-ranges", one("B(i) = A(i) where i in 0:N, i in 0:N"),
     "index 'i' has two range clauses", 1, 56),
    ("where-undefined-size", one("B(i) = A(i) where i in 0:M"),
     "undefined size variable 'M' in a range bound", 1, 53),
    ("where-index-in-bound", "def f(float(N) A) -> (B) { B(i, j) = 1.0 where i in 0:N, j in 0:i }",
     "undefined size variable 'i' in a range bound", 1, 65),
    ("typed-output-undefined-size", "def f(float(N) A) -> (int32(M) B) { B(i) = 1 where i in 0:N }",
     "undefined size variable 'M' in a typed output's shape", 1, 29),
    ("where-float-bound", one("B(i) = A(i) where i in 0:1.5"),
     "a range bound must be an integer expression", 1, 53),
    ("where-modulo-bound", one("B(i) = A(i) where i in 0:N % 2"),
     "a range bound may use only size variables, integers, + - * / and min/max", 1, 55),
    ("where-read-bound", one("B(i) = A(i) where i in 0:A(0)"),  # (ragged: issue 27)
     "the range of 'i' reads a tensor (a ragged range), but 'i' is on the left-hand side: only "
     "a reduction index may be ragged (the shape of 'B' cannot depend on data)", 1, 46),
    ("where-builtin-bound", one("B(i) = A(i) where i in 0:exp(N)"),
     "a range bound may use only size variables, integers, + - * / and min/max", 1, 53),
    ("where-division-by-zero", one("B(i) = A(i) where i in 0:N / (N - N)"),
     "division by zero in a range bound", 1, 55),
    ("where-negative-start", one("B(i) = 1.0 where i in -1:N"),
     "the range of 'i' starts below 0, so 'B' would be written at a negative position", 1, 50),
    ("let-shadows-let", one("B(i) = A(i) + x where x = 1, x = 2"),
     "where-binding 'x' shadows another name", 1, 57),
    ("let-shadows-index", one("B(i) = A(i) + i where i = 1"),
     "where-binding 'i' shadows another name", 1, 50),
    ("let-shadows-size", one("B(i) = A(i) where N = 1"),
     "where-binding 'N' shadows another name", 1, 46),
    ("let-shadows-tensor", one("B(i) = A(i) where A = 1"),
     "where-binding 'A' shadows another name", 1, 46),
    ("let-used-before-bound", one("B(i) = A(i) + x where x = y, y = 1"),
     "where-binding 'y' is used before it is bound; a binding may use only the bindings before it",
     1, 57),
    ("let-self-reference", one("B(i) = A(i) + x where x = x + 1"),
     "where-binding 'x' is used before it is bound", 1, 50),
    ("exists-not-a-read", one("B(i) = A(i) where exists 1"),
     "'where exists' needs a tensor read", 1, 46),
    ("exists-new-index", one("B(i) = A(i) where exists A(j)"),
     "'where exists' uses index 'j', which the statement does not use", 1, 46),
    # ------------------------------------------------------------- builtins
    ("unsupported-builtin", one("B(i) = j0(A(i))"),
     "builtin 'j0' is not supported by tcomp yet", 1, 35),
    ("unsupported-builtin-erfinv", one("B(i) = erfinv(A(i))"),
     "builtin 'erfinv' is not supported by tcomp yet", 1, 35),
    ("builtin-arity", one("B(i) = exp(A(i), 1)"), "'exp' takes 1 argument, got 2", 1, 35),
    ("builtin-arity-2", one("B(i) = pow(A(i))"), "'pow' takes 2 arguments, got 1", 1, 35),
    ("builtin-arity-fma", one("B(i) = 1.0 + fma(A(i), 2.0)"),
     "'fma' takes 3 arguments, got 2", 1, 41),
    ("builtin-arity-min", one("B(i) = min(A(i), 1.0, 2.0)"),
     "'min' takes 2 arguments, got 3", 1, 35),
    # ------------------------------------------------------------- ranges
    ("ambiguous-range", one("B(i) +=! A(i + j)"),
     "ambiguous range for index 'i': it appears in A(i + j) only together with other indices "
     "whose ranges are unknown; add a 'where i in 0:<size>' clause", 1, 28),
    ("uninferable-range", one("B(i) = 1.0"),
     "cannot infer the range of index 'i': no tensor read bounds it; add a 'where i in 0:<size>' "
     "clause", 1, 28),
    ("uninferable-range-gather", "def f(float(N) A, int32(M) I) -> (B) { B(i) = A(I(0) + i) }",
     "cannot infer the range of index 'i'", 1, 40),
    ("uninferable-range-nonaffine", one("B(i) = A(i / 2)"),
     "cannot infer the range of index 'i'", 1, 28),
    # A tensor's shape comes from its last statement: an earlier one may not write beyond it.
    ("write-beyond-last-shape",
     "def f(float(N) A) -> (O) {\n  O(i) = A(i)\n  O(i) = O(i + 1) where i in 0:N-1\n}",
     "this statement writes 'O' beyond its shape: i runs over 0:N here, but 'O' has extent "
     "N - 1 in dimension 0, set by the last statement that writes it (line 3); restrict this "
     "statement with 'where i in 0:N - 1', or let the last statement cover 0:N", 2, 3),
    ("write-beyond-last-shape-2d",
     "def f(float(N, M) A) -> (O) {\n  O(i, j) = A(i, j)\n  O(i, j) = 0.0 where i in 0:N, "
     "j in 0:M-2\n}",
     "this statement writes 'O' beyond its shape: j runs over 0:M here, but 'O' has extent "
     "M - 2 in dimension 1, set by the last statement that writes it (line 3)", 2, 3),
    # ------------------------------------------------------------- bool reductions
    ("bool-sum", "def f(bool(N) A) -> (B) { B(k) +=! A(i) where k in 0:1 }",
     "'+=!' on bool values of 'B' is ambiguous: write 'max=!' for a logical or, or accumulate "
     "in an integer (cast the right-hand side, e.g. int32(...), or declare 'B' as int32)", 1, 27),
    ("bool-product", "def f(float(N) A) -> (B) { B *=! A(i) > 0.0 }",
     "'*=!' on bool values of 'B' is ambiguous: write 'min=!' for a logical and", 1, 28),
    ("bool-continued-sum", "def f(float(N) A) -> (B) {\n  B max=! A(i) > 0.0\n  B += A(i) < 1.0\n}",
     "'+=' on bool values of 'B' is ambiguous: write 'max=' for a logical or", 3, 3),
]


@pytest.mark.parametrize("src,message,line,col",
                         [pytest.param(*case[1:], id=case[0]) for case in PARSE_ERRORS])
def test_parse_error(src, message, line, col):
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(src)
    err = info.value
    assert message in err.message
    assert (err.line, err.col) == (line, col), str(err)
    # the rendered error starts with the location and the message
    assert str(err).startswith(f"<tc>:{line}:{col}: error: {err.message}")


def test_inexpressible_inferred_range():
    # No known program reaches this message (range inference only builds ranges
    # that convert back); pin its text on the helper that raises it.
    import sympy

    from tcomp.lang.check import _expr
    stmt = tcomp.lang.parse_module(one("B(i) = A(i)")).defs[0].stmts[0]
    with pytest.raises(tcomp.LangError) as info:
        _expr(sympy.Symbol("N", positive=True, integer=True) / 3, stmt)
    assert info.value.message == ("cannot express the inferred range N/3 as a size expression; "
                                  "add a where clause")
    assert (info.value.line, info.value.col) == (1, 28)


def test_every_parse_error_case_is_distinct():
    ids = [c[0] for c in PARSE_ERRORS]
    assert len(ids) == len(set(ids))
    assert len(set(c[1] for c in PARSE_ERRORS)) == len(PARSE_ERRORS)


# ------------------------------------------------------------------ rendering
def rendered(src):
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(src)
    return str(info.value)


def test_render_unknown_tensor():
    src = ("def matmul(float(M,K) A, float(K,N) B) -> (C) {\n"
           "    C(m, n) +=! A(m, r_k) * D(r_k, n)\n"
           "}\n")
    assert rendered(src) == (
        "<tc>:2:29: error: unknown tensor or function 'D'\n"
        "        C(m, n) +=! A(m, r_k) * D(r_k, n)\n"
        "                                ^")


def test_render_type_mismatch():
    src = "def f(float(N) A) -> (int32(N) B) {\n  B(i) = A(i) * 2\n}"
    assert rendered(src) == (
        "<tc>:2:3: error: type mismatch: the statement computes float32 but 'B' is int32 "
        "(declared); cast explicitly, e.g. int32(...)\n"
        "      B(i) = A(i) * 2\n"
        "      ^")


def test_render_keeps_tabs_under_the_caret():
    src = "def f(float(N) A) -> (B) {\n\tB(i) = A(i) $\n}"
    assert rendered(src) == (
        "<tc>:2:14: error: unexpected character '$'\n"
        "    \tB(i) = A(i) $\n"
        "    \t            ^")


def test_render_end_of_input():
    src = "def f(float(N) A) -> (B) {\n  B(i) = A(i) *"
    assert rendered(src) == (
        "<tc>:2:16: error: expected an expression, found end of input\n"
        "      B(i) = A(i) *\n"
        "                   ^")


def test_render_crlf_line_endings():
    src = "def f(float(N) A) -> (B) {\r\n  B(i) = A(i) $\r\n}\r\n"
    assert rendered(src) == (
        "<tc>:2:15: error: unexpected character '$'\n"
        "      B(i) = A(i) $\n"
        "                  ^")


def test_render_counts_lines_like_the_lexer():
    # \f, \v and \r are blanks to the lexer, and \u2028 inside a comment is skipped:
    # none of them starts a new line, so the excerpt must not split there either.
    src = "# note\u2028more\ndef f(float(N) A) -> (B) {\f B(i) = A(i)\v $\n}"
    assert rendered(src) == (
        "<tc>:2:42: error: unexpected character '$'\n"
        "    def f(float(N) A) -> (B) {  B(i) = A(i)  $\n"
        "                                             ^")
    src = "def f(float(N) A) -> (B) {\r  B(i) = A(i) $\r}"
    assert rendered(src) == (
        "<tc>:1:42: error: unexpected character '$'\n"
        "    def f(float(N) A) -> (B) {   B(i) = A(i) $ }\n"
        "                                             ^")


def test_render_nonprintable_character():
    src = "def f(float(N) A) -> (B) {\n  B(i) = A(i) \x07\n}"
    assert rendered(src) == (
        "<tc>:2:15: error: unexpected character '\\x07'\n"
        "      B(i) = A(i)  \n"
        "                  ^")


def test_error_attributes():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(one("B(i) = A(i) * D(i)"))
    err = info.value
    assert isinstance(err, tcomp.TcompError)
    assert err.message == "unknown tensor or function 'D'"
    assert (err.line, err.col) == (1, 42)
    assert err.loc.line == 1 and err.loc.col == 42


def test_error_location_second_def():
    src = ("def ok(float(N) A) -> (B) { B(i) = A(i) }\n"
           "# a comment\n"
           "def bad(float(N) A) -> (B) {\n"
           "    B(i) = A(i)  # fine\n"
           "    B(i) += A(i, k)\n"
           "}\n")
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(src)
    assert info.value.message == "tensor 'A' has 1 dimension but is indexed with 2"
    assert (info.value.line, info.value.col) == (5, 13)


# ----------------------------------------------------------- nesting limits
# Builders of right-hand sides MAX levels deep (counting the read A(i) and its
# index): one level more is an error.
AT_LIMIT = {
    "parens": lambda k: "(" * (k - 2) + "A(i)" + ")" * (k - 2),
    "calls": lambda k: "fabs(" * (k - 2) + "A(i)" + ")" * (k - 2),
    "negations": lambda k: "- " * (k - 2) + "A(i)",
    "sums": lambda k: "exp(" * (k - 3) + "A(i) + A(i) - 1.0" + ")" * (k - 3),
    "selects": lambda k: "i > 9 ? " * (k - 2) + "A(i)" + " : 0.0" * (k - 2),
    "subscripts": lambda k: "A(" + "min(" * (k - 2) + "i" + ", 9)" * (k - 2) + ") where i in 0:N",
}


@pytest.mark.parametrize("build", AT_LIMIT.values(), ids=AT_LIMIT.keys())
def test_nesting_at_the_limit_is_accepted_and_evaluates(build):
    x = np.arange(4, dtype=np.float32)
    op = tcomp.op(one(f"B(i) = {build(MAX)}"))
    want = tcomp.evaluate(op, x)
    assert want.shape == (4,)
    again = tcomp.op(str(op))  # printing and re-checking a deep tree works too
    np.testing.assert_array_equal(tcomp.evaluate(again, x), want)
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(one(f"B(i) = {build(MAX + 1)}"))
    assert info.value.message == f"expression nested more than {MAX} levels deep"


def test_a_flat_chain_counts_its_length_not_its_nesting():
    # issue 22: a sum of 99 terms was refused as "nested more than 100 levels deep"
    x = np.arange(4, dtype=np.float32)
    sums = [(LEN * x, " + ".join(["A(i)"] * LEN)),
            (x - 2.0 * (LEN - 1), "A(i) - " + " - ".join(["2.0"] * (LEN - 1))),
            ((LEN - MAX) * x, "(" * (MAX - 3) + " + ".join(["A(i)"] * (LEN - MAX)) + ")" * (MAX - 3))]
    for expected, rhs in sums:
        op = tcomp.op(one(f"B(i) = {rhs}"))
        want = tcomp.evaluate(op, x)
        np.testing.assert_array_equal(tcomp.evaluate(tcomp.op(str(op)), x), want)
        s = tcomp.Schedule(op)
        (i,) = s["B"].axes
        io, ii = s["B"].split(i, 2)
        s["B"].bind(io, "blockIdx.x")
        s["B"].bind(ii, "threadIdx.x")
        np.testing.assert_array_equal(tcomp.build(s, target="sim")(x), want)
        assert "__global__" in tcomp.build(s, target="cuda").source
        np.testing.assert_array_equal(want, expected)
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(one("B(i) = " + " + ".join(["A(i)"] * (LEN + 1))))
    assert info.value.message == TOO_LONG


def let_chain(n: int, step: str = "x{k} = x{j} + 1.0") -> str:
    """x0 = A(i), x1 = x0 + 1.0, ...: x{k} is k + 1 operations long once expanded."""
    lets = ", ".join(["x0 = A(i)"] + [step.format(k=k, j=k - 1) for k in range(1, n)])
    return one(f"B(i) = x{n - 1} where {lets}")


def test_where_bindings_count_towards_the_length_and_nesting_limits():
    # each binding is shallow, but the passes that expand them recurse through all
    op = tcomp.op(let_chain(LEN))
    np.testing.assert_array_equal(tcomp.evaluate(op, np.zeros(2, np.float32)), [LEN - 1] * 2)
    np.testing.assert_array_equal(tcomp.evaluate(tcomp.op(str(op)), np.zeros(2, np.float32)),
                                  [LEN - 1] * 2)
    for n in (LEN + 1, 5 * LEN):
        src = let_chain(n)
        with pytest.raises(tcomp.LangError) as info:
            tcomp.op(src)
        assert info.value.message == TOO_LONG.replace(
            "; compute", " (counting the where-bindings it uses); compute")
        assert (info.value.line, info.value.col) == (1, src.index(f"x{LEN} = ") + 1)
    # nesting through bindings: each one a call around the one before
    nested = "x{k} = fabs(x{j})"
    op = tcomp.op(let_chain(MAX - 1, nested))  # x{k} is k + 2 levels deep
    np.testing.assert_array_equal(tcomp.evaluate(op, -np.ones(2, np.float32)), [1, 1])
    src = let_chain(MAX, nested)
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(src)
    assert info.value.message == (f"expression nested more than {MAX} levels deep (counting "
                                  f"the where-bindings it uses)")
    assert (info.value.line, info.value.col) == (1, src.index(f"x{MAX - 1} = ") + 1)
    # the right-hand side itself can be the one too deep
    src = one(f"B(i) = -x{MAX - 2} where " + ", ".join(
        ["x0 = A(i)"] + [nested.format(k=k, j=k - 1) for k in range(1, MAX - 1)]))
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(src)
    assert (info.value.line, info.value.col) == (1, 35)
    assert info.value.message.startswith(f"expression nested more than {MAX} levels deep")


def test_huge_inputs_fail_cleanly():
    for rhs in ["(" * 5000 + "A(i)" + ")" * 5000, "-" * 5000 + "A(i)",
                "exp(" * 2000 + "A(i)" + ")" * 2000, "A(" * 2000 + "i" + ")" * 2000]:
        with pytest.raises(tcomp.LangError) as info:
            tcomp.parse(one(f"B(i) = {rhs}"))
        assert info.value.message == f"expression nested more than {MAX} levels deep"
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(one("B(i) = " + " + ".join(["A(i)"] * 50000)))
    assert info.value.message == TOO_LONG
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(one("B(i) = A(i) where i in 0:" + "(" * 5000 + "N" + ")" * 5000))
    assert info.value.message == f"expression nested more than {MAX} levels deep"


# ------------------------------------------------------- program-level errors
TWO = "def f(float(N) A) -> (B) { B(i) = A(i) }\ndef g(float(N) A) -> (B) { B(i) = -A(i) }"


def test_op_with_several_defs_needs_a_name():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(TWO)
    assert info.value.message == "source has 2 defs (f, g); pass name= to choose one"
    assert info.value.line is None and str(info.value) == f"error: {info.value.message}"
    assert tcomp.op(TWO, name="g").name == "g"


def test_op_without_defs():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op("# nothing here\n")
    assert info.value.message == "source has 0 defs (none); pass name= to choose one"


def test_missing_def_name():
    prog = tcomp.parse(TWO)
    with pytest.raises(tcomp.LangError) as info:
        prog["h"]
    assert info.value.message == "no def named 'h' (defs: f, g)"
    with pytest.raises(tcomp.LangError) as info:
        tcomp.op(TWO, name="missing")
    assert info.value.message == "no def named 'missing' (defs: f, g)"


def test_source_type_errors():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(b"def f() -> () {}\xff")
    assert info.value.message == "source is not valid UTF-8 (byte 16)"
    with pytest.raises(tcomp.LangError) as info:
        tcomp.parse(42)
    assert info.value.message == "source must be a str, got int"
    assert len(tcomp.parse(b"def f(float(N) A) -> (B) { B(i) = A(i) }")) == 1


# ------------------------------------------------------ evaluation-time errors
def f32(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def eval_error(src, *arrays):
    """The LangError of calling `src` on `arrays`: the same message from evaluate,
    a sim kernel and a CUDA kernel (its checks run before any GPU work, so they run
    here too; tcomp/lang/signature.py is the one checker)."""
    op = tcomp.op(src)
    with pytest.raises(tcomp.LangError) as info:
        tcomp.evaluate(op, *arrays)
    for target in ("sim", "cuda"):
        k = tcomp.build(op, target=target)
        with pytest.raises(tcomp.LangError) as other:
            k(*arrays)
        assert other.value.message == info.value.message, target
    return info.value


def eval_only_error(src, *arrays):
    """A LangError only the evaluation itself finds (out-of-bounds gathers, division
    by zero): evaluate's text (the sim reports these as SimError)."""
    op = tcomp.op(src)
    with pytest.raises(tcomp.LangError) as info:
        tcomp.evaluate(op, *arrays)
    return info.value


ADD = "def add(float(N) A, float(N) C) -> (B) { B(i) = A(i) + C(i) }"


def test_eval_wrong_input_count():
    err = eval_error(ADD, f32(3))
    assert err.message == "'add' takes 2 input(s) (A, C), got 1"
    err = eval_error(ADD, f32(3), f32(3), f32(3))
    assert err.message == "'add' takes 2 input(s) (A, C), got 3"


def test_eval_wrong_rank():
    err = eval_error(ADD, f32(3), f32(3, 1))
    assert err.message == "input 'C' must have 1 dimension(s), got 2 (shape (3, 1))"
    err = eval_error("def s(float a) -> (b) { b = a * 2 }", f32(1))
    assert err.message == "input 'a' must have 0 dimension(s), got 1 (shape (1,))"


def test_eval_incompatible_dtype():
    src = "def f(int32(N) A) -> (B) { B(i) = A(i) * 2 }"
    err = eval_error(src, f32(3))
    assert err.message == ("input 'A' is int32, but the array passed for it is float32; convert "
                           "it explicitly (NumPy: .astype(), torch: .to()), tcomp never casts "
                           "arrays")
    err = eval_error(src, np.zeros(3, np.complex64))
    assert err.message.startswith("input 'A' is int32, but the array passed for it is complex64;")
    err = eval_error(ADD, np.array(["a", "b", "c"]), f32(3))
    assert err.message.startswith("input 'A' is float32, but the array passed for it is <U1;")
    # float64 and int32 arrays for a float input: no silent cast
    for dt in (np.float64, np.int32):
        err = eval_error(ADD, np.zeros(3, dt), f32(3))
        assert err.message.startswith(f"input 'A' is float32, but the array passed for it is "
                                      f"{np.dtype(dt).name};")


def test_eval_python_data_of_the_wrong_kind():
    err = eval_error("def f(int32 n) -> (B) { B = n * 2 }", 2.5)
    assert err.message == ("input 'n' is int32, but the Python data passed for it holds float "
                           "values; pass int values, or an array of dtype int32")
    err = eval_error("def f(bool(N) m) -> (B) { B(i) = m(i) ? 1 : 0 }", [1, 0])
    assert err.message == ("input 'm' is bool, but the Python data passed for it holds int "
                           "values; pass bool values, or an array of dtype bool")
    err = eval_error(ADD, [True, False], [1.0, 2.0])
    assert err.message == ("input 'A' is float32, but the Python data passed for it holds bool "
                           "values; pass float or int values, or an array of dtype float32")
    err = eval_error("def f(half(N) A) -> (B) { B(i) = A(i) }", [1.0, 1e6])
    assert err.message == "input 'A': values of the Python data overflow float16"


def test_eval_integer_input_out_of_range():
    src = "def f(int8(N) A) -> (B) { B(i) = A(i) }"
    err = eval_error(src, [1, 300, -2])
    assert err.message == ("input 'A' is int8, but the Python data passed for it holds values "
                           "outside its range (-2..300)")


def test_eval_unreadable_input():
    err = eval_error(ADD, [[1.0], [1.0, 2.0]], f32(2))
    assert err.message.startswith("input 'A': cannot read a list as an array (")


def test_eval_inconsistent_size_variable():
    err = eval_error(ADD, f32(3), f32(4))
    assert err.message == "input 'C' dimension 0 is 4, but size N is 3 from input 'A' dimension 0"
    err = eval_error("def t(float(N, N) A) -> (B) { B(i, j) = A(j, i) }", f32(2, 3))
    assert err.message == "input 'A' dimension 1 is 3, but size N is 2 from input 'A' dimension 0"


def test_eval_literal_dim_mismatch():
    err = eval_error("def f(float(N, 4) A) -> (B) { B(i) = A(i, 3) }", f32(3, 5))
    assert err.message == "input 'A' dimension 1 must be 4, got 5"


def test_eval_literal_dims_and_ranks_on_every_target():
    """The reproducers of issue 9 item 4: run silently on CUDA before."""
    err = eval_error("def f(float(1) a) -> (b) { b(i) = a(i) }", f32(3))
    assert err.message == "input 'a' dimension 0 must be 1, got 3"
    err = eval_error("def f(int32 a) -> (b) { b = a + 1 }", np.zeros((1, 2), np.int32))
    assert err.message == "input 'a' must have 0 dimension(s), got 2 (shape (1, 2))"
    err = eval_error("def f(float(N) a) -> (b) { b(i) = a(i) }", f32(2, 3))
    assert err.message == "input 'a' must have 1 dimension(s), got 2 (shape (2, 3))"


def test_compiled_sizes_are_checked_on_every_target():
    op = tcomp.op(ADD)
    for target in ("sim", "cuda"):
        k = tcomp.build(op, target=target, sizes={"N": 4})
        with pytest.raises(tcomp.LoweringError) as info:
            k(f32(3), f32(3))
        assert str(info.value) == "'add' was compiled for N=4, but the inputs have N=3"


def test_eval_gather_out_of_bounds():
    src = "def g(float(N, D) T, int32(M) Idx) -> (O) {\n  O(m, d) = T(Idx(m), d)\n}"
    err = eval_only_error(src, f32(3, 2), np.array([0, 2, 3, 1], np.int32))
    assert err.message == ("T(Idx(m), d) reads 'T' out of bounds at index (3, 0) (shape (3, 2)) "
                           "when m=2, d=0")
    assert (err.line, err.col) == (2, 13)
    err = eval_only_error(src, f32(3, 2), np.array([0, -1], np.int32))
    assert err.message.startswith("T(Idx(m), d) reads 'T' out of bounds at index (-1, 0)")


def test_eval_out_of_bounds_through_where_range():
    err = eval_only_error(one("B(i) = A(i) where i in 0:N + 1"), f32(3))
    assert err.message == "A(i) reads 'A' out of bounds at index (3,) (shape (3,)) when i=3"
    assert (err.line, err.col) == (1, 35)


def test_eval_integer_division_by_zero():
    src = "def d(int32(N) A, int32(N) C) -> (Q, R) {\n  Q(i) = A(i) / C(i)\n  R(i) = A(i) % C(i)\n}"
    a, c = np.array([4, 5, 6], np.int32), np.array([1, 0, 2], np.int32)
    err = eval_only_error(src, a, c)
    assert err.message == "integer division by zero in A(i) / C(i)"
    assert (err.line, err.col) == (2, 15)
    err = eval_only_error(src.replace("Q(i) = A(i) / C(i)", "Q(i) = A(i)"), a, c)
    assert err.message == "integer division by zero in A(i) % C(i)"
    assert (err.line, err.col) == (3, 15)


def test_eval_size_expression_division_by_zero():
    src = "def f(float(N) A, float(M) C) -> (B) { B(i) = 1.0 where i in 0:N / (M - N) }"
    err = eval_only_error(src, f32(3), f32(3))
    assert err.message == "division by zero in a size expression"


def test_eval_typed_output_shape_mismatch():
    src = "def f(float(N) A, float(M) C) -> (float(M) B) { B(i) = A(i) }"
    err = eval_only_error(src, f32(3), f32(4))
    assert err.message == ("output 'B' is declared with shape (4,) but its statements compute "
                           "shape (3,)")
    src = "def f(float(N) A) -> (float(8) B) { B(i) = A(i) }"
    err = eval_only_error(src, f32(3))
    assert err.message == ("output 'B' is declared with shape (8,) but its statements compute "
                           "shape (3,)")


def test_eval_write_beyond_shape():
    """Undecidable when the op is checked (N vs M): checked at every call, on every
    target, before anything runs; the message names both statements' lines."""
    src = "def f(float(N) A, float(M) C) -> (B) {\n  B(i) = C(i)\n  B(i) = A(i)\n}"
    assert len(tcomp.op(src).write_checks) == 1
    err = eval_error(src, f32(3), f32(4))
    assert err.message == ("the statement on line 2 writes 'B' beyond its shape: i runs over "
                           "0:M = 0:4 there, but 'B' has extent N = 3 in dimension 0, set by the "
                           "last statement that writes it (line 3); restrict that statement with "
                           "'where i in 0:min(M, N)', or let the last statement cover 0:M")
    np.testing.assert_array_equal(tcomp.evaluate(tcomp.op(src), f32(3), f32(2)), [0, 1, 2])


def test_eval_needs_an_op():
    with pytest.raises(tcomp.LangError) as info:
        tcomp.evaluate(ADD, f32(3), f32(3))
    assert info.value.message == "evaluate() needs an Op (from tcomp.op or tcomp.parse), got str"
