"""Tuning records: one JSON line per measured candidate, appended as measured.

A line (format version 2; keys in this order):

    {"tcomp_record": 2, "op_hash": "3f1c...", "op": "matmul",
     "sizes": {"M": 4096, "N": 4096, "K": 4096}, "target": "cuda",
     "device": "NVIDIA H200", "schedule": {"tcomp_schedule": 1, "directives": [...]},
     "plan": {"inline": [...], "stages": {"C": {"rule": "simt_tile", "bm": 128, ...}}} | null,
     "times_ms": [1.23, ...] | null, "median_ms": 1.23 | null,
     "error": null | "schedule" | "lowering" | "compile" | "runtime" | "wrong_result"
              | "timeout" | "crash",
     "message": "", "build_s": 0.12, "predicted_ms": null | float,
     "search": {"run": "2026-11-30T12:00:00.123456+00:00", "round": 3, "rank": 0, "pool": 41,
                "elapsed_s": 12.5} | null,
     "time": "2026-11-30T12:00:00+00:00", "tcomp_version": "0.1.0"}

`schedule` is the JSON of `Schedule.to_json()` (as an object, not a string);
`plan` is the search-space plan the schedule came from (space.py: the rule
and parameters of each stage, the inlined stages), or null for a schedule
from elsewhere: with it, a resumed search mutates the recorded candidates
(tile sizes, unroll, stages, ...) instead of only replaying them; the
schedule stays what is measured and replayed, the plan is checked against it
before use (tuner.py);
`op_hash` identifies the op (identity.op_hash: its canonical TC text);
`predicted_ms` is the cost model's prediction when the candidate was chosen
(the sim measures no time: a sim run's best is the best prediction);
`search` says where the search chose it (null when measured outside one):
the run (its start time), the round of that run (1-based; a round measures
one batch), the candidate's rank among the round's pool in the model's
predicted order (0: predicted fastest) and the pool's size, and the seconds
from the run's start to the result. quality.py reads the model's hit rate
from it.

Durability: each line is written with one `write` on a file opened for
appending, then fsync'ed, so `kill -9` loses at most the line being written.
Such a loss leaves a last line without its newline; loading skips it with
a warning (`RecordsWarning`), and the next append cuts it off first.

Versions: lines of version 1 (no `plan` and `search` fields; written by
tcomp before plans were kept) load as records without them, and a file may mix both;
a version this tcomp does not know (a newer tcomp wrote it) is refused with
an error that says which versions it reads. New lines are version 2.

Validation: records are data, never executed. Every other line must be a
JSON object of this format with fields of the right types, or loading
raises `RecordsError` naming the file, the line and what is wrong: a file
edited by hand or written by another program is not silently half-read.
Blank lines are skipped. One process appends to a file at a time. A line
nested deeper than MAX_DEPTH levels (a record is at most about 6) is refused
as such, before anything walks it.

Several lines of one candidate (the same op, sizes, target and schedule:
a re-measured timeout, a failed re-check that tune recorded) are its
history; the last one is its result (`Records.latest`).

Re-check: `best` checks the record it would return again on the sim
(recheck.py) and passes over one that fails, with a RecordCheckWarning.
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import TcompError
from ..lang.op import Op
from .identity import canonical_schedule, check_sizes, op_hash, sizes_text
from .runner import MeasureInput, MeasureResult, measurement_key

from .record_checks import (FIELDS, FORMAT, MAX_DEPTH, SEARCH_KEYS, VERSIONS,  # noqa: F401
                            _deeper_than, _is_num, _plan_problem, _search_problem, _validate)


class RecordsError(TcompError):
    """A records file that cannot be read as tcomp records, or a query it cannot answer."""


class RecordsWarning(UserWarning):
    """A records file's last line was cut short (a run killed while writing it)."""


