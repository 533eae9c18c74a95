"""`Stage.scan(t, threads=N)`: an ordered recurrence computed as a parallel
scan over the block's threads (lowered by lower/scan.py to tiles of N
elements, each scanned by the block scan intrinsics of lower/intrinsics.py).

The recurrence must have an associative combine, recognised from the
statement's right-hand side `rhs` as a function of its one read of the
previous point `P = O(..., t - 1, ...)` (every other subscript the written
index itself), with `f`, `a`, `b` not reading `O`:

    P + f,  f + P                    '+'       (a prefix sum)
    P * f,  f * P                    '*'
    max(P, f), min(P, f) (or fmax/fmin on floats; either order)   'max', 'min'
    a * P + b  (P * a, and + b first)          'linear': (a, b) o (a', b') = (a a', a' b + b')

and the tensor's type the combine's type (no rounding between steps a scan
would skip): int32, uint32, int64, uint64, float32 or float64. Each tile
combines the carry (the value at the point before it: first `O` at the
range's start minus one, read from memory) with the tile's inclusive scan.
The float order is a tree's, not the loop's: sums may differ from
`tcomp.evaluate`'s by rounding (integer sums, max and min are exact).

Before:  for b: for t in 1:T: O[b, t] = O[b, t - 1] + X[b, t]
After:   scan(t, threads=256): for b: [t_i = threadIdx.x] carry = O[b, 0]
             for t_o in 0:ceil((T - 1) / 256):
                 v = X[b, 1 + t_o * 256 + t_i] (or 0 past the end)
                 scan_add(v, carry, 256)       (v = carry + X[..up to t]; carry += tile)
                 O[b, 1 + t_o * 256 + t_i] = v
The stage's loops become: t_i (bound to threadIdx.x), its independent axes
(bind them to blocks; other thread axes are refused: the scan's block is its
N threads along x), t_o innermost.

With lookback=True (a long axis: a few rows, or one), t_o is bound to
blockIdx.x, one tile a block, and `items` K > 1 gives each thread K
consecutive elements (t = lo + t_o * N * K + t_i * K + t_k, the unrolled
leaf t_k innermost; the leaves t_i, t_o, the independent axes, t_k); the tiles' carries come from a decoupled look-back
across blocks through the global buffers of `Lookback` (below).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arch.hierarchy import THREAD_INDEX
from ..arch.threads import is_thread
from ..errors import ScheduleError
from ..lang.ast import Binary, Call, Expr, Index, Read, walk
from ..lang.symbolic import NotSymbolic, index_symbol, to_sympy
from . import directives as D
from .stage import SplitRel

TYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")


@dataclass(frozen=True)
class ScanForm:
    op: str                 # '+', '*', 'max', 'min' or 'linear'
    element: Expr           # f, or b of the linear recurrence
    coef: Expr | None       # a of the linear recurrence
    prior: Read             # the read of the previous point


def scan_form(d, axis: str, dtype) -> ScanForm | str:
    """The statement's recurrence as a scan, or why it is not one."""
    if d.ordered != (axis,):
        return f"it is ordered over {', '.join(d.ordered)}, and a scan runs over one axis"
    if d.reduce or d.reduce_op is not None:
        return "it is a reduction (a scan computes a plain '=' recurrence)"
    if set(d.independent) != set(d.spatial) - {axis}:
        return "its reads of the tensor use other values of its other indices"
    if dtype.name not in TYPES:
        return (f"'{d.tensor}' is {dtype} (a scan keeps its partial results unrounded: "
                f"declare it one of {', '.join(TYPES)})")
    k = d.spatial.index(axis)
    reads = [x for e in [d.rhs, *d.lets.values()] for x in walk(e)
             if isinstance(x, Read) and x.tensor == d.tensor]
    if len(reads) != 1 or not _previous(reads[0], d.spatial, k):
        return (f"it does not read '{d.tensor}' exactly once, at the previous point "
                f"('{axis} - 1') and its own other indices")
    prior = reads[0]
    e = d.rhs

    def free(x):
        return prior not in list(walk(x))

    def is_p(x):
        return x == prior

    form = None
    if isinstance(e, Binary) and e.op in ("+", "*"):
        if is_p(e.a) and free(e.b):
            form = ScanForm(e.op, e.b, None, prior)
        elif is_p(e.b) and free(e.a):
            form = ScanForm(e.op, e.a, None, prior)
        elif e.op == "+":
            for prod, add in ((e.a, e.b), (e.b, e.a)):
                if isinstance(prod, Binary) and prod.op == "*" and free(add) and \
                        prod.dtype == e.dtype:
                    if is_p(prod.b) and free(prod.a):
                        form = ScanForm("linear", add, prod.a, prior)
                    elif is_p(prod.a) and free(prod.b):
                        form = ScanForm("linear", add, prod.b, prior)
                if form:
                    break
    elif isinstance(e, Call) and len(e.args) == 2 and (
            e.fn in ("max", "min") or (e.fn in ("fmax", "fmin") and e.dtype.is_float)):
        a, b = e.args
        other = b if is_p(a) else a if is_p(b) else None
        if other is not None and free(other):
            form = ScanForm(e.fn.lstrip("f") if e.fn.startswith("fm") else e.fn, other, None,
                            prior)
    if form is None:
        return ("its right-hand side is not an associative combine of the previous point "
                "(P + f, P * f, max(P, f), min(P, f) or a * P + b, with P the read of "
                f"'{d.tensor}' at '{axis} - 1')")
    if e.dtype != dtype or prior.dtype != dtype:
        return (f"it computes in {e.dtype} but '{d.tensor}' is {dtype} (each step would "
                f"round, which a scan skips)")
    return form


