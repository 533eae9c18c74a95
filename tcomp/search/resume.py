"""Resume: what a tune takes over from its records file (tuner.py).

    failed = resume(st, records.matching(op, sizes, target), check)

1. Lines are grouped by candidate (op, sizes, target, schedule): the last
   line of a candidate is its result (records.py), so a candidate counts
   once, however often it was measured.
2. A candidate whose only line is a `timeout` is measured again, once,
   before anything new (`st.retry`): a timeout may say more about the
   machine (a loaded CPU, a worker that was still starting) than about the
   candidate. Its new line is appended; a second `timeout` is final.
3. Every other candidate is a resumed Trial: counted toward `trials`, its
   time trains the model, and, when its recorded plan still yields its
   schedule (`Space.from_plan`), it is a parent for mutations as if measured
   in this run.
4. The best resumed Trial is re-checked (recheck.py: on the sim against
   `tcomp.evaluate`) before it counts as the best so far; one that fails
   becomes a failed Trial with a RecordCheckWarning, and the next best is
   re-checked in turn. `resume` returns the failures (trial, record,
   re-check result), which tune appends to the records so that the next
   run does not check them again.
5. The search's random draws are seeded from (seed, lines resumed): a
   rerun after an interruption draws new candidates rather than the first
   run's pool again, whose candidates are all measured by then (that
   made a resumed tune stop at once with a false "exhausted"). The same
   records and seed still give the same run.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from .records import Record
from .recheck import RecordCheckWarning, failed_text
from .space import Candidate


@dataclass(frozen=True)
class Retry:
    """A candidate recorded once, as a timeout, to measure again."""
    cand: Candidate  # with its plan, or plan "null" when the record has none usable
    record: Record


def resume(st, found: list, check, seed: int, path: str) -> list:
    """Take over `found` (records of this op, sizes and target, in file order)
    into the tuner's state `st` (see the module docstring); `check(schedule
    text) -> MeasureResult` re-checks a record; `path`: the records file."""
    from .tuner import Trial, canonical
    groups: dict = {}
    for r in found:
        groups.setdefault(r.key, []).append(r)
    entries = []  # (Trial, Record)
    for lines in groups.values():
        r = lines[-1]
        text = r.schedule_json
        cand = st.space.from_plan(r.plan, text) if r.plan is not None else None
        if cand is not None:
            text = cand.schedule  # the same schedule, as the space writes it
        if len(lines) == 1 and r.error == "timeout":
            st.retry.append(Retry(cand if cand is not None else Candidate(text, "null", ""), r))
            st.measured.add(canonical(text))
            continue
        if cand is not None:
            st.cands[text] = cand  # a parent for mutations, as if measured here
        w = r.search or {}
        entries.append((Trial(0, text, cand.sketch if cand is not None else "", r.median_ms,
                              r.predicted_ms, r.error, r.message, 0.0, resumed=True,
                              round=w.get("round", 0), rank=w.get("rank"),
                              pool=w.get("pool", 0)), r))
    failed = _recheck_best(st, entries, check, path)
    for t, _ in entries:
        st._add(dataclasses.replace(t, index=st.done + 1), canonical(t.schedule))
    st.resumed = st.done
    if found:
        st.rng = np.random.default_rng([seed, len(found)])
    st.refit()
    return failed


def _recheck_best(st, entries: list, check, path: str) -> list:
    """Re-check the best entry until one passes (see the module docstring)."""
    failed = []
    while True:
        scored = [i for i, (t, _) in enumerate(entries) if t.score(st.timed) is not None]
        if not scored:
            return failed
        i = min(scored, key=lambda i: entries[i][0].score(st.timed))
        t, rec = entries[i]
        res = check(t.schedule)
        if res.ok:
            return failed
        t = dataclasses.replace(t, time_ms=None, error=res.error,
                                message=f"re-checked on the sim on resume: {res.message}")
        entries[i] = (t, rec)
        st.cands.pop(t.schedule, None)
        failed.append((t, rec, res))
        warnings.warn(f"tune: {path}:{rec.line}: the best recorded candidate is passed over: "
                      f"{failed_text(res)}; the next best is used", RecordCheckWarning,
                      stacklevel=4)
