"""Kernel IR's generic machinery: structural hashes remembered per node, the
`plain` test, children derived from fields, rebuilding, walks, free
variables and reduction identities. Every name is re-exported by ir.py
(`ir.children`, `ir.walk`, ...); it lives here to keep the node definitions
short."""
from __future__ import annotations

import math
import operator
import typing
from dataclasses import fields

from .ir import Expr, Imm, Load, Ref, Stmt, Var


# ------------------------------------------------------------------ hashing
def _remember_hash(cls: type) -> None:
    """Make node class `cls` compute its structural hash once per node.

    The dataclass hash of a node hashes its fields, so the hash of a tree
    walks the whole tree, on every dict or set lookup: the simplifier keys
    its linear forms by subexpressions, and hashing deep index expressions
    again and again took a large part of lowering. A node is immutable, so
    its hash is kept on it after the first call (equality is unchanged, and
    the field is no dataclass field: `replace`, `fields` and the printer do
    not see it). It is dropped when a node is pickled or copied (string
    hashes differ between processes)."""
    if getattr(cls.__dict__.get("__hash__"), "remembered", False):
        return
    # the dataclass hash: of the tuple of the fields that take part in it
    names = tuple(f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash))
    get = operator.attrgetter(*names) if len(names) > 1 else (
        lambda x, _g=operator.attrgetter(*names): (_g(x),)) if names else (lambda x: ())

    def __hash__(self, _set=object.__setattr__):
        h = self._hash
        if h is None:
            h = hash(get(self))
            _set(self, "_hash", h)
        return h

    __hash__.remembered = True
    cls.__hash__ = __hash__


def _node_state(self) -> dict:
    """Pickled/copied state of a node: its fields, without what is remembered
    on it (`_hash`, `_plain`)."""
    state = self.__dict__
    if any(k in state for k in _REMEMBERED):
        state = {k: v for k, v in state.items() if k not in _REMEMBERED}
    return state


_REMEMBERED = ("_hash", "_plain", "_free", "_loaded", "_has_ref")


def plain(e) -> bool:
    """Whether every node structurally equal to `e` prints as `e` does, so
    that a cache may key on `e` by equality. Equality is not that strict for
    constants: 1 == 1.0 == True and 0.0 == -0.0 (and NaN equals nothing), so
    `e` is plain when each of its constants is a Python int of an integer
    type, a bool of the bool type, or a float of a float type that is
    neither NaN nor -0.0 (equal such constants print alike). Kept on the
    node, like its hash."""
    p = e._plain
    if p is None:
        if type(e) is Imm:
            v, dt = e.value, e.dtype
            if dt.is_bool:
                p = type(v) is bool
            elif dt.is_float:
                p = type(v) is float and v == v and (v != 0.0 or math.copysign(1.0, v) > 0)
            else:
                p = type(v) is int
        else:
            p = True
            for c in children(e):
                if not plain(c):
                    p = False
                    break
        object.__setattr__(e, "_plain", p)
    return p


for _base in (Expr, Stmt):
    _base.__getstate__ = _node_state
    # what is remembered on a node reads as None until it is set on the node itself (an
    # attribute read: cheaper than asking the node's __dict__, on every hash and walk)
    for _name in _REMEMBERED:
        setattr(_base, _name, None)
    for _cls in _base.__subclasses__():
        _remember_hash(_cls)


# ------------------------------------------------------------------ children
def _holds_nodes(hint) -> bool:
    """Whether a field's declared type is, or contains, a node type."""
    if isinstance(hint, type):
        return issubclass(hint, (Expr, Stmt))
    return any(_holds_nodes(a) for a in typing.get_args(hint))


def child_fields(cls: type) -> tuple[str, ...]:
    """The fields of node class `cls` that hold children, in declaration
    order: those declared as an Expr, a Stmt, an optional one or a tuple of
    them (fields not part of equality, like `Store.loc`, are no children).
    Worked out once per class (every traversal asks, for every node)."""
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        hints = typing.get_type_hints(cls)
        names = _CHILD_FIELDS[cls] = tuple(
            f.name for f in fields(cls) if f.compare and _holds_nodes(hints[f.name]))
    return names


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node) -> tuple:
    """The Expr and Stmt children of any node, in field order (tuple fields
    contribute their elements; an absent optional child, None, is skipped)."""
    fn = _CHILDREN.get(type(node))
    if fn is None:
        fn = _children_fn(type(node))
    return fn(node)


def _children_fn(cls: type):
    """The function that gives the children of a `cls` node (`children`),
    made once per class from its child fields: every traversal asks for
    every node, and reading the fields through one attrgetter call (a class
    whose child fields are all single nodes, or one tuple) took a third of
    the time the general loop over the fields did. A class with an optional
    field, or a tuple beside other fields, gets the general loop."""
    names = child_fields(cls)
    hints = typing.get_type_hints(cls) if names else {}

    def shape(name):
        h = hints[name]
        if typing.get_origin(h) is tuple:
            return "tuple"
        return "node" if isinstance(h, type) and issubclass(h, (Expr, Stmt)) else "other"

    shapes = [shape(n) for n in names]
    if not names:
        fn = _no_children
    elif shapes == ["tuple"]:
        fn = operator.attrgetter(names[0])
    elif all(sh == "node" for sh in shapes):
        fn = (operator.attrgetter(*names) if len(names) > 1 else
              (lambda x, _g=operator.attrgetter(names[0]): (_g(x),)))
    else:
        fn = gather_fields(names)
    _CHILDREN[cls] = fn
    return fn


