"""`tcomp.tune`: evolutionary, cost-model-guided schedule search.

    res = tcomp.tune(op, sizes={"M": 4096, ...}, trials=200, records="mm.jsonl")
    res.schedule, res.time_ms, res.history

One run, round by round:
1. the *population* starts as `population` candidates from `Space.generate`
   (on resume: the best recorded candidates, and fresh ones for the rest);
2. each round makes a pool of unmeasured candidates: mutations
   (`Space.mutate`) of the best candidates so far and of the population,
   plus a few fresh ones from `Space.generate` (so no region of the space is
   left for good);
3. the cost model (model.py) predicts the pool's times from its features
   (features.py); a batch of `batch` is chosen epsilon-greedily: a fraction
   `epsilon` at random (at least one per batch of four or more), the rest
   the best predicted;
4. the batch is measured by the runner and every result appended to the
   records as it comes back (the runner's `on_result`; with the prediction),
   so a run stopped mid-batch loses only the candidates in flight;
5. the model is refit on every timed measurement; the population becomes
   the best measured candidates and the best predicted of the pool;
6. the run stops after `trials` measurements in all (the records' earlier
   measurements of this op, sizes and target count: rerunning the same call
   resumes and stops at the same total; raise `trials` to search further),
   when the best has not improved for `patience` rounds, after
   `time_limit_s`, when the space has nothing unmeasured left ("exhausted":
   a pool came up empty EXHAUSTED_AFTER + 1 times in a row, the later ones
   drawn wider: mutations of every measured candidate and a population of
   fresh ones), or at Ctrl-C (KeyboardInterrupt), which keeps everything
   measured.

Resume (resume.py): the records file is read first; its candidates for this
op, sizes and target are never measured again (but one recorded once as a
`timeout`, which is measured again, once, first), its timed ones train the
model (their schedules are lowered again for their features) and its best,
re-checked on the sim, is the best so far. Records also keep each
candidate's plan (records.py, format 2): a recorded plan that still yields
the recorded schedule (`Space.from_plan`) makes that record a candidate of
the search again, so the best recorded candidates are parents of the next
round's mutations, exactly as if they had been measured in this run.
Records without a plan (format 1, or from elsewhere) are replayed and learnt
from, not mutated. The random draws are seeded from the seed and the number
of records resumed, so a rerun explores on from where the last one stopped.

Progress: `progress(Progress)` is called after each measurement. A callback
that raises (anything but KeyboardInterrupt, which stops the tune as Ctrl-C
does) is reported once with a ProgressWarning and not called again in that
run; the search goes on.

Target "sim" (no GPU): the SimRunner checks each candidate's result on the
CPU but measures no time, so nothing can be learned; candidates are ranked
by the analytic proxy of features.py (traffic and arithmetic against the
H200's ceilings), the best is the correct candidate with the least proxy
time, and `time_ms` is that estimate (`res.timed` is False). Records keep
it as `predicted_ms`, which is how `tcomp.search.best` ranks sim records.
"""
from __future__ import annotations

import datetime
import math
import os
import time
import warnings
from collections.abc import Callable

import numpy as np

from ..lang.op import Op
from ..schedule import Schedule
from .model import CostModel
from .rules.base import limits_for
from .space import Candidate, SearchError, Space
from .trials import Progress, Trial, TuneResult


class ProgressWarning(UserWarning):
    """The progress callback of `tune` raised; it is not called again in that run."""


