"""Index width of generated CUDA code: 32-bit where every index fits, 64-bit
for tensors of 2^31 elements or more.

Kernel IR types index arithmetic as int32 (the simplifier computes it with
exact integers). `widen` retypes a flattened kernel for 64-bit indexing:

  * size parameters, thread/block indices, loop variables and `let`s of int32
    values are int64 (`long long`);
  * subscripts (the flattened offsets), loop bounds and both sides of a
    comparison that involves one of those are computed in int64: int32 data
    inside them (a gathered index `A(B(i))`) is converted to int64 first;
  * values the program computes keep their types: an index variable used as a
    value is converted back to int32, which is exactly what it was; int32
    tensors and int32 arithmetic on data stay int32.

Which width a launch needs (`index_bits_for`): 64 when any tensor (input,
output or temporary) has 2^31 elements or more, a launch has 2^31 threads or
more (block index times block size would overflow), or a size parameter does
not fit an int; else 32.
"""
from __future__ import annotations

import dataclasses

from ..lower import ir
from ..lower.rewriter import Rewriter, walk_stmts
from ..lang import dtypes
from ..arch import threads

int64 = dtypes.int64
LIMIT = 2 ** 31  # element or thread counts from here on need 64-bit indices
_ARITH = ("+", "-", "*", "/", "%", "min", "max", "&", "|", "^", "<<", ">>")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def index_bits_for(tensor_shapes, launches, sizes=None) -> tuple[int, str]:
    """(32 or 64, why). `tensor_shapes`: name -> shape (ints); `launches`:
    (kernel name, grid, block) with int extents; `sizes`: size parameter
    values (a kernel takes them as C ints in 32-bit mode)."""
    for name, v in (sizes or {}).items():
        if not -LIMIT <= int(v) < LIMIT:
            return 64, f"size {name} is {v}"
    for name, shape in tensor_shapes.items():
        n = 1
        for d in shape:
            n *= int(d)
        if n >= LIMIT:
            return 64, f"'{name}' has {n} elements"
    for kname, grid, block in launches:
        n = 1
        for d in (*grid, *block):
            n *= int(d)
        if n >= LIMIT:
            return 64, f"kernel {kname} launches {n} threads"
    return 32, "every tensor has fewer than 2^31 elements"


def static_index_bits(prog: ir.Program) -> int | None:
    """64 when sizes fixed at build already need 64-bit indices; None when
    nothing fixed needs them (symbolic sizes decide at call time)."""
    # A tensor whose fixed dimensions alone reach 2^31 elements is empty or needs
    # 64 bits, whatever its symbolic dimensions turn out to be.
    shapes = {b.name: [int(d.value) for d in b.shape if isinstance(d, ir.Imm)]
              for b in prog.buffers}
    launches = [(k.name, [int(g.value) for g in k.grid], [int(b.value) for b in k.block])
                for k in prog.kernels
                if all(isinstance(d, ir.Imm) for d in (*k.grid, *k.block))]
    bits, _ = index_bits_for(shapes, launches, prog.bound_sizes)
    return 64 if bits == 64 else None


def widen(k: ir.Kernel) -> ir.Kernel:
    """The kernel with 64-bit index arithmetic (see the module docstring)."""
    names = set(k.sizes) | threads.INDEX_VARS
    for s in walk_stmts(k.body):
        if isinstance(s, ir.For):
            names.add(s.var)
        elif isinstance(s, ir.Let) and s.value.dtype == ir.int32:
            names.add(s.var)
    return dataclasses.replace(k, body=_Widen(names).stmt(k.body))


def _widenable(dt) -> bool:
    """Integers that convert to int64 exactly."""
    return dt.is_int and dt != dtypes.uint64


class _Widen(Rewriter):
    """`expr` is `value` (an expression keeps its type); `index` computes an
    expression in int64. Subscripts and loop bounds are indices."""

    def __init__(self, names: set[str]):
        self.names = names

    # ------------------------------------------------------------ indices
    def index(self, e: ir.Expr) -> ir.Expr:
        """`e` computed in int64."""
        if isinstance(e, ir.Imm) and e.dtype.is_int:
            return ir.Imm(int(e.value), int64)
        if isinstance(e, ir.Var) and e.name in self.names and e.dtype == ir.int32:
            return ir.Var(e.name, int64)
        if isinstance(e, ir.Bin) and e.op in _ARITH and e.dtype == ir.int32:
            return ir.Bin(e.op, self.index(e.a), self.index(e.b), int64)
        if isinstance(e, ir.Un) and e.op == "-" and e.dtype == ir.int32:
            return ir.Un("-", self.index(e.x), int64)
        if isinstance(e, ir.Select) and e.dtype == ir.int32:
            return ir.Select(self.value(e.cond), self.index(e.a), self.index(e.b), int64)
        v = self.value(e)
        return v if v.dtype == int64 else ir.Cast(int64, v)

    def _indexish(self, e: ir.Expr) -> bool:
        """Whether a comparison operand involves index variables (then both
        sides are compared in 64 bits)."""
        return bool(ir.free_vars(e) & self.names) or (
            isinstance(e, ir.Imm) and e.dtype == ir.int32 and not -LIMIT <= e.value < LIMIT)

    # ------------------------------------------------------------ values
    def value(self, e: ir.Expr) -> ir.Expr:
        """`e` with its own type; index variables in it read as int32."""
        return self.expr(e)

    def expr_Var(self, e: ir.Var) -> ir.Expr:
        if e.name in self.names and e.dtype == ir.int32:
            return ir.Cast(ir.int32, ir.Var(e.name, int64))
        return e

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        return ir.Load(e.buffer, tuple(self.index(i) for i in e.indices), e.dtype)

    def expr_Ref(self, e: ir.Ref) -> ir.Expr:
        return ir.Ref(e.buffer, tuple(self.index(i) for i in e.indices), e.dtype)

    def expr_Bin(self, e: ir.Bin) -> ir.Expr:
        if (e.op in _COMPARE and _widenable(e.a.dtype) and _widenable(e.b.dtype)
                and (self._indexish(e.a) or self._indexish(e.b))):
            return ir.Bin(e.op, self.index(e.a), self.index(e.b), e.dtype)
        return ir.Bin(e.op, self.value(e.a), self.value(e.b), e.dtype)

    # ------------------------------------------------------------ statements
    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        return dataclasses.replace(s, indices=tuple(self.index(i) for i in s.indices),
                                   value=self.value(s.value))

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        vector = s.vector
        if vector is not None:  # its loads are the body's: widened alike
            vector = dataclasses.replace(
                vector, loads=tuple(self.value(x) for x in vector.loads),
                load_bases=tuple(self.index(x) for x in vector.load_bases),
                store_base=(None if vector.store_base is None
                            else self.index(vector.store_base)))
        return dataclasses.replace(s, lo=self.index(s.lo), extent=self.index(s.extent),
                                   body=self.stmt(s.body), vector=vector)

    def stmt_Let(self, s: ir.Let) -> ir.Stmt:
        wide = s.var in self.names and s.value.dtype == ir.int32
        v = self.index(s.value) if wide else self.value(s.value)
        return ir.Let(s.var, v, self.stmt(s.body))

    def stmt_AllReduce(self, s: ir.AllReduce) -> ir.Stmt:
        return s  # its extent is compared with the block's dimension, which stays int32
