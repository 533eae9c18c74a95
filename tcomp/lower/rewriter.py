"""The one rewriter base: dispatch on node type, rebuild only what changed.

Subclasses override `expr_<Node>` / `stmt_<Node>` methods; the default
(`generic`) visits the children a node's fields declare (ir.children) and
returns the same object when no child changed, so unchanged subtrees are
shared and identity checks are cheap. `Visitor` is the read-only
counterpart, for analyses that carry context down the tree.
"""
from __future__ import annotations

from . import ir


class Rewriter:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _new_tables(cls)

    def expr(self, e: ir.Expr) -> ir.Expr:
        fn = self._expr_fns.get(type(e))
        if fn is None:
            fn = _method(type(self), "expr_", type(e))
        return fn(self, e)

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        fn = self._stmt_fns.get(type(s))
        if fn is None:
            fn = _method(type(self), "stmt_", type(s))
        return fn(self, s)

    def exprs(self, es: tuple) -> tuple:
        out = tuple(self.expr(e) for e in es)
        return es if all(a is b for a, b in zip(out, es)) else out

    def node(self, x):
        return self.expr(x) if isinstance(x, ir.Expr) else self.stmt(x)

    def generic(self, x):
        """Rewrite the children of `x` (its node fields, ir.child_fields) and
        rebuild it only when one changed. A rebuilt Seq is normalised with
        `ir.seq` (nested sequences flattened, a single statement unwrapped)."""
        changes = None
        for name in ir.child_fields(type(x)):
            old = getattr(x, name)
            if old is None:
                continue
            if isinstance(old, tuple):
                new = tuple([self.node(c) for c in old])
                for a, b in zip(new, old):
                    if a is not b:
                        break
                else:
                    continue
            else:
                new = self.node(old)
                if new is old:
                    continue
            if changes is None:
                changes = {}
            changes[name] = new
        if changes is None:
            return x
        if type(x) is ir.Seq:
            return ir.seq(*changes["stmts"])
        return ir.rebuild(x, changes)

    generic_expr = generic_stmt = generic


def _new_tables(cls: type) -> None:
    """Give rewriter class `cls` its own dispatch tables (node class -> the
    function that handles it), filled by `_method` as nodes come: the passes
    dispatch on every node, so the method is looked up once per (rewriter
    class, node class). The tables live on the class itself, so a class made
    per call (a rewriter defined inside a function) takes them with it when
    it goes."""
    cls._expr_fns = {}
    cls._stmt_fns = {}


def _leaf(self, x):
    return x  # a node without children that the rewriter does not handle: itself


def _method(cls: type, prefix: str, node: type):
    """The function `cls` handles a `node` with (`<prefix><Node>`, else its
    generic method), recorded in the class's table. Where the generic method
    is the base's and would give the node back as it is, the node is given
    back without a walk: a node without children, and any expression when
    the class rewrites no expression (no `expr_` method: a pass that rewrites
    statements only, which would otherwise walk every index expression of
    the kernel to rebuild nothing)."""
    fn = getattr(cls, prefix + node.__name__, None)
    if fn is None:
        fn = getattr(cls, "generic_" + prefix[:-1])
        if fn is Rewriter.generic and (not ir.child_fields(node) or (
                prefix == "expr_" and not _rewrites_exprs(cls))):
            fn = _leaf
    table = cls.__dict__.get("_" + prefix + "fns")
    if table is None:  # a class whose tables were not made (assigned over)
        _new_tables(cls)
        table = cls.__dict__["_" + prefix + "fns"]
    table[node] = fn
    return fn


def _rewrites_exprs(cls: type) -> bool:
    """Whether rewriter class `cls` may change an expression: it has an
    `expr_<Node>` method, or its own expression walk (`expr`, `generic`,
    `generic_expr`)."""
    return (any(name.startswith("expr_") for name in dir(cls))
            or cls.expr is not Rewriter.expr or cls.generic is not Rewriter.generic
            or cls.generic_expr is not Rewriter.generic)


_new_tables(Rewriter)


class Visitor:
    """The one read-only traversal: `visit_<Node>` methods where a pass needs
    them; the default visits the children in field order."""

    def visit(self, x) -> None:
        getattr(self, "visit_" + type(x).__name__, self.generic_visit)(x)

    def generic_visit(self, x) -> None:
        for c in ir.children(x):
            self.visit(c)


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
    """Pre-order traversal of statements (an If's then-branch before its else)."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(c for c in reversed(ir.children(x)) if isinstance(c, ir.Stmt))
