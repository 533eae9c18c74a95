"""Fragment buffers put in the shape the mma layouts are written for, before
tensor_cores.py distributes them over the lanes (two rewrites of that pass):

* `squeeze`: a fragment of a batched product (C[b, m, n] += A[b, m, k] *
  B[b, k, n], the batch loops outside the tensorized ones) is allocated with
  the batch dimensions of extent 1 it covers: `C_fragment[1, 16, 16]` becomes
  `C_fragment[16, 16]` and every access drops the subscripts (0) of those
  dimensions. A ring slot (the first dimension of a pipelined fragment, more
  than one slot) stays.
* `transpose`: an operand read in the other major order (A as A[k, m], B as
  B[n, k]: the mma's A is m x k, its B k x n) has its tile's two dimensions
  swapped, in its allocation and in every access, so that every fragment is
  then in the mma's own orientation. Copies into it are unchanged in
  meaning; `ldmatrix` serves a shared tile whose rows run along the
  fragment's other dimension with its other form (.trans for A, plain for B:
  `LDMATRIX` below).
"""
from __future__ import annotations

import dataclasses

from ..arch import fragments as _F
from . import ir
from .printer import expr as expr_text
from .rewriter import Rewriter, walk_stmts

# (role, the fragment's dimension along which the shared tile's rows of 8 elements
# run, pair of B tiles) -> (intrinsic, lane -> (row, col) of the fragment element whose
# address the lane gives; arch/fragments.py). "col": rows along the fragment's columns
# (A[m, k] with k contiguous, B[k, n] with n contiguous); "row": along its rows (A[k, m]
# with m contiguous, B[n, k] with k contiguous).
LDMATRIX = {
    ("a", "col", False): ("ldmatrix_x4", _F.LDMATRIX_A_ROWS),
    ("b", "col", True): ("ldmatrix_x4_trans", _F.LDMATRIX_B_ROWS),
    ("b", "col", False): ("ldmatrix_x2_trans", _F.LDMATRIX_X2_ROWS),
    ("a", "row", False): ("ldmatrix_x4_trans", _F.LDMATRIX_T_ROWS),
    ("b", "row", True): ("ldmatrix_x4", _F.LDMATRIX_T_ROWS),
    ("b", "row", False): ("ldmatrix_x2", _F.LDMATRIX_T_X2_ROWS),
}


def fragments(body: ir.Stmt) -> dict[str, ir.Buffer]:
    return {x.buffer.name: x.buffer for x in walk_stmts(body)
            if isinstance(x, ir.Alloc) and x.buffer.scope == "fragment"}


class _Accesses(Rewriter):
    """Rewrite the subscripts of every access (Load, Store, Ref) to the
    buffers in `fix` (name -> subscripts -> subscripts) and their Allocs
    (`shapes`: name -> new shape)."""

    def __init__(self, fix, shapes):
        self.fix, self.shapes = fix, shapes

    def expr_Load(self, e):
        e = self.generic(e)
        f = self.fix.get(e.buffer)
        return e if f is None else dataclasses.replace(e, indices=f(e.indices))

    def expr_Ref(self, e):
        e = self.generic(e)
        f = self.fix.get(e.buffer)
        return e if f is None else dataclasses.replace(e, indices=f(e.indices))

    def stmt_Store(self, s):
        s = self.generic(s)
        f = self.fix.get(s.buffer)
        return s if f is None else dataclasses.replace(s, indices=f(s.indices))

    def stmt_Alloc(self, s):
        s = self.generic(s)
        shape = self.shapes.get(s.buffer.name)
        if shape is None:
            return s
        return dataclasses.replace(s, buffer=dataclasses.replace(s.buffer, shape=shape))


def squeeze(body: ir.Stmt, frags: dict, simp) -> ir.Stmt:
    """Drop the dimensions of extent 1 before a fragment's tile (batch
    dimensions of a batched product; see the module docstring)."""
    fix, shapes = {}, {}
    for name, b in frags.items():
        shape = b.shape
        drop = [i for i, d in enumerate(shape[:-2]) if isinstance(d, ir.Imm) and d.value == 1]
        if not drop:
            continue

        def f(idx, drop=frozenset(drop), name=name):
            if len(idx) != len(frags[name].shape):
                return idx
            for i in drop:  # (bounds inference sized the dimension: its one index is 0)
                v = simp.expr(idx[i])
                assert isinstance(v, ir.Imm) and v.value == 0, (name, i, expr_text(v))
            return tuple(x for i, x in enumerate(idx) if i not in drop)
        fix[name] = f
        shapes[name] = tuple(d for i, d in enumerate(shape) if i not in drop)
    return _Accesses(fix, shapes).stmt(body) if fix else body


def transpose(body: ir.Stmt, frags: dict, names) -> ir.Stmt:
    """Swap the tile's two dimensions of the fragments `names` (operands read
    in the other major order; see the module docstring)."""
    def f(idx):
        return idx[:-2] + (idx[-1], idx[-2])
    fix = {n: f for n in names}
    shapes = {n: f(frags[n].shape) for n in names}
    return _Accesses(fix, shapes).stmt(body) if fix else body
