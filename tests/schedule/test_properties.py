"""Property tests for schedules (API.md "Schedules": "No schedule may change
what a program computes").

a. Random LEGAL sequences of primitives over small ops never change the
   result: `tcomp.build(s, "sim", sizes=...)(*arrays)` equals
   `tcomp.evaluate(op, *arrays)` up to float reassociation.
b. Random ILLEGAL primitives raise `ScheduleError` (nothing else), naming the
   primitive, and leave the schedule unchanged.
c. `to_json` / `from_json` round trip: replaying gives identical JSON and
   identical lowered IR.

The generator keeps a small model of the schedule (loop extents for the bound
sizes, annotations, attach points, kernels' thread extents) and only draws
primitives that its rules call legal; every rule is written next to the
primitive it guards. A ScheduleError while generating, a LoweringError other
than those listed (with the reason the schedule is illegal) in
`ACCEPTED_LOWERING`, any other exception, or a wrong answer is a failure.

Longer bug hunts: TCOMP_PROPERTY_EXAMPLES=2000 TCOMP_PROPERTY_RANDOM=1
(TCOMP_PROPERTY_MAXSIZE=11, TCOMP_PROPERTY_DEADLINE_MS=8000 to catch slow cases).

Patterns that are legal but that tcomp gets wrong today (see
scratch/bugs_lower.md) are kept out of the random generator (rule "R-bug")
and pinned by the deterministic regression tests at the end of this file, so
that they do not mask other failures.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import tcomp
from tcomp.lang.symbolic import NotSymbolic, eval_int, to_sympy
from tcomp.schedule.primitives import _siblings  # what compute_at accepts as a sibling
from tcomp.schedule.snapshot import reads_through_inlined

# ------------------------------------------------------------------ ops
OPS = {
    "matmul": "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, r_k) * B(r_k, n) }",
    "conv1d": "def conv1d(float(B,L) I, float(KW) W) -> (O) "
              "{ O(b, x) +=! I(b, x + r_k) * W(r_k) }",
    "rowsum": "def rowsum(float(M,N) A) -> (S) { S(m) +=! A(m, r_n) * A(m, r_n) }",
    "rowmax": "def rowmax(float(M,N) A) -> (S) { S(m) max=! A(m, r_n) }",
    "chain": """def chain(float(M,N) A, float(M,N) B) -> (T, U, D) {
        T(m, n) = exp(A(m, n))
        U(m, n) = T(m, n) + B(m, n)
        D(m, n) = U(m, n) * U(m, n) - 1.0
    }""",
    "softmax": """def softmax(float(N, D) I) -> (O, maxVal, expDistance, expSum) {
        maxVal(n) max=! I(n, d)
        expDistance(n, d) = exp(I(n, d) - maxVal(n))
        expSum(n) +=! expDistance(n, d)
        O(n, d) = expDistance(n, d) / expSum(n)
    }""",
    # Temporaries (written, not declared as outputs): inlined ones get no kernel.
    "chain_tmp": """def chain_tmp(float(M,N) A, float(M,N) B) -> (D) {
        T(m, n) = exp(A(m, n))
        U(m, n) = T(m, n) + B(m, n)
        D(m, n) = U(m, n) * T(m, n)
    }""",
    "softmax_tmp": """def softmax_tmp(float(N, D) I) -> (O) {
        mx(n) max=! I(n, d)
        e(n, d) = exp(I(n, d) - mx(n))
        sm(n) +=! e(n, d)
        O(n, d) = e(n, d) / sm(n)
    }""",
    "transpose": "def transpose(float(M,N) A) -> (B) { B(n, m) = A(m, n) * 2.0 }",
    "total": "def total(float(N) A) -> (S) { S +=! A(r_n) }",
    # In-place updates: the right-hand side sees the tensor before the statement.
    # Those that read other elements (or reduce) read a snapshot stage ("O.1.snap").
    "inplace_shift": """def inplace_shift(float(N) A) -> (O) {
        O(i) = A(i)
        O(i) = O(i) + O(i - 1) where i in 1:N
    }""",
    "inplace_diag": """def inplace_diag(float(M, N) A) -> (O) {
        O(i, j) = A(i, j)
        O(i, j) = O(i - 1, j + 1) - O(i, j) where i in 1:M, j in 0:N - 1
        O(i, j) = O(i, j) * O(i, j) + 1.0 where i in 0:M, j in 0:N
    }""",
    "inplace_reduce": """def inplace_reduce(float(M, N) A) -> (O) {
        O(i) = A(i, 0)
        O(i) += O(i) * A(i, r_j)
    }""",
    "inplace_init": """def inplace_init(float(M, N) A) -> (O) {
        O(i) = A(i, 0)
        O(i) +=! (i + 1 < M ? O(i + 1) : 1.0) * A(i, r_j) where i in 0:M
    }""",
}
_OPS = {}


def get_op(name):
    if name not in _OPS:
        _OPS[name] = tcomp.op(OPS[name])
    return _OPS[name]


MAX_SIZE = int(os.environ.get("TCOMP_PROPERTY_MAXSIZE", "7"))


def sizes_strategy(name):
    op = get_op(name)
    if name == "conv1d":
        return st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 5)).map(
            lambda t: {"B": t[0], "KW": t[1], "L": t[1] + t[2]})
    return st.fixed_dictionaries({v: st.integers(1, MAX_SIZE) for v in op.size_vars})


# Input data kinds: random signs almost never give a row whose values are all
# negative (where a max started from 0.0 instead of -inf is wrong) or all
# positive (min); "special" sprinkles +-inf and NaN (README: max/min ignore NaN,
# sums propagate it; a sum of +inf and -inf is NaN in any order).
DATA_KINDS = ["uniform", "negative", "positive", "special"]


def make_inputs(op, sizes, seed, kind="uniform"):
    rng = np.random.default_rng(seed)
    out = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        if kind == "negative":
            a = -rng.uniform(0.5, 2.0, shape)
        elif kind == "positive":
            a = rng.uniform(0.5, 2.0, shape)
        else:
            a = rng.uniform(-1, 1, shape)
        if kind == "special":
            pick = rng.random(shape)
            a = np.where(pick < 0.1, np.inf, np.where(pick < 0.2, -np.inf,
                                                      np.where(pick < 0.3, np.nan, a)))
        out.append(a.astype(t.dtype.numpy))
    return out


def assert_same(op, got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for t, g, w in zip(op.outputs, got, want):
        assert g.shape == w.shape, (t.name, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=2e-5,
                                   atol=2e-5, err_msg=f"output {t.name}")


# LoweringErrors a legal-looking schedule may get, with why the schedule is illegal.
ACCEPTED_LOWERING = [
    # A shared/local copy is a fixed-size buffer; with a fused loop outside the
    # attach point the region one iteration reads (e.g. rows (f*2)/3 .. (f*2+1)/3)
    # has a size that changes from iteration to iteration, so no constant size
    # exists (the message tells the user to split by constants instead).
    re.compile(r"stage '[^']+' \((shared|local)\) computed at '[^']+' needs a region of "
               r"non-constant extent"),
    # A stage computed inside another kernel's loops while some other stage, in an
    # earlier kernel (or outside the host), reads it: that reader would see it
    # unwritten (compute_at at a transitive consumer or at one of several readers).
    re.compile(r"stage '[^']+' reads '[^']+', which is computed inside '[^']+' \(compute_at\)"),
    # A global copy computed inside one reader's loops holds only what that reader
    # reads there, while a reader in a later kernel needs all of it (a copy of A for
    # both statements of inplace_init, computed at the first, which reads one column).
    re.compile(r"stage '[^']+' writes global tensor '[^']+' but is computed inside '[^']+', and "
               r"'[^']+' does not read all of it"),
]

# A ring (pipeline stages=3) runs its copies ahead: a copy that computes a global-memory or a
# shared stage inside its loops is refused.
ACCEPTED_LOWERING.append(re.compile(
    r"runs the copy '[^']+' ahead of the loop's compute, but '[^']+' \(shared memory\) is "
    r"computed inside it"))
ACCEPTED_LOWERING.append(re.compile(
    r"no copy into a shared ring at the top of the loop: the copy into the ring (also writes "
    r"'[^']+', a buffer that lives outside it|synchronises)"))

THREADS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
BLOCKS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


# ------------------------------------------------------------------ the model
class Gen:
    """Draws legal primitives and applies them to a Schedule."""

    def __init__(self, data, opname, sizes):
        self.data, self.opname, self.sizes = data, opname, sizes
        self.op = get_op(opname)
        self.s = tcomp.Schedule(self.op)
        self.log: list[str] = []
        # stage -> axis -> (extent for the bound sizes, constant at schedule time (symbolic),
        #                   constant by construction: split factor / nparts / fuse of those,
        #                   so also constant when the stage loops over a region)
        self.ext: dict[str, dict[str, tuple[int, bool, bool]]] = {}
        self.coop_ext: dict = {}
        self.piped: dict[str, set] = {}
        self.outputs = {t.name for t in self.op.outputs}
        self.bind: dict[str, dict[str, str]] = {}
        self.unroll: dict[str, set] = {}
        self.vec: dict[str, set] = {}
        self.attach: dict[str, tuple] = {}
        self.scope: dict[str, str] = {}
        self.origin: dict[str, str] = {}
        self.untouched: dict[str, bool] = {}  # no loop transformation at all
        self.rf_ok: dict[str, bool] = {}  # only splits of original reduction axes so far
        self.cached_write: set = set()
        self.coop: set = set()
        for stg in self.s.stages:
            self._new_stage(stg.name, "global", self.s.states[stg.name].origin)

    # ---------------------------------------------------------- bookkeeping
    def draw(self, strategy, label=None):
        return self.data.draw(strategy, label=label)

    def _new_stage(self, name, scope, origin):
        self._reset_ext(name)
        self.bind[name], self.unroll[name], self.vec[name] = {}, set(), set()
        self.piped[name] = set()
        self.attach[name] = ("root",)
        self.scope[name], self.origin[name] = scope, origin
        self.untouched[name] = True
        self.rf_ok[name] = True

    def _reset_ext(self, name):
        d = self.s.states[name].definition
        ext = {}
        for v in d.spatial + d.reduce:
            lo, hi = d.ranges[v]
            n = eval_int(hi, self.sizes) - eval_int(lo, self.sizes)
            try:
                const = (to_sympy(hi) - to_sympy(lo)).is_number
            except NotSymbolic:
                const = False
            ext[v] = (max(n, 0), bool(const), False)
        self.ext[name] = ext

    def stage(self, name):
        return self.s[name]

    def leaves(self, name):
        return list(self.s[name].leaf_axes)

    def defn(self, name):
        return self.s.states[name].definition

    def is_reduction(self, name):
        d = self.defn(name)
        return bool(d.reduce) or d.reduce_op is not None

    def tensor(self, name):
        return self.s[name].tensor

    def readers(self, tensor):
        return self.s.readers(tensor)

    def annotated(self, name, leaf):
        return (leaf in self.bind[name] or leaf in self.unroll[name] or leaf in self.vec[name]
                or leaf in self.piped[name])

    def attached_at(self, name, leaf=None):
        return [n for n, a in self.attach.items()
                if a[0] == "at" and a[1] == name and (leaf is None or a[2] == leaf)]

    def root_of(self, name):
        while self.attach[name][0] == "at":
            name = self.attach[name][1]
        return name

    def subtree(self, name):
        out = [name]
        for n in self.attached_at(name):
            out += self.subtree(n)
        return out

    def kernel_tags(self, root):
        tags = {}
        for n in self.subtree(root):
            for leaf, tag in self.bind[n].items():
                if tag.startswith("threadIdx"):
                    if n in self.coop:
                        tags[tag] = self.coop_ext[(n, tag)]
                    else:
                        tags[tag] = self.ext[n][leaf][0]
        return tags

    def root_kernel(self, n):
        """A stage at root with its own kernel (a pending shared/local copy will move)."""
        return self.attach[n] == ("root",) and self.scope[n] == "global"

    def loopable(self):
        return [st_.name for st_ in self.s.stages if self.attach[st_.name] != ("inline",)]

    def free_leaves(self, name, kind=None, hosts=True):
        """Leaves that may be split (or fused as the inner loop): unannotated. A split
        moves the stages computed at the loop to its inner half; fusing away an outer
        loop that hosts stages is refused (hosts=False)."""
        return [a for a in self.leaves(name) if not self.annotated(name, a.name)
                and (hosts or not self.attached_at(name, a.name))
                and (kind is None or a.kind == kind)]

    def pending(self):
        """shared/local copies still at root: they must be computed at their reader
        (at root they are refused: "writes a shared buffer but is computed at root")."""
        return [n for n in self.attach if self.scope[n] != "global" and self.attach[n] == ("root",)]

    def record(self, text):
        self.log.append(text)
        note(text)
        event("primitive: " + (text.split("(")[0].split(".")[-1] if "(" in text else text[:20]))

    def touched(self, name, spatial=True):
        self.untouched[name] = False
        if spatial:
            self.rf_ok[name] = False

    # ---------------------------------------------------------- primitives
    def do_split(self):
        names = [n for n in self.loopable() if self.free_leaves(n)]
        if not names:
            return False
        name = self.draw(st.sampled_from(names))
        ax = self.draw(st.sampled_from(self.free_leaves(name)))
        e, const, _ = self.ext[name][ax.name]
        orig_reduce = ax.name in self.defn(name).reduce
        if self.draw(st.booleans()):
            f = self.draw(st.integers(1, e + 2), label="factor")
            self.record(f"{name}.split({ax.name}, {f})")
            o, i = self.stage(name).split(ax, f)
            self.ext[name][o.name] = (math.ceil(e / f), const, False)
            self.ext[name][i.name] = (f, True, True)
        else:
            p = self.draw(st.integers(1, e + 1), label="nparts")
            self.record(f"{name}.split({ax.name}, nparts={p})")
            o, i = self.stage(name).split(ax, nparts=p)
            self.ext[name][o.name] = (p, True, True)
            self.ext[name][i.name] = (math.ceil(e / p), const, False)
        self.touched(name, spatial=not (ax.kind == "reduce" and orig_reduce))
        return True

    def do_tile(self):
        names = [n for n in self.loopable() if len(self.free_leaves(n, "spatial")) >= 2]
        if not names:
            return False
        name = self.draw(st.sampled_from(names))
        free = self.free_leaves(name, "spatial")
        x, y = self.draw(st.permutations(free))[:2]
        ex, cx, _ = self.ext[name][x.name]
        ey, cy, _ = self.ext[name][y.name]
        fx, fy = self.draw(st.integers(1, ex + 1)), self.draw(st.integers(1, ey + 1))
        self.record(f"{name}.tile({x.name}, {y.name}, {fx}, {fy})")
        xo, yo, xi, yi = self.stage(name).tile(x, y, fx, fy)
        self.ext[name][xo.name] = (math.ceil(ex / fx), cx, False)
        self.ext[name][xi.name] = (fx, True, True)
        self.ext[name][yo.name] = (math.ceil(ey / fy), cy, False)
        self.ext[name][yi.name] = (fy, True, True)
        self.touched(name)
        return True

    def do_fuse(self):
        cands = []
        for n in self.loopable():
            lv = self.leaves(n)
            free = {a.name for a in self.free_leaves(n)}
            outer_ok = {a.name for a in self.free_leaves(n, hosts=False)}
            for a, b in zip(lv, lv[1:]):
                if a.name in outer_ok and b.name in free and a.kind == b.kind:
                    cands.append((n, a, b))
        if not cands:
            return False
        name, a, b = self.draw(st.sampled_from(cands))
        self.record(f"{name}.fuse({a.name}, {b.name})")
        f = self.stage(name).fuse(a, b)
        (ea, ca, ka), (eb, cb, kb) = self.ext[name][a.name], self.ext[name][b.name]
        self.ext[name][f.name] = (ea * eb, ca and cb, ka and kb)
        self.touched(name)
        return True

    def do_reorder(self):
        names = [n for n in self.loopable() if len(self.leaves(n)) >= 2]
        if not names:
            return False
        name = self.draw(st.sampled_from(names))
        lv = self.leaves(name)
        # Rule: a vectorized loop stays innermost (it was checked to be).
        movable = [a for a in lv if a.name not in self.vec[name]]
        if len(movable) < 2:
            return False
        sub = self.draw(st.lists(st.sampled_from(movable), min_size=2, max_size=len(movable),
                                 unique=True))
        perm = self.draw(st.permutations(sub))
        pos = sorted(lv.index(a) for a in perm)
        new = list(lv)
        for i, a in zip(pos, perm):
            new[i] = a
        # Rule: blockIdx loops stay outermost (a block loop inside a serial loop is illegal).
        blocks = [i for i, a in enumerate(new) if self.bind[name].get(a.name, "").startswith("b")]
        if blocks != list(range(len(blocks))):
            return False
        # Rule: a reduction bound to threads keeps its reduction loops innermost.
        if any(a.kind == "reduce" and a.name in self.bind[name] for a in lv):
            first_red = next(i for i, a in enumerate(new) if a.kind == "reduce")
            if any(a.kind == "spatial" for a in new[first_red:]):
                return False
        self.record(f"{name}.reorder({', '.join(a.name for a in perm)})")
        self.stage(name).reorder(*perm)
        if [a.name for a in new] != [a.name for a in lv]:
            self.touched(name, spatial=any(a.kind == "spatial" for a in perm))
        return True

    def do_bind(self):
        cands = []
        for n in self.loopable():
            if not self.root_kernel(n):
                continue  # threads in producers only through cooperative fetching (do_coop)
            lv = self.leaves(n)
            used = set(self.bind[n].values())
            nblock = 0
            while nblock < len(lv) and self.bind[n].get(lv[nblock].name, "").startswith("b"):
                nblock += 1
            first_red = next((i for i, a in enumerate(lv) if a.kind == "reduce"), len(lv))
            registers = all(a.kind == "reduce" for a in lv[first_red:])
            red_bound = any(a.kind == "reduce" and a.name in self.bind[n] for a in lv)
            for i, a in enumerate(lv):
                if self.annotated(n, a.name):
                    continue
                if a.kind == "reduce":
                    # A cross-thread reduction: one reduction axis per stage, and every
                    # reduction loop inside every spatial loop (accumulator in a register).
                    if red_bound or not registers:
                        continue
                if i == nblock and a.kind == "spatial":
                    cands += [(n, a, t) for t in BLOCKS if t not in used]
                tags = self.kernel_tags(n)
                for t in THREADS:
                    if t in used:
                        continue
                    e = self.ext[n][a.name][0]
                    if t in tags and tags[t] != e:
                        continue  # one extent per threadIdx tag in a kernel
                    prod = e * math.prod(v for k, v in tags.items() if k != t)
                    if prod <= 1024:
                        cands.append((n, a, t))
        if not cands:
            return False
        name, ax, tag = self.draw(st.sampled_from(cands))
        self.record(f"{name}.bind({ax.name}, {tag!r})")
        self.stage(name).bind(ax, tag)
        self.bind[name][ax.name] = tag
        self.touched(name)
        return True

    def do_unroll(self):
        cands = []
        for n in self.loopable():
            for a in self.leaves(n):
                e, _, by_split = self.ext[n][a.name]
                if self.annotated(n, a.name) or e > 16:
                    continue
                # Rule: a stage computed at another loops over a region, not its full
                # range: only constant-by-construction loops are unrolled there.
                if not self.root_kernel(n) and not by_split:
                    continue
                cands.append((n, a))
        if not cands:
            return False
        name, ax = self.draw(st.sampled_from(cands))
        factor = self.draw(st.sampled_from([None, None, 1, 2]))  # a CUDA hint: same result
        self.record(f"{name}.unroll({ax.name}, factor={factor})")
        self.stage(name).unroll(ax, factor=factor)
        self.unroll[name].add(ax.name)
        self.touched(name)
        return True

    def do_vectorize(self):
        cands = []
        for n in self.loopable():
            lv = self.leaves(n)
            # (A reduction stage left without reduction axes by rfactor vectorizes too:
            # test_vectorize_rfactor_stage_without_reduction_axes.)
            if not lv:
                continue
            a = lv[-1]
            # Rule: constant extent (constant by construction, so that it stays constant
            # if the stage is computed over a region); nothing computed inside it.
            if (a.kind == "spatial" and not self.annotated(n, a.name) and self.ext[n][a.name][2]
                    and not self.attached_at(n, a.name)):
                # ... and a stage that must host a pending copy keeps a loop to host it.
                hosts = any(n in self.readers(self.tensor(p)) for p in self.pending())
                if not (hosts and len(lv) < 2):
                    cands.append((n, a))
        if not cands:
            return False
        name, ax = self.draw(st.sampled_from(cands))
        self.record(f"{name}.vectorize({ax.name})")
        self.stage(name).vectorize(ax)
        self.vec[name].add(ax.name)
        self.touched(name)
        return True

    def can_inline(self, n):
        if self.attach[n] == ("inline",) or self.is_reduction(n):
            return False
        if len(self.s.writers(self.tensor(n))) != 1 or self.origin[n] == "cache_write":
            return False
        # Rule: a snapshot is complete before its reader starts: never inlined.
        if self.origin[n] == "snapshot":
            return False
        if self.attached_at(n) or self.pipelined_host(n):
            return False
        # Rule: the reader of a pending shared/local copy must keep its loops.
        for p in self.pending():
            if n in self.readers(self.tensor(p)):
                return False
        return True

    def do_inline(self):
        cands = [n for n in self.s.states if self.can_inline(n)]
        if not cands:
            return False
        name = self.draw(st.sampled_from(cands))
        self.record(f"{name}.compute_inline()")
        self.stage(name).compute_inline()
        self.attach[name] = ("inline",)
        return True

    def attach_consumers(self, p):
        """Stages at whose loops producer p may be computed."""
        if self.attach[p] == ("inline",) or len(self.s.writers(self.tensor(p))) != 1:
            return []
        # Rule: a snapshot stays at root (its reader writes the tensor it copies).
        if self.origin[p] == "snapshot":
            return []
        # Rule: threads of a kernel come from its root stage (and cooperative copies made
        # after attaching); block loops only at root. So p's subtree binds nothing.
        if any(self.bind[n] for n in self.subtree(p)):
            return []
        if any(not self.ext[p][u][2] for u in self.unroll[p] | self.vec[p]):
            return []
        # A pipelined loop keeps its shared copies.
        if self.pipelined_host(p):
            return []
        readers = self.readers(self.tensor(p))
        if self.scope[p] != "global":
            # A shared/local copy lives inside its one reader.
            if len(readers) != 1 or readers[0] == p:
                return []
            consumers = readers
        else:
            # Any consumer, direct or not; if another reader then runs outside it, lowering
            # refuses the schedule (ACCEPTED_LOWERING "computed inside").
            consumers = [c for c in self.s.states if c != p and c not in self.subtree(p)
                         and _consumes(self.s, c, self.tensor(p))]
        return [c for c in consumers if self.attach[c] != ("inline",)
                and self.attach_leaves(p, c) and self.readers_stay_apart(p, c)]

    def readers_stay_apart(self, p, c):
        """Rule: no stage ends up inside a stage that writes a tensor it reads (an
        in-place update; p may host such a stage, e.g. a snapshot computed at a copy
        of its buffer)."""
        attach = dict(self.attach)
        attach[p] = ("at", c, None)
        for n, st_ in self.s.states.items():
            reads = reads_through_inlined(self.s, st_, attach.get)  # (inlined reads too)
            host = n
            while attach[host][0] == "at":
                host = attach[host][1]
                if self.tensor(host) in reads:
                    return False
        return True

    def attach_leaves(self, p, c):
        # Rule: a loop hosting another stage is no longer innermost: never a vectorized
        # one. A pipelined loop runs its shared copies ahead of the other stages there.
        return [a for a in self.leaves(c) if a.name not in self.vec[c]
                and (a.name not in self.piped[c] or self.runs_ahead(c, a.name, p))]

    def is_copy(self, p):
        return self.scope[p] == "shared" and self.origin[p] == "cache_read"

    def runs_ahead(self, c, leaf, extra=None):
        """Rule: the shared copies at a pipelined loop (with `extra` computed there
        too) read nothing the other stages there compute (or the stages inside
        them): the copies run ahead of them (else a LoweringError)."""
        here = self.attached_at(c, leaf) + ([extra] if extra else [])
        made = {self.tensor(n) for q in here if not self.is_copy(q) for n in self.subtree(q)}
        return all(not (self.defn(q).reads() & made) for q in here if self.is_copy(q))

    def attach_targets(self, p):
        return [(c, a) for c in self.attach_consumers(p) for a in self.attach_leaves(p, c)
                if self.keeps_a_place(p, c)]

    def keeps_a_place(self, p, c):
        """Rule: computing p at c leaves every pending copy a place to be computed
        at (a global copy of O inside the shared copy that O's update reads, or
        inside O's update itself while its own shared copy of O is pending, would
        put a reader of O inside O's writer: found by random runs)."""
        pend = [q for q in self.pending() if q != p]
        if not pend:
            return True
        old = self.attach[p]
        self.attach[p] = ("at", c, None)
        try:
            return all(self.attach_consumers(q) and any(
                self.attach_leaves(q, r) for r in self.attach_consumers(q)) for q in pend)
        finally:
            self.attach[p] = old

    def do_compute_at(self):
        cands = [p for p in self.s.states if self.attach_targets(p)]
        if not cands:
            return False
        p = self.draw(st.sampled_from(cands))
        c = self.draw(st.sampled_from(sorted({c for c, _ in self.attach_targets(p)})))
        ax = self.draw(st.sampled_from(self.attach_leaves(p, c)))
        self.record(f"{p}.compute_at({c}, {ax.name})")
        self.stage(p).compute_at(self.stage(c), ax)
        self.attach[p] = ("at", c, ax.name)
        return True

    def do_compute_root(self):
        cands = [n for n, a in self.attach.items() if a[0] == "at" and self.scope[n] == "global"
                 and not self.pipelined_host(n)]
        if not cands:
            return False
        name = self.draw(st.sampled_from(cands))
        self.record(f"{name}.compute_root()")
        self.stage(name).compute_root()
        self.attach[name] = ("root",)
        return True

    def do_cache_read(self):
        cands = []
        for t in [x.name for x in self.op.inputs] + [self.tensor(n) for n in self.s.states]:
            if self.s.tensors[t][2] != "global":
                continue
            writers = self.s.writers(t)
            readers = [r for r in self.readers(t) if self.attach[r] != ("inline",)
                       and r not in writers]
            # Rule: one copy serves the readers of one version of t (no writer of t
            # between them): the readers grouped by the writers between them.
            order = list(self.s.states)
            groups: dict[int, list] = {}
            for r in readers:
                version = sum(order.index(w) < order.index(r) for w in writers)
                groups.setdefault(version, []).append(r)
            for group in groups.values():
                if (t, tuple(group)) not in cands:
                    cands.append((t, tuple(group)))
        if not cands:
            return False
        t, readers = self.draw(st.sampled_from(cands))
        scope = self.draw(st.sampled_from(["global", "shared", "local"]))
        if scope == "global":
            chosen = self.draw(st.lists(st.sampled_from(readers), min_size=1, unique=True))
        else:
            # One reader: it hosts the copy, so it needs a loop that is not vectorized.
            hosts = [r for r in readers if any(a.name not in self.vec[r] for a in self.leaves(r))]
            if not hosts:
                return False
            chosen = [self.draw(st.sampled_from(hosts))]
        self.record(f"s.cache_read({t!r}, {scope!r}, {chosen})")
        new = self.s.cache_read(t, scope, [self.s[r] for r in chosen])
        self._new_stage(new.name, scope, "cache_read")
        if scope != "global" and self.draw(st.integers(0, 3)) > 0:
            self.attach_pending(new.name)
        return True

    def do_cache_write(self):
        cands = [n for n in self.s.states
                 # R-bug: nothing computed at its loops (test_cache_write_drops_...).
                 if self.attach[n] == ("root",) and self.untouched[n] and not self.attached_at(n)
                 and self.origin[n] == "statement" and n not in self.cached_write
                 and self.defn(n).init and not any(self.bind[n].values())]
        if not cands:
            return False
        name = self.draw(st.sampled_from(cands))
        # Rule: a local/shared accumulator is computed at a loop of the copy-out stage:
        # that needs one (a 0-d output has none).
        scope = self.draw(st.sampled_from(["global", "local", "shared"]
                                          if self.defn(name).spatial else ["global"]))
        self.record(f"s.cache_write({name!r}, {scope!r})")
        new = self.s.cache_write(self.s[name], scope)
        self.cached_write.add(name)
        self._new_stage(new.name, scope, "cache_write")
        for n, st_ in self.s.states.items():  # (the snapshot of an in-place statement)
            if n not in self.attach:
                self._new_stage(n, "global", st_.origin)
        self._reset_ext(name)
        self.rf_ok[name] = False
        return True

    def do_rfactor(self):
        cands = []
        for n in self.s.states:
            if (self.attach[n] != ("root",) or not self.rf_ok[n] or self.attached_at(n)
                    or not self.defn(n).reduce
                    or self.bind[n] or self.unroll[n] or self.vec[n]):
                continue
            cands += [(n, a) for a in self.leaves(n) if a.kind == "reduce"]
        if not cands:
            return False
        name, ax = self.draw(st.sampled_from(cands))
        self.record(f"{name}.rfactor({ax.name})")
        new = self.stage(name).rfactor(ax)
        self._new_stage(new.name, "global", "rfactor")
        self._reset_ext(name)
        self.untouched[name] = True
        self.rf_ok[name] = False
        return True

    def coop_candidates(self):
        # (fusing away a loop that hosts a stage is refused)
        return [n for n in self.s.states if self.scope[n] == "shared"
                and self.origin[n] == "cache_read" and self.attach[n][0] == "at" and self.untouched[n] and self.defn(n).spatial
                and not self.bind[n] and not self.attached_at(n)
                and self.root_kernel(self.root_of(n))]

    def do_coop(self, name=None):
        """Cooperative fetching: fuse a shared copy's axes, split by a thread extent
        of its kernel, bind the inner loop to that threadIdx tag."""
        cands = self.coop_candidates()
        if not cands:
            return False
        if name is None:
            name = self.draw(st.sampled_from(cands))
        tags = self.kernel_tags(self.root_of(name))
        tag = self.draw(st.sampled_from(THREADS))
        if tag in tags:
            t = tags[tag]
            if t < 1:
                return False  # (a thread loop over an empty range: nothing to split by)
        else:
            t = self.draw(st.integers(1, 8))
            if t * math.prod(tags.values()) > 1024:
                return False
        stg = self.stage(name)
        lv = self.leaves(name)
        self.record(f"{name}: cooperative fetch: fuse all, split by {t}, bind inner to {tag}")
        f = lv[0]
        for a in lv[1:]:
            f = stg.fuse(f, a)
        o, i = stg.split(f, t)
        stg.bind(i, tag)
        self.coop.add(name)
        self.coop_ext[(name, tag)] = t
        self.bind[name][i.name] = tag
        # (the copy loops over a region; bound it by the whole tensor)
        total = math.prod(self.ext[name][a.name][0] for a in self.stage(name).axes)
        self.ext[name][f.name] = (total, False, False)
        self.ext[name][o.name] = (math.ceil(total / t), False, False)
        self.ext[name][i.name] = (t, True, True)
        self.touched(name)
        return True

    def do_pipeline(self):
        """Run the shared copies computed at a serial loop ahead of its compute
        (at least one copy there; other stages there are built after them),
        double-buffered through registers or in a ring of 3."""
        cands = []
        for n in self.loopable():
            for a in self.leaves(n):
                here = self.attached_at(n, a.name)
                copies = [p for p in here if self.is_copy(p)]
                # (a copy that still has to host a pending copy is not pipelined)
                if (copies and not self.annotated(n, a.name) and self.runs_ahead(n, a.name)
                        and not any(p in self.readers(self.tensor(q))
                                    for p in copies for q in self.pending())):
                    cands.append((n, a))
        if not cands:
            return False
        name, ax = self.draw(st.sampled_from(cands))
        stages = self.draw(st.sampled_from([2, 3]))
        self.record(f"{name}.pipeline({ax.name}, stages={stages})")
        self.stage(name).pipeline(ax, stages=stages)
        self.piped[name].add(ax.name)
        self.touched(name)
        return True

    def pipelined_host(self, p):
        a = self.attach[p]
        return a[0] == "at" and a[2] in self.piped[a[1]]

    def do_align(self):
        cands = [n for n in self.s.states if self.scope[n] != "global" and self.defn(n).spatial
                 and self.attach[n] != ("inline",)]
        if not cands:
            return False
        name = self.draw(st.sampled_from(cands))
        # storage_align is about the buffer dimension: any original axis, even once its
        # loop was split or fused (test_storage_align_after_fuse).
        ax = self.draw(st.sampled_from(self.stage(name).axes))
        f = self.draw(st.integers(1, 8))
        off = self.draw(st.integers(0, f - 1))
        self.record(f"{name}.storage_align({ax.name}, {f}, {off})")
        self.stage(name).storage_align(ax, f, off)
        return True

    def do_order_of(self, name, moved=False):
        """storage_order of stage `name` (with `moved`, never the identity order);
        True when the order differs from the definition's."""
        axes = self.draw(st.permutations(self.stage(name).axes))
        if moved and axes == list(self.stage(name).axes):
            axes = axes[1:] + axes[:1]
        self.record(f"{name}.storage_order({', '.join(a.name for a in axes)})")
        self.stage(name).storage_order(*axes)
        return len(axes) > 1 and [a.name for a in axes] != list(self.defn(name).spatial)

    def do_align_of(self, name):
        ax = self.draw(st.sampled_from(self.stage(name).axes))
        f = self.draw(st.integers(1, 8))
        off = self.draw(st.integers(0, f - 1))
        self.record(f"{name}.storage_align({ax.name}, {f}, {off})")
        self.stage(name).storage_align(ax, f, off)

    def do_order(self):
        """storage_order: a permutation of the original spatial axes of a shared or
        local buffer (like storage_align, legal whatever its loops became)."""
        cands = [n for n in self.s.states if self.scope[n] != "global" and self.defn(n).spatial
                 and self.attach[n] != ("inline",)]
        if not cands:
            return False
        self.do_order_of(self.draw(st.sampled_from(cands)))
        return True

    def sync(self):
        """Attach points as tcomp keeps them (a split moves the stages computed at a
        loop to its inner half)."""
        for n, st_ in self.s.states.items():
            self.attach[n] = st_.attach

    def attach_pending(self, name):
        targets = self.attach_targets(name)
        assert targets, f"no place to compute {name}: generator bug"
        c, ax = self.draw(st.sampled_from(targets))
        self.record(f"{name}.compute_at({c}, {ax.name})")
        self.stage(name).compute_at(self.stage(c), ax)
        self.attach[name] = ("at", c, ax.name)

    ACTIONS = ("split", "split", "tile", "fuse", "reorder", "bind", "bind", "bind", "unroll",
               "vectorize", "inline", "inline", "compute_at", "compute_at", "compute_root",
               "cache_read", "cache_read", "cache_write", "rfactor", "coop", "coop", "align",
               "pipeline", "pipeline", "order", "order")

    def run(self, max_steps=10):
        n = self.draw(st.integers(0, max_steps), label="steps")
        done = 0
        for _ in range(3 * n):
            if done >= n:
                break
            action = self.draw(st.sampled_from(self.ACTIONS), label="action")
            if getattr(self, "do_" + action)():
                done += 1
            self.sync()
        # Finalize: shared/local copies are computed at their reader (outermost first).
        for _ in range(10):
            pend = [p for p in self.pending()
                    if not any(r in self.pending() for r in self.readers(self.tensor(p)))]
            if not pend:
                break
            for p in pend:
                self.attach_pending(p)
        assert not self.pending()
        for n in self.coop_candidates():
            if self.draw(st.booleans()):
                self.do_coop(n)


def build_and_compare(g: Gen, seed=0):
    op = g.op
    kind = g.data.draw(st.sampled_from(DATA_KINDS), label="data")
    event(f"data: {kind}")
    arrays = make_inputs(op, g.sizes, seed, kind)
    with np.errstate(all="ignore"):  # inf - inf, 0 * inf: NaN is expected data here
        want = tcomp.evaluate(op, *arrays)
    try:
        k = tcomp.build(g.s, "sim", sizes=g.sizes)
    except tcomp.LoweringError as e:
        if any(p.search(str(e)) for p in ACCEPTED_LOWERING):
            note(f"accepted: {e}")
            event("accepted LoweringError")
            return False
        raise
    with np.errstate(all="ignore"):
        got = k(*arrays)
    assert_same(op, got, want)
    event(f"ran {len(g.log)} primitives")
    return True


# TCOMP_PROPERTY_EXAMPLES=2000 (and TCOMP_PROPERTY_RANDOM=1) for a longer bug hunt.
N_EXAMPLES = int(os.environ.get("TCOMP_PROPERTY_EXAMPLES", "0")) or None
DERANDOMIZE = not os.environ.get("TCOMP_PROPERTY_RANDOM")
DEADLINE = int(os.environ.get("TCOMP_PROPERTY_DEADLINE_MS", "0")) or None


def _n(default):
    return N_EXAMPLES or default


legal_settings = settings(max_examples=_n(70), deadline=DEADLINE, derandomize=DERANDOMIZE,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])


