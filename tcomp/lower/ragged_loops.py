"""The loops of a ragged range (lang/check_ragged.py) in a stage's nest.

    O(b, d) +=! T(J(j), d) where j in Off(b):Off(b + 1)
    ->  for b: for d: acc = 0; for j in Off[b]:Off[b] + max(Off[b + 1] - Off[b], 0): acc += ...

The domain gives a ragged index placeholder bounds (`<j>.lo`, `<j>.extent`:
Vars no kernel has), so that splits, guards and the index reconstruction
treat it as any loop; once the stage's indices are known, the placeholders
become the bounds read at the point (`bounds`). Legal only where each loop
derived from the ragged index runs inside every loop derived from an index its
bounds use, and in one thread (bound to no thread axis: its extent differs
from thread to thread). The bounds are read, not checked: a bound that takes
the index outside a tensor it reads is an out-of-bounds read (the sim reports
it; on CUDA it is undefined, as every read out of bounds).
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lang.ast import Index, walk
from ..schedule.stage import SplitRel
from . import ir
from .translate import cast


def placeholder(var: str) -> tuple[ir.Var, ir.Var]:
    return ir.Var(f"{var}.lo"), ir.Var(f"{var}.extent")


def _derived(st, roots: set[str]) -> set[str]:
    out = set(roots)
    for r in st.relations:
        if isinstance(r, SplitRel):
            if r.parent in out:
                out |= {r.outer, r.inner}
        elif r.outer in out or r.inner in out:
            out.add(r.fused)
    return out


def check(stage: str, st) -> None:
    """The ragged loops of stage state `st` run in one thread, inside their bounds' loops."""
    d = st.definition
    if st.attach != ("root",):
        raise LoweringError(f"stage '{stage}' has a ragged range and must be computed at root")
    leaves = st.leaves
    for v in d.ragged:
        mine = _derived(st, {v})
        lo, hi = d.ranges[v]
        uses = {x.name for e in (lo, hi) for x in walk(e) if isinstance(x, Index)}
        theirs = _derived(st, uses)  # (spatial: fuse keeps them apart from reduction loops)
        for leaf in mine & set(leaves):
            if leaf in st.bind:
                raise LoweringError(f"stage '{stage}': loop '{leaf}' of the ragged index '{v}' "
                                    f"is bound to {st.bind[leaf]}, but its extent is read at each "
                                    f"point; keep it serial and bind the spatial loops")
            outer = [x for x in theirs & set(leaves) if leaves.index(x) > leaves.index(leaf)]
            if outer:
                raise LoweringError(f"stage '{stage}': loop '{leaf}' of the ragged index '{v}' "
                                    f"runs outside loop '{outer[0]}', whose index its bounds "
                                    f"read; reorder it inside")


def bounds(d, tr, guard) -> dict[str, ir.Expr]:
    """{placeholder name: its value} at the stage's indices (Translator `tr`);
    read only where the spatial `guard` holds (the tail of a split runs no
    iteration and reads no bound beyond the tensor)."""
    out = {}
    for v in d.ragged:
        lo_e, hi_e = d.ranges[v]
        lo, hi = cast(tr(lo_e), ir.int32), cast(tr(hi_e), ir.int32)
        p_lo, p_ext = placeholder(v)
        ext = ir.Bin("max", ir.Bin("-", hi, lo, ir.int32), ir.const(0), ir.int32)
        if guard is not None:
            lo, ext = (ir.Select(guard, x, ir.const(0), ir.int32) for x in (lo, ext))
        out[p_lo.name], out[p_ext.name] = lo, ext
    return out
