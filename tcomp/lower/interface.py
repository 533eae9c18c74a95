"""What a target needs of a program besides its kernels, computed once here
so that targets never call back into lowering: where each size parameter
comes from, which outputs and temporaries must start zeroed, the declared
shapes of typed outputs, and the inputs' contract (the signature)."""
from __future__ import annotations

from ..lang.ast import Const, Size
from ..lang.signature import Signature
from ..lang.symbolic import NotSymbolic, to_sympy


def size_sources(op) -> dict[str, tuple[int, int]]:
    """Size variable -> (input position, dimension) of the first input whose
    shape names it."""
    sources = {}
    for i, t in enumerate(op.inputs):
        for d, dim in enumerate(t.shape):
            if isinstance(dim, Size):
                sources.setdefault(dim.name, (i, d))
    return sources


def zero_fill(op, temps) -> frozenset[str]:
    """Outputs that must start zero-filled, and every temporary (`temps`).
    Outputs start zero-filled; the fill is skipped when the first statement
    writing the tensor covers all of it (from 0 to its shape in every
    dimension)."""
    return frozenset([t.name for t in op.outputs if _needs_zero(op, t.name)] + list(temps))


def _needs_zero(op, name: str) -> bool:
    t = op.tensor(name)
    first = next(st for st in op.statements if name in st.tensors)
    if first.continues or first.scatter:
        return True
    try:
        for v, dim in zip(first.spatial, t.shape):
            r = first.range_of(v)
            if not (isinstance(r.lo, Const) and r.lo.value == 0):
                return True
            if (to_sympy(r.hi) - to_sympy(dim)).simplify() != 0:
                return True
    except NotSymbolic:
        return True
    return False


def declared_shapes(op, lsize) -> dict:
    """Output name -> its declared shape as size expressions (`lsize`
    translates one: the Builder's, with the sizes fixed at compile time), for
    the outputs declared with a shape."""
    return {t.name: tuple(lsize(d) for d in t.declared_shape)
            for t in op.outputs if t.declared_shape is not None}


def signature(op) -> Signature:
    return Signature.from_op(op)