# ------------------------------------------------------------------ a. legal schedules
@legal_settings
@given(data=st.data(), opname=st.sampled_from(sorted(OPS)))
def test_legal_schedules_keep_the_result(data, opname):
    sizes = data.draw(sizes_strategy(opname), label="sizes")
    g = Gen(data, opname, sizes)
    g.run()
    note("\n".join(g.log))
    build_and_compare(g)


INPLACE = sorted(n for n in OPS if n.startswith("inplace_"))


@settings(legal_settings, max_examples=_n(60))
@given(data=st.data(), opname=st.sampled_from(INPLACE))
def test_legal_schedules_keep_in_place_updates(data, opname):
    """In-place statements (README: the right-hand side sees the state before
    the statement) under random legal schedules of every stage, their
    snapshots included: the sim agrees with evaluate and reports no race."""
    sizes = data.draw(sizes_strategy(opname), label="sizes")
    g = Gen(data, opname, sizes)
    g.run()
    note("\n".join(g.log))
    build_and_compare(g)


@settings(legal_settings, max_examples=_n(40))
@given(data=st.data(), opname=st.sampled_from(["matmul", "conv1d", "chain", "transpose",
                                               "softmax_tmp"]))
def test_storage_order_keeps_the_result(data, opname):
    """A random legal schedule, then every shared/local buffer laid out in a
    random dimension order (storage_order, with a random storage_align now and
    then): the layout never changes the result, and the schedule replays from
    JSON to the same IR."""
    sizes = data.draw(sizes_strategy(opname), label="sizes")
    g = Gen(data, opname, sizes)
    # more copies than in the general mix: they are what storage_order lays out
    for _ in range(data.draw(st.integers(1, 3), label="copies")):
        g.do_cache_read()
        g.sync()
    g.run(max_steps=6)
    ordered = 0
    for n in list(g.s.states):
        if g.scope[n] != "global" and g.defn(n).spatial and g.attach[n] != ("inline",):
            if g.do_order_of(n, moved=True):
                ordered += 1
            if data.draw(st.booleans(), label="align"):
                g.do_align_of(n)
    event(f"{ordered} buffers ordered")
    note("\n".join(g.log))
    if build_and_compare(g):
        s2 = tcomp.Schedule.from_json(g.op, g.s.to_json())
        assert str(tcomp.lower(s2, sizes=g.sizes)) == str(tcomp.lower(g.s, sizes=g.sizes))


