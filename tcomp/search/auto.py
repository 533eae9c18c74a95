"""`tcomp.auto_schedule`: a schedule chosen without measuring.

    s = tcomp.auto_schedule(op, {"M": 4096, "N": 4096, "K": 4096})
    k = tcomp.build(op, target="cuda", sizes=sizes)     # the same choice, then built
    k.remarks                                           # what was chosen, and why

The choice, in order:
1. tuning records (`records=path`), when they hold a valid record of this op
   at these sizes and target: the best one (`tcomp.search.best`), checked
   like any other choice below;
2. otherwise the schedule space of the search (space.py: the sketch rules,
   every candidate replayed, lowered and checked against the device limits),
   `candidates` plans drawn with a seed derived from the op and the sizes (so
   the same call chooses the same schedule), plus, per sketch drawn, its
   rules' reference point (the measured-good tile of bench/'s hand schedule,
   rules/references.py: Space.references), ranked by the analytic estimate
   of features.py (traffic and arithmetic against the H200's ceilings, over
   the share of the device the launch keeps busy). The plain default schedule
   (`tcomp.Schedule(op)`: one thread) is a candidate too, so the choice is
   never estimated slower than it;
3. the chosen schedule is run on the sim at small sizes
   (`identity.small_sizes`) against `tcomp.evaluate` on random inputs before
   it is returned (`check=True`); a candidate that fails the check is passed
   over, with a remark, for the next best. A compiler that lies loses its
   users: this costs a few hundred milliseconds and is on by default.

Sizes: tiles are drawn from loop extents, so every size variable needs a
value. Those not given take `HINT` (1024) for the choice only: the schedule
is correct at any size (tails are guarded), and lowering at the caller's
sizes is checked too (a candidate that does not lower there is passed over);
a remark says which sizes were assumed.

Specialisation: with sizes left symbolic, a vectorized choice whose vectors
lowering declines there gets a variant for the divisibility they need
(`D % 4 == 0`), found by lowering (auto_specialize.py), and a remark.

The estimate is a proxy, not a measurement: `tcomp.tune` measures, and its
records, passed as `records=`, win.
"""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import TcompError
from ..lang.op import Op
from ..schedule import Schedule
from .auto_specialize import Lowerings, specialized
from .rules.base import limits_for
from .identity import sizes_text, small_sizes
from .oracle import OracleError, compare, make_case, seed_of

HINT = 1024  # the value assumed for a size variable the caller leaves symbolic
CHECK_BUDGET = 1 << 13  # the sim check's work (identity.work_of) at most
TARGETS = ("cuda", "sim")


@dataclass
class AutoChoice:
    """What `auto_schedule` chose and why: the schedule, where it came from
    ("records", "estimate" or "default"), the sketch (rules per stage), the
    estimated milliseconds at the choice sizes, how many candidates were
    ranked, the sizes the choice assumed, the milliseconds it took, and the
    remarks (one line each, also on a built kernel's `remarks`)."""
    schedule: Schedule
    source: str
    sketch: str
    estimate_ms: float | None
    candidates: int
    sizes: dict
    seconds: float = 0.0
    remarks: list[str] = field(default_factory=list)


def auto_schedule(op: Op, sizes: dict | None = None, target: str = "cuda", *,
                  records=None, candidates: int = 24, check: bool = True,
                  seed: int | None = None, specialize: bool = True) -> Schedule:
    """A schedule for `op` at `sizes`, chosen by the cost estimate without
    measuring (see the module docstring). `records`: a tuning-records file
    whose best valid record wins; `candidates`: how many plans of the space
    are ranked; `check`: run the choice on the sim at small sizes against
    `tcomp.evaluate` first; `specialize`: with sizes left symbolic, give a
    vectorized choice a variant for the divisibility its vectors need
    (auto_specialize.py). The returned Schedule is an ordinary one (with
    variants, `Schedule.specialize`, where it was specialised): schedule it
    further, serialise it (`to_json`) or build it."""
    return choose(op, sizes, target, records=records, candidates=candidates, check=check,
                  seed=seed, specialize=specialize).schedule


