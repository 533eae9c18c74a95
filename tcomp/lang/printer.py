"""The one printer of the language: expressions, statements, defs and ops back
to TC text. Parentheses are inserted exactly where the grammar needs them, so
parse(print(x)) == x."""
from __future__ import annotations

import math

from . import literals
from .ast import (Binary, Call, Cast, Const, Def, ExistsClause, Expr, Index, LetClause,
                  LetRef, Module, Name, OrderedClause, OutParam, Param, RangeClause, Read, Select, Size, Stmt,
                  Unary, Values)

# Binding strength; higher binds tighter. Binary operators are left-associative.
PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
        "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}
SELECT, UNARY, ATOM = 0, 7, 8


def _prec(e: Expr) -> int:
    if isinstance(e, Select):
        return SELECT
    if isinstance(e, Binary):
        return PREC[e.op]
    if isinstance(e, Unary):
        return UNARY
    return ATOM


def format_const(v) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    return text if any(c in text for c in ".e") else text + ".0"


def const_text(e: Const) -> str:
    """A literal as the source wrote it, up to spelling: the double nearest its
    text (its value may be rounded to a narrower type), or the text itself
    where that double would round differently (literals.exact_text)."""
    if e.text is None:
        return format_const(e.value)
    v = float(e.text)
    return e.text if literals.exact_text(v, e.text) else format_const(v)


def expr_to_text(e: Expr, min_prec: int = SELECT) -> str:
    p = _prec(e)
    if isinstance(e, Const):
        text = const_text(e)
    elif isinstance(e, (Name, Index, Size, LetRef)):
        text = e.name
    elif isinstance(e, Read):
        text = e.tensor if not e.args else f"{e.tensor}({_args(e.args)})"
    elif isinstance(e, Call):
        text = f"{e.fn}({_args(e.args)})"
    elif isinstance(e, Cast):
        text = f"{e.type_name}({expr_to_text(e.x)})"
    elif isinstance(e, Unary):
        inner = expr_to_text(e.x, UNARY)
        # `- -x` must not print as `--x`; keep a space between repeated minus signs.
        text = e.op + (" " if inner.startswith("-") else "") + inner
    elif isinstance(e, Binary):
        text = f"{expr_to_text(e.a, p)} {e.op} {expr_to_text(e.b, p + 1)}"
    elif isinstance(e, Select):
        text = (f"{expr_to_text(e.cond, SELECT + 1)} ? {expr_to_text(e.a)} : "
                f"{expr_to_text(e.b)}")
    else:
        raise TypeError(f"not an expression: {e!r}")
    return f"({text})" if p < min_prec else text


def _args(args) -> str:
    return ", ".join(expr_to_text(a) for a in args)


def clause_to_text(c) -> str:
    if isinstance(c, RangeClause):
        return f"{c.var} in {expr_to_text(c.lo, 1)}:{expr_to_text(c.hi, 1)}"
    if isinstance(c, ExistsClause):
        return f"exists {expr_to_text(c.read)}"
    if isinstance(c, LetClause):
        return f"{c.name} = {expr_to_text(c.value)}"
    if isinstance(c, OrderedClause):
        return f"ordered {c.var}"
    raise TypeError(c)


def stmt_to_text(s: Stmt) -> str:
    sub = f"({', '.join(s.indices)})" if s.indices else \
        f"({', '.join(expr_to_text(e) for e in s.subscripts)})" if s.subscripts else ""
    lhs = ", ".join(t + sub for t in s.all_tensors)
    rhs = ", ".join(expr_to_text(v) for v in s.rhs.items) if isinstance(s.rhs, Values) \
        else expr_to_text(s.rhs)
    text = f"{lhs} {s.op}{'!' if s.init else ''} {rhs}"
    if s.where:
        text += " where " + ", ".join(clause_to_text(c) for c in s.where)
    return text


def _dims(dims) -> str:
    return f"({', '.join(expr_to_text(d) for d in dims)})" if dims else ""


def param_to_text(p: Param) -> str:
    return f"{p.type_name}{_dims(p.dims)} {p.name}"


def out_to_text(o: OutParam) -> str:
    if o.type_name is None:
        return o.name
    return f"{o.type_name}{_dims(o.dims)} {o.name}"


def def_to_text(d: Def, notes: dict[int, str] | None = None) -> str:
    """`notes` maps a statement's position to a comment printed above it."""
    head = (f"def {d.name}({', '.join(param_to_text(p) for p in d.inputs)}) -> "
            f"({', '.join(out_to_text(o) for o in d.outputs)}) {{")
    lines = [head]
    for i, s in enumerate(d.stmts):
        if notes and i in notes:
            lines.extend(f"    # {n}" for n in notes[i].splitlines())
        lines.append("    " + stmt_to_text(s))
    lines.append("}")
    return "\n".join(lines)


def module_to_text(m: Module) -> str:
    return "\n\n".join(def_to_text(d) for d in m.defs) + "\n"
