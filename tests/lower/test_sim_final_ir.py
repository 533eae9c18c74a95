"""The sim runs the final Kernel IR: the IR after the whole pipeline, the one
the CUDA printer prints, with flat (row-major) offsets. A layout decision
(storage order, padding, the flattening itself) is then a value the tests
check, not only a text the golden files show.

Errors: the final IR's flat offsets are checked against the buffers' element
counts; on an error the sim runs the IR before flattening too and reports its
message (the subscript and dimension at fault) when it has one, else the
final IR's (a fault of the flattening itself).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import tcomp
from tcomp.errors import LoweringError
from tcomp.lower import ir
from tcomp.lower.pipeline import PASSES, lower as lower_pipeline, run_passes
from tcomp.lower.ir import walk_expr
from tcomp.lower.rewriter import Rewriter, walk_stmts
from tcomp.target_sim import run_program

from .test_sim_catches import MM, MM_SIZES, shared_matmul
from .util import inputs_for


def loads_and_stores(prog):
    for k in prog.kernels:
        for s in walk_stmts(k.body):
            if isinstance(s, ir.Store):
                yield s
            exprs = [getattr(s, f) for f in ("value", "cond", "lo", "extent")
                     if isinstance(getattr(s, f, None), ir.Expr)]
            exprs += list(getattr(s, "indices", ()))
            for e in exprs:
                yield from (x for x in walk_expr(e) if isinstance(x, ir.Load))


def test_the_sim_runs_what_cuda_prints():
    s = shared_matmul()
    k = tcomp.build(s, target="sim")
    assert str(k.program) == str(tcomp.lower(s))
    shapes = {"A": 2, "B": 2, "C": 2, "A_shared": 2, "B_shared": 2}
    accesses = list(loads_and_stores(k.program))
    assert {a.buffer for a in accesses} == set(shapes)
    assert all(len(a.indices) == 1 for a in accesses)  # flat offsets only
    assert all(len(a.indices) == shapes[a.buffer] for a in loads_and_stores(k.unflattened))
    args = inputs_for(MM, MM_SIZES, seed=3)
    np.testing.assert_allclose(k(*args), tcomp.evaluate(MM, *args), rtol=1e-5, atol=1e-5)


def test_run_passes_continues_the_pipeline():
    s = shared_matmul()
    unflat = lower_pipeline(s, until="flatten_storage")
    assert str(run_passes(unflat, start="flatten_storage")) == str(tcomp.lower(s))
    assert [n for n, _ in PASSES][-2:] == ["flatten_storage", "vectorize"]
    with pytest.raises(LoweringError, match=re.escape(
            "lower: start='flatten' is not a pass (passes: bind_threads, simplify, tensor_cores, "
            "software_pipeline, insert_barriers, vector_loads, unroll, simplify_after_unroll, "
            "registers, "
            "flatten_storage, "
            "vectorize)")):
        run_passes(unflat, start="flatten")
    with pytest.raises(LoweringError, match=r"lower: until='unrol' is not a pass \(passes: "):
        lower_pipeline(s, until="unrol")


# ----------------------------------------------------------------- flattening bugs
class TransposeFlatLoads(Rewriter):
    """Read square 4x4 buffer `name` transposed: offset r*4 + c becomes c*4 + r,
    in loads only (a flattening that disagrees between stores and loads)."""

    def __init__(self, name):
        self.name = name

    def expr_Load(self, e):
        e = self.generic_expr(e)
        if e.buffer != self.name:
            return e
        (off,) = e.indices
        i32 = ir.int32
        t = ir.Bin("+", ir.Bin("*", ir.Bin("%", off, ir.const(4), i32), ir.const(4), i32),
                   ir.Bin("/", off, ir.const(4), i32), i32)
        return dataclasses.replace(e, indices=(t,))


class ShiftFlatStores(Rewriter):
    def __init__(self, name, delta):
        self.name, self.delta = name, delta

    def stmt_Store(self, s):
        s = self.generic_stmt(s)
        if s.buffer != self.name:
            return s
        (off,) = s.indices
        return dataclasses.replace(s, indices=(ir.Bin("+", off, ir.const(self.delta),
                                                      ir.int32),))


def broken_final_ir(rewriter):
    """The shared matmul with its final IR (only) rewritten: the IR before
    flattening stays correct, as with a bug in the flattening pass."""
    k = tcomp.build(shared_matmul(), target="sim")
    kernels = tuple(dataclasses.replace(kk, body=rewriter.stmt(kk.body))
                    for kk in k.program.kernels)
    new = dataclasses.replace(k.program, kernels=kernels)
    assert new != k.program
    k.program = new
    return k


def test_an_inconsistent_layout_is_a_wrong_value():
    """K = 8, whole tiles: every element of the tile is written and read, after
    barriers: no check can fire, but the values are the transposed tile's, and
    a value test fails."""
    args = inputs_for(MM, {"M": 8, "N": 8, "K": 8}, seed=3)
    got = broken_final_ir(TransposeFlatLoads("A_shared"))(*args)
    assert not np.allclose(got, tcomp.evaluate(MM, *args), rtol=1e-3, atol=1e-3)


def test_a_flat_offset_out_of_bounds_names_the_offset_and_the_shape():
    args = inputs_for(MM, MM_SIZES, seed=3)
    k = broken_final_ir(ShiftFlatStores("B_shared", 16))
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel mm_C: write to B_shared at flat offset 16 out of bounds (shape (4, 4): 16 "
            "elements) in block (0, 0, 0), thread (0, 0, 0)")):
        k(*args)


def test_the_unflattened_message_wins_when_it_has_one():
    """The same bug in the IR before flattening: its per-dimension message."""
    from .test_sim_catches import ShiftStore, rewrite
    args = inputs_for(MM, MM_SIZES, seed=3)
    k = rewrite(tcomp.build(shared_matmul(), target="sim"), ShiftStore("B_shared", 0, 4))
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel mm_C: write to B_shared[4, 0] out of bounds (shape (4, 4), dimension 0) "
            "in block (0, 0, 0), thread (0, 0, 0)")):
        k(*args)


# ----------------------------------------------------------------- flat buffers
F32 = tcomp.lang.dtypes.float32


def _program(body, buffers):
    bufs = tuple(ir.Buffer(n, F32, tuple(ir.const(d) for d in shape), role="output")
                 for n, shape in buffers.items())
    k = ir.Kernel("k", tuple(buffers), (), (ir.ONE, ir.ONE, ir.ONE),
                  (ir.const(4), ir.ONE, ir.ONE), body)
    return ir.Program("p", bufs, (k,), (), tuple(buffers), ())


def test_flat_stores_name_elements_by_their_multi_index():
    """Flat offsets into a 2-d global buffer: the values land row-major, and a
    race names the element by its subscripts in the buffer's shape."""
    tx = ir.Var("threadIdx.x")
    body = ir.Store("O", (ir.Bin("+", ir.Bin("*", tx, ir.const(3), ir.int32), ir.const(2),
                                 ir.int32),), ir.Cast(F32, tx))
    env = {"O": np.zeros((4, 3), np.float32)}
    run_program(_program(body, {"O": (4, 3)}), env, {})
    want = np.zeros((4, 3), np.float32)
    want[:, 2] = np.arange(4)
    np.testing.assert_array_equal(env["O"], want)
    read = ir.Load("O", (ir.const(5),), F32)  # O[1, 2], written by thread 1
    body = ir.seq(body, ir.Store("O", (ir.Bin("+", tx, ir.const(6), ir.int32),), read))
    with pytest.raises(tcomp.SimError, match=re.escape(
            "kernel k: thread (0, 0, 0) reads O[1, 2] written by thread (1, 0, 0) since the "
            "last barrier (missing barrier) in block (0, 0, 0)")):
        run_program(_program(body, {"O": (4, 3)}), {"O": np.zeros((4, 3), np.float32)}, {})


