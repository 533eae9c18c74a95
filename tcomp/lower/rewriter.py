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
        names = _CHILD_FIELDS.get(type(x))
        if names is None:
            names = ir.child_fields(type(x))
        Expr = ir.Expr
        for name in names:
            old = getattr(x, name)
            if old is None:
                continue
            if isinstance(old, tuple):
                new = tuple([self.expr(c) if isinstance(c, Expr) else self.stmt(c) for c in old])
                for a, b in zip(new, old):
                    if a is not b:
                        break
                else:
                    continue
            else:
                new = self.expr(old) if isinstance(old, Expr) else self.stmt(old)
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


_CHILD_FIELDS = ir._CHILD_FIELDS  # node class -> its child fields (ir.child_fields fills it)


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
    them; the default visits the children in field order. A visitor without
    a method for any kind of expression (and the default `generic_visit`)
    does not walk into expressions, where it would find nothing to do."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._visit_fns = {}

    def visit(self, x) -> None:
        fn = self._visit_fns.get(type(x))
        if fn is None:
            fn = _visit_method(type(self), type(x))
        fn(self, x)

    def generic_visit(self, x) -> None:
        for c in ir.children(x):
            self.visit(c)


Visitor._visit_fns = {}


def _skip(self, x) -> None:
    pass  # nothing of this node or below it interests the visitor


def _visit_method(cls: type, node: type):
    """What visitor class `cls` does with a `node` (per (class, node class),
    like `_method`): its `visit_<Node>`, else `generic_visit`, or nothing
    when that is the default and would find nothing below."""
    fn = getattr(cls, "visit_" + node.__name__, None)
    if fn is None:
        fn = cls.generic_visit
        if fn is Visitor.generic_visit and (not ir.child_fields(node) or (
                issubclass(node, ir.Expr) and cls.visit is Visitor.visit and not any(
                    hasattr(cls, "visit_" + e.__name__) for e in _expr_classes()))):
            fn = _skip
    table = cls.__dict__.get("_visit_fns")
    if table is None:
        table = cls._visit_fns = {}
    table[node] = fn
    return fn


def _expr_classes() -> list:
    out, todo = [], [ir.Expr]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


class Substitute(Rewriter):
    """Replace variables by expressions."""

    def __init__(self, mapping: dict[str, ir.Expr]):
        self.mapping = mapping
        # id(expr) -> (expr, substituted): trees share subexpressions (a substituted
        # variable's value at each of its uses), each substituted once.
        self._done: dict[int, tuple] = {}

    def expr(self, e: ir.Expr) -> ir.Expr:
        if type(e) is ir.Var:
            return self.mapping.get(e.name, e)
        if ir.free_vars(e).isdisjoint(self.mapping):
            return e  # no variable to replace below (kept on the node: ir.free_vars)
        hit = self._done.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = Rewriter.expr(self, e)
        self._done[id(e)] = (e, out)
        return out

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if ir.free_vars(s).isdisjoint(self.mapping):
            return s
        return Rewriter.stmt(self, s)

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
    get = _STMT_CHILDREN.get
    while stack:
        x = stack.pop()
        yield x
        fn = get(type(x))
        if fn is None:
            fn = _stmt_children_fn(type(x))
        stack.extend(fn(x))


def _stmt_children_fn(cls: type):
    """The function giving the statement children of a `cls` node, last
    first (walk_stmts pushes them): made once per class from the fields whose
    declared type holds statements, so that a walk over the statements does
    not read (and test) the expressions of every node."""
    import typing
    hints = typing.get_type_hints(cls)
    names = [n for n in ir.child_fields(cls) if _holds_stmts(hints[n])]
    if not names:
        fn = _no_stmts
    elif len(names) == 1 and isinstance(hints[names[0]], type):
        def fn(x, _n=names[0]):
            v = getattr(x, _n)
            return (v,) if v is not None else ()
    else:
        fn = ir.gather_fields(names, keep=ir.Stmt, last_first=True)
    _STMT_CHILDREN[cls] = fn
    return fn


def _holds_stmts(hint) -> bool:
    import typing
    if isinstance(hint, type):
        return issubclass(hint, ir.Stmt)
    return any(_holds_stmts(a) for a in typing.get_args(hint))


def _no_stmts(x) -> tuple:
    return ()


_STMT_CHILDREN: dict = {}  # node class -> its statement children, last first
