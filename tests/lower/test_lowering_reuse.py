"""What lowering remembers and skips to be fast, and that none of it changes
a result: node hashes and plainness kept on nodes (ir.py), rewriters and
visitors that leave expressions alone when they handle none, substitution
and access collection over shared subtrees, the simplifier's per-scope memo
(scopes entered again the same way included), the shared simplifiers of
`simplify_expr`, and the integer path of `constant_extent`."""
from __future__ import annotations

import copy
import math
import pickle

import tcomp
from tcomp.lang import dtypes
from tcomp.lower import ir, printer
from tcomp.lower import rewriter as R
from tcomp.lower import simplify as S
from tcomp.lower.accesses import accesses
from tcomp.lower.rewriter import Rewriter, Visitor, substitute
from tcomp.schedule.extents import _int_extents, constant_extent, extents

F32 = dtypes.float32
X, I = ir.Var("x"), ir.Var("i")


def c(v):
    return ir.const(v)


def b(op, a, b_):
    return ir.Bin(op, a, b_, ir.int32)


def text(s: ir.Stmt) -> str:
    return "\n".join(printer.stmt(s))


def kernel(body: ir.Stmt) -> ir.Kernel:
    return ir.Kernel("k", (), (), (c(1), c(1), c(1)), (c(1), c(1), c(1)), body)


# ------------------------------------------------------------------ hashes, plain
def test_remembered_hash_is_the_dataclass_hash_and_is_not_pickled():
    e = b("+", X, ir.Load("A", (I, c(2)), ir.int32))
    assert hash(e) == hash((e.op, e.a, e.b, e.dtype))
    assert hash(e) == hash(b("+", ir.Var("x"), ir.Load("A", (ir.Var("i"), c(2)), ir.int32)))
    st = ir.Store("B", (I,), e, loc="here")  # loc takes no part in equality or hash
    assert hash(st) == hash(("B", (I,), e)) == hash(ir.Store("B", (I,), e))
    assert hash(ir.Barrier()) == hash(("block",))
    ir.plain(e)
    assert "_hash" in e.__dict__ and "_plain" in e.__dict__
    for back in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e), copy.copy(e)):
        assert "_hash" not in back.__dict__ and "_plain" not in back.__dict__
        assert back == e and hash(back) == hash(e)
    assert "_hash" not in ir.rebuild(e, {"b": c(1)}).__dict__


def test_plain_means_equal_nodes_print_alike():
    assert ir.plain(b("+", X, c(1)))
    assert ir.plain(ir.Imm(True, ir.bool_)) and ir.plain(ir.Imm(1.5, F32))
    assert ir.plain(ir.Imm(0.0, F32))
    not_plain = [ir.Imm(1, F32), ir.Imm(1, ir.bool_), ir.Imm(True, ir.int32),
                 ir.Imm(-0.0, F32), ir.Imm(math.nan, F32), ir.Imm(1.0, ir.int32)]
    for imm in not_plain:
        assert not ir.plain(imm), imm
        assert not ir.plain(ir.Bin("+", ir.Var("y", imm.dtype), imm, imm.dtype))
    # plainness separates equal constants of different Python values, which
    # an emitter may spell differently (the printer does for the zeros)
    assert ir.Imm(1.0, F32) == ir.Imm(1, F32) and ir.Imm(True, ir.int32) == ir.Imm(1, ir.int32)
    assert ir.Imm(0.0, F32) == ir.Imm(-0.0, F32)
    assert printer.expr(ir.Imm(0.0, F32)) != printer.expr(ir.Imm(-0.0, F32))


# ------------------------------------------------------------------ rewriter, visitor
def test_a_statement_only_rewriter_keeps_expressions_without_walking_them():
    class Stmts(Rewriter):
        def stmt_Barrier(self, s):
            return ir.Seq(())

    class Exprs(Rewriter):
        def expr_Var(self, e):
            return ir.Var("k") if e.name == "i" else e

    assert R._method(Stmts, "expr_", ir.Bin) is R._leaf
    assert R._method(Exprs, "expr_", ir.Bin) is Rewriter.generic
    e = b("+", I, ir.Load("A", (I,), ir.int32))
    body = ir.seq(ir.Barrier(), ir.Store("A", (e,), e))
    out = Stmts().stmt(body)
    assert out.indices[0] is e and out.value is e
    assert Exprs().stmt(body) == ir.seq(ir.Barrier(), ir.Store(
        "A", (b("+", ir.Var("k"), ir.Load("A", (ir.Var("k"),), ir.int32)),),
        b("+", ir.Var("k"), ir.Load("A", (ir.Var("k"),), ir.int32))))


def test_a_rewriter_with_its_own_expression_walk_still_walks():
    seen = []

    class Count(Rewriter):
        def expr(self, e):
            seen.append(type(e).__name__)
            return super().expr(e)

    Count().stmt(ir.Store("A", (b("+", I, c(1)),), c(0)))
    assert seen == ["Bin", "Var", "Imm", "Imm"]


