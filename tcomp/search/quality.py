"""How good the cost model was during a tune, read back from its records.

Each round of the search (tuner.py) predicts the time of every candidate in
a pool, measures a batch of them and records, per candidate, its rank in the
predicted order (records.py, the `search` field: 0 is the predicted
fastest). A batch is a *hit* when its best measured candidate (the least
median time) was in the model's predicted top `top` (10) of that round's
pool: the model had recognised the candidate that turned out best. The
issue's target is hits in at least 80% of the batches chosen after 100
trials (the model then has 100 measurements to learn from).

    q = model_quality("mm.jsonl")              # the one op/sizes/target in the file
    q = model_quality("mm.jsonl", op, sizes, "cuda", top=10, after=100)
    q.hit_rate()          # (hits, batches) among batches chosen after `after` trials
    q.curve(window=10)    # per batch: (trials done, rolling hit rate, cumulative hit rate)
    print(q.summary()); print(q.table())
    plot_quality(q, "curve.png")   # best-so-far vs trials and vs time, and the hit rate

Batches with no timed result (every candidate failed) have no best and
count neither way. Records written outside a search, or by a tcomp that did
not keep ranks (format 1), count as trials (and in best-so-far) but belong
to no batch. On the sim nothing is timed: the scores are the model's own
estimates (the analytic proxy), so the best of a batch is by construction
the one ranked first and every batch hits; the figure means something only
for a timed run.

Time: each run's records carry seconds from that run's start; a file that
several runs appended to is laid out run after run (a run starts where the
previous one's last record ended). Records without a time sit at 0.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import TcompError
from ..lang.op import Op
from .identity import op_hash, sizes_text
from .records import Records, RecordsError


@dataclass(frozen=True)
class Batch:
    """One round's measurements. `first`: the 1-based trial index of its
    first record (trials before it: first - 1); `size`: records in it;
    `pool`: candidates the round predicted; `best_rank`: the predicted rank
    of its best measured candidate (None when nothing in it was timed);
    `hit`: best_rank < top (None when nothing was timed)."""
    run: str
    round: int
    first: int
    size: int
    pool: int
    best_rank: int | None
    hit: bool | None


@dataclass
class Quality:
    """The model-quality report of one op at one size for one target (see the
    module docstring). `trials`: per record in file order, (trial index,
    seconds on the laid-out time axis or None, best score so far or None)."""
    op: str
    sizes: dict
    target: str
    top: int
    after: int
    timed: bool
    batches: list = field(default_factory=list)
    trials: list = field(default_factory=list)

    def hit_rate(self, after: int | None = None) -> tuple[int, int]:
        """(hits, batches) among the scored batches chosen after `after`
        trials (default: self.after)."""
        after = self.after if after is None else after
        scored = [b for b in self.batches if b.hit is not None and b.first - 1 >= after]
        return sum(b.hit for b in scored), len(scored)

    def curve(self, window: int = 10) -> list:
        """Per scored batch, in order: (trials done at its end, hit rate of
        the last `window` scored batches, hit rate of all so far)."""
        out, hits = [], []
        for b in self.batches:
            if b.hit is None:
                continue
            hits.append(b.hit)
            last = hits[-window:]
            out.append((b.first + b.size - 1, sum(last) / len(last), sum(hits) / len(hits)))
        return out

    def summary(self) -> str:
        h, n = self.hit_rate()
        scored = sum(b.hit is not None for b in self.batches)
        rate = f"{h}/{n} = {100 * h / n:.0f}%" if n else "none yet"
        best = next((s for _, _, s in reversed(self.trials) if s is not None), None)
        lines = [f"{self.op} at {sizes_text(self.sizes)} for {self.target}: "
                 f"{len(self.trials)} trials, {len(self.batches)} batches ({scored} with a "
                 f"{'timed' if self.timed else 'valid'} result), best {_ms(best)}",
                 f"model: best measured candidate of a batch in the predicted top {self.top}: "
                 f"{rate} of the batches chosen after {self.after} trials "
                 f"(target: at least 80%); all batches: {_rate(*self.hit_rate(0))}"]
        if not self.timed:
            lines.append("(nothing is timed on the sim: batches are scored by the model's own "
                         "estimates, so every batch hits; judge the model on a timed run)")
        return "\n".join(lines)

    def table(self) -> str:
        """One line per batch: run, round, trials before it, size, pool,
        the best's predicted rank, hit."""
        rows = [f"{'batch':>5}  {'round':>5}  {'after':>5}  {'size':>4}  {'pool':>4}  "
                f"{'best rank':>9}  hit"]
        for i, b in enumerate(self.batches, 1):
            rank = "-" if b.best_rank is None else str(b.best_rank)
            hit = "-" if b.hit is None else ("yes" if b.hit else "no")
            rows.append(f"{i:>5}  {b.round:>5}  {b.first - 1:>5}  {b.size:>4}  {b.pool:>4}  "
                        f"{rank:>9}  {hit}")
        return "\n".join(rows)


def _ms(ms) -> str:
    from .tuner import fmt_ms
    return fmt_ms(ms)


def _rate(h: int, n: int) -> str:
    return f"{h}/{n} = {100 * h / n:.0f}%" if n else "no batch yet"