def gather_fields(names, keep: type | None = None, last_first: bool = False):
    """The function giving the nodes held in fields `names` of a node, in field
    order (a tuple field contributes its elements, None is skipped); `keep`:
    only nodes of that class; `last_first`: in reverse order (for a stack)."""
    def fn(x):
        out = []
        for name in names:
            v = getattr(x, name)
            if isinstance(v, tuple):
                out.extend(v if keep is None else [c for c in v if isinstance(c, keep)])
            elif v is not None and (keep is None or isinstance(v, keep)):
                out.append(v)
        return tuple(reversed(out)) if last_first else tuple(out)
    return fn


def _no_children(x) -> tuple:
    return ()


_CHILDREN: dict = {}  # node class -> the function giving a node's children (_children_fn)


def rebuild(node, changes: dict):
    """`dataclasses.replace(node, **changes)`, without its per-call checks
    (the rewriter rebuilds a node each time a child changes): the node's
    constructor with its fields, `changes` replacing some of them."""
    cls = type(node)
    names = _INIT_FIELDS.get(cls)
    if names is None:
        names = _INIT_FIELDS[cls] = tuple(f.name for f in fields(cls) if f.init)
    kw = {n: getattr(node, n) for n in names}
    kw.update(changes)
    return cls(**kw)


_INIT_FIELDS: dict[type, tuple[str, ...]] = {}


def expr_children(e: Expr) -> tuple[Expr, ...]:
    return children(e)


def walk_expr(e: Expr):
    """Every node of an expression (pre-order; children pushed on a stack, so
    the last child's subtree comes first)."""
    stack = [e]
    get = _CHILDREN.get
    while stack:
        x = stack.pop()
        yield x
        fn = get(type(x))
        if fn is None:
            fn = _children_fn(type(x))
        stack.extend(fn(x))


def memory_nodes(e: Expr):
    """The Load and Ref nodes of `walk_expr(e)`, in its order: subtrees that
    hold none (`loaded(x)` empty and no Ref: most index arithmetic) are not
    entered."""
    stack = [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Load or t is Ref:
            yield x
        elif not (loaded(x) or has_ref(x)):
            continue
        stack.extend(children(x))


def binding(node) -> tuple[str, object] | None:
    """(variable, the child it is defined in) for a node that defines a
    variable (a node class says so with `BINDS`, the name of that field)."""
    where = getattr(type(node), "BINDS", None)
    return None if where is None else (node.var, getattr(node, where))


def walk(node):
    """Every node under `node`, statements and expressions, in pre-order
    (children in field order)."""
    stack = [node]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def free_vars(e) -> frozenset[str]:
    """The names of the Var nodes under `e` (a frozenset). Kept on the node,
    like its hash: passes ask about the same subexpressions again and again
    (every atom of every subscript, every guard), and trees share subtrees."""
    f = e._free
    if f is None:
        if isinstance(e, Var):
            f = frozenset((e.name,))
        else:
            cs = children(e)
            if not cs:
                f = _NONE
            elif len(cs) == 1:
                f = free_vars(cs[0])
            else:
                f = frozenset().union(*[free_vars(c) for c in cs])
        object.__setattr__(e, "_free", f)
    return f


def loaded(e) -> frozenset[str]:
    """The buffers of the Load nodes under `e` (itself included), kept on the
    node like `free_vars`."""
    f = e._loaded
    if f is None:
        cs = children(e)
        if not cs:
            f = _NONE
        elif len(cs) == 1:
            f = loaded(cs[0])
        else:
            f = frozenset().union(*[loaded(c) for c in cs])
        if isinstance(e, Load):
            f = f | {e.buffer}
        object.__setattr__(e, "_loaded", f)
    return f


def has_ref(e) -> bool:
    """Whether a Ref node is under `e` (itself included), kept on the node."""
    f = e._has_ref
    if f is None:
        f = isinstance(e, Ref)
        if not f:
            for c in children(e):
                if has_ref(c):
                    f = True
                    break
        object.__setattr__(e, "_has_ref", f)
    return f


_NONE: frozenset = frozenset()


def identity(op: str, dt) -> Imm:
    """The identity of reduction operator `op` ('+', '*', 'max', 'min') in type
    `dt`: where an accumulation starts, and what an `AllReduce` lane past the
    reduction's extent contributes."""
    if op == "+":
        return Imm(0.0 if dt.is_float else (False if dt.is_bool else 0), dt)
    if op == "*":
        return Imm(1.0 if dt.is_float else (True if dt.is_bool else 1), dt)
    if dt.is_float:
        return Imm(float("-inf") if op == "max" else float("inf"), dt)
    if dt.is_bool:
        return Imm(op == "min", dt)
    import numpy as np
    info = np.iinfo(dt.numpy)
    return Imm(int(info.min if op == "max" else info.max), dt)