def _previous(r: Read, spatial, k: int) -> bool:
    for j, (a, v) in enumerate(zip(r.args, spatial)):
        if j != k:
            if not (isinstance(a, Index) and a.name == v):
                return False
            continue
        try:
            if to_sympy(a) - index_symbol(v) != -1:
                return False
        except NotSymbolic:
            return False
    return True


@dataclass(frozen=True)
class Lookback:
    """Stage.scan(..., lookback=True): the tiles of the ordered axis over blockIdx.x,
    one tile (threads * count elements) a block, chained across blocks by a
    decoupled look-back (lower/scan_lookback.py). `items`: the leaf of a thread's
    `count` consecutive elements (None when count is 1). The look-back's global
    buffer `status`, a temporary of the program (zero-filled before each call, so
    every tile starts 'not ready'), holds `words` uint64 words a tile of every row
    (slot = row * tiles + tile, its words from slot * words): each word is
    `flag << 32 | a 32-bit piece` (flag 0 not ready, 1 the tile's aggregate
    published, 2 its inclusive prefix, the state after the tile, published), the
    pieces the value's 32-bit halves, low first: one word for a 32-bit combine,
    two for a 64-bit one; the linear recurrence's pair (a, b) twice that, a then b
    (a prefix: (0, h)). Every word of a publication carries its flag, and each flag
    value is written once a word, so a reader that finds one flag in all of a
    slot's words has one publication's value; one round of independent 64-bit
    loads reads a predecessor (separate flag and value buffers need the value's
    load ordered after the flag's, one more round trip to L2 a window: H200, a
    2^28 cumsum, 1.19 -> 0.87 ms at 256 threads x 16 items)."""
    items: str | None
    count: int
    status: str
    words: int


