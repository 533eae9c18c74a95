"""Pass: arithmetic simplification of Kernel IR.

Integer expressions are brought to a canonical linear form
  c0 + sum(ci * atom_i)
where atoms are variables or non-linear subterms; like terms combine, so
`(m_o*64 + 63) - m_o*64 + 1` folds to 64. With the ranges of the enclosing
loops known, floor division and modulo by a constant simplify:
  (q*c + r) / c -> q   and   (q*c + r) % c -> r    when 0 <= r < c,
  (q*c + r) / c -> q + r / c   and   (q*c + r) % c -> r % c         when 0 <= r,
  (g*x + r) / c -> x / (c/g)   and   (g*x + r) % c -> g*(x % (c/g)) + r
                                                    when g divides c, 0 <= r < g,
  (x / a) / c -> x / (a*c).
Bitwise operators (on int32; layouts make them, lower/flatten.py), with
m = 2^k - 1:
  x << k -> x * 2^k                       (two's complement, as C computes it)
  (q*2^k + r) >> k -> q + (r >> k), -> q when 0 <= r < 2^k   (`>>` is floor division)
  (q*2^k + r) & m -> r & m, -> r when 0 <= r < 2^k,  and (x % (c 2^k)) & m -> x & m,
  ((x % (c 2^(k+s))) >> s) & m -> (x >> s) & m
  (q*2^k + r) ^ x -> q*2^k + (r ^ x) when 0 <= r < 2^k and 0 <= x < 2^k,
  x ^ 0 -> x, x | 0 -> x, x & 0 -> 0.
Constants fold in every operator; comparisons decided by ranges fold to
true/false; `if` on a constant keeps one branch; loops of extent 1 become a
substitution and loops of extent 0 disappear.

No rewrite creates an integer constant outside its type's range: a fold or
linear form that would (`I(i) + 2000000000 + 2000000000` in int32) leaves the
expression as written, so that it wraps at run time as `evaluate` does (and
index arithmetic widened to 64 bits computes it exactly).

Pre: any Kernel IR. Post: same meaning, canonical integer arithmetic.
"""
from __future__ import annotations

import dataclasses

from ..arch import threads
from . import ir
from .rewriter import Rewriter, _leaf, _method, substitute


from .simplify_linear import (BITWISE, Linear, _divisors, _fits, _fold, _holds,  # noqa: F401
                              _in_range, _is_int32, _key)
from .simplify_rules import DivmodBitwise