# ------------------------------------------------------------------ c. json round trip
@settings(max_examples=_n(60), deadline=DEADLINE, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), opname=st.sampled_from(sorted(OPS)))
def test_json_round_trip(data, opname):
    sizes = data.draw(sizes_strategy(opname), label="sizes")
    g = Gen(data, opname, sizes)
    g.run()
    text = g.s.to_json()
    s2 = tcomp.Schedule.from_json(g.op, text)
    assert s2.to_json() == text
    assert [x.name for x in s2.stages] == [x.name for x in g.s.stages]
    for n in g.s.states:
        assert [a.name for a in s2[n].leaf_axes] == [a.name for a in g.s[n].leaf_axes]
    # Replaying the replay is stable too.
    assert tcomp.Schedule.from_json(g.op, s2.to_json()).to_json() == text

    def lowered(s, sz):
        try:
            return str(tcomp.lower(s, sizes=sz))
        except tcomp.LoweringError as e:
            return f"LoweringError: {e}"
    assert lowered(s2, sizes) == lowered(g.s, sizes)
    assert lowered(s2, {}) == lowered(g.s, {})


# ------------------------------------------------------------------ b. illegal primitives
def _illegal_moves(g: Gen):
    """(description, thunk, fragments expected in the message) for the current state."""
    s = g.s
    moves = []
    names = g.loopable()
    for n in names:
        stg = s[n]
        lv = g.leaves(n)
        free = g.free_leaves(n)
        if free:
            a = free[0]

            def removed(stg=stg, a=a, n=n):
                stg.split(a, 2)
                g.log.append(f"{n}.split({a.name}, 2)")
                g._legal_prefix_json = s.to_json()
                # now `a` is gone:
                return g._removed_use(stg, a)
            moves.append((f"{n}: use {a.name} after splitting it", removed, ["no longer exists"]))
            for bad in (0, -2, True, 2.5, "3"):
                moves.append((f"{n}.split({a.name}, {bad!r})",
                              lambda stg=stg, a=a, bad=bad: stg.split(a, bad),
                              ["split", "must be a positive int"]))
            moves.append((f"{n}.split({a.name}, 2, nparts=2)",
                          lambda stg=stg, a=a: stg.split(a, 2, nparts=2),
                          ["split", "exactly one of"]))
            moves.append((f"{n}.tile same axis", lambda stg=stg, a=a: stg.tile(a, a, 2, 2),
                          ["tile", "same axis"]))
            moves.append((f"{n}.reorder duplicate", lambda stg=stg, a=a: stg.reorder(a, a),
                          ["reorder", "given twice"]))
            moves.append((f"{n}.split by name", lambda stg=stg, a=a: stg.split(a.name, 2),
                          ["split", "must be an Axis"]))
            moves.append((f"{n}.bind unknown tag",
                          lambda stg=stg, a=a: stg.bind(a, "threadIdx.q"),
                          ["bind", "unknown thread tag"]))
        for a in lv:
            if a.kind == "reduce" and a.name not in g.bind[n]:
                moves.append((f"{n}.bind reduce {a.name} to blocks",
                              lambda stg=stg, a=a: stg.bind(a, "blockIdx.y"),
                              ["bind", "reduction axis", "blockIdx.y"]))
                bound_red = [l for l in g.bind[n] if l in {x.name for x in lv if x.kind == "reduce"}]
                if bound_red and a.name not in g.bind[n]:
                    used_t = set(g.bind[n].values())
                    free_t = [t for t in THREADS if t not in used_t]
                    if free_t:
                        moves.append((f"{n}.bind second reduce {a.name}",
                                      lambda stg=stg, a=a, t=free_t[0]: stg.bind(a, t),
                                      ["bind", "only one reduction axis can be bound"]))
                moves.append((f"{n}.rfactor-less vectorize of reduce {a.name}",
                              lambda stg=stg, a=a: stg.vectorize(a),
                              ["vectorize"]))
            if a.name in g.bind[n]:
                moves.append((f"{n}.bind bound {a.name}",
                              lambda stg=stg, a=a: stg.bind(a, "threadIdx.z"),
                              ["bind", "already bound"]))
                moves.append((f"{n}.unroll bound {a.name}", lambda stg=stg, a=a: stg.unroll(a),
                              ["unroll", "already bound"]))
        for i, a in enumerate(lv[:-1]):
            moves.append((f"{n}.vectorize outer {a.name}", lambda stg=stg, a=a: stg.vectorize(a),
                          ["vectorize"]))
        for i, a in enumerate(lv):
            for j, b in enumerate(lv):
                if j != i + 1 and i != j:
                    # (an attach point on either loop is another valid reason)
                    moves.append((f"{n}.fuse non-adjacent {a.name},{b.name}",
                                  lambda stg=stg, a=a, b=b: stg.fuse(a, b),
                                  ["fuse", ("directly outside", "computed at")]))
                if j == i + 1 and a.kind != b.kind and not g.annotated(n, a.name) \
                        and not g.annotated(n, b.name):
                    moves.append((f"{n}.fuse spatial+reduce",
                                  lambda stg=stg, a=a, b=b: stg.fuse(a, b),
                                  ["fuse", ("spatial and a reduction", "computed at")]))
        used = {t: l for l, t in g.bind[n].items()}
        for t, l in used.items():
            for a in free:
                if a.kind == "spatial":
                    moves.append((f"{n}.bind {t} twice", lambda stg=stg, a=a, t=t: stg.bind(a, t),
                                  ["bind", f"{t} is already bound"]))
        if g.attach[n][0] == "at":
            for a in free:
                if a.kind == "spatial":
                    moves.append((f"{n}.bind blockIdx on attached",
                                  lambda stg=stg, a=a: stg.bind(a, "blockIdx.z"),
                                  ["bind", "computed inside another stage"]))
        if lv:
            moves.append((f"{n}.compute_at itself",
                          lambda stg=stg, a=lv[0]: stg.compute_at(stg, a),
                          ["compute_at", "itself"]))
            moves.append((f"{n}.pipeline(stages=6)",
                          lambda stg=stg, a=lv[0]: stg.pipeline(a, stages=6),
                          ["pipeline", "stages must be an int from 2 to 5"]))
            moves.append((f"{n}.tensorize", lambda stg=stg, a=lv[0]: stg.tensorize(a, "mma"),
                          ["tensorize", "unknown intrinsic"]))
            for m in names:
                if m != n and s[m].leaf_axes:
                    moves.append((f"{n} with axis of {m}",
                                  lambda stg=stg, b=s[m].leaf_axes[0]: stg.unroll(b),
                                  ["unroll", "belongs to stage"]))
                    break
        for a in stg.axes:
            for f, o in ((0, 0), (4, 4), (4, -1)):
                moves.append((f"{n}.storage_align({a.name}, {f}, {o})",
                              lambda stg=stg, a=a, f=f, o=o: stg.storage_align(a, f, o),
                              ["storage_align"]))
        orig = list(stg.axes)
        if orig and g.scope[n] == "global":
            moves.append((f"{n}.storage_order in global memory",
                          lambda stg=stg, o=orig: stg.storage_order(*reversed(o)),
                          ["storage_order", "in global memory"]))
        if orig:
            moves.append((f"{n}.storage_order repeated axis",
                          lambda stg=stg, o=orig: stg.storage_order(o[0], *o),
                          ["storage_order", "exactly once"]))
        if len(orig) >= 2:
            moves.append((f"{n}.storage_order missing axis",
                          lambda stg=stg, o=orig: stg.storage_order(*o[1:]),
                          ["storage_order", "exactly once"]))
        derived = [a for a in lv if a.name not in g.defn(n).spatial]
        if derived:
            moves.append((f"{n}.storage_order({derived[0].name})",
                          lambda stg=stg, a=derived[0], o=orig: stg.storage_order(a, *o[1:]),
                          ["storage_order", "must be an original spatial axis"]))
        if g.is_reduction(n) and g.attach[n] != ("inline",):
            moves.append((f"{n}.compute_inline of reduction", lambda stg=stg: stg.compute_inline(),
                          ["compute_inline", "reduction"]))
        if (not g.untouched[n] or g.attach[n] != ("root",)) and g.origin[n] == "statement" \
                and g.defn(n).init and n not in g.cached_write:
            moves.append((f"cache_write({n}) after transformations",
                          lambda n=n: s.cache_write(s[n], "local"),
                          ["cache_write", "already has loop transformations"]))
        spatial = [a for a in lv if a.kind == "spatial"]
        if spatial:
            moves.append((f"{n}.rfactor(spatial)", lambda stg=stg, a=spatial[0]: stg.rfactor(a),
                          ["rfactor"]))
    # compute_at at a non-consumer; cache_read by a non-reader
    for p in s.states:
        t = g.tensor(p)
        for c in names:
            if c != p and not _consumes(s, c, t) and s[c].leaf_axes:
                if not _siblings(s.states[p], s.states[c]) or _consumes(s, p, g.tensor(c)):
                    # (a sibling over the same indices may be computed there: compute_at)
                    moves.append((f"{p}.compute_at(non-consumer {c})",
                                  lambda p=p, c=c: s[p].compute_at(s[c], s[c].leaf_axes[0]),
                                  ["compute_at", "does not read"]))
                if s.tensors[t][2] == "global":
                    moves.append((f"cache_read({t}) by non-reader {c}",
                                  lambda t=t, c=c: s.cache_read(t, "shared", [s[c]]),
                                  ["cache_read", "does not read"]))
                break
    for n in s.states:
        if g.attach[n] == ("inline",):
            for p in s.states:
                if p != n and g.tensor(p) in g.defn(n).reads() and len(s.writers(g.tensor(p))) == 1 \
                        and s[n].leaf_axes:
                    moves.append((f"{p}.compute_at(inlined {n})",
                                  lambda p=p, n=n: s[p].compute_at(s[n], s[n].leaf_axes[0]),
                                  ["compute_at", "inlined"]))
    for n, st_ in s.states.items():
        if st_.snapshot is None:
            continue
        src, reader = st_.snapshot
        moves.append((f"{n}.set_scope('shared')", lambda n=n: s[n].set_scope("shared"),
                      ["set_scope", "snapshot", "stays in global memory"]))
        if g.attach[n] != ("inline",):
            # (or: a copy computed at the snapshot must move first)
            moves.append((f"{n}.compute_inline()", lambda n=n: s[n].compute_inline(),
                          ["compute_inline", ("snapshot", "move it first"),
                           ("Keep it at root", "move it first")]))
        if s[reader].leaf_axes and g.attach[reader] != ("inline",):
            moves.append((f"{n}.compute_at(its reader {reader})",
                          lambda n=n, r=reader: s[n].compute_at(s[r], s[r].leaf_axes[0]),
                          # (or: a copy of the source computed at the snapshot would
                          # then be inside the writer too)
                          # (or the snapshot binds blocks of its own)
                          ["compute_at", ("snapshot", "vectorized", "in-place update",
                                          "cannot bind blocks")]))
        if src not in g.defn(reader).reads():
            moves.append((f"cache_read({src}) by the in-place {reader}",
                          lambda src=src, r=reader: s.cache_read(src, "shared", [s[r]]),
                          ["cache_read", ("in place", "does not read")]))
    moves.append(("cache_read unknown tensor", lambda: s.cache_read("NOPE", "shared", [s.stages[-1]]),
                  ["cache_read", "unknown tensor"]))
    moves.append(("unknown stage", lambda: s["NOPE"], ["no stage named 'NOPE'"]))
    return moves


