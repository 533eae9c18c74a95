"""The simplifier's rules for floor division, modulo and the bitwise
operators by constants (the rewrites lower/simplify.py's docstring lists),
as a mixin of `Simplifier`: they use its linear forms and ranges."""
from __future__ import annotations

from . import ir
from .simplify_linear import Linear, _divisors, _fits


class DivmodBitwise:
    """`divmod`, `bitwise` and `_xor` of the Simplifier."""

    def divmod(self, op: str, a: ir.Expr, c: int, e: ir.Expr) -> ir.Expr:
        if c == 1:
            return a if op == "/" else ir.const(0)
        if (op == "/" and isinstance(a, ir.Bin) and a.op == "/" and isinstance(a.b, ir.Imm)
                and a.b.value > 0 and int(a.b.value) * c < 2**31):  # (x / a) / c -> x / (a*c)
            return self.divmod("/", a.a, int(a.b.value) * c,
                               ir.Bin("/", a.a, ir.const(int(a.b.value) * c), ir.int32))
        lin = self.linear(a)
        if not _fits(lin, ir.int32):
            return e
        q = Linear({t: k // c for t, k in lin.terms.items() if k % c == 0}, 0)
        rest = Linear({t: k for t, k in lin.terms.items() if k % c != 0}, lin.const)
        qc, rc = divmod(rest.const, c)
        q.const, rest.const = qc, rc
        r = self.bound(rest)
        if r[0] is not None and r[1] is not None and 0 <= r[0] and r[1] < c:
            if op == "/":
                return self.expr_of(q)
            return self.expr_of(rest)
        # (c*q + r) / c -> q + r / c  and  (c*q + r) % c -> r % c (floor semantics; only
        # for r >= 0, so that the code generator keeps plain C division for r)
        if q.terms and r[0] is not None and r[0] >= 0:
            inner = self.divmod(op, rest.to_expr(), c, ir.Bin(op, rest.to_expr(), ir.const(c),
                                                             ir.int32))
            if op == "%":
                return inner
            return self.expr_of(self.linear(ir.Bin("+", q.to_expr(), inner, ir.int32)))
        # (g*x + r) / c -> x / (c/g)  and  (g*x + r) % c -> g*(x % (c/g)) + r
        # for a divisor g of c with 0 <= r < g (floor semantics, any sign of x).
        for g in sorted((g for g in _divisors(c) if 1 < g < c and
                         any(k % g == 0 for k in lin.terms.values())), reverse=True):
            x = Linear({t: k // g for t, k in lin.terms.items() if k % g == 0}, 0)
            rest = Linear({t: k for t, k in lin.terms.items() if k % g != 0}, lin.const)
            x.const, rest.const = divmod(rest.const, g)
            if not x.terms:
                continue
            r = self.bound(rest)
            if r[0] is None or r[1] is None or r[0] < 0 or r[1] >= g:
                continue
            inner = ir.Bin(op, x.to_expr(), ir.const(c // g), ir.int32)
            if op == "/":
                return self.expr(inner)
            return self.expr_of(self.linear(ir.Bin("+", ir.Bin("*", self.expr(inner), ir.const(g),
                                                               ir.int32), rest.to_expr(),
                                                    ir.int32)))
        return e

    def bitwise(self, op: str, a: ir.Expr, b: ir.Expr, e: ir.Bin) -> ir.Expr:
        """The bitwise rules of the module docstring."""
        for x, y in ((a, b), (b, a)):
            if isinstance(y, ir.Imm) and y.value == 0 and op in ("^", "|"):
                return x
            if isinstance(y, ir.Imm) and y.value == 0 and op == "&":
                return ir.const(0)
        if op == "^":
            return self._xor(a, b, e)
        if not isinstance(b, ir.Imm) or op == "|":
            return e
        k = int(b.value)
        if op in ("<<", ">>") and k == 0:
            return a
        if op == "<<" and 0 < k < 31:
            lin = self.linear(a).scale(1 << k)
            return lin.to_expr() if _fits(lin, ir.int32) else e
        if op == ">>" and 0 < k < 31:
            lin = self.linear(a)
            if not _fits(lin, ir.int32):
                return e
            c = 1 << k
            q = Linear({t: v // c for t, v in lin.terms.items() if v % c == 0}, lin.const // c)
            rest = Linear({t: v for t, v in lin.terms.items() if v % c}, lin.const % c)
            lo, hi = self.bound(rest)
            if lo is not None and hi is not None and 0 <= lo and hi < c:
                return q.to_expr()
            if not q.terms and not q.const:
                return e
            shifted = ir.Bin(">>", rest.to_expr(), b, ir.int32)
            return self.linear(ir.Bin("+", q.to_expr(), shifted, ir.int32)).to_expr()
        if op == "&" and k > 0 and k & (k + 1) == 0:  # a mask of the low bits
            c = k + 1
            lin = self.linear(a)
            rest = Linear({}, lin.const)
            if not _fits(lin, ir.int32):
                return e
            for t, v in lin.terms.items():
                if v % c == 0:
                    continue
                if isinstance(t, ir.Bin) and t.op == "%" and isinstance(t.b, ir.Imm) and \
                        t.b.value > 0 and t.b.value % c == 0:
                    t = t.a  # (x % (j c)) & m == x & m
                elif isinstance(t, ir.Bin) and t.op == ">>" and isinstance(t.b, ir.Imm) and \
                        isinstance(t.a, ir.Bin) and t.a.op == "%" and \
                        isinstance(t.a.b, ir.Imm) and t.a.b.value > 0 and \
                        t.a.b.value % (c << int(t.b.value)) == 0:
                    t = ir.Bin(">>", t.a.a, t.b, ir.int32)  # ((x % (j c 2^s)) >> s) & m
                rest = rest.add(self.linear(t).scale(v % c))
            rest = Linear({t: v % c for t, v in rest.terms.items() if v % c},
                          rest.const % c)
            lo, hi = self.bound(rest)
            if lo is not None and hi is not None and 0 <= lo and hi < c:
                return rest.to_expr()
            out = ir.Bin("&", rest.to_expr(), b, ir.int32)
            return e if out == e else out
        return e

    def _xor(self, a: ir.Expr, b: ir.Expr, e: ir.Bin) -> ir.Expr:
        """(q*c + r) ^ x -> q*c + (r ^ x) for c a power of two with 0 <= r < c
        and 0 <= x < c (no bit of x reaches q*c): the part that varies
        outside x's bits becomes linear (a ring's stage, a warp's tile), and
        what stays an XOR often depends on the lane alone (hoisted by the
        compiler out of the loops)."""
        for p, x in ((a, b), (b, a)):
            lo, hi = self.bound(self.linear(x))
            if lo is None or hi is None or lo < 0:
                continue
            c = 1 << max(hi, 1).bit_length()
            lin = self.linear(p)
            if not _fits(lin, ir.int32):
                continue
            q = Linear({t: v for t, v in lin.terms.items() if v % c == 0}, lin.const // c * c)
            r = Linear({t: v for t, v in lin.terms.items() if v % c}, lin.const % c)
            if q.is_const() and not q.const:
                continue
            rlo, rhi = self.bound(r)
            if rlo is None or rhi is None or rlo < 0 or rhi >= c:
                continue
            low = self.expr(ir.Bin("^", r.to_expr(), x, ir.int32))
            return self.linear(ir.Bin("+", q.to_expr(), low, ir.int32)).to_expr()
        return e