def choose(op: Op, sizes: dict | None = None, target: str = "cuda", *, records=None,
           candidates: int = 24, check: bool = True, seed: int | None = None,
           specialize: bool = True) -> AutoChoice:
    """`auto_schedule` with its reasons: the AutoChoice."""
    with paused_gc():
        return _choose(op, sizes, target, records, candidates, check, seed, specialize)


@contextlib.contextmanager
def paused_gc():
    """The cyclic garbage collector off for the duration (as it was, after).
    A choice builds and drops hundreds of thousands of IR nodes: acyclic
    trees that reference counting frees as they go. With the collector on,
    that allocation triggers its collections, the oldest generation's a walk
    of the whole heap, which find nothing to free and took 10-20% of
    auto_schedule's CPU time (bench/auto_time.py; the sim's compile pauses it
    for the same reason, target_sim/executor.py). What cycles a choice leaves
    are collected at the next collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _choose(op, sizes, target, records, candidates, check, seed, specialize) -> AutoChoice:
    from .space import Space
    from . import features as F
    t0 = time.perf_counter()
    if not isinstance(op, Op):
        raise TcompError(f"auto_schedule: needs a tcomp Op (tcomp.op(src)), got "
                         f"{type(op).__name__}")
    if target not in TARGETS:
        raise TcompError(f"auto_schedule: unknown target {target!r} (targets: "
                         f"{', '.join(TARGETS)})")
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise TcompError(f"auto_schedule: candidates must be a positive int, got {candidates!r}")
    given = _given_sizes(op, sizes)
    assumed = {v: HINT for v in op.size_vars if v not in given}
    at = {**given, **assumed}
    at = {v: at[v] for v in op.size_vars}
    remarks = []
    if assumed:
        remarks.append(f"auto_schedule: sizes {sizes_text(assumed)} assumed for the choice "
                       f"(not given); pass sizes= for a schedule fitted to your shapes")
    checker = _Checker(op, at) if check else None
    lowerings = Lowerings()  # at the caller's sizes: _lowers, then the specialisation's

    def usable(s: Schedule, what: str) -> bool:
        if assumed and not _lowers(s, given, what, remarks, lowerings):
            return False
        return checker is None or checker.ok(s, what, remarks)

    if records is not None:
        got = _from_records(op, at, target, records, remarks)
        if got is not None and usable(got, "the best record"):
            remarks.append(f"auto_schedule: the best record of {records} chosen (tuning records "
                           f"win over the estimate)")
            return _done(AutoChoice(got, "records", "records", None, 1, at, remarks=remarks), t0)

    space = Space(op, at, "cuda" if target.startswith("cuda") else "sim", limits_for(target))
    rng = np.random.default_rng(seed if seed is not None else seed_of(op, at))
    pool = space.generate(candidates, rng)
    pool += space.references(pool)  # the rules' measured-good tiles, whatever the draws
    default = space.default()
    if default.schedule not in {c.schedule for c in pool} and space.analyse(default).ok:
        pool.append(default)
    ranked = sorted(((F.analytic_ms(space.features[c.schedule]), i, c) for i, c in
                     enumerate(pool) if c.schedule in space.features), key=lambda x: x[:2])
    for ms, _, cand in ranked:
        s = cand.replay(op)
        if usable(s, f"candidate {cand.sketch}"):
            src = "default" if cand.sketch == "default" else "estimate"
            remarks.append(f"auto_schedule: {cand.sketch} chosen from {len(ranked)} candidates "
                           f"by the analytic estimate ({ms:.4g} ms at {sizes_text(at)})")
            if specialize and assumed:
                spec = specialized(s, given, list(assumed), remarks, lowerings)
                if spec is not s and (checker is None or checker.variants_ok(spec, remarks)):
                    s = spec
            return _done(AutoChoice(s, src, cand.sketch, ms, len(ranked), at, remarks=remarks), t0)
    # Nothing usable: the plain default schedule, which is correct by construction.
    remarks.append("auto_schedule: no candidate of the space was usable; the plain default "
                   "schedule (one thread) is used")
    return _done(AutoChoice(Schedule(op), "default", "default", None, len(ranked), at,
                            remarks=remarks), t0)


def _done(choice: AutoChoice, t0: float) -> AutoChoice:
    choice.seconds = time.perf_counter() - t0
    return choice


def _given_sizes(op: Op, sizes) -> dict:
    from ..schedule.args import as_int
    if sizes is None:
        return {}
    if not hasattr(sizes, "items"):
        raise TcompError(f"auto_schedule: sizes must be a mapping of size variables to ints "
                         f"(e.g. {{'{(op.size_vars or ('N',))[0]}': 1024}}), got "
                         f"{type(sizes).__name__}")
    out = {}
    for k, v in sizes.items():
        if k not in op.size_vars:
            raise TcompError(f"auto_schedule: '{k}' is not a size variable of '{op.name}' "
                             f"(sizes: {', '.join(op.size_vars) or 'none'})")
        n = as_int(v)
        if n is None or n < 0:
            raise TcompError(f"auto_schedule: size {k} must be a non-negative int, got {v!r}")
        out[k] = n
    return out


def _lowers(s: Schedule, given: dict, what: str, remarks: list, lowerings: Lowerings) -> bool:
    """Whether `s` lowers at the caller's (partly symbolic) sizes."""
    try:
        lowerings(s, given)
    except TcompError as e:
        remarks.append(f"auto_schedule: {what} passed over: it does not lower at the given "
                       f"sizes ({_first_line(e)})")
        return False
    return True


