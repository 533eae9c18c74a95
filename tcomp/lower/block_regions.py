"""A global stage computed at a consumer's loop inside the consumer's block loops
computes its region once in each block: the regions of two blocks must not share
an element, or the blocks write it (and a reduction reads it back) in no fixed
order, a race between blocks.

The region is inferred (attach.region) from the consumer's indices over its loop
variables; a loop bound to blockIdx.T that was fused from several loops (`j_o`,
`k`, `j_i` into one) reaches the indices only as `f / 2 / K` and `f % K`, where no
dependence can be read off. Here the region is inferred once more with every
block loop at or outside the attach point taken apart into the loops it was fused
from (their own variables, `f.k`), and each of them must move the region:

- a loop the region does not read at all makes every block along it compute
  the same elements (issue 22's long fuzz run, seed 4 pair 32738: a block loop;
  seed 4 pair 11495: `k` of a fused block loop over `j_o, k, j_i` whose region
  `O(j)` reads `j_o` and `j_i` only);
- a loop read by one dimension of the region, `a * v + ...` with a constant
  width `w > |a|` there, gives neighbouring blocks overlapping regions (`O(j)`
  and `O(j + 1)` read at a block loop `j`: both blocks compute `O(j + 1)`). That
  is a race only where the stage accumulates in memory (a reduction with a
  spatial loop inside its reduction loops: one block zeroes what the other is
  summing); a plain store of the same value by both blocks is a halo computed
  twice, legal and right (tests/lower/test_sim_batches.py).

Both are refused naming the stage, the loops and the remedy."""
from __future__ import annotations

from ..arch import threads
from ..errors import ScheduleError
from ..schedule.stage import FuseRel, SplitRel
from . import ir
from .construct import add, mul
from .ir_walk import free_vars
from .printer import expr as show
from .simplify import Simplifier, simplify_expr


def check_block_regions(b, cname, cst, level, info, attached, domains, views) -> None:
    """Refuse a global stage among `attached` (computed at leaf `level` of `cname`)
    whose region is not one-to-one in the blocks of the consumer's block loops.
    `domains`: their regions as inferred; `views`: the kernel's buffer views."""
    from .attach import _through_views, region

    glob = [p for p in attached if b.sched.states[p].scope == "global"]
    blocks = [(j, leaf) for j, leaf in enumerate(cst.leaves)
              if threads.is_block(cst.bind.get(leaf))]
    if not glob or not blocks:
        return
    atoms, index = _taken_apart(cst, level, info, [leaf for j, leaf in blocks if j <= level])
    alt = None
    if any(len(parts) > 1 for parts in atoms.values()):
        alt_info = type(info)(info.loopvar, info.ext, info.domain, index, info.ctx, ())
        alt = {}
        for p in reversed(attached):
            alt[p] = region(b, p, cname, cst, level, alt_info,
                            [(q, alt[q]) for q in attached if q in alt])
    for p in glob:
        pd = b.sched.states[p].definition
        dom = _through_views(domains[p] if alt is None else alt[p], views, pd.tensor, b.sched)
        read = []
        for j, leaf in blocks:
            for var, name in atoms.get(leaf, [(info.loopvar[leaf], leaf)]):
                if _is_one(info.ext[name]):
                    continue
                _check_moves(p, cname, cst, leaf, info.loopvar[leaf], var, name,
                             atoms.get(leaf, []), dom, b.sched.states[p])
                read.append((var, cst.bind[leaf], info.ext[name]))
        _check_jointly(p, cname, dom, read, b.sched.states[p])


def check_thread_regions(b, cname, cst, level, info, attached, domains, views) -> None:
    """Refuse a global stage among `attached` that accumulates in memory and whose
    region moves with the consumer's thread-bound loops (at or outside the attach
    point) without being provably one-to-one in its threads. Two threads share no
    element where, jointly over the thread variables the region reads, either each
    has a dimension of its own, `a * v + c` at most |a| wide with no other thread
    variable in it, or one dimension reads them all as a mixed radix (sorted by
    |a|: |a_1| >= width, |a_k+1| >= width + sum |a_j| (extent_j - 1)). Else each
    thread would sum into elements another thread zeroes or reads (fuzz seed 11
    pair 93645: `O` at a loop bound to threadIdx.y, read at O(i, i) and a gathered
    O(c, X(c) % N); review: O(2 i + j) over threadIdx.y and .x). A region that does
    not move with a thread loop is loops.one_thread's (computed by thread 0)."""
    from .attach import _through_views
    bound = [(info.loopvar[leaf], cst.bind[leaf], info.ext[leaf])
             for leaf in cst.leaves[:level + 1]
             if threads.is_thread(cst.bind.get(leaf)) and not _is_one(info.ext[leaf])]
    if not bound:
        return
    for p in attached:
        pst = b.sched.states[p]
        if pst.scope != "global" or not _accumulates_in_memory(pst):
            continue
        dom = _through_views(domains[p], views, pst.definition.tensor, b.sched)
        _refuse_overlap(p, cname, dom, bound, pst, "thread")