def tune(op, sizes: dict, trials: int = 200, records=None, target: str = "cuda", *,
         runner=None, batch: int = 8, population: int | None = None, epsilon: float = 0.1,
         patience: int | None = 8, time_limit_s: float | None = None, seed: int = 0,
         model: CostModel | str = "auto", limits=None,
         progress: Callable[[Progress], None] | None = None) -> TuneResult:
    """Search schedules of `op` at `sizes` (see the module docstring).

    trials: measurements in all (resumed ones count); records: a JSON-lines
    path (None: keep nothing); target: "cuda", "cuda:<arch>" or "sim";
    runner: a tcomp.search Runner for `target` (default: LocalRunner on
    every local GPU, or SimRunner for "sim"; one made here is closed here);
    batch: candidates measured per round; population: candidates kept
    between rounds (default: twice the trials, between 8 and 32);
    epsilon: share of each batch chosen at random;
    patience: rounds without a better best before stopping (None: never);
    time_limit_s: stop after this long; seed: of the search's random draws;
    model: a CostModel or a backend name (model.BACKENDS); limits: the
    device limits of the space (tcomp.search.Limits, an H200 by default);
    progress: called with a Progress after each measurement."""
    if population is None and isinstance(trials, int):
        population = max(8, min(32, 2 * trials))
    _check_args(op, trials, target, batch, population, epsilon, patience, time_limit_s, seed)
    from .records import Records
    from .runner import MeasureInput, Runner
    timed = target != "sim"
    if isinstance(model, str):
        model = CostModel("analytic" if not timed else model, seed=seed)
    elif not isinstance(model, CostModel):
        raise SearchError(f"tune: model must be a CostModel or a backend name, got "
                          f"{type(model).__name__}")
    space = Space(op, sizes, "sim" if not timed else "cuda", limits_for(target, limits))
    sizes = space.sizes
    recs = Records(records) if records is not None else None
    own_runner = runner is None
    if runner is not None and not isinstance(runner, Runner):
        raise SearchError(f"tune: runner must be a tcomp.search Runner (SimRunner, LocalRunner, "
                          f"...), got {type(runner).__name__}")
    if runner is not None and (runner.target == "sim") != (target == "sim"):
        raise SearchError(f"tune: the runner measures target '{runner.target}' but target is "
                          f"'{target}'; pass a {'SimRunner' if target == 'sim' else 'LocalRunner'}"
                          f" or target='{runner.target}'")
    st = _State(space, model, timed, seed)
    if recs is not None:
        _resume(st, recs, op, sizes, target, runner, seed)
    try:
        if st.done < trials:
            runner = runner if runner is not None else _default_runner(target)
            st.stopped = _search(st, runner, recs, trials, target, batch, population, epsilon,
                                 patience, time_limit_s, progress, MeasureInput)
        else:
            st.stopped = "trials"
    except KeyboardInterrupt:
        st.stopped = "interrupted"
    finally:
        if own_runner and runner is not None:
            runner.close()
    return st.result(op, sizes, target, records)


