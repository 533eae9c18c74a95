"""tensor_cores' last step: the per-lane fragment elements become registers
at constant subscripts (`_Registers`), the element loops are unrolled
(`_UnrollRegisters`); `_multiple` tells whether a linear form is a multiple
of a constant (also used by the distribution step)."""
from __future__ import annotations

import dataclasses

from ..errors import LoweringError
from . import ir
from .printer import expr as expr_text
from .rewriter import Rewriter
from .simplify import Linear
from .tensor_core_layouts import LAYOUTS, _b


class _Registers(Rewriter):
    """Logical (row, col) subscripts of fragments -> register offsets; Alloc
    shapes -> registers per lane; copies from shared into A/B -> ldmatrix."""

    def __init__(self, frags, roles, shapes, slots, simp, element_loops):
        self.frags, self.roles, self.shapes, self.simp = frags, roles, shapes, simp
        self.slots, self.element_loops = slots, element_loops

    def logical(self, buf, idx) -> bool:
        """Whether `idx` are logical subscripts of fragment `buf` (not yet a register)."""
        return buf in self.frags and len(idx) == (3 if buf in self.slots else 2)

    def slot_base(self, buf, idx):
        """The first register of the ring slot that `idx` (logical) picks: slots
        follow one another, each a whole fragment's registers."""
        if buf not in self.slots:
            return ir.const(0)
        rows, cols = self.shapes[buf]
        return _b("*", idx[0], rows * cols // 32)

    def reg(self, buf, idx):
        """Register offset of the tile of `buf` whose origin is `idx` (logical):
        its first register (tiles row-major, `per_lane` registers each)."""
        lay = LAYOUTS[self.roles[buf]]
        rows, cols = self.shapes[buf]
        i0, i1 = idx[-2:]
        per_row = cols // lay.tw
        tile_r = _b("/", i0, lay.th)
        tile_c = _b("/", i1, lay.tw)
        base = _b("*", _b("+", _b("*", tile_r, per_row), tile_c), lay.per_lane)
        return _b("+", self.slot_base(buf, idx), base)

    def stmt_Alloc(self, s: ir.Alloc) -> ir.Stmt:
        body = self.stmt(s.body)
        b = s.buffer
        if b.name in self.frags:
            rows, cols = self.shapes[b.name]
            regs = rows * cols // 32 * self.slots.get(b.name, 1)
            b = dataclasses.replace(b, shape=(ir.const(regs),))
        return ir.Alloc(b, body)

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        # the per-lane element loops made by _Distribute: `for e: F[...] = ...`
        if s.var in self.element_loops:
            return self._element_loop(s, *self.element_loops[s.var])
        return self.generic_stmt(s)

    def _element_loop(self, s: ir.For, buf, e: ir.Expr) -> ir.Stmt:
        lay = LAYOUTS[self.roles[buf]]

        class Sub(Rewriter):
            def expr_Load(inner, x):
                idx = inner.exprs(x.indices)
                if x.buffer == buf and self.logical(buf, idx):
                    return ir.Load(buf, (self._elem(buf, lay, idx, e),), x.dtype)
                return dataclasses.replace(x, indices=idx)

            def stmt_Store(inner, x):
                idx, v = inner.exprs(x.indices), inner.expr(x.value)
                if x.buffer == buf and self.logical(buf, idx):
                    idx = (self._elem(buf, lay, idx, e),)
                return dataclasses.replace(x, indices=idx, value=v)
        return dataclasses.replace(s, body=self.simp.stmt(Sub().stmt(s.body)))

    def _elem(self, buf, lay, idx, e):
        """Register of this lane's element e of the tile holding (idx), logical
        subscripts (a ring slot first, then the tile's two)."""
        rows, cols = self.shapes[buf]
        # idx = 16 ti + r + row(lane, e): the tile is (idx - row) / th; the simplifier
        # folds it as the lane's row is below th
        tile_r = self.simp.expr(_b("/", idx[-2], lay.th))
        tile_c = self.simp.expr(_b("/", idx[-1], lay.tw))
        off = _b("+", _b("*", _b("+", _b("*", tile_r, cols // lay.tw), tile_c), lay.per_lane), e)
        return self.simp.expr(_b("+", self.slot_base(buf, idx), off))

    def expr_Ref(self, x: ir.Ref) -> ir.Expr:
        if self.logical(x.buffer, x.indices):
            lay = LAYOUTS[self.roles[x.buffer]]
            for i, t in zip(x.indices[-2:], (lay.th, lay.tw)):
                if not _multiple(self.simp.linear(i), t):
                    raise LoweringError(f"fragment '{x.buffer}': intrinsic operand at {expr_text(i)}, not "
                                        f"at a tile boundary (a multiple of {t})")
            return ir.Ref(x.buffer, (self.simp.expr(self.reg(x.buffer, x.indices)),), x.dtype)
        return x


class _UnrollRegisters(Rewriter):
    """Unroll every loop whose variable reaches a fragment's register offset
    (registers are named by constants); a runtime extent there is an error."""

    def __init__(self, frags):
        self.frags = frags

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        s = self.generic_stmt(s)
        used = set()
        for x in ir.walk(s.body):
            if isinstance(x, (ir.Load, ir.Store, ir.Ref)) and x.buffer in self.frags:
                used |= ir.free_vars(x.indices[0])
        # (a vectorized loop stays one: its lanes are consecutive registers, and
        # targets emit it unrolled when it gets no vector access)
        if s.var not in used or s.kind in ("unroll", "thread", "vectorize"):
            return s
        if not isinstance(s.extent, ir.Imm):
            raise LoweringError(f"loop '{s.var}' picks fragment registers but runs a number of "
                                f"iterations known only at run time ({s.extent}); split it by "
                                f"a constant")
        return dataclasses.replace(s, kind="unroll")


def _multiple(lin: Linear, t: int) -> bool:
    return lin.const % t == 0 and all(c % t == 0 for c in lin.terms.values())


class _Replace(Rewriter):
    def __init__(self, mapping):
        self.mapping, self.hit = mapping, False

    def expr_Bin(self, e):
        if e in self.mapping:
            self.hit = True
            return self.mapping[e]
        return self.generic_expr(e)