def _check_jointly(p, cname, dom, read, pst) -> None:
    """The block loops together (each alone moves the region: _check_moves): an
    accumulating stage's regions of two blocks must share no element (review:
    O(2 i + j) over blockIdx.y and blockIdx.x passed each loop's check and raced)."""
    if len(read) >= 2 and _accumulates_in_memory(pst):
        _refuse_overlap(p, cname, dom, read, pst, "block", least=2)


def _refuse_overlap(p, cname, dom, loops, pst, what, least=1) -> None:
    """Refuse stage `p` when its region `dom` reads at least `least` of the bound
    `loops` ((variable, tag, extent)) and is not provably apart between two
    different values of them (_apart): `what`s would race."""
    used = {v: free_vars(base) | free_vars(width) for v, (base, width) in dom.items()}
    read = [r for r in loops if any(r[0] in fv for fv in used.values())]
    if len(read) < least or _apart(dom, used, read):
        return
    names = ", ".join(f"'{var}' ({tag})" for var, tag, _ in read)
    raise ScheduleError(
        f"stage '{p}' (global scope) accumulates in '{pst.definition.tensor}' (a spatial loop "
        f"inside its reduction loops) at a loop of '{cname}' inside its {what} loop(s) "
        f"{names}, and the region it computes there, "
        + ", ".join(f"{v}: {show(dom[v][0])} + [0, {show(dom[v][1])})" for v in dom)
        + f", is not provably apart from one {what} to the next: {what}s would sum into the "
        f"same elements in no fixed order (a race between {what}s). Compute '{p}' at root "
        f"or outside those loops, give it shared or local scope, or reorder its reduction "
        f"loops innermost")


def _apart(dom, used, read) -> bool:
    """Whether the regions of two different values of the `read` variables
    share no element (check_thread_regions' rule)."""
    names = {var for var, _, _ in read}
    own = all(any(_disjoint_along(dom[v], var) and not (used[v] & (names - {var}))
                  for v in dom) for var, _, _ in read)
    if own:
        return True
    for v, (base, width) in dom.items():
        if not isinstance(width, ir.Imm) or used[v] & names & free_vars(width):
            continue
        lin = Simplifier().linear(base)
        coefs = []
        for var, _, ext in read:
            c = lin.terms.get(ir.Var(var))
            if c is None or not isinstance(ext, ir.Imm) or any(
                    var in free_vars(a) for a in lin.terms if a != ir.Var(var)):
                break
            coefs.append((abs(c), int(ext.value)))
        else:
            span, ok = int(width.value), True
            for c, ext in sorted(coefs):
                ok = ok and c >= span
                span += c * (ext - 1)
            if ok:
                return True
    return False


def _disjoint_along(dim, var) -> bool:
    """Whether one dimension (base, width) of a region is `a * var + c` with a
    constant width of at most |a|: the regions of two values of var are apart."""
    base, width = dim
    if var in free_vars(width) or not isinstance(width, ir.Imm):
        return False
    lin = Simplifier().linear(base)
    coef = lin.terms.get(ir.Var(var))
    if coef is None or any(var in free_vars(a) for a in lin.terms if a != ir.Var(var)):
        return False
    return abs(coef) >= int(width.value)


