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
    dimension), or the first two, plain assignments, cover it between them
    (0:m and m:n in one dimension, all of the others: the first point of a
    recurrence and the recurrence)."""
    return frozenset([t.name for t in op.outputs if _needs_zero(op, t.name)] + list(temps))


def _needs_zero(op, name: str) -> bool:
    t = op.tensor(name)
    writers = [st for st in op.statements if name in st.tensors]
    first = writers[0]
    if first.continues or first.scatter:
        return True
    try:
        if _covers(first, t.shape):
            return False
        # A first point and a recurrence over the rest (`O(t) = X(t) where t in 0:1`, then
        # `... where t in 1:T, ordered t`): two plain statements that tile one dimension.
        if len(writers) > 1 and _tile_one_dimension(writers[0], writers[1], t.shape):
            return False
    except NotSymbolic:
        return True
    return True


def _plain(st) -> bool:
    return not (st.continues or st.scatter or st.reduce_op is not None or st.reduce or
                st.ragged or len(st.tensors) > 1)


def _same(a, b) -> bool:
    return (to_sympy(a) - to_sympy(b)).simplify() == 0


def _covers(st, shape) -> bool:
    """Whether statement `st` writes every element, from 0 to the shape in every dimension."""
    for v, dim in zip(st.spatial, shape):
        r = st.range_of(v)
        if not (isinstance(r.lo, Const) and r.lo.value == 0) or not _same(r.hi, dim):
            return False
    return True


def _tile_one_dimension(a, b, shape) -> bool:
    """Whether plain statements `a` then `b` write every element between them: the
    same full ranges but in one dimension, where `a` covers 0:m and `b` m:dim."""
    if not (_plain(a) and _plain(b)) or len(a.spatial) != len(shape) or \
            len(b.spatial) != len(shape):
        return False
    split = None
    for k, dim in enumerate(shape):
        ra, rb = a.range_of(a.spatial[k]), b.range_of(b.spatial[k])
        full = [isinstance(r.lo, Const) and r.lo.value == 0 and _same(r.hi, dim)
                for r in (ra, rb)]
        if all(full):
            continue
        if split is not None:
            return False
        if not (isinstance(ra.lo, Const) and ra.lo.value == 0 and _same(ra.hi, rb.lo) and
                _same(rb.hi, dim)):
            return False
        split = k
    return True


def declared_shapes(op, lsize) -> dict:
    """Output name -> its declared shape as size expressions (`lsize`
    translates one: the Builder's, with the sizes fixed at compile time), for
    the outputs declared with a shape."""
    return {t.name: tuple(lsize(d) for d in t.declared_shape)
            for t in op.outputs if t.declared_shape is not None}


def signature(op) -> Signature:
    return Signature.from_op(op)