def _check_args(op, trials, target, batch, population, epsilon, patience, time_limit_s, seed):
    if not isinstance(op, Op):
        raise SearchError(f"tune: op must be a tcomp.Op (from tcomp.op), got {type(op).__name__}")
    for name, v in (("trials", trials), ("batch", batch), ("population", population)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SearchError(f"tune: {name} must be a positive integer, got {v!r}")
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int)
                                 or patience < 1):
        raise SearchError(f"tune: patience must be a positive integer or None, got {patience!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
            or not 0 <= epsilon <= 1:
        raise SearchError(f"tune: epsilon must be a number in [0, 1], got {epsilon!r}")
    if time_limit_s is not None and (not isinstance(time_limit_s, (int, float))
                                     or not time_limit_s > 0):
        raise SearchError(f"tune: time_limit_s must be a positive number of seconds or None, "
                          f"got {time_limit_s!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SearchError(f"tune: seed must be a non-negative integer, got {seed!r}")
    if not isinstance(target, str) or not (target == "sim" or target == "cuda"
                                           or target.startswith("cuda:")):
        raise SearchError(f"tune: target must be 'cuda', 'cuda:<arch>' or 'sim', got "
                          f"{target!r}")


def _resume(st, recs, op, sizes, target, runner, seed) -> None:
    """Take over the records (resume.py); failed re-checks are recorded."""
    from .recheck import recheck
    from .resume import resume
    from .runner import MeasureInput, MeasureResult
    from .sim_runner import SimRunner
    sim = runner if isinstance(runner, SimRunner) else None  # its inputs=, budget and limit
    failed = resume(st, recs.matching(op, sizes, target),
                    lambda text: recheck(op, sizes, text, sim), seed, recs.path)
    for t, rec, res in failed:
        recs.add(MeasureInput(op, sizes, t.schedule, target),
                 MeasureResult(None, res.error, t.message, res.build_s, res.device),
                 predicted_ms=rec.predicted_ms, plan=rec.plan)


def _default_runner(target: str):
    if target == "sim":
        from .sim_runner import SimRunner
        return SimRunner()
    from .local_runner import LocalRunner
    return LocalRunner()


def canonical(text: str) -> str:
    from .identity import canonical_schedule
    return canonical_schedule(text)


class _State:
    """What the search knows: measured trials, features, the model."""

    def __init__(self, space: Space, model: CostModel, timed: bool, seed: int):
        self.space, self.model, self.timed = space, model, timed
        self.rng = np.random.default_rng(seed)
        self.history: list[Trial] = []
        self.measured: set[str] = set()  # canonical schedule texts
        self.train_X, self.train_t = [], []
        self.best: Trial | None = None
        self.cands: dict[str, Candidate] = {}  # measured ones of this run, by schedule text
        self.start = time.perf_counter()
        self.resumed = 0
        self.retry: list = []  # resume.Retry: recorded once as a timeout, to measure again
        self.stopped = "trials"

    @property
    def done(self) -> int:
        return len(self.history)

    def feature(self, text: str) -> np.ndarray | None:
        """The features of a schedule (the space's analysis, cached there)."""
        if text not in self.space.features and not self.space.analyse(text).ok:
            return None
        return self.space.features[text]

    def _add(self, t: Trial, key: str) -> bool:
        """Record a trial; True when it is a new best."""
        self.history.append(t)
        self.measured.add(key)
        if t.ok and t.time_ms is not None and self.timed:
            f = self.feature(t.schedule)
            if f is not None:
                self.train_X.append(f)
                self.train_t.append(max(t.time_ms, 1e-6))
        s = t.score(self.timed)
        if s is not None and (self.best is None or s < self.best.score(self.timed)):
            self.best = t
            return True
        return False

    def refit(self) -> None:
        if self.train_t:
            self.model.fit(np.array(self.train_X), np.array(self.train_t))

    def predict(self, cands: list) -> np.ndarray:
        X = np.array([self.feature(c.schedule) for c in cands])
        return self.model.predict_ms(X) if len(cands) else np.zeros(0)

    def result(self, op, sizes, target, records) -> TuneResult:
        if self.best is None:
            kinds = {}
            for t in self.history:
                kinds[t.error or "untimed"] = kinds.get(t.error or "untimed", 0) + 1
            text = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) or "none measured"
            where = f"; the records are in {os.fspath(records)}" if records is not None else ""
            if self.stopped == "interrupted":
                raise SearchError(f"tune: interrupted before any valid candidate of '{op.name}' "
                                  f"was measured ({self.done} trials){where}")
            raise SearchError(f"tune: no valid candidate of '{op.name}' after {self.done} "
                              f"trials ({text}){where}")
        sched = Schedule.from_json(op, self.best.schedule)
        return TuneResult(op, dict(sizes), target, sched, self.best.score(self.timed),
                          self.timed, self.history, self.best, self.stopped,
                          os.fspath(records) if records is not None else None, self.model,
                          self.space)


def _search(st: _State, runner, recs, trials, target, batch, population, epsilon, patience,
            time_limit_s, progress, MeasureInput) -> str:
    space, rng = st.space, st.rng
    pop = _first_population(st, population)
    stale, rounds = 0, 0
    run = datetime.datetime.now(datetime.timezone.utc).isoformat()  # names this run in records
    calls = _Callback(progress)
    while st.done < trials:
        if st.retry:  # recorded once as a timeout: measured again, once, before anything new
            n = min(batch, trials - st.done)
            todo, st.retry = st.retry[:n], st.retry[n:]
            pred = [_predicted(st, x.cand, x.record.predicted_ms) for x in todo]
            _measure(st, runner, recs, trials, target, [x.cand for x in todo], pred,
                     [None] * len(todo), calls, MeasureInput)
            continue
        pool = _pool(st, pop, batch)
        for _ in range(EXHAUSTED_AFTER):
            if pool:
                break
            pool = _pool(st, pop, batch, wide=population)
        if not pool:
            return "exhausted"
        pred = st.predict(pool)
        rank = np.empty(len(pool), dtype=int)  # place in the predicted order (0: fastest)
        rank[np.argsort(pred, kind="stable")] = np.arange(len(pool))
        rounds += 1
        chosen = _choose(pool, pred, min(batch, trials - st.done), epsilon, rng)
        where = [{"run": run, "round": rounds, "rank": int(rank[i]), "pool": len(pool)}
                 for i in chosen]
        improved = _measure(st, runner, recs, trials, target, [pool[i] for i in chosen],
                            [float(pred[i]) for i in chosen], where, calls, MeasureInput)
        st.refit()
        stale = 0 if improved else stale + 1
        if patience is not None and stale >= patience:
            return "patience"
        if time_limit_s is not None and time.perf_counter() - st.start > time_limit_s \
                and st.done < trials:
            return "time_limit"  # checked after a round: a run measures at least one
        pop = _next_population(st, pool, pred, population)
    return "trials"


def _measure(st: _State, runner, recs, trials, target, cands, pred, where, calls,
             MeasureInput) -> bool:
    """Measure `cands` (predicted `pred`; `where`: each one's search field
    without the elapsed seconds, None for a re-measure); each result is
    recorded as the runner reports it. True when one is a new best."""
    limit = _slow_limit_s(st)
    inputs = [MeasureInput(st.space.op, st.space.sizes, c.schedule, target, limit)
              for c in cands]
    reported = set()
    improved = False

    def record(j, res):  # as each candidate finishes: appended and flushed at once
        nonlocal improved
        if j in reported:
            return
        reported.add(j)
        c, p = cands[j], pred[j]
        elapsed = time.perf_counter() - st.start
        w = None if where[j] is None else {**where[j], "elapsed_s": round(elapsed, 3)}
        if recs is not None:
            recs.add(inputs[j], res, predicted_ms=p, plan=c.plan_dict(), search=w)
        w = w or {}
        t = Trial(st.done + 1, c.schedule, c.sketch, res.median_ms, p, res.error,
                  res.message, elapsed, round=w.get("round", 0), rank=w.get("rank"),
                  pool=w.get("pool", 0))
        if c.plan_dict() is not None:
            st.cands[c.schedule] = c
        improved |= st._add(t, canonical(c.schedule))
        calls(lambda: _progress(st, trials, t), t)

    results = runner.run(inputs, on_result=record)
    for j, res in enumerate(results):  # any a runner did not report as it went
        record(j, res)
    return improved


class _Callback:
    """The progress callback: an error in it is reported once (ProgressWarning)
    and the callback dropped; KeyboardInterrupt goes through (it stops the tune)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, make, trial: Trial) -> None:
        if self.fn is None:
            return
        try:
            self.fn(make())
        except Exception as e:
            self.fn = None
            warnings.warn(f"tune: the progress callback raised {type(e).__name__}: {e} (after "
                          f"trial {trial.index}); it is not called again in this run, and the "
                          f"search goes on", ProgressWarning, stacklevel=2)


def _predicted(st: _State, cand: Candidate, recorded: float | None) -> float | None:
    """The model's prediction for a re-measured candidate (the recorded one
    when its schedule no longer lowers)."""
    if st.feature(cand.schedule) is None:
        return recorded
    return float(st.predict([cand])[0])


# A candidate's device run (a check at small sizes, two warm-up calls, then
# timed calls for up to a second) is cut when it takes longer than SLOW_FLOOR_S
# or SLOW_FACTOR times the best time so far, whichever is longer: such a
# candidate is ~200x slower than the best and cannot win, and without the cut
# each one costs the runner's hang limit (30 s; measured on an H200: a batch of
# unscheduled softmax candidates at 32768 x 4096 took 16 x 30 s).
SLOW_FLOOR_S = 5.0
SLOW_FACTOR = 1000.0


def _slow_limit_s(st: _State) -> float | None:
    """The device time limit of the next batch's candidates (None: the runner's)."""
    if not st.timed or st.best is None or st.best.time_ms is None:
        return None
    return max(SLOW_FLOOR_S, SLOW_FACTOR * st.best.time_ms / 1000.0)


# Empty pools in a row, after the first, before a run stops as "exhausted":
# each is drawn wider (see _pool). One pool can come up empty while the space
# still has unmeasured candidates, when the population and the few fresh
# draws are all measured already (a resumed run).
EXHAUSTED_AFTER = 3
WIDE_PARENTS = 64  # measured candidates a wide pool mutates (at random), at most


def _pool(st: _State, pop: list, batch: int, wide: int = 0) -> list:
    """Unmeasured candidates to predict: the population, mutations of the best
    measured and of the population, and a few fresh ones. `wide` (a
    population size) when the last pool was empty: mutations of up to
    WIDE_PARENTS measured candidates at random and `wide` fresh ones."""
    space, rng = st.space, st.rng
    measured = [st.cands[t.schedule] for t in _ranked(st) if t.schedule in st.cands]
    parents = measured[:4] + pop[:8]
    if wide and measured:
        picks = rng.choice(len(measured), size=min(WIDE_PARENTS, len(measured)), replace=False)
        parents = [measured[int(i)] for i in picks]
    out, seen = [], set()

    def add(c):
        k = canonical(c.schedule)
        if k not in st.measured and k not in seen and st.feature(c.schedule) is not None:
            seen.add(k)
            out.append(c)

    for c in pop:
        add(c)
    for p in parents:
        for _ in range(2):
            add(space.mutate(p, rng))
    for c in space.generate(wide or max(2, batch // 2), rng):
        add(c)
    return out


def _first_population(st: _State, size: int) -> list:
    """The first round's population: the best measured candidates (the
    records', on resume) for up to half, then the drawn sketches at their
    rules' reference points (Space.references: bench/'s measured-good tiles),
    then fresh unmeasured ones for the rest."""
    keep = [st.cands[t.schedule] for t in _ranked(st) if t.schedule in st.cands][:size // 2]
    drawn = st.space.generate(size, st.rng)
    fresh = [c for c in st.space.references(drawn) + drawn
             if canonical(c.schedule) not in st.measured]
    return keep + fresh[:size - len(keep)]


def _ranked(st: _State) -> list:
    ok = [t for t in st.history if t.score(st.timed) is not None]
    return sorted(ok, key=lambda t: t.score(st.timed))


def _choose(pool, pred, k: int, epsilon: float, rng) -> list:
    """Indices into pool: mostly the best predicted, `epsilon` of them random."""
    k = min(k, len(pool))
    n_rand = int(round(epsilon * k))
    if epsilon > 0 and k >= 4:
        n_rand = max(1, n_rand)
    order = [int(i) for i in np.argsort(pred, kind="stable")]
    chosen = order[:k - n_rand]
    rest = [i for i in order if i not in set(chosen)]
    if n_rand and rest:
        chosen += [int(i) for i in rng.choice(rest, size=min(n_rand, len(rest)), replace=False)]
    return chosen


def _next_population(st: _State, pool, pred, size: int) -> list:
    measured = [st.cands[t.schedule] for t in _ranked(st) if t.schedule in st.cands]
    keep = measured[:size // 2]
    order = np.argsort(pred, kind="stable")
    unmeasured = [pool[int(i)] for i in order
                  if canonical(pool[int(i)].schedule) not in st.measured]
    return keep + unmeasured[:size - len(keep)]


def _progress(st: _State, trials: int, last: Trial) -> Progress:
    elapsed = time.perf_counter() - st.start
    here = st.done - st.resumed
    eta = elapsed / here * (trials - st.done) if here else None
    best = st.best.score(st.timed) if st.best is not None else None
    return Progress(st.done, trials, best, elapsed, eta, last)


def fmt_ms(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "-"
    return f"{ms:.4g} ms" if ms >= 0.01 else f"{ms * 1e3:.4g} us"
