"""Pass: storage flattening — multi-dimensional subscripts become one
offset per buffer: row-major, then the buffer's layout (`Buffer.layout`).

Pre: Load/Store/Ref carry one subscript per buffer dimension.
Post: Load/Store/Ref carry a single subscript. Both targets run the IR after this
pass (the sim runs the IR before it too, on an error, to name the dimension
at fault).

A swizzled buffer (ir.Swizzle) is laid out here and nowhere else, so every
access (loads, stores, vector accesses, cp.async destinations, ldmatrix row
addresses) goes through the same mapping. Element (row r, column j) of a
row of W elements, e = 16 / itemsize elements per chunk:

    r*W + ((j / e) ^ x) * e + j % e,     x = (r >> log2 g) & (n - 1)

written so that what an access's column already says stays visible: with
j = a*h + l, 0 <= l < a for a power of two a <= e (the enclosing loops'
ranges decide), the offset is r*W + (h ^ (x << log2(e/a))) * a + l. A
vectorized loop's lane (l) thus stays a linear term beside a multiple of
the vector (the `vectorize` pass still finds its vectors), and an aligned
reference (a = e, l = 0) is one XOR per address.
"""
from __future__ import annotations

import dataclasses

from . import ir
from .rewriter import Rewriter, walk_stmts
from .simplify import Linear, kernel_simplifier

I32 = ir.int32


def _flat(indices, shape) -> ir.Expr:
    out = None
    for i, n in zip(indices, shape):
        out = i if out is None else ir.Bin("+", ir.Bin("*", out, n, ir.int32), i, ir.int32)
    return out if out is not None else ir.const(0)


def _b(op, a, b):
    return ir.Bin(op, a, b if isinstance(b, ir.Expr) else ir.const(b), I32)


class _Flatten(Rewriter):
    def __init__(self, buffers, simp, scoped):
        self.buffers, self.simp = buffers, simp
        # knows the enclosing loops' and lets' ranges (where a swizzled column's
        # in-chunk part is read from); `simp` keeps row-major offsets as they were
        self.scoped = scoped

    def expr(self, e: ir.Expr) -> ir.Expr:
        if not (ir.loaded(e) or ir.has_ref(e)):
            return e  # nothing to flatten below (kept on the node: ir.loaded, ir.has_ref)
        return Rewriter.expr(self, e)

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        saved = self.scoped.enter_loop(s.var, s.lo, s.extent)
        out = self.generic_stmt(s)
        self.scoped.restore(s.var, saved)
        return out

    def stmt_Let(self, s: ir.Let) -> ir.Stmt:
        saved = self.scoped.enter_let(s.var, s.value)
        out = self.generic_stmt(s)
        self.scoped.restore(s.var, saved)
        return out

    def flat(self, name, indices) -> ir.Expr:
        b = self.buffers[name]
        shape = b.shape
        if b.layout is not None:
            return self.swizzled(b, indices)
        if all(isinstance(n, ir.Imm) for n in shape):
            return self.simp._merge_divmod(self.rows(indices, shape)).to_expr()
        return self.simp.expr(_flat(indices, shape))

    def rows(self, indices, shape) -> Linear:
        """The row-major offset of constant-shaped `shape` (the already
        canonical linear forms of the subscripts combined directly)."""
        strides, stride = [], 1
        for n in reversed(shape):
            strides.append(stride)
            stride *= int(n.value)
        lin = Linear()
        for i, st in zip(indices, reversed(strides)):  # outer dimension first
            lin = lin.add(self.simp.linear(i).scale(st))
        return lin

    def swizzled(self, b: ir.Buffer, indices) -> ir.Expr:
        width = int(b.shape[-1].value)
        size = b.dtype.numpy.itemsize
        e = ir.CHUNK_BYTES // size
        n, g = b.layout.chunks(width * size)
        row = self.rows(indices[:-1], b.shape[:-1]).to_expr()
        x = _b("&", _b(">>", row, g.bit_length() - 1), n - 1)
        col = self.simp.linear(indices[-1])
        a = e
        while True:  # the largest power of two a <= e with col = a*h + l, 0 <= l < a
            high = Linear({t: c // a for t, c in col.terms.items() if c % a == 0},
                          col.const // a)
            low = Linear({t: c for t, c in col.terms.items() if c % a}, col.const % a)
            lo, hi = self.scoped.bound(low)
            if a == 1 or (lo is not None and hi is not None and 0 <= lo and hi < a):
                break
            a //= 2
        # A constant part of the chunk that no other term of it reaches (the k16
        # step of an ldmatrix) is XORed into the whole offset last: the offsets
        # of such accesses then share everything but an immediate operand.
        field = n * (e // a)  # the XOR's bits, in units of a
        cx = high.const % field if low.is_const() and not low.const else 0
        if cx and cx & self.bits(Linear({t: c for t, c in high.terms.items() if c % field})):
            cx = 0
        high = Linear(high.terms, high.const - cx)
        chunk = _b("^", high.to_expr(), _b("<<", x, (e // a).bit_length() - 1))
        out = self.rows(indices[:-1], b.shape[:-1]).scale(width)
        out = out.add(self.simp.linear(self.scoped.expr(chunk)).scale(a)).add(low)
        out = self.simp._merge_divmod(out).to_expr()
        return _b("^", out, cx * a) if cx else out

    def bits(self, lin: Linear) -> int:
        """A mask of the bits a non-negative linear form without constant may
        set (-1: unknown): the union of its terms' bits when they cannot carry
        into each other (power-of-two coefficients over disjoint bit ranges),
        else every bit below its upper bound."""
        masks = []
        for t, c in lin.terms.items():
            lo, hi = self.scoped.atom_bound(t) or (None, None)
            if lo is None or hi is None or lo < 0 or c <= 0:
                return -1
            masks.append(((1 << hi.bit_length()) - 1) * c if c & (c - 1) == 0 else None)
        if None not in masks and all(m1 & m2 == 0 for i, m1 in enumerate(masks)
                                     for m2 in masks[i + 1:]):
            out = 0
            for m in masks:
                out |= m
            return out
        lo, hi = self.scoped.bound(lin)
        return -1 if lo is None or hi is None or lo < 0 else (1 << hi.bit_length()) - 1

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        idx = self.exprs(e.indices)
        return ir.Load(e.buffer, (self.flat(e.buffer, idx),), e.dtype)

    def expr_Ref(self, e: ir.Ref) -> ir.Expr:
        idx = self.exprs(e.indices)
        return ir.Ref(e.buffer, (self.flat(e.buffer, idx),), e.dtype)

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        idx, v = self.exprs(s.indices), self.expr(s.value)
        return ir.Store(s.buffer, (self.flat(s.buffer, idx),), v, loc=s.loc, atomic=s.atomic)


def run(k: ir.Kernel, program: ir.Program) -> ir.Kernel:
    buffers = {b.name: b for b in program.buffers}
    for x in walk_stmts(k.body):
        if isinstance(x, ir.Alloc):
            buffers[x.buffer.name] = x.buffer
    # One simplifier for the kernel: its cache of linear forms is shared by all indices.
    return dataclasses.replace(k, body=_Flatten(buffers, kernel_simplifier(k),
                                                kernel_simplifier(k)).stmt(k.body))