def status_words(dtype, linear: bool) -> int:
    """uint64 words a tile's status takes (Lookback)."""
    return (2 if linear else 1) * (dtype.bits // 32)


def _temp_name(sched, base: str) -> str:
    name, i = base, 1
    while name in sched.tensors:
        name, i = f"{base}{i}", i + 1
    return name


def _lookback_buffers(stage, d, axis: str, tile: int, dtype, linear: bool) -> dict:
    """Register the look-back's status buffer (Lookback's docstring) in the
    schedule's tensors, 1-d of (rows * tiles) slots of `words` uint64 words: rows
    the product of the independent indices' extents, tiles ceil(extent of `axis`
    / tile)."""
    from ..lang import dtypes
    from ..lang.ast import Binary, Const
    sched = stage._sched

    def extent(v):
        lo, hi = d.ranges[v]
        return hi if isinstance(lo, Const) and lo.value == 0 else \
            Binary("-", hi, lo, dtypes.int32)

    slots = Binary("/", Binary("+", extent(axis), Const(tile - 1, dtypes.int32), dtypes.int32),
                   Const(tile, dtypes.int32), dtypes.int32)
    for v in d.spatial:
        if v != axis:
            slots = Binary("*", extent(v), slots, dtypes.int32)
    base = stage.name.replace(".", "_")
    words = status_words(dtype, linear)
    name = _temp_name(sched, f"{base}_status")
    sched.tensors[name] = (dtypes.uint64, (Binary("*", slots, Const(words, dtypes.int32),
                                                   dtypes.int32),), "global")
    return {"status": name, "words": words}


def scan(stage, ax, threads, items=1, lookback=False) -> tuple:
    """Stage.scan's body (primitives.py): validate, record, transform."""
    from .args import as_int
    p = "scan"
    stage._not_inline(p)
    name = stage._leaf(ax, p)
    s = stage._s
    d = s.definition
    if not d.ordered:
        raise ScheduleError(f"{p}: stage '{stage.name}' is not ordered; a scan computes an "
                            f"ordered recurrence ('where ordered {name}')")
    if name not in d.ordered:
        raise ScheduleError(f"{p}: axis '{name}' is not the ordered axis of stage "
                            f"'{stage.name}' ({', '.join(d.ordered)})")
    n = as_int(threads)
    if n is None or n < 32 or n > 1024 or n % 32:
        raise ScheduleError(f"{p}: threads must be a multiple of 32 from 32 to 1024 (whole "
                            f"warps of one block), got {threads!r}")
    k = as_int(items)
    if k is None or k < 1 or k > 32:
        raise ScheduleError(f"{p}: items must be an integer from 1 to 32 (elements a thread "
                            f"scans in its registers), got {items!r}")
    if not isinstance(lookback, bool):
        raise ScheduleError(f"{p}: lookback must be True or False, got {lookback!r}")
    if k > 1 and not lookback:
        raise ScheduleError(f"{p}: items={k} needs lookback=True (the single-block scan "
                            f"keeps one element a thread; the multi-block scan with look-back "
                            f"keeps 'items' a thread)")
    form = scan_form(d, name, stage._sched.tensors[d.tensor][0])
    if isinstance(form, str):
        raise ScheduleError(f"{p}: stage '{stage.name}' cannot be computed as a scan: {form}; "
                            f"leave it an ordered loop")
    if bound := [a for a, tag in s.bind.items() if is_thread(tag)]:
        raise ScheduleError(f"{p}: stage '{stage.name}' binds '{bound[0]}' to "
                            f"{s.bind[bound[0]]}; a scan's block is its {n} threads along x: "
                            f"bind the independent axes to blocks")
    if lookback and (bound := [a for a, tag in s.bind.items() if tag == "blockIdx.x"]):
        raise ScheduleError(f"{p}: stage '{stage.name}' binds '{bound[0]}' to blockIdx.x; "
                            f"a scan with lookback puts its tiles on blockIdx.x: bind the "
                            f"independent axes to blockIdx.y or blockIdx.z")
    stage._sched.directives.append(D.Scan(stage.name, name, n, k, lookback))
    outer, inner = s.fresh(f"{name}_o"), s.fresh(f"{name}_i")
    s.leaves.remove(name)
    s.kinds[outer] = s.kinds[inner] = "spatial"
    if k == 1:
        s.relations.append(SplitRel(name, outer, inner, n, None))
        s.leaves = [inner] + s.leaves + [outer]
        item = None
    else:
        rest = s.fresh(f"{name}_r")
        s.kinds[rest] = "spatial"
        s.relations.append(SplitRel(name, outer, rest, n * k, None))
        item = s.fresh(f"{name}_k")
        s.kinds[item] = "spatial"
        s.relations.append(SplitRel(rest, inner, item, k, None))
        s.leaves = [inner, outer] + s.leaves + [item]  # (t_o on blocks: outside)
        s.unroll.add(item)
    s.bind[inner] = THREAD_INDEX  # (the block scan's threads: tid of a 1-D block)
    s.scan = (outer, inner, n)
    if lookback:
        if k == 1:  # the tile loop on blockIdx.x, outside the serial independent loops
            s.leaves.remove(outer)
            s.leaves.insert(1, outer)
        s.bind[outer] = "blockIdx.x"
        bufs = _lookback_buffers(stage, d, name, n * k, stage._sched.tensors[d.tensor][0],
                                 form.op == "linear")
        s.lookback = Lookback(item, k, **bufs)
    kind = "spatial"
    from .stage import Axis
    return Axis(stage.name, outer, kind), Axis(stage.name, inner, kind)
