"""What `tune` returns (tuner.py): `Trial` (one measured candidate),
`Progress` (what the progress callback gets after each measurement) and
`TuneResult`."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lang.op import Op
from ..schedule import Schedule
from .model import CostModel
from .space import Space


@dataclass(frozen=True)
class Trial:
    """One measured candidate. `index`: 1-based, in measuring order (records
    read on resume come first); `time_ms`: measured median (None when not
    timed: failed, or the sim); `predicted_ms`: the model's prediction when it
    was chosen; `error`/`message`: as the runner said; `elapsed_s`: seconds
    from the start of this run (0 for resumed ones); `sketch`: the rules of
    the candidate ("" for a resumed record without a usable plan);
    `round`, `rank`, `pool`: the round of its run that measured it, its place
    in the model's predicted order of that round's pool of `pool` candidates
    (from the records for resumed ones; 0, None, 0 when not known)."""
    index: int
    schedule: str
    sketch: str
    time_ms: float | None
    predicted_ms: float | None
    error: str | None
    message: str
    elapsed_s: float
    resumed: bool = False
    round: int = 0  # the round of its run that measured it (0: not known)
    rank: int | None = None  # its place in that round's predicted order (0: fastest)
    pool: int = 0  # how many candidates that round predicted

    @property
    def ok(self) -> bool:
        return self.error is None

    def score(self, timed: bool) -> float | None:
        """What ranks it: the measured time, or on the sim the prediction."""
        if not self.ok:
            return None
        return self.time_ms if timed else self.predicted_ms


@dataclass
class Progress:
    """What a progress callback gets after each measurement."""
    done: int            # trials so far, resumed ones included
    total: int           # the trials asked for
    best_ms: float | None
    elapsed_s: float
    eta_s: float | None  # at this run's pace
    last: Trial


@dataclass
class TuneResult:
    """The outcome of `tune`. `schedule`: the best Schedule; `time_ms`: its
    measured median time, or on the sim its analytic estimate (`timed`
    False); `history`: every Trial in order; `best`: the best Trial;
    `stopped`: why the run ended ("trials", "patience", "time_limit",
    "exhausted", "interrupted"); `model`: the cost model as trained."""
    op: Op
    sizes: dict
    target: str
    schedule: Schedule
    time_ms: float
    timed: bool
    history: list
    best: Trial
    stopped: str
    records: str | None = None
    model: CostModel | None = None
    space: Space | None = field(default=None, repr=False)

    def top(self, n: int = 10) -> list:
        """The n best valid trials, best first."""
        ok = [t for t in self.history if t.score(self.timed) is not None]
        return sorted(ok, key=lambda t: t.score(self.timed))[:n]

    def errors(self) -> dict:
        """error kind -> how many trials failed with it."""
        out = {}
        for t in self.history:
            if t.error:
                out[t.error] = out.get(t.error, 0) + 1
        return out