class _Checker:
    """The sim check of a choice at small sizes, against the oracle."""

    def __init__(self, op: Op, at: dict):
        self.op, self.sizes = op, small_sizes(op, at, CHECK_BUDGET)
        self.case = None

    def ok(self, s: Schedule, what: str, remarks: list) -> bool:
        from ..build import build
        if self.case is None:
            try:
                self.case = make_case(self.op, self.sizes)
            except OracleError as e:  # random inputs the oracle refuses: nothing to check on
                remarks.append(f"auto_schedule: not checked on the sim ({_first_line(e)})")
                self.case = False
        if self.case is False:
            return True
        inputs, want = self.case
        try:
            got = build(s, target="sim", sizes=self.sizes)(*inputs)
        except TcompError as e:
            remarks.append(f"auto_schedule: {what} passed over: it fails on the sim at "
                           f"{sizes_text(self.sizes)} ({_first_line(e)})")
            return False
        problem = compare(self.op, got, want)
        if problem is not None:
            remarks.append(f"auto_schedule: {what} passed over: on the sim at "
                           f"{sizes_text(self.sizes)} it differs from tcomp.evaluate ({problem})")
            return False
        return True


    def variants_ok(self, s: Schedule, remarks: list) -> bool:
        """A specialised choice built with symbolic sizes (so that each variant is
        lowered for its condition, as a call at any size builds it) and run at
        the check sizes rounded up to satisfy each variant's divisibility."""
        from ..build import build
        for cond, _ in s.specializations:
            at = {v: -(-max(n, 1) // cond.divisors().get(v, 1)) * cond.divisors().get(v, 1)
                  for v, n in self.sizes.items()}
            what = f"the variant for {cond.text}"
            try:
                inputs, want = make_case(self.op, at)
                k = build(s, target="sim")
                got = k(*inputs)
            except OracleError:
                continue  # (as for the plain choice: nothing to check on)
            except TcompError as e:
                remarks.append(f"auto_schedule: {what} is dropped: it fails on the sim at "
                               f"{sizes_text(at)} ({_first_line(e)})")
                return False
            problem = compare(self.op, got, want) if k.ran == f"when {cond.text}" else \
                f"the call at {sizes_text(at)} ran {k.ran}"
            if problem is not None:
                remarks.append(f"auto_schedule: {what} is dropped: on the sim at "
                               f"{sizes_text(at)} it differs from tcomp.evaluate ({problem})")
                return False
        return True


def _from_records(op: Op, at: dict, target: str, records, remarks: list) -> Schedule | None:
    from .records import RecordsError, best
    try:
        return best(records, op, at, target)
    except RecordsError as e:
        remarks.append(f"auto_schedule: records {records} give no schedule here "
                       f"({_first_line(e)}); the estimate chooses")
        return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