def _consumes(s, stage, tensor):
    """(stages read what the stages before them wrote: a later writer of a tensor,
    such as an in-place update, is not a producer)"""
    order = list(s.states)
    seen, todo = set(), [stage]
    while todo:
        cur = todo.pop()
        reads = s.states[cur].definition.reads()
        if tensor in reads:
            return True
        for t in reads:
            for w in s.writers(t):
                if w not in seen and order.index(w) < order.index(cur):
                    seen.add(w)
                    todo.append(w)
    return False


def _removed_use(self, stg, a):
    """Use axis `a`, just split away, in a random primitive."""
    uses = [lambda: stg.split(a, 2), lambda: stg.unroll(a), lambda: stg.vectorize(a),
            lambda: stg.bind(a, "threadIdx.x"), lambda: stg.reorder(a),
            lambda: stg.fuse(a, stg.leaf_axes[-1]), lambda: stg.tile(a, stg.leaf_axes[-1], 2, 2)]
    i = self.draw(st.integers(0, len(uses) - 1), label="use of removed axis")
    return uses[i]()


Gen._removed_use = _removed_use


@settings(max_examples=_n(80), deadline=DEADLINE, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), opname=st.sampled_from(sorted(OPS)))
def test_illegal_primitives_raise_schedule_error(data, opname):
    sizes = data.draw(sizes_strategy(opname), label="sizes")
    g = Gen(data, opname, sizes)
    g.run(max_steps=5)
    moves = _illegal_moves(g)
    desc, thunk, fragments = data.draw(st.sampled_from(moves), label="illegal move")
    note("\n".join(g.log))
    note(f"illegal: {desc}")
    g._legal_prefix_json = g.s.to_json()
    try:
        thunk()
    except tcomp.ScheduleError as e:
        msg = str(e)
        for f in fragments:  # a tuple: any one of several valid reasons
            assert any(x in msg for x in ((f,) if isinstance(f, str) else f)), (desc, msg)
    else:
        pytest.fail(f"{desc}: no ScheduleError")
    # Nothing recorded by the failed primitive (a legal split before it may have been).
    assert g.s.to_json() == g._legal_prefix_json