@dataclass(frozen=True)
class Record:
    """One line of a records file (see the module docstring)."""
    op_hash: str
    op: str
    sizes: dict
    target: str
    device: str
    schedule: dict
    times_ms: tuple[float, ...] | None
    error: str | None
    message: str
    build_s: float
    predicted_ms: float | None
    time: str
    tcomp_version: str
    plan: dict | None = None  # the space's plan (space.py), None when not known
    search: dict | None = None  # run, round, rank, pool, elapsed_s (None: not from a search)
    line: int = 0  # where it was read from (0: not read from a file)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def schedule_json(self) -> str:
        """The schedule as text for `Schedule.from_json`."""
        return json.dumps(self.schedule, indent=1)

    @property
    def key(self) -> tuple:
        return measurement_key(self.op_hash, self.sizes, self.target,
                               json.dumps(self.schedule, sort_keys=True, separators=(",", ":")))

    def to_line(self) -> str:
        d = {"tcomp_record": FORMAT, "op_hash": self.op_hash, "op": self.op, "sizes": self.sizes,
             "target": self.target, "device": self.device, "schedule": self.schedule,
             "plan": self.plan, "times_ms": list(self.times_ms) if self.times_ms is not None else None,
             "median_ms": self.median_ms, "error": self.error, "message": self.message,
             "build_s": self.build_s, "predicted_ms": self.predicted_ms,
             "search": self.search, "time": self.time,
             "tcomp_version": self.tcomp_version}
        return json.dumps(d, allow_nan=False) + "\n"

    @classmethod
    def of(cls, inp: MeasureInput, res: MeasureResult, predicted_ms: float | None = None,
           plan: dict | None = None, search: dict | None = None) -> "Record":
        """The record of measuring `inp` with result `res`; `plan`: the
        space's plan of the candidate (a dict, Candidate.plan_dict()), if any;
        `search`: where the search chose it (see the module docstring)."""
        from .. import __version__
        if not isinstance(inp, MeasureInput) or not isinstance(res, MeasureResult):
            raise RecordsError(f"Record.of: needs a MeasureInput and a MeasureResult, got "
                               f"{type(inp).__name__} and {type(res).__name__}")
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        rec = cls(op_hash(inp.op), inp.op.name, dict(inp.sizes), inp.target, res.device,
                  json.loads(canonical_schedule(inp.schedule)), res.times_ms, res.error,
                  res.message, round(float(res.build_s), 6),
                  None if predicted_ms is None else float(predicted_ms), now, __version__,
                  plan, search)
        problem = _validate(json.loads(rec.to_line()))  # what is written must load
        if problem is not None:
            raise RecordsError(f"Record.of: cannot record this candidate: {problem}")
        return rec


def _record(d: dict, line: int) -> Record:
    return Record(d["op_hash"], d["op"], d["sizes"], d["target"], d["device"], d["schedule"],
                  tuple(d["times_ms"]) if d["times_ms"] is not None else None, d["error"],
                  d["message"], d["build_s"], d["predicted_ms"], d["time"], d["tcomp_version"],
                  d.get("plan"), d.get("search"), line)