def test_a_visitor_without_expression_methods_still_reaches_nested_statements():
    loops = []

    class Loops(Visitor):
        def visit_For(self, s):
            loops.append(s.var)
            self.generic_visit(s)

    vars_ = []

    class Vars(Visitor):
        def visit_Var(self, e):
            vars_.append(e.name)

    inner = ir.For("j", c(0), X, "serial", ir.Store("A", (ir.Var("j"),), I))
    body = ir.For("i", c(0), c(4), "serial", ir.If(b("<", I, c(2)), ir.seq(inner, inner)))
    Loops().visit(body)
    Vars().visit(body)
    assert loops == ["i", "j", "j"]
    assert sorted(vars_) == sorted(["i"] + ["x", "j", "i"] * 2)


# ------------------------------------------------------------------ shared subtrees
def test_substitute_shares_a_shared_subexpression_and_leaves_others():
    shared = b("*", b("+", I, c(1)), c(4))
    other = b("+", X, c(2))
    s = ir.seq(ir.Store("A", (shared,), other), ir.Store("B", (shared, other), c(0)))
    out = substitute(s, {"i": c(3)})
    assert out.stmts[0].indices[0] is out.stmts[1].indices[0]
    assert out.stmts[0].indices[0] == b("*", b("+", c(3), c(1)), c(4))
    assert out.stmts[0].value is other  # nothing to substitute in it: kept


def test_accesses_of_a_subtree_shared_inside_and_outside_a_binding():
    e = b("+", I, X)
    inside_first = ir.seq(ir.For("i", c(0), c(4), "serial", ir.Store("A", (e,), c(0))),
                          ir.Store("B", (e,), c(0)))
    outside_first = ir.seq(ir.Store("B", (e,), c(0)),
                           ir.For("i", c(0), c(4), "serial", ir.Store("A", (e,), c(0))))
    for body in (inside_first, outside_first):
        assert accesses(body).free_vars == {"i", "x"}
        assert accesses(body).writes == {"A", "B"}
    only_inside = ir.seq(ir.For("i", c(0), c(4), "serial", ir.Store("A", (e,), c(0))),
                         ir.For("i", c(0), c(2), "serial", ir.Store("B", (e,), c(0))))
    assert accesses(only_inside).free_vars == {"x"}


# ------------------------------------------------------------------ the simplifier's memo
def test_one_expression_object_simplified_in_each_scope_by_its_ranges():
    e = b("/", I, c(4))
    body = ir.For("i", c(0), c(8), "serial", ir.seq(
        ir.If(b("<", I, c(4)), ir.Store("A", (e,), c(0))),
        ir.Store("B", (e,), c(0))))
    assert text(S.simplify(kernel(body)).body) == "\n".join([
        "for i in 0:8",
        "  if i < 4",
        "    A[0] = 0",
        "  B[i / 4] = 0"])


def test_a_scope_entered_again_the_same_way_and_a_different_one():
    e = b("/", I, c(4))

    def loop(n):
        return ir.For("i", c(0), c(n), "serial", ir.Store("A", (e,), c(0)))

    out = S.simplify(kernel(ir.seq(loop(4), loop(8), loop(4), loop(8))))
    assert [printer.expr(s.body.indices[0]) for s in out.body.stmts] == [
        "0", "i / 4", "0", "i / 4"]
    # the same, each loop simplified by a simplifier of its own
    alone = [S.simplify(kernel(loop(n))).body.body.indices[0] for n in (4, 8, 4, 8)]
    assert [s.body.indices[0] for s in out.body.stmts] == alone


def test_simplify_expr_shares_one_simplifier_per_set_of_ranges(monkeypatch):
    S._SHARED.clear()
    e = b("+", b("*", X, c(4)), c(3))
    first = S.simplify_expr(e, {"x": (0, 7)})
    assert S.simplify_expr(e, {"x": (0, 7)}) is first
    assert len(S._SHARED) == 1
    assert printer.expr(S.simplify_expr(b("/", X, c(8)), {"x": (0, 7)})) == "0"
    assert printer.expr(S.simplify_expr(b("/", X, c(8)), {"x": (0, 15)})) == "x / 8"
    assert len(S._SHARED) == 2
    monkeypatch.setattr(S, "_SHARED_ENTRIES", 0)  # past its size a simplifier starts afresh
    again = S.simplify_expr(e, {"x": (0, 7)})
    assert again is not first and again == first


# ------------------------------------------------------------------ constant extents
def test_constant_extent_from_integers_agrees_with_sympy():
    op = tcomp.op("""def f(float32(N, 24) A) -> (B) {
  B(i, j) = A(i, j) * 2.0
}""")
    s = tcomp.Schedule(op)
    B = s["B"]
    i, j = B.axes
    io, ii = B.split(i, 8)
    jo, ji = B.split(j, 5)
    jf = B.fuse(jo, ji)
    jfo, jfi = B.split(jf, nparts=2)
    state = B._s
    fast, slow = _int_extents(state), extents(state)
    assert {a: v for a, v in fast.items() if type(v) is int} == {
        "j": 24, ii.name: 8, jo.name: 5, ji.name: 5, jf.name: 25, jfo.name: 2, jfi.name: 13}
    for axis, v in fast.items():
        e = slow[axis]
        want = int(e) if e is not None and e.is_Integer else None
        assert constant_extent(state, axis) == want
        if type(v) is int:
            assert v == want
    assert constant_extent(state, io.name) is None  # ceil(N / 8): symbolic