# ------------------------------------------------------------------ regression tests (bugs)
def _run_vs_evaluate(op, s, arrays, sizes=None):
    want = tcomp.evaluate(op, *arrays)
    got = tcomp.build(s, "sim", sizes=sizes)(*arrays)
    assert_same(op, got, want)


@pytest.fixture(scope="module")
def chain_data():
    op = get_op("chain")
    return op, make_inputs(op, {"M": 4, "N": 6}, 1)


# Each regression test below pins what tcomp does today with the schedule that
# was once computed wrong: either it is accepted and right (run against
# evaluate), or it is refused with a message naming the stages involved. A test
# of a refusal is paired with the nearest schedule that is accepted (usually
# the remedy the message suggests), run against evaluate, so that a check that
# refuses too much fails as surely as one that refuses too little.
SOFTMAX_SIZES = {"N": 3, "D": 4}


def _refused(s, sizes, error, *fragments):
    """Building `s` raises `error` whose message holds every fragment."""
    with pytest.raises(error) as e:
        tcomp.build(s, "sim", sizes=sizes)
    for f in fragments:
        assert f in str(e.value), str(e.value)


@pytest.mark.parametrize("how", ["split", "tile"])
def test_transforming_an_attach_point_keeps_the_attached_stage(chain_data, how):
    """U computed at D's loop m; then m is split or tiled: U stays computed, at
    the outer loop (it was silently never computed: wrong U and D)."""
    op, arrays = chain_data
    s = tcomp.Schedule(op)
    U, D = s["U"], s["D"]
    m, n = D.axes
    U.compute_at(D, m)
    if how == "split":
        D.split(m, 2)
    else:
        D.tile(m, n, 2, 2)
    _run_vs_evaluate(op, s, arrays)