def _taken_apart(cst, level, info, leaves):
    """{block leaf: [(variable, loop name)] of the loops it was fused from} (a leaf
    fused from nothing: itself) and the consumer's indices with those variables."""
    val = {leaf: ir.Var(info.loopvar[leaf]) for leaf in cst.leaves}
    owner = {leaf: leaf for leaf in leaves}  # a loop taken apart -> its block leaf
    parts = {leaf: [] for leaf in leaves}
    for r in reversed(cst.relations):
        if isinstance(r, SplitRel):
            val[r.parent] = add(mul(val[r.outer], info.ext[r.inner]), val[r.inner])
        elif r.fused in owner:
            top = owner[r.fused]
            for name in (r.outer, r.inner):
                owner[name] = top
                val[name] = ir.Var(f"{info.loopvar[top]}.{name}")
        else:
            val[r.outer] = ir.Bin("/", val[r.fused], info.ext[r.inner], ir.int32)
            val[r.inner] = ir.Bin("%", val[r.fused], info.ext[r.inner], ir.int32)
    fused = {r.fused for r in cst.relations if isinstance(r, FuseRel)}
    for name, top in owner.items():
        if name != top and name not in fused:
            parts[top].append((f"{info.loopvar[top]}.{name}", name))
    for top in leaves:
        if not parts[top]:
            parts[top] = [(info.loopvar[top], top)]
        else:  # outermost first, as fused
            order = _fuse_order(cst, top)
            parts[top].sort(key=lambda vn: order.index(vn[1]))
    d = cst.definition
    index = {v: simplify_expr(add(info.domain[v][0], val[v])) for v in d.spatial + d.reduce}
    return parts, index


def _fuse_order(cst, top) -> list:
    """The loops fused into `top`, outermost first."""
    by = {r.fused: r for r in cst.relations if isinstance(r, FuseRel)}
    if top not in by:
        return [top]
    r = by[top]
    return _fuse_order(cst, r.outer) + _fuse_order(cst, r.inner)


def _is_one(e) -> bool:
    return isinstance(e, ir.Imm) and int(e.value) <= 1


def _accumulates_in_memory(pst) -> bool:
    """Whether stage state `pst` reads back the elements it writes: a reduction
    with a spatial loop inside its reduction loops (stage_nest's `registers`)."""
    d = pst.definition
    if d.reduce_op is None or not (d.reduce or not d.init):
        return False
    kinds = [pst.kinds[leaf] for leaf in pst.leaves]
    first = kinds.index("reduce") if "reduce" in kinds else len(kinds)
    return not all(k == "reduce" for k in kinds[first:])


def _check_moves(p, cname, cst, leaf, lvar, var, name, parts, dom, pst) -> None:
    pd = pst.definition
    tag = cst.bind[leaf]
    reads = [v for v, (base, width) in dom.items()
             if var in free_vars(base) | free_vars(width)]
    if not reads:
        if not parts or len(parts) == 1:
            raise ScheduleError(
                f"stage '{p}' (global scope) is computed at a loop of '{cname}' in "
                f"each block of its loop '{lvar}' (bound to {tag}), but the "
                f"region it computes there does not move with '{lvar}': "
                f"every block would write the same elements of '{p}' in no fixed "
                f"order (a race between blocks). Compute '{p}' at root, or give it "
                f"shared or local scope (a copy in each block)")
        fused = ", ".join(f"'{n}'" for _, n in parts)
        raise ScheduleError(
            f"stage '{p}' (global scope) is computed at a loop of '{cname}' in each "
            f"block of its loop '{lvar}' (bound to {tag}, fused from {fused}), but the "
            f"region it computes there does not move with '{name}': blocks that differ "
            f"only in '{name}' would write the same elements of '{p}' in no fixed order "
            f"(a race between blocks). Compute '{p}' at root, give it shared or local "
            f"scope (a copy in each block), or do not fuse '{name}' into the block loop")
    if len(reads) != 1 or not _accumulates_in_memory(pst):
        return
    v = reads[0]
    base, width = dom[v]
    if var in free_vars(width) or not isinstance(width, ir.Imm):
        return
    lin = Simplifier().linear(base)
    coef = lin.terms.get(ir.Var(var))
    if coef is None or any(var in free_vars(a) for a in lin.terms if a != ir.Var(var)):
        return
    w = int(width.value)
    if abs(coef) >= w:
        return
    k = pd.spatial.index(v) if v in pd.spatial else v
    what = f"'{lvar}'" if not parts or len(parts) == 1 else f"'{name}' (of '{lvar}')"
    raise ScheduleError(
        f"stage '{p}' (global scope) is computed at a loop of '{cname}' in each block of "
        f"its loop '{lvar}' (bound to {tag}), where its region is {w} elements wide in "
        f"dimension {k} ({v}: from {show(base)}) but moves by only {abs(coef)} from one "
        f"block of {what} to the next, and it accumulates in '{pd.tensor}' (a spatial loop "
        f"inside its reduction loops): neighbouring blocks would sum into the same "
        f"elements of '{p}' in no fixed order (a race between blocks). Compute '{p}' at "
        f"root, give it shared or local scope (a copy in each block), or reorder its "
        f"reduction loops innermost (it then stores each element once, the same in both "
        f"blocks)")
