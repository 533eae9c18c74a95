"""The schedule space of one op at given sizes: candidates drawn from the
sketch rules (rules/), each replayed and lowered before it is returned.

A *plan* says how every stage is scheduled, as plain data:

    {"inline": ["t"],                            # elementwise temporaries substituted
     "stages": {"C": {"rule": "simt_tile", "bm": 128, ...},   # root stages, one rule each
                ...}}

Stages a rule schedules inside another (the row statistics of `row`) and
inlined stages have no entry of their own. Applying a plan to a fresh
`Schedule(op)` gives the directives; the candidate is their JSON text
(`Schedule.to_json()`), which `Schedule.from_json(op, text)` replays, and the
plan is kept beside it so the search can mutate parameters rather than
directives.

    space = Space(op, {"M": 4096, "N": 4096, "K": 4096}, target="cuda")
    cands = space.generate(100, np.random.default_rng(0))   # all valid
    child = space.mutate(cands[0], rng)                      # valid too
    space.rejected     # Counter: why candidates were dropped ("schedule", "lowering", ...)
    space.lowered[c.schedule].program    # the Kernel IR each valid candidate lowered to
    space.features[c.schedule]           # its feature vector (features.py)

Each candidate is analysed once (`Space.analyse`, cached by schedule text):
replayed, lowered up to the `unroll` pass with that pass's checks, checked
against the limits, and its features read from that IR (validate.py says
why the search stops there). `lower_ms` keeps the milliseconds of each.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import TcompError
from ..schedule import Schedule
from . import graph as G
from . import features as F
from .rules import RULES, Context, Limits, extents_of
from .validate import Invalid, Valid, validate

__all__ = ["Candidate", "Space", "generate", "mutate"]


@dataclass(frozen=True)
class Candidate:
    """One point of the space. `schedule` is the text of `Schedule.to_json()`
    (replay: `Schedule.from_json(op, c.schedule)`); `plan` the JSON text of the
    plan that produced it (which rule and parameters per stage); `sketch`
    names the rules, "stage:rule" joined by ", " ("default" for none)."""
    schedule: str
    plan: str = field(compare=False)
    sketch: str = field(compare=False)

    def plan_dict(self) -> dict:
        return json.loads(self.plan)

    def replay(self, op) -> Schedule:
        return Schedule.from_json(op, self.schedule)


class SearchError(TcompError):
    """A bad argument to the search (missing sizes, a candidate without a plan)."""


class Space:
    """The candidates of `op` at `sizes` for `target` ("cuda" or "sim"), checked
    against `limits`. Every size variable of the op must be given: tile sizes
    are drawn from the loop extents."""

    def __init__(self, op, sizes: dict, target: str = "cuda", limits: Limits | None = None):
        missing = [v for v in op.size_vars if v not in (sizes or {})]
        if missing:
            raise SearchError(f"Space: sizes must bind every size variable of '{op.name}'; "
                              f"missing {', '.join(missing)} (e.g. sizes={{'{missing[0]}': 1024}})")
        self.op, self.sizes, self.target = op, dict(sizes), target
        self.limits = limits or Limits()
        base = Schedule(op)
        self.graph = G.stage_graph(base)
        self.order = G.topological_order(self.graph)
        inlined = frozenset(n for n in self.order if _inlinable(self.graph, n))
        self.ctx = Context(op, self.graph, self.sizes, extents_of(base, self.sizes), self.limits,
                           inlined)
        self.rejected: Counter = Counter()  # error kind -> candidates dropped
        self.errors: list[tuple[dict | None, Invalid]] = []  # (plan or None, why), latest 200
        self.lowered: dict[str, Valid] = {}  # schedule text -> its lowering
        self.features: dict[str, np.ndarray] = {}  # schedule text -> its feature vector
        self.lower_ms: list[float] = []  # replay + lowering + checks + features, per analysis
        # schedule text -> the Schedule `build` made it from, until analysed: the analysis
        # lowers that object instead of replaying the text (the same directives; the replay
        # cost a tenth of auto_schedule's time on a fused GEMM)
        self._built: dict[str, Schedule] = {}

    # ------------------------------------------------------------ plans
    def sample_plan(self, rng: np.random.Generator) -> dict:
        """A random plan: per root stage (outputs first), a rule among those
        that apply, chosen by weight, with sampled parameters."""
        ctx, claimed, stages = self.ctx, set(), {}
        for st in reversed(self.order):
            if st in ctx.inlined or st in claimed:
                continue
            rules = [r for r in RULES.values() if r.applies(ctx, st)]
            while rules:
                w = np.array([r.weight for r in rules])
                r = rules[int(rng.choice(len(rules), p=w / w.sum()))]
                params = r.sample(ctx, st, rng)
                if params is not None:
                    break
                rules.remove(r)
            else:
                continue  # no rule has feasible parameters: the default schedule for it
            if r.claims is not None:
                claimed |= set(r.claims(ctx, st))
            stages[st] = {"rule": r.name, **_jsonable(params)}
        return {"inline": sorted(ctx.inlined, key=self.order.index),
                "stages": {k: stages[k] for k in self.order if k in stages}}

    def build(self, plan: dict) -> Candidate:
        """Apply `plan` to a fresh Schedule (ScheduleError when a primitive
        refuses it)."""
        s = Schedule(self.op)
        kept = set()  # inlinable producers a stage's rule keeps as stages (tc_tile's a_stage)
        for st, p in plan["stages"].items():
            rule = RULES[p["rule"]]
            if rule.keeps is not None:
                kept |= rule.keeps(self.ctx, st, {k: v for k, v in p.items() if k != "rule"})
        for st in plan.get("inline", ()):
            if st not in kept:
                s[st].compute_inline()
        for st, p in plan["stages"].items():
            params = {k: v for k, v in p.items() if k != "rule"}
            RULES[p["rule"]].apply(s, self.ctx, st, params)
        sketch = ", ".join(f"{st}:{p['rule']}" for st, p in plan["stages"].items()) or "default"
        text = s.to_json()
        if text not in self.lowered:
            if len(self._built) >= 64:  # built and never analysed (a plan read back, unused)
                self._built.clear()
            self._built[text] = s
        return Candidate(text, json.dumps(plan, sort_keys=True), sketch)

    def from_plan(self, plan, schedule: str | None = None) -> Candidate | None:
        """The candidate of a plan read back from records: None when the plan
        does not apply here (a rule or parameter this tcomp does not have, a
        primitive that refuses it) or, given the recorded `schedule` text,
        when the plan no longer yields that schedule (rules changed since the
        record was written): a plan is trusted only as far as it reproduces
        what was measured."""
        from .identity import canonical_schedule
        try:
            rules = [p.get("rule") for p in plan["stages"].values()]
            if any(r not in RULES for r in rules):
                return None
            cand = self.build(plan)
        except (TcompError, KeyError, TypeError, ValueError, AttributeError):
            return None
        if schedule is not None and canonical_schedule(cand.schedule) != \
                canonical_schedule(schedule):
            return None
        return cand

    def default(self) -> Candidate:
        """The default schedule (every stage at root, serial): always valid."""
        return Candidate(Schedule(self.op).to_json(), json.dumps({"inline": [], "stages": {}}),
                         "default")

    # ------------------------------------------------------------ checks
    def analyse(self, cand: Candidate | str) -> Valid | Invalid:
        """Replay `cand` (a Candidate, or the text of a schedule), lower it up
        to the `unroll` pass, check it and read its features into
        `features` (all cached by schedule text); invalid ones are counted in
        `rejected` and kept in `errors`."""
        text = cand if isinstance(cand, str) else cand.schedule
        if text in self.lowered:
            return self.lowered[text]
        t = time.perf_counter()
        res = validate(self.op, self._built.pop(text, text), self.sizes, self.target, self.limits)
        if res.ok:
            self.features[text] = F.extract(res, self.sizes)
        self.lower_ms.append((time.perf_counter() - t) * 1e3)
        if res.ok:
            self.lowered[text] = res
        else:
            self._reject(cand.plan_dict() if isinstance(cand, Candidate) else None, res)
        return res

    validate = analyse  # the checks are the analysis: one lowering serves both

    def _reject(self, plan, why: Invalid):
        self.rejected[why.kind] += 1
        self.errors.append((plan, why))
        del self.errors[:-200]

    def _try(self, plan: dict) -> Candidate | None:
        try:
            cand = self.build(plan)
        except TcompError as e:
            self._reject(plan, Invalid("schedule", str(e)))
            return None
        return cand if self.validate(cand).ok else None

    # ------------------------------------------------------------ search
    def generate(self, n: int, rng: np.random.Generator, attempts: int | None = None) -> list:
        """Up to `n` distinct valid candidates from at most `attempts` plans
        (default 10 n). When none is valid, the default schedule is returned."""
        out, seen = [], set()
        for _ in range(attempts if attempts is not None else 10 * n):
            if len(out) >= n:
                break
            cand = self._try(self.sample_plan(rng))
            if cand is not None and cand.schedule not in seen:
                seen.add(cand.schedule)
                out.append(cand)
        if not out and self.validate(self.default()).ok:
            out.append(self.default())
        return out

    def referenced(self, cand: Candidate) -> Candidate | None:
        """`cand`'s plan with each stage's parameters replaced by the first
        reference point of its rule (Rule.reference: the measured-good
        parameters of bench/'s hand schedules, rules/references.py) that the
        rule's `feasible` accepts, merged over the drawn ones; None when no
        stage has such a point, nothing changes, or the result is invalid."""
        plan = cand.plan_dict()
        changed = False
        for st, p in plan["stages"].items():
            rule = RULES[p["rule"]]
            if rule.reference is None:
                continue
            drawn = {k: v for k, v in p.items() if k != "rule"}
            for ref in rule.reference(self.ctx, st):
                params = {**drawn, **ref}
                if rule.feasible(self.ctx, st, params):
                    new = {"rule": p["rule"], **_jsonable(params)}
                    changed |= new != p
                    plan["stages"][st] = new
                    break
        return self._try(plan) if changed else None

    def references(self, pool: list) -> list:
        """One referenced candidate (`referenced`) per distinct sketch of
        `pool` (its first candidate of that sketch), each new to the pool."""
        seen, sketches, out = {c.schedule for c in pool}, set(), []
        for c in pool:
            if c.sketch in sketches:
                continue
            sketches.add(c.sketch)
            r = self.referenced(c)
            if r is not None and r.schedule not in seen:
                seen.add(r.schedule)
                out.append(r)
        return out

    def mutate(self, cand: Candidate, rng: np.random.Generator, attempts: int = 20) -> Candidate:
        """A valid neighbour of `cand`: one parameter of one stage's rule drawn
        again (a tile size, an unroll or vector width, the pipeline depth, a
        cache on or off), or, one time in eight, that stage's rule drawn again.
        Returns `cand` itself when no valid neighbour is found in `attempts`."""
        plan = cand.plan_dict()
        if not plan["stages"]:
            return cand
        for _ in range(attempts):
            new = json.loads(cand.plan)
            st = list(new["stages"])[int(rng.integers(len(new["stages"])))]
            old = new["stages"][st]
            rule = RULES[old["rule"]]
            if rng.random() < 0.125:
                full = self.sample_plan(rng)["stages"].get(st)
                if full is None:
                    continue
                new["stages"][st] = full
            else:
                fresh = rule.sample(self.ctx, st, rng)
                keys = [k for k in (fresh or {}) if k != "rule"]
                if not keys:
                    continue
                k = keys[int(rng.integers(len(keys)))]
                params = {**{a: b for a, b in old.items() if a != "rule"},
                          k: _jsonable({k: fresh[k]})[k]}
                if not rule.feasible(self.ctx, st, params):
                    continue
                new["stages"][st] = {"rule": old["rule"], **params}
            if new == plan:
                continue
            child = self._try(new)
            if child is not None and child.schedule != cand.schedule:
                return child
        return cand


def _inlinable(g, n) -> bool:
    a = g.nodes[n]
    return (a["kind"] in ("elementwise", "injective", "gather") and not a["output"]
            and a["writers"] == 1 and a["origin"] == "statement" and g.out_degree(n) > 0)


def _jsonable(params: dict) -> dict:
    return json.loads(json.dumps(params))


def generate(op, sizes: dict, target: str = "cuda", n: int = 100,
             rng: np.random.Generator | None = None, limits: Limits | None = None) -> list:
    """`n` valid candidates of `op` at `sizes` (see Space.generate)."""
    return Space(op, sizes, target, limits).generate(n, rng if rng is not None
                                                    else np.random.default_rng())


def mutate(op, candidate: Candidate, rng: np.random.Generator, sizes: dict,
           target: str = "cuda", limits: Limits | None = None) -> Candidate:
    """A valid neighbour of `candidate` (see Space.mutate)."""
    return Space(op, sizes, target, limits).mutate(candidate, rng)