def test_fusing_away_an_attach_point_is_refused(chain_data):
    op, arrays = chain_data
    s = tcomp.Schedule(op)
    U, D = s["U"], s["D"]
    m, n = D.axes
    U.compute_at(D, m)
    with pytest.raises(tcomp.ScheduleError, match=r"fuse: stage 'U' is computed at 'D.m', which "
                                                  r"fusing would remove; compute it at 'n' or "
                                                  r"after the fuse"):
        D.fuse(m, n)
    # the remedy: fuse first, then compute U at the fused loop
    s = tcomp.Schedule(op)
    U, D = s["U"], s["D"]
    U.compute_at(D, D.fuse(*D.axes))
    _run_vs_evaluate(op, s, arrays)


def test_compute_at_transitive_consumer():
    """API.md lets a stage be computed at any consumer; at a transitive one the
    intermediate stage (root, its own earlier kernel) would read maxVal before
    it is computed: wrong answer until b91178d, a LoweringError since."""
    op = get_op("softmax")
    arrays = make_inputs(op, SOFTMAX_SIZES, 2)
    s = tcomp.Schedule(op)
    s["maxVal"].compute_at(s["O"], s["O"].axes[0])
    _refused(s, SOFTMAX_SIZES, tcomp.LoweringError,
             "stage 'expDistance' reads 'maxVal', which is computed inside 'O' (compute_at)")
    # accepted: maxVal at its direct consumer
    s = tcomp.Schedule(op)
    s["maxVal"].compute_at(s["expDistance"], s["expDistance"].axes[0])
    _run_vs_evaluate(op, s, arrays, SOFTMAX_SIZES)


