"""Kernel IR that grows in one place: children derived from dataclass fields,
the one rewriter and visitor over them, the accesses helper, and the operand
reference node `Ref`."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from tcomp.errors import LoweringError, SimError
from tcomp.lang import dtypes
from tcomp.lower import flatten, ir, printer
from tcomp.lower.accesses import accesses
from tcomp.lower.rewriter import Rewriter, Visitor, walk_stmts
from tcomp.lower.verify import verify
from tcomp.target_cuda.codegen import CodegenOptions, _Kernel
from tcomp.target_cuda.index_width import widen
from tcomp.target_sim import run_program

F32 = dtypes.float32
I, J, TX = ir.Var("i"), ir.Var("j"), ir.Var("threadIdx.x")


def c(v):
    return ir.const(v)


def add(a, b):
    return ir.Bin("+", a, b, ir.int32)


def node_classes():
    return [cls for _, cls in inspect.getmembers(ir, inspect.isclass)
            if issubclass(cls, (ir.Expr, ir.Stmt)) and cls not in (ir.Expr, ir.Stmt)]


# ------------------------------------------------------------------ children
def test_child_fields_follow_the_declarations():
    assert ir.child_fields(ir.Load) == ("indices",)
    assert ir.child_fields(ir.Bin) == ("a", "b")
    assert ir.child_fields(ir.Select) == ("cond", "a", "b")
    assert ir.child_fields(ir.Store) == ("indices", "value")  # (loc is no child)
    assert ir.child_fields(ir.For) == ("lo", "extent", "body")
    assert ir.child_fields(ir.If) == ("cond", "then", "else_")
    assert ir.child_fields(ir.Evaluate) == ("call",)
    assert ir.child_fields(ir.AllReduce) == ("extent",)
    assert ir.child_fields(ir.Alloc) == ("body",)  # a Buffer is not a node
    assert ir.child_fields(ir.Ref) == ("indices",)
    assert ir.child_fields(ir.Var) == ir.child_fields(ir.Barrier) == ()


def test_every_node_class_declares_its_child_fields():
    """Every field of every node is either a child or plainly not one (a name,
    a dtype, an operator, a Buffer): a field typed `object` would hide nodes."""
    for cls in node_classes():
        hints = __import__("typing").get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in ir.child_fields(cls):
                assert "Expr" not in str(hints[f.name]) and "Stmt" not in str(hints[f.name]), \
                    (cls.__name__, f.name)


def test_children_in_field_order_and_optional_skipped():
    st = ir.Store("A", (I, J), ir.Load("B", (J,), F32))
    assert ir.children(st) == (I, J, ir.Load("B", (J,), F32))
    assert ir.children(ir.If(TX, st)) == (TX, st)
    assert ir.children(ir.If(TX, st, st)) == (TX, st, st)


def test_walk_and_walk_stmts_are_preorder():
    inner = ir.Store("A", (I,), c(1))
    loop = ir.For("i", c(0), c(4), "serial", ir.seq(inner, ir.Barrier()))
    body = ir.If(TX, loop, ir.Barrier())
    assert list(walk_stmts(body)) == [body, loop, loop.body, inner, ir.Barrier(), ir.Barrier()]
    nodes = list(ir.walk(loop))
    assert nodes[:4] == [loop, c(0), c(4), loop.body]


def test_rewriter_rebuilds_only_what_changed():
    class Rename(Rewriter):
        def expr_Var(self, e):
            return ir.Var("k") if e.name == "i" else e

    s = ir.seq(ir.Store("A", (J,), c(0)), ir.Store("A", (I,), c(1), loc="here"))
    out = Rename().stmt(s)
    assert out.stmts[0] is s.stmts[0]
    assert out.stmts[1] == ir.Store("A", (ir.Var("k"),), c(1))
    assert out.stmts[1].loc == "here"  # fields that are no children are kept
    same = ir.Store("A", (J,), c(0))
    assert Rename().stmt(same) is same


def test_rewriter_normalises_a_rebuilt_sequence():
    class Drop(Rewriter):
        def stmt_Barrier(self, s):
            return ir.Seq(())

    s = ir.Seq((ir.Barrier(), ir.Store("A", (I,), c(1))))
    assert Drop().stmt(s) == ir.Store("A", (I,), c(1))


def test_visitor_reaches_every_node():
    seen = []

    class Count(Visitor):
        def visit_Load(self, e):
            seen.append(e.buffer)
            self.generic_visit(e)

    body = ir.For("i", ir.Load("N", (c(0),), ir.int32), c(4), "serial",
                  ir.If(ir.Bin("<", ir.Load("P", (I,), ir.int32), c(3), ir.bool_),
                        ir.Store("A", (ir.Load("Q", (I,), ir.int32),), c(1))))
    Count().visit(body)
    assert sorted(seen) == ["N", "P", "Q"]


# ------------------------------------------------------------------ accesses
def test_accesses_reads_writes_and_free_variables():
    body = ir.For("i", c(0), ir.Var("N"), "serial",
                  ir.Let("t", add(I, TX),
                         ir.Store("C", (ir.Var("t"),),
                                  ir.Bin("*", ir.Load("A", (I, ir.Var("k")), F32),
                                         ir.Var("x", F32), F32))))
    a = accesses(body)
    assert a.reads == {"A"} and a.writes == {"C"}
    assert a.free_vars == {"N", "threadIdx.x", "k", "x"}  # i and t are defined inside
    assert accesses(body.body).free_vars == {"i", "threadIdx.x", "k", "x"}
    red = ir.AllReduce("+", "R", F32, "threadIdx.x", ir.Var("B"))
    assert accesses(red) == accesses(ir.seq(red))
    assert accesses(red).reads == accesses(red).writes == {"R"}
    assert accesses(red).free_vars == {"B"}


def test_accesses_scoping_of_a_bound_variable_in_its_own_bounds():
    # `for i in 0:i` uses an outer i in its extent: that one is free.
    loop = ir.For("i", c(0), I, "serial", ir.Store("A", (I,), c(0)))
    assert accesses(loop).free_vars == {"i"}


# ------------------------------------------------------------------ Ref
def _program(body, buffers, block=1):
    bufs = tuple(ir.Buffer(n, F32, tuple(c(d) for d in shape), "global", "output")
                 for n, shape in buffers.items())
    k = ir.Kernel("k", tuple(buffers), (), (c(1), c(1), c(1)), (c(block), c(1), c(1)), body)
    return ir.Program("p", bufs, (k,), (), tuple(buffers), ()), k


def test_ref_prints_as_an_address():
    r = ir.Ref("A", (I, add(J, c(1))), F32)
    assert printer.expr(r) == "&A[i, j + 1]"
    assert printer.expr(ir.Call("f", (r,), F32)) == "f(&A[i, j + 1])"


def copy(dst, src):
    return ir.Evaluate(ir.Call("test_copy", (dst, src), F32))


def test_ref_is_flattened_like_a_load(copy_intrinsic):
    body = ir.For("i", c(0), c(4), "serial", ir.For("j", c(0), c(8), "serial", copy(
        ir.Ref("A", (I, J), F32), ir.Ref("B", (J, I), F32))))
    prog, k = _program(body, {"A": (4, 8), "B": (8, 4)})
    verify(k, prog)
    flat = flatten.run(k, prog)
    assert printer.stmt(flat.body.body.body) == ["test_copy(&A[i * 8 + j], &B[j * 4 + i])"]
    verify(flat, prog, flat=True)


def test_ref_cuda_emitter_prints_the_flat_address():
    prog, k = _program(ir.Let("p", ir.Ref("A", (add(TX, c(2)),), F32), ir.Seq(())), {"A": (8,)})
    gen = _Kernel(k, prog)
    assert gen.expr(ir.Ref("A", (add(TX, c(2)),), F32)) == "(&A[threadIdx.x + 2])"
    wide = widen(k)
    assert wide.body.value.indices[0].dtype == dtypes.int64  # 64-bit indexing
    gen = _Kernel(wide, prog, CodegenOptions(index_bits=64))
    assert gen.expr(wide.body.value) == "(&A[((long long)threadIdx.x) + 2LL])"


def test_ref_subscripts_are_verified():
    prog, k = _program(ir.Let("p", ir.Ref("A", (I,), F32), ir.Seq(())), {"A": (4, 8)})
    k = dataclasses.replace(k, body=ir.For("i", c(0), c(4), "serial", k.body))
    with pytest.raises(LoweringError, match="buffer 'A' has 2 dimensions but is accessed with "
                                            "1 subscripts"):
        verify(k, prog)
    prog, k = _program(ir.Let("p", ir.Ref("Z", (c(0),), F32), ir.Seq(())), {"A": (4,)})
    with pytest.raises(LoweringError, match="unknown buffer 'Z'"):
        verify(k, prog)


def test_ref_has_no_value_in_the_sim():
    body = ir.Let("p", ir.Ref("A", (TX,), F32), ir.Store("A", (TX,), ir.Imm(1.0, F32)))
    prog, _ = _program(body, {"A": (4,)}, block=4)
    env = {"A": np.zeros(4, np.float32)}
    with pytest.raises(SimError, match=r"kernel k: &A\[threadIdx.x\] is the address of an "
                                       r"element, not a value; only an intrinsic that takes an "
                                       r"address operand can use it"):
        run_program(prog, env, {})
