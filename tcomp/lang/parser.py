"""Recursive-descent parser: source text -> `Module` (unchecked syntax tree).

Grammar (TC's, with tcomp's extensions marked +):

  module    := def*
  def       := 'def' ID '(' [param {',' param}] ')' '->' '(' [output {',' output}] ')' '{' stmt* '}'
  param     := TYPE ['(' dim {',' dim} ')'] ID        dim := ID | INT
  output    := ID | TYPE ['(' dim {',' dim} ')'] ID   (+ typed outputs)
  stmt      := ID ['(' [sub {',' sub}] ')'] ASSIGN expr ['<=>' expr] [where] ['<=>' expr] [';'] (+;)
  sub       := ID | expr   (+ an expr reading a tensor: a scatter, `O(I(i), d) += ...`)
             | lhs {',' lhs} TUPLE expr {',' expr} [where] [';']      (+ tuple reductions)
  TUPLE     := 'argmax=!' | 'argmin=!' | 'welford=!' | 'expsum=!'       (monoids.py)
  ASSIGN    := '=' | '+=' | '*=' | 'max=' | 'min=' | '+=!' | '*=!' | 'max=!' | 'min=!'
  where     := 'where' clause {',' clause}
  clause    := ID 'in' expr ':' expr | 'exists' expr | ID '=' expr (+) | 'ordered' ID (+)
  expr      := or ['?' expr ':' expr]                     (right associative)
  or := and {'||' and}   and := cmp {'&&' cmp}
  cmp := add {('=='|'!='|'<'|'<='|'>'|'>=') add}   (one level, as in TC)   add := mul {('+'|'-') mul}
  mul := unary {('*'|'/'|'%') unary}     unary := ('-'|'!') unary | postfix
  postfix   := INT | FLOAT | 'inf' | 'nan' (+) | ID | ID '(' [expr {',' expr}] ')' | '(' expr ')'
"""
from __future__ import annotations

from .. errors import LangError
from . import dtypes, literals, monoids
from .ast import (Binary, Call, Cast, Const, Def, ExistsClause, Expr, LetClause, Module,
                  Name, OrderedClause, OutParam, Param, RangeClause, Select, Stmt, Unary, Values, children)
from .lexer import MONOID_WORDS, Token, tokenize
from .source import Source

# Every later pass (checker, printer, oracle, lowering, the sim: three frames a
# level) recurses over expression trees, and this parser recurses once per
# parenthesis, call or ternary: bound both so that no input can exhaust Python's
# recursion limit. Two bounds: the *nesting*, MAX_DEPTH levels (parentheses,
# calls, ternaries, unary operators, subscripts; a chain of binary operators of
# one precedence level, `a + b - c + ...`, is one level however long), and the
# *length*, MAX_LENGTH steps from the root to a leaf (a flat sum of MAX_LENGTH
# terms `X(i)` is that long).
MAX_DEPTH = 100
MAX_LENGTH = 200
INT32_MAX = 2**31 - 1
MAX_RANK = 64  # NumPy's limit on an array's dimensions (evaluate and the sim hold tensors in it)


def check_rank(name, rank: int) -> None:
    """A tensor of more dimensions than an array can have is refused where it is written."""
    if rank > MAX_RANK:
        raise LangError(f"tensor '{name.text}' has {rank} dimensions; tcomp supports at most "
                        f"{MAX_RANK} (NumPy's limit)", name.loc)


# As in TC, all six comparisons share one level (left-associative): `a == b < c` is
# `(a == b) < c`, unlike C.
BINARY_LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"),
                 ("*", "/", "%"))
BINARY_PREC = {op: i for i, level in enumerate(BINARY_LEVELS) for op in level}
ASSIGN_OPS = ("=", "+=", "*=", "max=", "min=", "+=!", "*=!", "max=!", "min=!")
TUPLE_OPS = tuple(f"{w}=!" for w in MONOID_WORDS)  # tuple reductions (monoids.py)


def parse_module(text: str, name: str = "<tc>") -> Module:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LangError(f"source is not valid UTF-8 (byte {e.start})") from None
    if not isinstance(text, str):
        raise LangError(f"source must be a str, got {type(text).__name__}")
    return _Parser(Source(text, name)).module()