@pytest.mark.parametrize("order", ["expDistance first", "expSum first"])
def test_compute_at_one_of_several_consumers(order):
    """expDistance is read by expSum and O; computed at O, the expSum kernel
    (which runs first) would read it unwritten: refused. With expSum computed
    at O as well (the remedy the message names), accepted and right."""
    op = get_op("softmax")
    arrays = make_inputs(op, SOFTMAX_SIZES, 3)
    s = tcomp.Schedule(op)
    s["expDistance"].compute_at(s["O"], s["O"].axes[0])
    _refused(s, SOFTMAX_SIZES, tcomp.LoweringError,
             "stage 'expSum' reads 'expDistance', which is computed inside 'O' (compute_at); "
             "compute 'expSum' inside 'O' too")
    s = tcomp.Schedule(op)
    names = ["expDistance", "expSum"] if order == "expDistance first" else ["expSum", "expDistance"]
    for n in names:
        s[n].compute_at(s["O"], s["O"].axes[0])
    _run_vs_evaluate(op, s, arrays, SOFTMAX_SIZES)


def test_cache_read_of_a_tensor_computed_at_its_reader():
    op = get_op("softmax")
    arrays = make_inputs(op, SOFTMAX_SIZES, 4)
    s = tcomp.Schedule(op)
    s["maxVal"].compute_at(s["expDistance"], s["expDistance"].axes[0])
    s.cache_read("maxVal", "global", [s["expDistance"]])
    _refused(s, SOFTMAX_SIZES, tcomp.LoweringError,
             "stage 'maxVal.global' reads 'maxVal', which is computed inside 'expDistance'")
    # accepted: the copy computed inside expDistance too, after maxVal
    s = tcomp.Schedule(op)
    ED = s["expDistance"]
    s["maxVal"].compute_at(ED, ED.axes[0])
    s.cache_read("maxVal", "global", [ED]).compute_at(ED, ED.axes[0])
    _run_vs_evaluate(op, s, arrays, SOFTMAX_SIZES)


@pytest.mark.parametrize("scope", ["global", "local"])
def test_cache_write_of_a_stage_hosting_another(chain_data, scope):
    """Accepted and right (U stays computed inside D's loop)."""
    op, arrays = chain_data
    sizes = {"M": 4, "N": 6}
    s = tcomp.Schedule(op)
    U, D = s["U"], s["D"]
    U.compute_at(D, D.axes[0])
    DL = s.cache_write(D, scope)
    if scope == "local":
        DL.compute_at(D, D.axes[0])
    _run_vs_evaluate(op, s, arrays, sizes)


SHIFTED = """def shifted(float(N) A) -> (D) {
  T(i) = A(i) * 2.0
  U(i) = T(i + 1) where i in 0:N-1
  D(i) = U(i) + T(i) where i in 0:N-1
}"""


def test_producer_computed_at_reader_that_also_reads_it_through_an_inlined_stage():
    """T (a temporary) is read by D directly (T(i)) and through the inlined
    temporary U (T(i+1)); computed at D.i, T's region covers both reads
    (it covered T(i) only: D read T(i+1) before it was computed)."""
    op = tcomp.op(SHIFTED)
    A = np.arange(7, dtype=np.float32) + 1
    s = tcomp.Schedule(op)
    s["U"].compute_inline()
    s["T"].compute_at(s["D"], s["D"].axes[0])
    _run_vs_evaluate(op, s, [A])


@pytest.mark.parametrize("scope", ["global", "local", "shared"])
def test_copy_computed_at_reader_that_also_reads_it_through_an_inlined_stage(scope):
    """Same with a cache_read copy of T read by U and D (it gave wrong values
    (global) and a SimError out of bounds of the too-small copy (shared/local))."""
    op = tcomp.op(SHIFTED)
    A = np.arange(7, dtype=np.float32) + 1
    s = tcomp.Schedule(op)
    X = s.cache_read("T", scope, [s["U"], s["D"]])
    s["U"].compute_inline()
    X.compute_at(s["D"], s["D"].axes[0])
    _run_vs_evaluate(op, s, [A])