class Records:
    """The records in `path` (loaded and validated now; a missing file is an
    empty one, created at the first `append`)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.records: list[Record] = []
        self._keys: set = set()
        self._cut_at: int | None = None  # where a truncated last line starts
        self._needs_newline = False
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        except OSError as e:
            raise RecordsError(f"records: cannot read {self.path} ({e})") from None
        lines = data.split(b"\n")
        offset = 0
        for i, raw in enumerate(lines, 1):
            last = i == len(lines)  # the text after the final newline ("" when there is one)
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            where = f"{self.path}:{i}"
            try:
                d = json.loads(raw.decode("utf-8"))
            except RecursionError:
                raise RecordsError(f"{where}: nested too deeply to read (more than "
                                   f"{MAX_DEPTH} levels); not a tcomp record") from None
            except (UnicodeDecodeError, ValueError) as e:
                if last:  # no newline after it: a write that kill -9 cut short
                    warnings.warn(f"{where}: the last line is incomplete (a run was killed "
                                  f"while writing it); it is ignored and will be cut off at "
                                  f"the next append", RecordsWarning, stacklevel=3)
                    self._cut_at = start
                    continue
                raise RecordsError(f"{where}: not a JSON line ({type(e).__name__}: {e}); "
                                   f"records files hold one JSON object per line") from None
            if _deeper_than(d, MAX_DEPTH):
                raise RecordsError(f"{where}: nested too deeply to read (more than "
                                   f"{MAX_DEPTH} levels); not a tcomp record")
            problem = _validate(d)
            if problem is not None:
                raise RecordsError(f"{where}: {problem}")
            rec = _record(d, i)
            self.records.append(rec)
            self._keys.add(rec.key)
            if last:
                self._needs_newline = True  # complete, but its newline was never written

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __repr__(self) -> str:
        return f"<tcomp records {self.path}: {len(self.records)} record(s)>"

    def measured(self, inp: MeasureInput) -> bool:
        """Whether `inp` (same op, sizes, target and schedule) is recorded,
        failed or not: a resumed run skips it."""
        return inp.key in self._keys

    def append(self, record: Record) -> None:
        """Write `record` as one line and fsync it."""
        if not isinstance(record, Record):
            raise RecordsError(f"Records.append: needs a Record, got {type(record).__name__}")
        data = record.to_line().encode()
        if self._cut_at is not None:
            os.truncate(self.path, self._cut_at)
            self._cut_at = None
        if self._needs_newline:
            data = b"\n" + data
            self._needs_newline = False
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write unless the OS writes less (then the rest follows)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.records.append(record)
        self._keys.add(record.key)

    def add(self, inp: MeasureInput, res: MeasureResult, predicted_ms: float | None = None,
            plan: dict | None = None, search: dict | None = None) -> Record:
        """Record measuring `inp` with result `res` (appended and fsync'ed);
        `plan`: the candidate's plan in the space, when it came from one;
        `search`: where the search chose it."""
        rec = Record.of(inp, res, predicted_ms, plan, search)
        self.append(rec)
        return rec

    def matching(self, op: Op, sizes: Mapping[str, int], target: str) -> list[Record]:
        """The records of `op` at `sizes` for `target`, every line in file order."""
        h, sizes = op_hash(op), dict(sizes)
        return [r for r in self.records
                if r.op_hash == h and r.sizes == sizes and r.target == target]

    def latest(self, op: Op, sizes: Mapping[str, int], target: str) -> list[Record]:
        """One record per candidate of `op` at `sizes` for `target`: its last
        line (its result), in the order the candidates were first recorded."""
        last: dict = {}  # key -> its last line; a dict keeps the order of first insertion
        for r in self.matching(op, sizes, target):
            last[r.key] = r
        return list(last.values())

    def best(self, op: Op, sizes: Mapping[str, int], target: str | None = None,
             device: str | None = None, check: bool = True) -> Record:
        """The best valid record of `op` at `sizes` for `target` (None: the
        target of the records, `target_of`): the least
        median time; where none is timed (the sim), the least predicted time.
        `device` picks one device when records of several match. A candidate
        recorded more than once counts by its last line. `check`: re-check the
        winner on the sim first (recheck.py) and pass over one that fails, with
        a RecordCheckWarning, for the next."""
        target = self.target_of(op, sizes, target)
        ranked = self.ranked(op, sizes, target, device)
        if not check:
            return ranked[0]
        from .recheck import RecordCheckWarning, failed_text, recheck
        sizes = dict(ranked[0].sizes)
        for rec in ranked:
            res = recheck(op, sizes, rec.schedule_json)
            if res.ok:
                return rec
            warnings.warn(f"{self.path}:{rec.line}: the best remaining record of '{op.name}' "
                          f"is passed over: {failed_text(res)}", RecordCheckWarning,
                          stacklevel=3)
        raise RecordsError(f"best: every one of the {len(ranked)} valid records of '{op.name}' "
                           f"at {sizes_text(sizes)} for target '{target}' in {self.path} "
                           f"failed its re-check on the sim (see the warnings)")

    def target_of(self, op: Op, sizes: Mapping[str, int], target: str | None = None) -> str:
        """`target`, or when it is None the target of the records of `op` at
        `sizes`: the one target they hold; of several, "cuda" where it is one
        (the GPU's own architecture, what `tune` measures by default), else a
        RecordsError asking for target=. "cuda" when none match (the error
        then names what the file holds)."""
        if target is not None:
            return target
        if not isinstance(op, Op):
            raise RecordsError(f"best: op must be a tcomp.Op, got {type(op).__name__}")
        sizes, h = check_sizes(op, sizes, "best"), op_hash(op)
        held = sorted({r.target for r in self.records if r.op_hash == h and r.sizes == sizes})
        if len(held) == 1:
            return held[0]
        if not held or "cuda" in held:
            return "cuda"
        raise RecordsError(f"best: {self.path} holds records of '{op.name}' at "
                           f"{sizes_text(sizes)} for several targets ({', '.join(held)}): pass "
                           f"target= one of them")

    def ranked(self, op: Op, sizes: Mapping[str, int], target: str | None = None,
               device: str | None = None) -> list[Record]:
        """The valid records of `op` at `sizes` for `target` (None: `target_of`),
        one per candidate (its last line), best first, as `best` ranks them,
        not re-checked. RecordsError when there is none."""
        if not isinstance(op, Op):
            raise RecordsError(f"best: op must be a tcomp.Op, got {type(op).__name__}")
        sizes = check_sizes(op, sizes, "best")
        target = self.target_of(op, sizes, target)
        where = f"{self.path}"
        found = self.latest(op, sizes, target)
        if not found:
            raise RecordsError(f"best: {where} has no record of '{op.name}' at "
                               f"{sizes_text(sizes)} for target '{target}'{self._held()}")
        valid = [r for r in found if r.ok and (device is None or r.device == device)]
        if not valid:
            if device is not None and any(r.ok for r in found):
                devs = sorted({r.device for r in found if r.ok})
                raise RecordsError(f"best: {where} has no valid record of '{op.name}' on device "
                                   f"'{device}' (devices with valid records: {', '.join(devs)})")
            kinds = {}
            for r in found:
                kinds[r.error] = kinds.get(r.error, 0) + 1
            text = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items()))
            raise RecordsError(f"best: every one of the {len(found)} records of '{op.name}' at "
                               f"{sizes_text(sizes)} for target '{target}' in {where} failed "
                               f"({text})")
        timed = [r for r in valid if r.times_ms is not None]
        devs = sorted({r.device for r in timed})
        if len(devs) > 1:
            raise RecordsError(f"best: {where} has timed records of '{op.name}' from several "
                               f"devices ({', '.join(devs)}); times from different devices do "
                               f"not compare: pass device= one of them")
        if timed:
            return sorted(timed, key=lambda r: r.median_ms)
        predicted = [r for r in valid if r.predicted_ms is not None]
        if predicted:
            return sorted(predicted, key=lambda r: r.predicted_ms)
        raise RecordsError(f"best: the {len(valid)} valid records of '{op.name}' at "
                           f"{sizes_text(sizes)} for target '{target}' in {where} have neither "
                           f"times nor predicted times to rank them by")

    def _held(self) -> str:
        held = sorted({(r.op, sizes_text(r.sizes), r.target) for r in self.records})
        if not held:
            return " (the file holds no records)"
        shown = "; ".join(f"'{o}' at {s} for '{t}'" for o, s, t in held[:5])
        more = f"; and {len(held) - 5} more" if len(held) > 5 else ""
        return f" (it holds: {shown}{more})"


def best(path, op: Op, sizes: Mapping[str, int], target: str | None = None,
         device: str | None = None):
    """The `Schedule` of the best record in `path` for `target` (None: the
    target its records of `op` at `sizes` hold, `Records.target_of`; "cuda"
    of several) (Records.best: re-checked
    on the sim first, a record that fails passed over with a
    RecordCheckWarning), replayed through `Schedule.from_json`, so it is
    checked against `op` as any schedule is. RecordsError when no valid
    record matches."""
    from ..errors import ScheduleError
    from ..schedule import Schedule
    records = Records(path)
    rec = records.best(op, sizes, target, device)
    try:
        return Schedule.from_json(op, rec.schedule_json)
    except ScheduleError as e:
        raise RecordsError(f"best: the best record ({records.path}:{rec.line}) does not replay "
                           f"on '{op.name}' with this tcomp: {e}") from None