def model_quality(records, op: Op | str | None = None, sizes: Mapping | None = None,
                  target: str | None = None, top: int = 10, after: int = 100) -> Quality:
    """The report of the records in `records` (a path or a Records) for `op`
    (an Op, or a def's name), `sizes` and `target`; any left out may be
    omitted when the file holds records of one (op, sizes, target) only.
    `top`: the predicted ranks that count as a hit (0 .. top - 1); `after`:
    the trials before the batches `hit_rate` counts."""
    for name, v in (("top", top), ("after", after)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "top" else 0):
            raise TcompError(f"model_quality: {name} must be an integer >= "
                             f"{1 if name == 'top' else 0}, got {v!r}")
    recs = records if isinstance(records, Records) else Records(records)
    group = _select(recs, op, sizes, target)
    timed = any(r.times_ms is not None for r in group)
    q = Quality(group[0].op, dict(group[0].sizes), group[0].target, top, after, timed)
    offsets, ends, best = {}, {}, None
    for r in group:  # the time axis: runs one after another
        w = r.search
        if w is not None and w["run"] not in offsets:
            offsets[w["run"]] = sum(ends.values())
        if w is not None:
            ends[w["run"]] = max(ends.get(w["run"], 0.0), w["elapsed_s"])
    batches: dict = {}
    for i, r in enumerate(group, 1):
        s = _score(r, timed)
        if s is not None and (best is None or s < best):
            best = s
        w = r.search
        t = None if w is None else offsets[w["run"]] + w["elapsed_s"]
        q.trials.append((i, t, best))
        if w is not None:
            batches.setdefault((w["run"], w["round"]), []).append((i, r))
    for (run, rnd), members in batches.items():
        scored = [(_score(r, timed), r.search["rank"]) for _, r in members
                  if _score(r, timed) is not None]
        rank = min(scored)[1] if scored else None
        q.batches.append(Batch(run, rnd, members[0][0], len(members),
                               members[0][1].search["pool"], rank,
                               None if rank is None else rank < top))
    q.batches.sort(key=lambda b: b.first)
    return q


def _score(r, timed: bool):
    if not r.ok:
        return None
    return r.median_ms if timed else r.predicted_ms


def _select(recs: Records, op, sizes, target) -> list:
    found = list(recs)
    if op is not None:
        if isinstance(op, Op):
            h = op_hash(op)
            found = [r for r in found if r.op_hash == h]
        elif isinstance(op, str):
            found = [r for r in found if r.op == op]
        else:
            raise TcompError(f"model_quality: op must be a tcomp.Op or a def's name, got "
                             f"{type(op).__name__}")
    if sizes is not None:
        found = [r for r in found if r.sizes == dict(sizes)]
    if target is not None:
        found = [r for r in found if r.target == target]
    groups = sorted({(r.op, sizes_text(r.sizes), r.target) for r in found})
    if not found:
        asked = ", ".join(x for x in (
            f"op '{op.name if isinstance(op, Op) else op}'" if op is not None else "",
            f"sizes {sizes_text(dict(sizes))}" if sizes is not None else "",
            f"target '{target}'" if target is not None else "") if x) or "any op"
        raise RecordsError(f"model_quality: {recs.path} has no record of {asked}")
    if len(groups) > 1:
        shown = "; ".join(f"'{o}' at {s} for '{t}'" for o, s, t in groups[:5])
        raise RecordsError(f"model_quality: {recs.path} holds records of several ops, sizes or "
                           f"targets ({shown}); pass op=, sizes= and target= to pick one")
    return found


def plot_quality(q: Quality, path, window: int = 10) -> None:
    """Write an image (PNG by the name's extension) with three panels:
    best-so-far against trials, against time, and the hit rate against
    trials (rolling over `window` batches, cumulative, the 80% target and
    the `after` mark). Needs matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TcompError("plot_quality needs matplotlib, which is not installed here: pip "
                         "install matplotlib (or pip install 'tcomp[search]')") from None
    xs = [i for i, _, b in q.trials if b is not None]
    ys = [b for _, _, b in q.trials if b is not None]
    tt = [(t, b) for _, t, b in q.trials if b is not None and t is not None]
    label = "best time (ms)" if q.timed else "best estimated time (ms)"
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    a.step(xs, ys, where="post")
    a.set_xlabel("trials")
    b.step([t for t, _ in tt], [y for _, y in tt], where="post")
    b.set_xlabel("seconds (runs laid end to end)")
    for ax in (a, b):
        ax.set_ylabel(label)
        if ys and min(ys) > 0:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    cv = q.curve(window)
    c.plot([x for x, _, _ in cv], [r for _, r, _ in cv], marker=".",
           label=f"last {window} batches")
    c.plot([x for x, _, _ in cv], [r for _, _, r in cv], label="all batches so far")
    c.axhline(0.8, color="grey", linestyle="--", label="target 80%")
    c.axvline(q.after, color="grey", linestyle=":", label=f"{q.after} trials")
    h, n = q.hit_rate()
    c.set_title(f"after {q.after} trials: {_rate(h, n)}", fontsize=10)
    c.set_xlabel("trials")
    c.set_ylabel(f"best of batch in predicted top {q.top}")
    c.set_ylim(-0.05, 1.05)
    c.grid(True, alpha=0.3)
    c.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"tcomp tune {q.op} at {sizes_text(q.sizes)} ({q.target})")
    fig.tight_layout()
    try:
        fig.savefig(os.fspath(path))
    except OSError as e:
        raise TcompError(f"plot_quality: cannot write {os.fspath(path)}: {e.strerror or e}") \
            from None
    finally:
        plt.close(fig)