class _Parser:
    def __init__(self, source: Source):
        self.toks = tokenize(source)
        self.pos = 0
        self.depth = 0

    # -------------------------------------------------------------- helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        t = self.toks[self.pos]
        if t.kind != "eof":
            self.pos += 1
        return t

    def error(self, what: str, tok: Token | None = None):
        tok = tok or self.tok
        raise LangError(f"expected {what}, found {tok.describe()}", tok.loc)

    def expect_op(self, text: str) -> Token:
        if not self.tok.is_op(text):
            self.error(f"'{text}'")
        return self.advance()

    def expect_ident(self, what: str) -> Token:
        if self.tok.kind != "ident":
            self.error(what)
        return self.not_reserved(self.advance(), what)

    @staticmethod
    def not_reserved(t: Token, what: str) -> Token:
        """`inf` and `nan` are float literals, not names."""
        if t.text in literals.WORDS:
            raise LangError(f"'{t.text}' is a reserved word (the float literal "
                            f"{'infinity' if t.text == 'inf' else 'NaN'}) and cannot be "
                            f"{what}; choose another name", t.loc)
        return t

    def comma_list(self, item, close: str) -> list:
        """Items separated by ',' up to (and consuming) the `close` token."""
        out = []
        if self.tok.is_op(close):
            self.advance()
            return out
        while True:
            out.append(item())
            if self.tok.is_op(","):
                self.advance()
                continue
            self.expect_op(close)
            return out

    # ------------------------------------------------------------ top level
    def module(self) -> Module:
        defs = []
        while self.tok.kind != "eof":
            if not self.tok.is_kw("def"):
                self.error("'def'")
            defs.append(self.def_())
        return Module(tuple(defs))

    def def_(self) -> Def:
        start = self.advance()
        name = self.expect_ident("a def name").text
        self.expect_op("(")
        inputs = self.comma_list(self.param, ")")
        self.expect_op("->")
        self.expect_op("(")
        outputs = self.comma_list(self.out_param, ")")
        self.expect_op("{")
        stmts = []
        while not self.tok.is_op("}"):
            if self.tok.kind == "eof":
                self.error("'}' to close the def")
            stmts.append(self.stmt())
        self.advance()
        return Def(name, tuple(inputs), tuple(outputs), tuple(stmts), loc=start.loc)

    def type_name(self) -> Token:
        t = self.tok
        if t.kind != "ident" or t.text not in dtypes.BY_NAME:
            self.error("a type name (float, half, int32, ...)")
        return self.advance()

    def dims(self) -> tuple[Expr, ...]:
        if not self.tok.is_op("("):
            return ()
        self.advance()
        return tuple(self.comma_list(self.dim, ")"))

    def dim(self) -> Expr:
        t = self.tok
        if t.kind == "ident" and t.text not in dtypes.BY_NAME:
            self.not_reserved(self.advance(), "a size variable")
            return Name(t.text, loc=t.loc)
        if t.kind == "int":
            return self.int_const(self.advance())
        self.error("a size variable or integer")

    def tensor_name(self, what: str) -> Token:
        t = self.expect_ident(what)
        if t.text in dtypes.BY_NAME:
            raise LangError(f"'{t.text}' is a type name and cannot name a tensor", t.loc)
        return t

    def param(self) -> Param:
        ty = self.type_name()
        dims = self.dims()
        name = self.tensor_name("an input tensor name")
        check_rank(name, len(dims))
        return Param(name.text, ty.text, dims, loc=name.loc)

    def out_param(self) -> OutParam:
        t = self.tok
        if t.kind == "ident" and t.text in dtypes.BY_NAME:
            ty = self.advance()
            dims = self.dims()
            name = self.tensor_name("an output tensor name")
            check_rank(name, len(dims))
            return OutParam(name.text, ty.text, dims, loc=name.loc)
        name = self.tensor_name("an output tensor name")
        return OutParam(name.text, loc=name.loc)

    # ------------------------------------------------------------ statements
    def stmt(self) -> Stmt:
        name = self.tok
        if name.kind != "ident":
            self.error("a statement (tensor name) or '}'")
        if name.text in dtypes.BY_NAME:
            raise LangError(f"'{name.text}' is a type name and cannot be written", name.loc)
        self.not_reserved(self.advance(), "a tensor name")
        indices, subscripts = self.lhs_subscripts(name)
        more = []  # a tuple reduction's further components: `a(n), b(n) argmax=! ...`
        while self.tok.is_op(","):
            self.advance()
            other = self.tensor_name("a tensor name (a component of a tuple reduction)")
            more.append((other, self.lhs_indices(other)))
        if not (self.tok.kind == "op" and self.tok.text in ASSIGN_OPS + TUPLE_OPS):
            self.error("an assignment operator (=, +=, *=, max=, min=, or their ! forms)")
        optok = self.advance()
        op = optok.text
        init = op.endswith("!")
        rhs = self.expr()
        if op in TUPLE_OPS or more:
            if subscripts:
                raise LangError("a tuple reduction cannot write through a data-dependent "
                                "subscript (a scatter); write each component in its own "
                                "statement", name.loc)
            rhs = self.tuple_rhs(name, indices, more, optok, rhs)
        self.skip_equivalent()
        where: list = []
        if self.tok.is_kw("where"):
            self.advance()
            where.append(self.where_clause())
            while self.tok.is_op(","):
                self.advance()
                where.append(self.where_clause())
        self.skip_equivalent()
        if self.tok.is_op(";"):
            self.advance()
        self.check_depth(rhs)
        for c in where:
            for e in (c.lo, c.hi) if isinstance(c, RangeClause) else \
                    (c.read,) if isinstance(c, ExistsClause) else \
                    (c.value,) if isinstance(c, LetClause) else ():
                self.check_depth(e)
        for e in subscripts:
            self.check_depth(e)
        return Stmt(name.text, tuple(indices), op.rstrip("!"), init, rhs, tuple(where),
                    loc=name.loc, tensors=tuple(t.text for t, _ in more),
                    subscripts=tuple(subscripts))

    def lhs_subscripts(self, name: Token) -> tuple[list[str], list[Expr]]:
        """(indices, ()) for plain index variables; ((), every subscript as an
        expression) when one of them calls something (a tensor read, checked as
        a scatter by check_scatter.py). Other expressions are refused."""
        if not self.tok.is_op("("):
            return [], []
        start = self.pos
        self.advance()
        try:
            subs = self.comma_list(self.expr, ")")
        except LangError:  # not expressions: plain indices, or their error
            subs = []
        if any(isinstance(x, Call) for e in subs for x in _walk(e)):
            check_rank(name, len(subs))
            return [], subs
        self.pos = start
        return self.lhs_indices(name), []

    def lhs_indices(self, name: Token) -> list[str]:
        if not self.tok.is_op("("):
            return []
        self.advance()
        indices = self.comma_list(self.lhs_index, ")")
        check_rank(name, len(indices))
        return indices

    def tuple_rhs(self, name: Token, indices, more, optok: Token, first: Expr) -> Values:
        """The values of a tuple reduction (monoids.py), after its first one;
        checks the left-hand side's shape against the monoid."""
        if optok.text not in TUPLE_OPS:
            raise LangError(f"several tensors on the left-hand side need a tuple reduction "
                            f"({', '.join(TUPLE_OPS)}), not '{optok.text}'", optok.loc)
        items = [first]
        while self.tok.is_op(","):
            self.advance()
            items.append(self.expr())
        m = monoids.MONOIDS[optok.text[:-2]]
        if len(items) not in m.nvalues:
            raise LangError(f"'{optok.text}' takes {m.values_doc}, got {len(items)} "
                            f"value{'s' if len(items) != 1 else ''}", optok.loc)
        k = m.ncomponents(len(items))
        if len(more) + 1 != k:
            raise LangError(f"'{optok.text}' with {len(items)} value"
                            f"{'s' if len(items) != 1 else ''} writes {k} tensors "
                            f"({', '.join(m.roles[:k])}), got {len(more) + 1}", name.loc)
        for t, idx in more:
            if list(idx) != list(indices):
                raise LangError(f"the components of a tuple reduction are written at the same "
                                f"indices: '{t.text}({', '.join(idx)})' differs from "
                                f"'{name.text}({', '.join(indices)})'", t.loc)
        seen = [name.text]
        for t, _ in more:
            if t.text in seen:
                raise LangError(f"'{t.text}' is written twice by this tuple reduction", t.loc)
            seen.append(t.text)
        return Values(tuple(items), loc=first.loc)

    def skip_equivalent(self):
        """`<=> name(args)`: TC's "equivalent to" annotation, accepted and ignored."""
        if self.tok.is_op("<=>"):
            self.advance()
            self.expr()

    def lhs_index(self) -> str:
        t, nxt = self.tok, self.peek()
        if t.kind != "ident" or nxt.is_op("(") or (nxt.kind == "op" and nxt.text in BINARY_PREC):
            raise LangError("left-hand side subscripts must be plain index variables", t.loc)
        if t.text in dtypes.BY_NAME:
            raise LangError(f"type name '{t.text}' cannot be an index variable", t.loc)
        return self.not_reserved(self.advance(), "an index variable").text

    def where_clause(self):
        t = self.tok
        if t.is_kw("exists"):
            self.advance()
            return ExistsClause(self.expr(), loc=t.loc)
        if t.kind == "ident" and t.text == "ordered" and self.peek().kind == "ident":
            self.advance()  # contextual: `ordered in 0:N` still ranges an index named so
            var = self.expect_ident("an index variable after 'ordered'")
            return OrderedClause(var.text, loc=var.loc)
        if self.tok.kind == "ident":
            self.not_reserved(self.tok, "an index variable or a where-binding")
        name = self.expect_ident("an index name or 'exists' after 'where'")
        if self.tok.is_kw("in"):
            self.advance()
            lo = self.or_()
            self.expect_op(":")
            hi = self.or_()
            return RangeClause(name.text, lo, hi, loc=name.loc)
        if self.tok.is_op("="):
            self.advance()
            return LetClause(name.text, self.expr(), loc=name.loc)
        self.error("'in' (range) or '=' (binding) in where clause")

    # ----------------------------------------------------------- expressions
    def check_depth(self, e: Expr):
        """Reject a tree nested more than MAX_DEPTH levels or longer than
        MAX_LENGTH operations (module docstring), at the first node beyond."""
        stack = [(e, 1, 0)]
        while stack:
            x, nest, length = stack.pop()
            message = depth_error(nest, length)
            if message:
                raise LangError(message, x.loc)
            for k, c in reversed(list(enumerate(children(x)))):  # leftmost first
                stack.append((c, nest + (0 if continues_chain(x, k, c) else 1), length + 1))

    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LangError(f"expression nested more than {MAX_DEPTH} levels deep", self.tok.loc)
        try:
            cond = self.or_()
            if not self.tok.is_op("?"):
                return cond
            q = self.advance()
            a = self.expr()
            self.expect_op(":")
            b = self.expr()
            return Select(cond, a, b, loc=q.loc)
        finally:
            self.depth -= 1

    def or_(self) -> Expr:
        """The binary operators (all left-associative), by operator precedence;
        iterative, so that neither long chains nor precedence levels recurse."""
        operands = [self.unary()]
        ops: list[Token] = []

        def reduce():
            t, b = ops.pop(), operands.pop()
            operands.append(Binary(t.text, operands.pop(), b, loc=t.loc))

        while self.tok.kind == "op" and self.tok.text in BINARY_PREC:
            t = self.advance()
            while ops and BINARY_PREC[ops[-1].text] >= BINARY_PREC[t.text]:
                reduce()
            ops.append(t)
            operands.append(self.unary())
        while ops:
            reduce()
        return operands[0]

    def unary(self) -> Expr:
        prefix = []
        while self.tok.is_op("-", "!"):
            prefix.append(self.advance())
        e = self.postfix()
        for t in reversed(prefix):
            e = Unary(t.text, e, loc=t.loc)
        return e

    def int_const(self, t: Token) -> Const:
        digits = t.text.lstrip("0")
        if len(digits) > len(str(INT32_MAX)):  # int() refuses more than 4300 digits
            text = t.text if len(t.text) <= 20 else f"{t.text[:12]}... ({len(t.text)} digits)"
            raise LangError(f"integer literal {text} does not fit in int32", t.loc)
        v = int(digits or "0")
        if v > INT32_MAX:
            raise LangError(f"integer literal {t.text} does not fit in int32", t.loc)
        return Const(v, loc=t.loc)

    def postfix(self) -> Expr:
        t = self.tok
        if t.kind == "int":
            return self.int_const(self.advance())
        if t.kind == "float":
            self.advance()
            return Const(float(t.text), loc=t.loc, text=t.text)
        if t.kind == "ident" and t.text in literals.WORDS:
            self.advance()
            if self.tok.is_op("("):
                self.not_reserved(t, "a tensor or function name")
            return Const(literals.WORDS[t.text], loc=t.loc, text=t.text)
        if t.is_op("("):
            self.advance()
            e = self.expr()
            self.expect_op(")")
            return e
        if t.kind == "ident":
            self.advance()
            if not self.tok.is_op("("):
                if t.text in dtypes.BY_NAME:
                    raise LangError(f"type name '{t.text}' used as a value; casts are written "
                                    f"{t.text}(x)", t.loc)
                return Name(t.text, loc=t.loc)
            self.advance()
            args = tuple(self.comma_list(self.expr, ")"))
            if t.text in dtypes.BY_NAME:
                if len(args) != 1:
                    raise LangError(f"cast to {t.text} takes 1 argument, got {len(args)}", t.loc)
                return Cast(t.text, args[0], loc=t.loc)
            # Tensor read or builtin call: semantic analysis decides.
            return Call(t.text, args, loc=t.loc)
        self.error("an expression")



def _walk(e: Expr):
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))


def continues_chain(parent: Expr, k: int, child: Expr) -> bool:
    """Whether `child`, operand `k` of `parent`, is the left part of the same
    chain of binary operators (one precedence level): one nesting level."""
    return k == 0 and isinstance(parent, Binary) and isinstance(child, Binary) and \
        BINARY_PREC.get(child.op) == BINARY_PREC.get(parent.op)


def depth_error(nest: int, length: int, suffix: str = "") -> str | None:
    """The message for an expression nested `nest` levels and `length`
    operations long, where that is beyond the bounds (module docstring)."""
    if nest > MAX_DEPTH:
        return f"expression nested more than {MAX_DEPTH} levels deep{suffix}"
    if length > MAX_LENGTH:
        return (f"expression more than {MAX_LENGTH} operations long (a sum of more than "
                f"{MAX_LENGTH} terms is){suffix}; compute part of it in a separate statement")
    return None