@pytest.mark.parametrize("scope", ["global", "shared", "local"])
def test_per_dimension_subscripts_land_row_major(scope):
    """IR before flattening (or hand-built) indexes a 3-d buffer per dimension:
    thread t stores t + 1 at [1, t % 3, 2] (per-lane subscripts) and thread 0
    stores 9 at [1, 0, 1] (uniform subscripts); both land row-major."""
    tx = ir.Var("threadIdx.x")
    t3 = ir.Bin("%", tx, ir.const(3), ir.int32)
    name = "O" if scope == "global" else "T"
    first = ir.If(ir.Bin("<", tx, ir.const(3), ir.bool_),
                  ir.Store(name, (ir.ONE, t3, ir.const(2)),
                           ir.Cast(F32, ir.Bin("+", tx, ir.ONE, ir.int32))))
    second = ir.If(ir.Bin("==", tx, ir.const(0), ir.bool_),
                   ir.Store(name, (ir.ONE, ir.const(0), ir.ONE), ir.Imm(9.0, F32)))
    want = np.zeros((2, 3, 4), np.float32)
    want[1, :, 2] = [1, 2, 3]
    want[1, 0, 1] = 9
    body = ir.seq(first, second)
    if scope != "global":  # copy the temporary out as a flat (row-major) view
        at = [(1, 0, 1), (1, 0, 2), (1, 1, 2), (1, 2, 2)]
        copies = [ir.Store("O", (ir.const(((a * 3) + b) * 4 + c),),
                           ir.Load("T", tuple(ir.const(v) for v in (a, b, c)), F32))
                  for a, b, c in at]
        if scope == "local":  # each thread copies what it wrote itself
            want[1, 1:, 2] = 0
            copies = [copies[0], copies[1]]
            body = ir.seq(ir.If(ir.Bin("==", tx, ir.const(0), ir.bool_), ir.seq(first, second,
                                                                                *copies)))
        else:
            body = ir.seq(body, ir.Barrier(),
                          ir.If(ir.Bin("==", tx, ir.const(0), ir.bool_), ir.seq(*copies)))
        body = ir.Alloc(ir.Buffer("T", F32, (ir.const(2), ir.const(3), ir.const(4)), scope), body)
    env = {"O": np.zeros((2, 3, 4), np.float32)}
    run_program(_program(body, {"O": (2, 3, 4)}), env, {})
    np.testing.assert_array_equal(env["O"], want)


def test_a_non_contiguous_array_is_run_on_a_copy_and_written_back():
    tx = ir.Var("threadIdx.x")
    body = ir.Store("O", (ir.Bin("*", tx, ir.const(2), ir.int32),), ir.Cast(F32, tx))
    base = np.zeros((2, 4), np.float32)
    env = {"O": base.T}  # shape (4, 2), Fortran order
    run_program(_program(body, {"O": (4, 2)}), env, {})
    np.testing.assert_array_equal(base.T[:, 0], np.arange(4))
    np.testing.assert_array_equal(base.T[:, 1], 0)
