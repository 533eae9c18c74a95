"""The store of a scatter's stage (lang/check_scatter.py), at the innermost
loop of its nest (stage_nest.py).

Each point writes `O(subscripts) op= value`. Two points collide only where
they differ in an index that is not a whole subscript (a *gathered* index:
`i` in `O(I(i), d)`); points that differ in `d` write other elements. So:

  * no loop derived from a gathered index is bound to threads or blocks: each
    element is updated by one thread, in order: a plain read-modify-write;
  * otherwise `+=`, `max=`, `min=` are atomic updates (`Store.atomic`, printed
    `@atomic`): CUDA's atomicAdd/atomicMax/atomicMin, a compare-and-swap loop
    for float max/min (target_cuda/atomics.py); float sums then depend on the
    order the threads arrive in. `*=` has no atomic: a LoweringError. `=` stays
    a plain store: which of several points with one subscript wins is
    undefined on CUDA, and the sim reports their different values as a race.

Every subscript that reads a tensor is range-checked first (`IndexCheck`):
on the sim an out-of-range value is an error naming the tensor, the subscript
and the value; on CUDA the kernel traps.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lang.ast import Index, Read, walk
from ..lang.printer import expr_to_text
from ..schedule.stage import SplitRel
from . import ir
from .translate import cast, combine

# CUDA's atomics, by operator: the element types each updates (sm_90 and above:
# float16/bfloat16 atomicAdd; float max/min by compare-and-swap: atomics.py).
ATOMIC_TYPES = {
    "+": ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64"),
    "max": ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64"),
    "min": ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64"),
}


def gathered_leaves(st) -> set[str]:
    """The leaf loops derived from the gathered indices of scatter stage `st`."""
    d = st.definition
    bare = {e.name for e in d.scatter if isinstance(e, Index)}
    derived = set(d.spatial) - bare
    for r in st.relations:
        if isinstance(r, SplitRel):
            if r.parent in derived:
                derived |= {r.outer, r.inner}
        elif r.outer in derived or r.inner in derived:
            derived.add(r.fused)
    return derived & set(st.leaves)


def parallel_leaf(st) -> str | None:
    """A gathered leaf bound to threads or blocks (then updates need atomics)."""
    return next((leaf for leaf in st.leaves if leaf in gathered_leaves(st) and leaf in st.bind),
                None)


def scatter_store(n) -> ir.Stmt:
    """The innermost statement of StageNest `n` of a scatter stage."""
    d, st, b = n.d, n.st, n.b
    shape = [b.lsize(x) for x in b.sched.tensors[d.tensor][1]]
    subs = tuple(cast(n.tr(e), ir.int32) for e in d.scatter)
    lhs = f"{d.tensor}({', '.join(expr_to_text(e) for e in d.scatter)})"
    checks = [ir.IndexCheck(s, ext, f"scatter into '{lhs}': subscript {expr_to_text(e)} "
                                    f"(dimension {k} of '{d.tensor}')")
              for k, (e, s, ext) in enumerate(zip(d.scatter, subs, shape))
              if any(isinstance(x, Read) for x in walk(e))]
    out = n.out_dtype
    value = n.value()
    leaf = parallel_leaf(st)
    if d.reduce_op is None:
        store = ir.Store(d.tensor, subs, cast(value, out), loc=n.loc)
    elif leaf is None:  # (the value rounded to the tensor's type first, as an atomic's is)
        current = cast(ir.Load(d.tensor, subs, out), n.acc_dt)
        value = cast(cast(value, out), n.acc_dt)
        store = ir.Store(d.tensor, subs, cast(combine(d.reduce_op, current, value, n.acc_dt), out),
                         loc=n.loc)
    else:
        ok = ATOMIC_TYPES.get(d.reduce_op, ())
        if out.name not in ok:
            what = (f"'{d.reduce_op}=' has no atomic update" if not ok else
                    f"no atomic '{d.reduce_op}=' updates {out.name}")
            raise LoweringError(
                f"stage '{n.stage}': its loop '{leaf}' over a gathered index is bound to "
                f"{st.bind[leaf]}, so several threads may update one element of '{d.tensor}' "
                f"and the update must be atomic, but {what} (atomics update "
                f"{', '.join(ok) if ok else 'with +=, max=, min= only'}); keep the gathered "
                f"loops serial (bind the others), or write into a tensor of a type that has one")
        store = ir.Store(d.tensor, subs, cast(value, out), loc=n.loc, atomic=d.reduce_op)
    return n.guarded(n.allg, ir.seq(*checks, store))