class Simplifier(DivmodBitwise, Rewriter):
    """`index_dtype`: the integer type whose arithmetic is analysed as linear
    forms (int32, the type of index arithmetic in Kernel IR; the CUDA code
    generator asks about kernels widened to int64 indices with int64). Only
    the passes rewrite; with int64 the simplifier is used for queries."""

    def __init__(self, ranges: dict | None = None, index_dtype=ir.int32):
        self.index_dtype = index_dtype
        # var -> (lo, hi) inclusive integer bounds, when known
        self.ranges: dict[str, tuple] = dict(ranges or {})  # var -> (lo, hi) ints or None
        self.sym: dict[str, tuple] = {}  # var -> (lo, hi) inclusive as Linear forms
        self._lin: dict[int, tuple] = {}  # id(expr) -> (expr, Linear): canonical forms are reused
        # expr -> simplified, under the current ranges: the passes hand over trees where one
        # subexpression sits in many places (a loop variable's substituted value, im2col's
        # pixel and channel indices, a guard's bound and the index it guards), each
        # simplified once per scope. Keyed by equality when that cannot mix up constants
        # that print differently (ir.plain), else by identity (id -> (expr, simplified)).
        # A scope that changes the ranges (enter_loop, enter_let, an if's refined bounds)
        # has a table of its own and gives the outer one back when it ends. Its table is
        # kept in the outer one under what changed the ranges (`_enter`), so a scope
        # entered again the same way (the same loop in each copy of a pipeline's
        # prologue) finds what was simplified there before.
        self._memo: dict = {}

    def expr(self, e: ir.Expr) -> ir.Expr:
        fn = self._expr_fns.get(type(e))
        if fn is None:
            fn = _method(type(self), "expr_", type(e))
        if fn is _leaf:
            return e
        memo = self._memo
        p = e._plain  # (ir.plain, kept on the node: read here first, as on every node)
        if p is None:
            p = ir.plain(e)
        if p:
            out = memo.get(e)
            if out is None:
                out = memo[e] = fn(self, e)
            return out
        hit = memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = fn(self, e)
        memo[id(e)] = (e, out)
        return out

    # --------------------------------------------------------- linear forms
    def linear(self, e: ir.Expr) -> Linear:
        hit = self._lin.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._linear(e)
        self._lin[id(e)] = (e, out)
        return out

    def _linear(self, e: ir.Expr) -> Linear:
        if isinstance(e, ir.Imm) and e.dtype == self.index_dtype:
            return Linear({}, int(e.value))
        if isinstance(e, ir.Bin) and e.dtype == self.index_dtype:
            if e.op in "+-":
                return self._merge_divmod(
                    self.linear(e.a).add(self.linear(e.b), 1 if e.op == "+" else -1))
            if e.op == "*":
                a, b = self.linear(e.a), self.linear(e.b)
                if b.is_const():
                    return a.scale(b.const)
                if a.is_const():
                    return b.scale(a.const)
        if isinstance(e, ir.Un) and e.op == "-" and e.dtype == self.index_dtype:
            return self.linear(e.x).scale(-1)
        return Linear({_key(e): 1}, 0)

    def expr_of(self, lin: Linear) -> ir.Expr:
        """`lin.to_expr()`, with its linear form remembered: a parent's
        `linear` then reads the form of this new expression instead of
        walking it again (which made nested sums quadratic). The form
        remembered is exactly what `_linear` computes on the expression:
        its positive terms, then its negative ones, in order (it is not
        `lin` itself, whose order may differ). A `%` term could merge with
        another on the way, so such forms are left to `_linear`."""
        out = lin.to_expr()
        if self.index_dtype == ir.int32 and lin.terms and not any(
                isinstance(a, ir.Bin) and a.op == "%" for a in lin.terms):
            terms = {a: c for a, c in lin.terms.items() if c > 0}
            terms.update((a, c) for a, c in lin.terms.items() if c < 0)
            self._lin[id(out)] = (out, Linear(terms, lin.const))
        return out

    def _merge_divmod(self, lin: Linear) -> Linear:
        """(x / c) * (c*k) + (x % c) * k  ->  x * k  (floor division identity), and for a
        divisor N that is not a constant (a size: what `fuse` divides by),
        (x / N) * N * k + (x % N) * k  ->  x * k (q * N + r == x for any N != 0, floored or
        truncated alike)."""
        for a, k in list(lin.terms.items()):
            if not (isinstance(a, ir.Bin) and a.op == "%"):
                continue
            if not isinstance(a.b, ir.Imm):
                q = ir.Bin("/", a.a, a.b, a.dtype)
                for qn in (ir.Bin("*", q, a.b, a.dtype), ir.Bin("*", a.b, q, a.dtype)):
                    if a in lin.terms and lin.terms.get(qn) == k:
                        rest = Linear({t: v for t, v in lin.terms.items() if t not in (a, qn)},
                                      lin.const)
                        lin = rest.add(self.linear(a.a).scale(k))
                        break
                continue
            c = int(a.b.value)
            q = ir.Bin("/", a.a, a.b, a.dtype)
            if c > 0 and lin.terms.get(q) == k * c and a in lin.terms:
                rest = Linear({t: v for t, v in lin.terms.items() if t not in (a, q)}, lin.const)
                lin = rest.add(self.linear(a.a).scale(k))
        return lin

    def bound(self, lin: Linear):
        """Inclusive (lo, hi) of a linear form from variable ranges; either
        side is None when unknown."""
        lo = hi = lin.const
        for a, c in lin.terms.items():
            r = self.atom_bound(a)
            if r is None:
                return None, None
            pick_lo, pick_hi = (r[0], r[1]) if c > 0 else (r[1], r[0])
            lo = None if lo is None or pick_lo is None else lo + c * pick_lo
            hi = None if hi is None or pick_hi is None else hi + c * pick_hi
        return lo, hi

    def atom_bound(self, a: ir.Expr):
        if isinstance(a, ir.Var):
            return self.ranges.get(a.name)
        if isinstance(a, ir.Bin) and a.op == "%" and isinstance(a.b, ir.Imm) and a.b.value > 0:
            return 0, int(a.b.value) - 1
        if isinstance(a, ir.Bin) and a.op == "/" and isinstance(a.b, ir.Imm) and a.b.value > 0:
            lo, hi = self.bound(self.linear(a.a))
            c = int(a.b.value)
            return (None if lo is None else lo // c), (None if hi is None else hi // c)
        if isinstance(a, ir.Bin) and a.op in BITWISE:
            return self._bitwise_bound(a)
        return None

    def _bitwise_bound(self, a: ir.Bin):
        if a.op == "&" and isinstance(a.b, ir.Imm) and a.b.value >= 0:
            return 0, int(a.b.value)  # whatever the sign of a.a
        if a.op == ">>" and isinstance(a.b, ir.Imm) and 0 <= a.b.value < 31:
            lo, hi = self.bound(self.linear(a.a))
            k = int(a.b.value)
            return (None if lo is None else lo >> k), (None if hi is None else hi >> k)
        if a.op in ("^", "|", "&"):  # of two non-negative values: below the next power of two
            (la, ha), (lb, hb) = self.bound(self.linear(a.a)), self.bound(self.linear(a.b))
            if None in (la, ha, lb, hb) or la < 0 or lb < 0:
                return None
            return 0, (1 << max(ha, hb).bit_length()) - 1
        return None

    def sym_bound(self, lin: Linear, upper: bool):
        """Upper (or lower) bound of a linear form as a linear form, replacing
        loop variables by their symbolic end points (two rounds)."""
        cur = lin
        for _ in range(2):
            out = Linear({}, cur.const)
            changed = False
            for a, c in cur.terms.items():
                r = self.sym.get(a.name) if isinstance(a, ir.Var) else None
                if r is None:
                    out = out.add(Linear({a: c}, 0))
                    continue
                changed = True
                end = r[1] if (c > 0) == upper else r[0]
                out = out.add(end.scale(c))
            cur = out
            if not changed:
                break
        return cur

    def decide(self, op: str, a: ir.Expr, b: ir.Expr):
        d = self.linear(a).add(self.linear(b), -1)
        res = _decide(op, self.bound(d))
        if res is None:
            # symbolic end points first (m_o * 32 - M / 32 * 32 with m_o < M / 32), then the
            # ranges of what is left (a lane's x / 2 in 0:16)
            lo, hi = self.sym_bound(d, False), self.sym_bound(d, True)
            res = _decide(op, (self.bound(lo)[0], self.bound(hi)[1]))
        return res

    # --------------------------------------------------------- expressions
    def expr_Bin(self, e: ir.Bin) -> ir.Expr:
        a, b = self.expr(e.a), self.expr(e.b)
        e = e if (a is e.a and b is e.b) else ir.Bin(e.op, a, b, e.dtype)
        if isinstance(a, ir.Imm) and isinstance(b, ir.Imm):
            folded = _fold(e.op, a, b, e.dtype)
            if folded is not None:
                return folded
        if e.dtype == ir.int32 and e.op in "+-*":
            lin = self.linear(e)
            return self.expr_of(lin) if _fits(lin, ir.int32) else e
        if e.op in ("/", "%") and e.dtype == ir.int32 and isinstance(b, ir.Imm) and b.value > 0:
            return self.divmod(e.op, a, int(b.value), e)
        if e.op in BITWISE and e.dtype == ir.int32:
            return self.bitwise(e.op, a, b, e)
        if e.op in ("min", "max") and _is_int32(a) and _is_int32(b):
            if self.decide("<=", a, b):
                return a if e.op == "min" else b
            if self.decide(">=", a, b):
                return b if e.op == "min" else a
        if e.op in ("<", "<=", ">", ">=", "==", "!=") and _is_int32(a) and _is_int32(b):
            res = self.decide(e.op, a, b)
            if res is not None:
                return ir.Imm(res, ir.bool_)
        if e.op == "&&":
            for x, y in ((a, b), (b, a)):
                if isinstance(x, ir.Imm):
                    return y if x.value else ir.Imm(False, ir.bool_)
        if e.op == "||":
            for x, y in ((a, b), (b, a)):
                if isinstance(x, ir.Imm):
                    return ir.Imm(True, ir.bool_) if x.value else y
        return e

    def expr_Select(self, e: ir.Select) -> ir.Expr:
        e = self.generic_expr(e)
        if isinstance(e.cond, ir.Imm):
            return e.a if e.cond.value else e.b
        return e

    def expr_Un(self, e: ir.Un) -> ir.Expr:
        e = self.generic_expr(e)
        if isinstance(e.x, ir.Imm):
            if e.op == "!":
                return ir.Imm(not e.x.value, ir.bool_)
            if e.dtype == ir.int32 and _in_range(-int(e.x.value), ir.int32):
                return ir.const(-int(e.x.value))
        if e.op == "-" and e.dtype == ir.int32:
            lin = self.linear(e)
            return self.expr_of(lin) if _fits(lin, ir.int32) else e
        return e

    def expr_Cast(self, e: ir.Cast) -> ir.Expr:
        e = self.generic_expr(e)
        if getattr(e.x, "dtype", None) == e.dtype:
            return e.x
        # T(U(x)) with x of type T and U holding every T exactly is x (a copy of
        # bfloat16 data through its float32 compute type)
        if isinstance(e.x, ir.Cast) and getattr(e.x.x, "dtype", None) == e.dtype and \
                _holds(e.x.dtype, e.dtype):
            return e.x.x
        return e

    # --------------------------------------------------------- statements
    def enter_loop(self, var: str, lo: ir.Expr, ext: ir.Expr):
        """Record the range of a loop variable; returns what to pass to restore()."""
        saved = self.ranges.get(var), self.sym.get(var), self._memo
        self._enter(("for", var, lo, ext))
        lo_b, ext_b = self.bound(self.linear(lo)), self.bound(self.linear(ext))
        hi = None if lo_b[1] is None or ext_b[1] is None else lo_b[1] + ext_b[1] - 1
        self.ranges[var] = (lo_b[0], hi)
        llo = self.linear(lo)
        self.sym[var] = (llo, llo.add(self.linear(ext)).add(Linear({}, 1), -1))
        return saved

    def enter_let(self, var: str, value: ir.Expr):
        """Record the range of a let-bound variable; returns what to pass to restore()."""
        saved = self.ranges.get(var), self.sym.get(var), self._memo
        self._enter(("let", var, value))
        if getattr(value, "dtype", None) == self.index_dtype:
            lin = self.linear(value)
            self.ranges[var] = self.bound(lin)
            self.sym[var] = (lin, lin)
        return saved

    def _enter(self, key: tuple):
        """Make the memo table of the scope `key` (what changes the ranges, from
        the current scope) current: the one kept for it, or a new one (kept when
        the key's expressions compare by equality: ir.plain)."""
        outer = self._memo
        inner = outer.get(key)
        if inner is None:
            inner = {}
            if all(ir.plain(x) for x in key if isinstance(x, ir.Expr)):
                outer[key] = inner
        self._memo = inner

    def restore(self, var, saved):
        """Undo enter_loop / enter_let (`saved`: what they returned)."""
        self._restore(var, saved[:2])
        self._memo = saved[2]

    def _refine(self, cond: ir.Expr, saved: dict):
        """Tighten the upper bound of v from `v + c < e` or `v + c <= e` (one loop
        variable with coefficient 1, e bounded above)."""
        if not (isinstance(cond, ir.Bin) and cond.op in ("<", "<=")
                and getattr(cond.a, "dtype", None) == self.index_dtype):
            return
        lin = self.linear(cond.a).add(self.linear(cond.b), -1)  # lin < 0 (or <= 0)
        vars_ = [(a, k) for a, k in lin.terms.items() if isinstance(a, ir.Var)]
        if len(vars_) != 1 or vars_[0][1] != 1:
            return
        var = vars_[0][0]
        rest = Linear({a: k for a, k in lin.terms.items() if a != var}, lin.const)
        lo_rest, _ = self.bound(rest)
        if lo_rest is None:
            return
        # var + rest < 0  =>  var <= -rest - 1 <= -lo_rest - 1
        hi = -lo_rest - (1 if cond.op == "<" else 0)
        cur = self.ranges.get(var.name)
        if var.name not in saved:
            saved[var.name] = (cur, self.sym.get(var.name))
        lo, old_hi = cur if cur is not None else (None, None)
        self.ranges[var.name] = (lo, hi if old_hi is None else min(old_hi, hi))

    def nonnegative(self, e: ir.Expr) -> bool:
        lo, _ = self.bound(self.linear(e))
        return lo is not None and lo >= 0

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        lo, ext = self.expr(s.lo), self.expr(s.extent)
        if isinstance(ext, ir.Imm) and ext.value <= 0:
            return ir.Seq(())
        if isinstance(ext, ir.Imm) and ext.value == 1 and s.kind != "thread":
            return self.stmt(substitute(s.body, {s.var: lo}))
        saved = self.enter_loop(s.var, lo, ext)
        body = self.stmt(s.body)
        self.restore(s.var, saved)
        if lo is s.lo and ext is s.extent and body is s.body:
            return s
        return dataclasses.replace(s, lo=lo, extent=ext, body=body)

    def _restore(self, var, saved):
        for table, old in zip((self.ranges, self.sym), saved):
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old

    def stmt_Let(self, s: ir.Let) -> ir.Stmt:
        v = self.expr(s.value)
        saved = self.enter_let(s.var, v)
        body = self.stmt(s.body)
        self.restore(s.var, saved)
        return s if (v is s.value and body is s.body) else ir.Let(s.var, v, body)

    def stmt_If(self, s: ir.If) -> ir.Stmt:
        c = self.expr(s.cond)
        if isinstance(c, ir.Bin) and c.op == "&&":
            # Drop conjuncts that repeat, so tail and clamp guards do not pile up.
            parts, out = _conjuncts(c), []
            for x in parts:
                if x not in out:
                    out.append(x)
            c = out[0]
            for x in out[1:]:
                c = ir.Bin("&&", c, x, ir.bool_)
        if isinstance(c, ir.Imm):
            if c.value:
                return self.stmt(s.then)
            return self.stmt(s.else_) if s.else_ is not None else ir.Seq(())
        # Inside the then-branch, conditions `v + c < e` bound the variable v.
        saved, memo = {}, self._memo
        for x in _conjuncts(c):
            self._refine(x, saved)
        if saved:
            self._enter(("if", c))
        then = self.stmt(s.then)
        for var, old in saved.items():
            self._restore(var, old)
        self._memo = memo
        else_ = self.stmt(s.else_) if s.else_ is not None else None
        if _empty(then) and (else_ is None or _empty(else_)):
            return ir.Seq(())
        if else_ is None and isinstance(then, ir.If) and then.else_ is None:
            return ir.If(ir.Bin("&&", c, then.cond, ir.bool_), then.then)
        return ir.If(c, then, else_)


def _conjuncts(c):
    if isinstance(c, ir.Bin) and c.op == "&&":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _empty(s: ir.Stmt) -> bool:
    return isinstance(s, ir.Seq) and not s.stmts


def _decide(op: str, d):
    """Decide `a op b` from inclusive bounds (lo, hi) of a - b (None: unknown)."""
    lo, hi = d
    lt = lambda x, y: x is not None and x < y  # noqa: E731
    gt = lambda x, y: x is not None and x > y  # noqa: E731
    table = {"<": (lt(hi, 0), not lt(lo, 0) and lo is not None),
             "<=": (not gt(hi, 0) and hi is not None, gt(lo, 0)),
             ">": (gt(lo, 0), not gt(hi, 0) and hi is not None),
             ">=": (not lt(lo, 0) and lo is not None, lt(hi, 0)),
             "==": (lo == 0 and hi == 0, gt(lo, 0) or lt(hi, 0)),
             "!=": (gt(lo, 0) or lt(hi, 0), lo == 0 and hi == 0)}
    true, false = table[op]
    return True if true else (False if false else None)


def simplify_expr(e: ir.Expr, ranges: dict | None = None) -> ir.Expr:
    """`e` simplified with variable `ranges` (var -> (lo, hi)). A pure function
    of its arguments, so one simplifier per set of ranges is kept and asked
    again, with what it remembers (its memo of simplified expressions and
    its linear forms): loop-nest construction asks for the same extents and
    subscripts again and again (more than half of its calls for a tiled
    GEMM), and for their parts in new combinations."""
    key = tuple(sorted(ranges.items())) if ranges else ()
    s = _SHARED.get(key)
    if s is None or len(s._memo) + len(s._lin) > _SHARED_ENTRIES:
        if s is None and len(_SHARED) >= _SHARED_SIMPLIFIERS:
            _SHARED.clear()
        s = _SHARED[key] = Simplifier(ranges)
    return s.expr(e)


_SHARED: dict = {}  # sorted ranges -> the Simplifier simplify_expr asks
_SHARED_SIMPLIFIERS = 64  # sets of ranges kept
_SHARED_ENTRIES = 50000  # memo and linear-form entries after which one starts afresh


def kernel_simplifier(k: ir.Kernel, index_dtype=ir.int32) -> Simplifier:
    """A simplifier that knows the kernel's thread/block index ranges and that
    size parameters are non-negative."""
    ranges = {n: (0, None) for n in k.sizes}
    s = Simplifier(ranges, index_dtype)
    for a, b in zip(threads.THREAD, k.block):
        name = a.name
        s.ranges[name] = (0, int(b.value) - 1 if isinstance(b, ir.Imm) else None)
        s.sym[name] = (Linear(), s.linear(b).add(Linear({}, 1), -1))
    for a, g in zip(threads.BLOCK, k.grid):
        name = a.name
        s.ranges[name] = (0, int(g.value) - 1 if isinstance(g, ir.Imm) else None)
        s.sym[name] = (Linear(), s.linear(g).add(Linear({}, 1), -1))
    return s


def simplify(k: ir.Kernel) -> ir.Kernel:
    s = kernel_simplifier(k)
    return dataclasses.replace(k, body=s.stmt(k.body), grid=tuple(s.expr(g) for g in k.grid))
