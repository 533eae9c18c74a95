"""The one rewriter base: dispatch on node type, rebuild only what changed.

Subclasses override `expr_<Node>` / `stmt_<Node>` methods; the defaults visit
children and return the same object when no child changed, so unchanged
subtrees are shared and identity checks are cheap.
"""
from __future__ import annotations

import dataclasses

from . import ir


class Rewriter:
    def expr(self, e: ir.Expr) -> ir.Expr:
        return getattr(self, "expr_" + type(e).__name__, self.generic_expr)(e)

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        return getattr(self, "stmt_" + type(s).__name__, self.generic_stmt)(s)

    def exprs(self, es: tuple) -> tuple:
        out = tuple(self.expr(e) for e in es)
        return es if all(a is b for a, b in zip(out, es)) else out

    def generic_expr(self, e: ir.Expr) -> ir.Expr:
        if isinstance(e, (ir.Load, ir.Ref)):
            idx = self.exprs(e.indices)
            return e if idx is e.indices else dataclasses.replace(e, indices=idx)
        if isinstance(e, ir.Bin):
            a, b = self.expr(e.a), self.expr(e.b)
            return e if (a is e.a and b is e.b) else dataclasses.replace(e, a=a, b=b)
        if isinstance(e, (ir.Un, ir.Cast)):
            x = self.expr(e.x)
            return e if x is e.x else dataclasses.replace(e, x=x)
        if isinstance(e, ir.Select):
            c, a, b = self.expr(e.cond), self.expr(e.a), self.expr(e.b)
            if c is e.cond and a is e.a and b is e.b:
                return e
            return dataclasses.replace(e, cond=c, a=a, b=b)
        if isinstance(e, ir.Call):
            args = self.exprs(e.args)
            return e if args is e.args else dataclasses.replace(e, args=args)
        return e

    def generic_stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Store):
            idx, v = self.exprs(s.indices), self.expr(s.value)
            if idx is s.indices and v is s.value:
                return s
            return dataclasses.replace(s, indices=idx, value=v)
        if isinstance(s, ir.For):
            lo, ext, body = self.expr(s.lo), self.expr(s.extent), self.stmt(s.body)
            if lo is s.lo and ext is s.extent and body is s.body:
                return s
            return dataclasses.replace(s, lo=lo, extent=ext, body=body)
        if isinstance(s, ir.If):
            c, t = self.expr(s.cond), self.stmt(s.then)
            e = self.stmt(s.else_) if s.else_ is not None else None
            if c is s.cond and t is s.then and e is s.else_:
                return s
            return dataclasses.replace(s, cond=c, then=t, else_=e)
        if isinstance(s, ir.Seq):
            out = tuple(self.stmt(x) for x in s.stmts)
            if all(a is b for a, b in zip(out, s.stmts)):
                return s
            return ir.seq(*out)
        if isinstance(s, ir.Let):
            v, body = self.expr(s.value), self.stmt(s.body)
            return s if (v is s.value and body is s.body) else dataclasses.replace(s, value=v, body=body)
        if isinstance(s, ir.Evaluate):
            c = self.expr(s.call)
            return s if c is s.call else ir.Evaluate(c)
        if isinstance(s, ir.Alloc):
            body = self.stmt(s.body)
            return s if body is s.body else dataclasses.replace(s, body=body)
        return s


class Substitute(Rewriter):
    """Replace variables by expressions."""

    def __init__(self, mapping: dict[str, ir.Expr]):
        self.mapping = mapping

    def expr_Var(self, e: ir.Var) -> ir.Expr:
        return self.mapping.get(e.name, e)


def substitute(node, mapping: dict[str, ir.Expr]):
    if not mapping:
        return node
    r = Substitute(mapping)
    return r.expr(node) if isinstance(node, ir.Expr) else r.stmt(node)


def walk_stmts(s: ir.Stmt):
    """Pre-order traversal of statements."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, ir.Seq):
            stack.extend(reversed(x.stmts))
        elif isinstance(x, (ir.For, ir.Let, ir.Alloc)):
            stack.append(x.body)
        elif isinstance(x, ir.If):
            if x.else_ is not None:
                stack.append(x.else_)
            stack.append(x.then)
