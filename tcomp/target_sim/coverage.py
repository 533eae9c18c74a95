"""A check of the sim, independent of the schedule's: every instance of a stored
statement is executed by some thread.

A thread index read twice on one path (`let i = threadIdx.y ... let i_i =
threadIdx.y`) gives both variables one value in each thread, so of the pairs
(i, i_i) that the two loops mean, only those with i == i_i run. That is harmless
for a store that uses one of them (a cooperative copy into shared memory, whose
region does not depend on the enclosing thread), and a silent wrong answer for a
store whose subscripts or value use both: the instances where they differ are
executed by no thread. Kernels are checked while they compile, before anything
runs; variables are followed through the lets that derive from them."""
from __future__ import annotations

from ..errors import SimError
from ..lower import ir
from ..arch import threads


class Coverage:
    def __init__(self, kernel: str):
        self.kernel = kernel
        self.deps: dict[str, frozenset] = {}  # let variable -> the thread lets it derives from
        self.tag_of: dict[str, str] = {}  # thread let variable -> the builtin it reads
        self.path: dict[str, list[str]] = {}  # builtin -> its let variables on the path

    def enter_let(self, s: ir.Let):
        """Record `s`; returns what `leave_let` restores."""
        v = s.value
        tag = v.name if isinstance(v, ir.Var) and v.name in threads.INDEX_VARS and \
            threads.is_thread(v.name) else None
        saved = (s.var, self.deps.get(s.var), self.tag_of.get(s.var), tag)
        if tag is not None:
            self.tag_of[s.var] = tag
            self.deps[s.var] = frozenset({s.var})
            self.path.setdefault(tag, []).append(s.var)
        else:
            self.deps[s.var] = self._deps(v)
            self.tag_of.pop(s.var, None)
        return saved

    def leave_let(self, saved) -> None:
        var, deps, tag_of, tag = saved
        if tag is not None:
            self.path[tag].pop()
        for table, old in ((self.deps, deps), (self.tag_of, tag_of)):
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old

    def _deps(self, e: ir.Expr) -> frozenset:
        out = set()
        for name in ir.free_vars(e):
            out |= self.deps.get(name, frozenset())
        return frozenset(out)

    def store(self, s: ir.Store) -> None:
        """SimError when the store uses two variables that read one thread index."""
        if not any(len(vs) > 1 for vs in self.path.values()):
            return
        used = set()
        for e in (*s.indices, s.value):
            used |= self._deps(e)
        for tag, vs in self.path.items():
            both = [v for v in vs if v in used]
            if len(both) > 1:
                where = f" (the statement at {s.loc})" if s.loc is not None else ""
                raise SimError(
                    f"kernel {self.kernel}: the store to '{s.buffer}'{where} uses '{both[0]}' and "
                    f"'{both[1]}', which both read {tag}: its instances where they differ are "
                    f"executed by no thread (a thread axis bound twice on one path)")