def test_shared_accumulator_inside_thread_loop():
    """A shared cache_write stage computed inside the consumer's threadIdx loop
    is computed for the whole (thread-relaxed) region by every thread; with its
    reduction accumulating in the buffer (a spatial loop inside the reduction
    loop) every thread did C_shared[i] = C_shared[i] + ... on the same words:
    a race (SimError in sim, double-counted sums on a GPU). Accepted and right
    now (the stores are restricted to one thread)."""
    op = get_op("matmul")
    sizes = {"M": 2, "K": 3, "N": 2}
    arrays = make_inputs(op, sizes, 9)
    s = tcomp.Schedule(op)
    C = s["C"]
    CS = s.cache_write(C, "shared")
    m, n = C.axes
    C.bind(n, "threadIdx.x")
    CS.compute_at(C, n)
    cm, cn = CS.axes
    (k,) = CS.reduce_axes
    CS.reorder(k, cm)
    _run_vs_evaluate(op, s, arrays, sizes)


def test_pipelined_copy_hosting_another_copy():
    """pipeline() double-buffers the shared copy A.shared1 computed at
    A.shared's loop; A.shared1 itself hosts A.shared2. The pipelined nest
    duplicated A.shared2's copy into the prefetch and the store halves, with no
    barrier between another thread's read and the rewrite (SimError, WAR race).
    Accepted and right now."""
    op = get_op("total")
    A = make_inputs(op, {"N": 3}, 10)
    s = tcomp.Schedule(op)
    S = s["S"]
    (r,) = S.reduce_axes
    S.bind(r, "threadIdx.x")
    c1 = s.cache_read("A", "shared", [S])
    c2 = s.cache_read("A", "shared", [c1])
    c3 = s.cache_read("A", "shared", [c2])
    c1.compute_at(S, r)
    c2.compute_at(c1, c1.axes[0])
    c3.compute_at(c2, c2.axes[0])
    c1.pipeline(c1.axes[0])
    _run_vs_evaluate(op, s, A, {"N": 3})


def test_vectorize_rfactor_stage_without_reduction_axes():
    """rfactor of the only reduction axis leaves C.rf with no reduction axis
    (but still a reduction): lowering puts its register accumulator inside the
    innermost loop, so a legal vectorize (innermost, constant extent, accepted
    by the primitive) fails: "vectorized loop 'n_i' is not innermost: it
    contains alloc". The same loop nest without the accumulator vectorizes."""
    op = get_op("matmul")
    sizes = {"M": 2, "N": 4, "K": 3}
    arrays = make_inputs(op, sizes, 11)
    s = tcomp.Schedule(op)
    C = s["C"]
    R = C.rfactor(C.reduce_axes[0])
    k, m, n = R.axes
    no, ni = R.split(n, 2)
    R.vectorize(ni)
    _run_vs_evaluate(op, s, arrays, sizes)


def test_inlined_output_reads_a_stage_computed_later():
    """expDistance is an output: inlined, it is still written by its own root
    kernel, which reads maxVal -- but maxVal is then computed inside expSum's
    kernel, which runs later: refused (it gave a wrong expDistance). Inlined
    with maxVal at root: accepted and right."""
    op = get_op("softmax")
    arrays = make_inputs(op, SOFTMAX_SIZES, 12)
    s = tcomp.Schedule(op)
    s["expDistance"].compute_inline()
    s["maxVal"].compute_at(s["expSum"], s["expSum"].axes[0])
    _refused(s, SOFTMAX_SIZES, tcomp.LoweringError,
             "stage 'expDistance' reads 'maxVal', which is computed inside 'expSum'")
    s = tcomp.Schedule(op)
    s["expDistance"].compute_inline()
    _run_vs_evaluate(op, s, arrays, SOFTMAX_SIZES)


@pytest.mark.parametrize("scope", ["global", "local"])
def test_cache_write_drops_a_stage_computed_at_a_reduction_loop(scope):
    """A copy of A is computed at C's reduction loop r_k; cache_write(C) turns C
    into a copy-out stage without r_k. The copy used to stay attached to 'C.r_k'
    and never be computed (wrong answer, or SimError "unknown buffer
    'A_local'"); accepted and right now."""
    op = get_op("matmul")
    sizes = {"M": 3, "K": 4, "N": 2}
    arrays = make_inputs(op, sizes, 13)
    s = tcomp.Schedule(op)
    C = s["C"]
    (k,) = C.reduce_axes
    s.cache_read("A", scope, [C]).compute_at(C, k)
    CL = s.cache_write(C, "local")
    CL.compute_at(C, C.axes[1])
    _run_vs_evaluate(op, s, arrays, sizes)


def test_rfactor_drops_a_stage_computed_at_a_vanished_loop():
    """rfactor(k_i) moves C's loop r_k_o into C.rf; a copy computed at 'C.r_k_o'
    used to keep pointing at a loop C no longer has. Accepted and right now."""
    op = get_op("matmul")
    sizes = {"M": 3, "K": 6, "N": 2}
    arrays = make_inputs(op, sizes, 14)
    s = tcomp.Schedule(op)
    C = s["C"]
    ko, ki = C.split(C.reduce_axes[0], 2)
    s.cache_read("A", "global", [C]).compute_at(C, ko)
    C.rfactor(ki)
    _run_vs_evaluate(op, s, arrays, sizes)


def test_rfactor_twice_keeps_both_stages():
    op = get_op("matmul")
    arrays = make_inputs(op, {"M": 3, "K": 5, "N": 2}, 5)
    s = tcomp.Schedule(op)
    C = s["C"]
    C.rfactor(C.reduce_axes[0])
    C.rfactor(C.reduce_axes[0])
    _run_vs_evaluate(op, s, arrays)


@pytest.mark.parametrize("scope", ["shared", "local"])
def test_cache_read_left_at_root(scope):
    """A shared or local copy left at root (no compute_at) is refused with the
    remedy; computed at C's row loop (at fixed sizes: a fixed-size buffer), it
    is accepted and right."""
    op = get_op("matmul")
    sizes = {"M": 3, "K": 5, "N": 2}
    arrays = make_inputs(op, sizes, 6)
    s = tcomp.Schedule(op)
    s.cache_read("A", scope, [s["C"]])
    _refused(s, sizes, tcomp.LoweringError,
             f"stage 'A.{scope}' writes a {scope} buffer but is computed at root; use compute_at "
             f"to place it inside a loop of a stage that reads it")
    s = tcomp.Schedule(op)
    s.cache_read("A", scope, [s["C"]]).compute_at(s["C"], s["C"].axes[0])
    _run_vs_evaluate(op, s, arrays, sizes)


# ------------------------------------------------------------------ hand-written legal schedules
def test_storage_align_after_fuse():
    """storage_align describes the copy's buffer dimension, so it should still
    take the copy's original axis after the loops over it were fused for
    cooperative fetching (the usual order in TVM-style schedules). (Failed with
    'storage_align: axis ... no longer exists as a loop' until the primitive
    stopped requiring a current loop.)"""
    op = get_op("matmul")
    sizes = {"M": 4, "K": 6, "N": 4}
    arrays = make_inputs(op, sizes, 8)
    s = tcomp.Schedule(op)
    C = s["C"]
    m, n = C.axes
    C.bind(n, "threadIdx.x")
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, m)
    a0, a1 = AS.axes
    f = AS.fuse(a0, a1)
    fo, fi = AS.split(f, 4)
    AS.bind(fi, "threadIdx.x")
    AS.storage_align(a0, 8, 1)
    _run_vs_evaluate(op, s, arrays, sizes)


def test_classic_gemm_schedule():
    """The tutorial-style schedule: tiles, blocks, threads, shared copies with
    cooperative fetching, register accumulation via cache_write."""
    op = get_op("matmul")
    sizes = {"M": 9, "K": 7, "N": 10}
    arrays = make_inputs(op, sizes, 7)
    s = tcomp.Schedule(op)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    CL.compute_at(C, ni)
    (k,) = CL.reduce_axes
    ko, ki = CL.split(k, 3)
    lm, ln = CL.axes
    CL.reorder(ko, ki, lm, ln)
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [CL])
        X.compute_at(CL, ko)
        a0, a1 = X.axes
        X.storage_align(a0, 8, 1)
        f = X.fuse(a0, a1)
        fo, fi = X.split(f, 4)
        X.bind(fi, "threadIdx.x")
    _run_vs_evaluate(op, s, arrays, sizes)
    s2 = tcomp.Schedule.from_json(op, s.to_json())
    assert str(tcomp.lower(s2, sizes)) == str(tcomp.lower(s, sizes))
