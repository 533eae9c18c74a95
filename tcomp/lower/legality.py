"""Legality of stage placement, checked before any loop is built: a stage
computed at another exists only inside that stage's loops, so its readers must
be there too; an output (or global tensor) computed inside another stage must
still be written everywhere."""
from __future__ import annotations

from ..errors import LoweringError
from ..lang.ast import Read, walk
from .stages import effective_reads


def check_readers(sched, sizes=None):
    """A stage computed at another exists only inside that stage's loops:
    every stage reading it must be computed there too (after it), be the
    host itself or one of the host's hosts, or — for a global tensor the
    host computes whole — run in a later kernel."""
    states = sched.states
    order = list(states)
    outputs = {t.name for t in sched.op.outputs}

    def hosts(n):
        out = []
        while states[n].attach[0] == "at":
            n = states[n].attach[1]
            out.append(n)
        return out

    def position(n):
        """Where n is built: (host-chain root first) list of (stage, leaf index, order)."""
        path = []
        while states[n].attach[0] == "at":
            _, h, leaf = states[n].attach
            path.append((h, states[h].leaves.index(leaf) if leaf in states[h].leaves
                         else -1, order.index(n)))
            n = h
        return list(reversed(path))

    for p, st in states.items():
        if st.attach[0] != "at":
            continue
        host = st.attach[1]
        pp = position(p)
        for q, qs in states.items():
            if q == p or st.tensor not in effective_reads(sched, q):
                continue
            if q in hosts(p)[1:]:
                # a host of its host reads it outside the loop it is computed in (issue
                # 22's long fuzz run, seed 3 pairs 3159, 5725, 8902: "variable 'i_o' is
                # not bound")
                raise LoweringError(
                    f"stage '{q}' reads '{st.tensor}', which is computed inside '{host}', a "
                    f"stage computed inside '{q}': '{q}' reads it outside that stage's loops; "
                    f"compute '{p}' at a loop of '{q}' instead")
            if q == host or (qs.attach == ("inline",) and qs.tensor not in outputs):
                continue  # (an inlined stage reads inside its readers, checked themselves)
            if qs.attach == ("epilogue", host):
                continue  # computed by the host's kernel from its registers (its statistics)
            qp = position(q)
            # q must be built inside the same host loops as p, and after it ...
            ok = len(qp) >= len(pp) and qp[:len(pp) - 1] == pp[:-1] and \
                qp[len(pp) - 1][0] == pp[-1][0] and \
                (qp[len(pp) - 1][1], qp[len(pp) - 1][2]) > (pp[-1][1], pp[-1][2])
            # ... or, for a tensor in global memory written whole, run in a later kernel.
            root = lambda n: (hosts(n) or [n])[-1]  # noqa: E731
            if not ok and st.scope == "global" and order.index(root(q)) > order.index(root(p)):
                check_cover(sched, p, set(), sizes)
                ok = True
            if not ok:
                raise LoweringError(
                    f"stage '{q}' reads '{st.tensor}', which is computed inside '{host}' "
                    f"(compute_at); compute '{q}' inside '{host}' too, after it, or compute "
                    f"'{p}' at root")


def check_producers(sched):
    """A stage computed inside another's kernel runs in that kernel: what it reads
    must be computed by then. A stage written earlier in the program but computed
    at root in a later kernel is not: `P` (after rfactor) computed at a loop of `T`,
    an earlier statement, read its rfactor stage `P.rf`, whose kernel ran after
    `T`'s, and came out zero (issue 22's long fuzz run, seed 2 pair 3277)."""
    states = sched.states
    order = list(states)

    def root(n):
        while states[n].attach[0] == "at":
            n = states[n].attach[1]
        return n
    for q, qs in states.items():
        if qs.attach[0] != "at":
            continue
        rq = root(q)
        for p in order[:order.index(q)]:
            ps = states[p]
            if ps.attach == ("inline",) or ps.tensor not in effective_reads(sched, q):
                continue
            rp = root(p)
            if order.index(rp) > order.index(rq):
                raise LoweringError(
                    f"stage '{q}' is computed in the kernel of '{rq}' (compute_at), but "
                    f"reads '{ps.tensor}', which stage '{p}' computes in a later kernel, of "
                    f"'{rp}'; compute '{p}' at a loop of '{q}', or compute '{q}' at root")


