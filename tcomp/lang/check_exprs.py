"""The checker's expression rules (check.py's `_Checker`, as a mixin):
nesting depth, operators and their types, names (indices, sizes, tensors,
lets), builtin calls and tensor reads."""
from __future__ import annotations

import dataclasses

from ..errors import LangError
from . import builtins, dtypes, literals
from .ast import (Binary, Call, Cast, Const, Expr, Index, LetRef, Name, Read, Select, Size, Unary,
                  Values, children)
from .parser import continues_chain, depth_error

COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC = ("&&", "||")


class ExprChecks:
    """Expression checks of `_Checker` (they use its scopes and tensors)."""

    def check_depth(self, e: Expr, loc) -> tuple[int, int]:
        """The parser bounds each expression's nesting and length; bindings used
        through LetRef make them longer, and the passes that expand them
        recurse that far: (nesting, length) of `e` expanded (parser.py)."""
        def resolved(x: Expr) -> Expr:
            while isinstance(x, LetRef):
                x = self.lets[x.name]
            return x

        def depth(x: Expr) -> tuple[int, int]:
            if isinstance(x, LetRef):
                return self.let_depths[x.name]
            nest, length = 1, 0
            for k, c in enumerate(children(x)):
                n, d = depth(c)
                nest = max(nest, n + (0 if continues_chain(x, k, resolved(c)) else 1))
                length = max(length, d + 1)
            return nest, length
        nest, length = depth(e)
        message = depth_error(nest, length, " (counting the where-bindings it uses)")
        if message:
            raise LangError(message, loc)
        return nest, length

    def expr(self, e: Expr) -> Expr:
        if isinstance(e, Const):  # a float literal alone is float32 until it meets a type
            return literals.typed(e, dtypes.float32 if isinstance(e.value, float) else dtypes.int32)
        if isinstance(e, Name):
            return self.name(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Read):  # already resolved (re-checking a printed op)
            return self.read(e.tensor, e.args, e.loc)
        if isinstance(e, Unary):
            x = self.expr(e.x)
            if e.op == "!":
                self.need_logical(x, "operand of '!'")
                return dataclasses.replace(e, x=x, dtype=dtypes.bool_)
            if x.dtype.is_bool:
                raise LangError("type mismatch: unary '-' on a bool", e.loc)
            return dataclasses.replace(e, x=x, dtype=dtypes.promote(x.dtype, x.dtype))
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op not in LOGIC:
                a, b = literals.meet([a, b], self.lets)
            if e.op in LOGIC:
                self.need_logical(a, f"left operand of '{e.op}'")
                self.need_logical(b, f"right operand of '{e.op}'")
                t = dtypes.bool_
            elif e.op in COMPARISONS:
                t = dtypes.bool_
            else:
                t = dtypes.promote(a.dtype, b.dtype)
            return dataclasses.replace(e, a=a, b=b, dtype=t)
        if isinstance(e, Select):
            c = self.expr(e.cond)
            self.need_logical(c, "condition of '?:'")
            a, b = literals.meet([self.expr(e.a), self.expr(e.b)], self.lets)
            t = a.dtype if a.dtype == b.dtype else dtypes.promote(a.dtype, b.dtype)
            return dataclasses.replace(e, cond=c, a=a, b=b, dtype=t)
        if isinstance(e, Cast):
            x, t = self.expr(e.x), dtypes.BY_NAME[e.type_name]
            if t.is_float and literals.is_weak(x, self.lets):  # double(0.1): the double 0.1
                x = literals.retype(x, t, self.lets)
            return dataclasses.replace(e, x=x, dtype=t)
        if isinstance(e, (Index, Size, LetRef)):
            return self.name(Name(e.name, loc=e.loc))
        if isinstance(e, Values):  # a tuple reduction's values: each typed alone
            return dataclasses.replace(e, items=tuple(self.expr(x) for x in e.items))
        raise AssertionError(f"unexpected node {e!r}")

    def need_logical(self, x: Expr, what: str):
        if x.dtype.is_float:
            raise LangError(f"type mismatch: {what} must be bool or integer, got {x.dtype} "
                            f"(compare explicitly, e.g. x != 0.0)", x.loc)

    def name(self, e: Name) -> Expr:
        n = e.name
        if n in self.lets:
            return LetRef(n, self.lets[n].dtype, loc=e.loc)
        if n in self.sizes:
            return Size(n, dtypes.int32, loc=e.loc)
        r = self.rank(n)
        if r is None and n in self.declared:
            raise LangError(f"output '{n}' is read before any statement writes it", e.loc)
        if r is not None:
            if r != 0:
                raise LangError(f"tensor '{n}' has {r} dimension{'s' if r != 1 else ''} but is "
                                f"read without indices", e.loc)
            return self.read(n, (), e.loc)
        if n in dtypes.BY_NAME:
            raise LangError(f"type name '{n}' used as a value", e.loc)
        if n not in self.stmt_indices:
            self.stmt_indices.append(n)
        return Index(n, dtypes.int32, loc=e.loc)

    def call(self, e: Call) -> Expr:
        n = e.fn
        if n in self.inputs or n in self.declared:
            return self.read(n, e.args, e.loc)
        if n in builtins.UNSUPPORTED:
            raise LangError(f"builtin '{n}' is not supported by tcomp yet", e.loc)
        if not builtins.is_builtin(n):
            if n in self.sizes or n in self.stmt_indices or n in self.lets:
                raise LangError(f"'{n}' is not a tensor or function and cannot be called", e.loc)
            if any(st.tensor == n for st in self.d.stmts):
                raise LangError(f"temporary '{n}' is read before any statement writes it", e.loc)
            raise LangError(f"unknown tensor or function '{n}'", e.loc)
        want = builtins.ARITY[n]
        if len(e.args) != want:
            raise LangError(f"'{n}' takes {want} argument{'s' if want != 1 else ''}, got "
                            f"{len(e.args)}", e.loc)
        args = tuple(literals.meet([self.expr(a) for a in e.args], self.lets))
        t = args[0].dtype
        for a in args[1:]:
            t = t if t == a.dtype else dtypes.promote(t, a.dtype)
        if builtins.returns_float(n):
            if not t.is_float:
                t = dtypes.float32
        elif t.is_bool or (t.is_int and t.bits < 32):
            t = dtypes.promote(t, t)
        return dataclasses.replace(e, args=args, dtype=t)

    def read(self, n: str, args, loc) -> Read:
        r = self.rank(n)
        if r is None:
            raise LangError(f"output '{n}' is read before any statement writes it", loc)
        if len(args) != r:
            raise LangError(f"tensor '{n}' has {r} dimension{'s' if r != 1 else ''} but is "
                            f"indexed with {len(args)}", loc)
        checked = tuple(self.expr(a) for a in args)
        for a in checked:
            if not a.dtype.is_int:
                raise LangError(f"subscript of '{n}' must be an integer, got {a.dtype}", a.loc)
        dtype = self.inputs[n][0] if n in self.inputs else self.written[n]["dtype"]
        return Read(n, checked, dtype, loc=loc)