def check_cover(sched, pname, seen, sizes=None):
    """An output computed inside another stage must still be written
    everywhere: every stage reading it must read it at plain, distinct
    indices over the output's whole ranges, run each of its other loops at
    least once (`sizes`: those bound at build), and be complete itself."""
    st = sched.states[pname]
    if st.attach[0] != "at" or pname in seen:  # (an inlined output is written at root too)
        return
    seen.add(pname)
    pd = st.definition
    from ..schedule.primitives import consumes
    if not consumes(sched, st.attach[1], pd.tensor):
        # a sibling, computed over the part of its target computed there: complete
        # when the target is (compute_at checked that their ranges are the same)
        check_cover(sched, st.attach[1], seen, sizes)
    what = "output" if pd.tensor in {t.name for t in sched.op.outputs} else "global tensor"
    _check_readers(sched, pname, pd, what, seen, sizes)


def _check_readers(sched, pname, via, what, seen, sizes):
    """Every reader of `via`'s tensor (the output's definition, or an inlined copy
    of it, whose readers read the output through it) reads all of it."""
    from ..lang.ast import Index
    st = sched.states[pname]
    readers = [q for q, s in sched.states.items() if via.tensor in s.definition.reads()]
    for q in readers:
        qd = sched.states[q].definition
        for e in [qd.rhs, *qd.lets.values()]:
            for r in walk(e):
                if not (isinstance(r, Read) and r.tensor == via.tensor):
                    continue
                # distinct indices too: a read of the diagonal, C(k, k), covers only it
                ok = len(r.args) == len(via.spatial) and all(
                    isinstance(a, Index) and _same(qd.ranges.get(a.name), via.ranges[v])
                    for a, v in zip(r.args, via.spatial)) and \
                    len({a.name for a in r.args}) == len(r.args)
                if not ok:
                    raise LoweringError(
                        f"stage '{pname}' writes {what} '{st.definition.tensor}' but is "
                        f"computed inside '{st.attach[1]}', and '{q}' does not read all of "
                        f"it: part of the {what} could stay unwritten (compute it at root "
                        f"instead)")
                _check_runs(sched, pname, q, r, what, sizes)
        if sched.states[q].attach == ("inline",):
            # an inlined copy (cache_read + compute_inline): its readers read the output
            # through it (fuzz seed 4 pairs 16816, 44414: O(0, 0) through O_global)
            _check_readers(sched, pname, qd, what, seen, sizes)
        check_cover(sched, q, seen, sizes)


def _check_runs(sched, pname, q, read, what, sizes):
    """The reader's loops other than the read's indices must run at least once, or
    the output is never computed: `i_local() = ...` computed inside a reader's loop
    `where i in 1:N` stayed unwritten at N = 1 (issue 22's long fuzz run, seed 2 pair
    1528). A range is taken to run when it does at the sizes bound at build and, for
    the others, at 1 (the smallest; a range non-empty there is one in every
    program whose tensors are not empty)."""
    from ..lang.printer import expr_to_text
    from ..lang.symbolic import NotSymbolic, size_symbol, to_sympy
    qd = sched.states[q].definition
    used = {a.name for a in read.args}
    pd = sched.states[pname].definition
    for v in qd.spatial + qd.reduce:
        if v in used:
            continue
        lo, hi = qd.ranges[v]
        try:
            n = to_sympy(hi) - to_sympy(lo)
        except NotSymbolic:
            n = None
        if n is not None:
            n = n.subs({size_symbol(k): int(x) for k, x in (sizes or {}).items()})
            n = n.subs({x: 1 for x in n.free_symbols})
        if n is None or not n.is_number or n < 1:
            raise LoweringError(
                f"stage '{pname}' writes {what} '{pd.tensor}' but is computed inside "
                f"'{sched.states[pname].attach[1]}', and '{q}' reads it inside its loop over "
                f"'{v}', which may run no iteration ({v} in {expr_to_text(lo)}:"
                f"{expr_to_text(hi)}): the {what} could stay unwritten (compute it at root "
                f"instead)")


def check_global_storage_order(name, st):
    if st.storage is not None:
        raise LoweringError(f"stage '{name}': storage_order lays out shared and local buffers "
                            f"only, but '{st.tensor}' is in {st.scope} memory")


def _same(a, b) -> bool:
    if a is None or b is None:
        return False
    from ..lang.symbolic import NotSymbolic, to_sympy
    try:
        return all((to_sympy(x) - to_sympy(y)).simplify() == 0 for x, y in zip(a, b))
    except NotSymbolic:
        return a == b
