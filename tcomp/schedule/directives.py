"""Schedule directives: plain frozen data, one class per primitive.

A schedule is the list of directives applied to an op; `to_json` writes that
list and `Schedule.from_json` replays it through the primitives (so replay is
validated exactly like the original calls).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    stage: str
    axis: str
    factor: int | None
    nparts: int | None


@dataclass(frozen=True)
class Tile:
    stage: str
    x: str
    y: str
    x_factor: int
    y_factor: int


@dataclass(frozen=True)
class Reorder:
    stage: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Fuse:
    stage: str
    outer: str
    inner: str


@dataclass(frozen=True)
class Bind:
    stage: str
    axis: str
    tag: str


@dataclass(frozen=True)
class Unroll:
    stage: str
    axis: str


@dataclass(frozen=True)
class UnrollBy:
    """unroll(axis, factor): the loop stays a loop; CUDA is asked to unroll it by `factor`
    (`#pragma unroll factor`; 1: keep it rolled)."""
    stage: str
    axis: str
    factor: int


@dataclass(frozen=True)
class Vectorize:
    stage: str
    axis: str


@dataclass(frozen=True)
class ComputeAt:
    stage: str
    target: str
    axis: str


@dataclass(frozen=True)
class ComputeInline:
    stage: str


@dataclass(frozen=True)
class ComputeRoot:
    stage: str


@dataclass(frozen=True)
class CacheRead:
    tensor: str
    scope: str
    readers: tuple[str, ...]


@dataclass(frozen=True)
class CacheWrite:
    stage: str
    scope: str


@dataclass(frozen=True)
class Rfactor:
    stage: str
    axis: str


@dataclass(frozen=True)
class Pipeline:
    stage: str
    axis: str
    stages: int


@dataclass(frozen=True)
class Tensorize:
    stage: str
    axis: str
    intrin: str


@dataclass(frozen=True)
class SetScope:
    stage: str
    scope: str


@dataclass(frozen=True)
class StorageOrder:
    stage: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class StorageAlign:
    stage: str
    axis: str
    factor: int
    offset: int


@dataclass(frozen=True)
class Swizzle:
    stage: str
    span: int


@dataclass(frozen=True)
class Scan:
    """Stage.scan(axis, threads, items, lookback): the ordered recurrence as a
    block-parallel scan (lookback: its tiles over blocks, chained by a decoupled
    look-back; items: elements a thread, lookback only)."""
    stage: str
    axis: str
    threads: int
    items: int = 1
    lookback: bool = False


@dataclass(frozen=True)
class OnlineSoftmax:
    """Schedule.online_softmax(max, sum, weighted): the stages of the chain rewritten."""
    max: str
    sum: str
    weighted: tuple[str, ...]


@dataclass(frozen=True)
class Tma:
    stage: str
    swizzle: int


@dataclass(frozen=True)
class Persistent:
    stage: str
    outer: str
    inner: str
    group_m: int


@dataclass(frozen=True)
class WarpSpecialize:
    stage: str
    axis: str
    producer_regs: int
    consumer_regs: int
    pingpong: bool = False


@dataclass(frozen=True)
class Epilogue:
    stage: str
    epilogue: str


KINDS = {cls.__name__: cls for cls in (Split, Tile, Reorder, Fuse, Bind, Unroll, UnrollBy,
                                         Vectorize,
                                         ComputeAt, ComputeInline, ComputeRoot, CacheRead,
                                         CacheWrite, Rfactor, StorageAlign, StorageOrder, SetScope,
                                         Pipeline, Tensorize, Swizzle, OnlineSoftmax, Tma,
                                         Persistent, WarpSpecialize, Epilogue, Scan)}


# The version of the JSON format `to_json` writes (the field "tcomp_schedule").
# Bump it when a directive's fields change meaning; `from_json` reads only this one.
FORMAT_VERSION = 1


def directive_items(directives) -> list:
    """The directives as JSON objects (dicts with their "kind")."""
    items = []
    for d in directives:
        item = {"kind": type(d).__name__}
        for f in dataclasses.fields(d):
            v = getattr(d, f.name)
            item[f.name] = list(v) if isinstance(v, tuple) else v
        items.append(item)
    return items


def to_json(directives, specialize: list | None = None) -> str:
    """The schedule file; `specialize`: its variants (schedule/specialize.py),
    written only when there are some."""
    data = {"tcomp_schedule": FORMAT_VERSION, "directives": directive_items(directives)}
    if specialize:
        data["specialize"] = specialize
    return json.dumps(data, indent=1)


def parsed(text: str) -> dict:
    """The schedule file's JSON object, its version checked (from_json reads
    its directives; Schedule.from_json its variants too)."""
    from ..errors import ScheduleError
    try:
        data = json.loads(text)
    except RecursionError:
        raise ScheduleError("from_json: not a tcomp schedule (its JSON is nested too deeply to be "
                            "one)") from None
    except (ValueError, TypeError) as e:
        raise ScheduleError(f"from_json: not a tcomp schedule ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise ScheduleError(f"from_json: not a tcomp schedule (expected a JSON object with "
                            f"\"tcomp_schedule\" and \"directives\", got "
                            f"{type(data).__name__})")
    version = data.get("tcomp_schedule")
    if version is None:
        raise ScheduleError(f"from_json: not a tcomp schedule: it has no format version (the "
                            f"field \"tcomp_schedule\"; this tcomp reads version "
                            f"{FORMAT_VERSION})")
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ScheduleError(f"from_json: schedule format version {version!r} is not supported; "
                            f"this tcomp reads version {FORMAT_VERSION} (write the schedule "
                            f"again with this tcomp's Schedule.to_json)")
    if "directives" not in data:
        raise ScheduleError("from_json: not a tcomp schedule: \"directives\" must be a list of "
                            "directive objects, got none")
    return data


def from_json(text: str) -> list:
    return directives_of(parsed(text)["directives"])


def directives_of(items, where: str = "from_json: not a tcomp schedule") -> list:
    """Directive objects from a list of JSON objects."""
    from ..errors import ScheduleError
    if not isinstance(items, list):
        raise ScheduleError(f"{where}: \"directives\" must be a list of directive objects, got "
                            f"{_json_type(items)}")
    return [_directive(i, item, where) for i, item in enumerate(items)]


# What each field type of the directives accepts from JSON, and its name in messages.
_FIELD_TYPES = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: type(v) is int, "an integer"),
    "int | None": (lambda v: v is None or type(v) is int, "an integer or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tuple[str, ...]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                        "a list of strings"),
}


def _json_type(v) -> str:
    """The JSON spelling of a decoded value's type (for messages)."""
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    kind = {str: "string", int: "integer", float: "number", list: "list", dict: "object"}[type(v)]
    if not isinstance(v, (str, int, float)):
        return kind
    return f"{kind} {_short(json.dumps(v))}"


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _directive(i: int, item, where: str = "from_json: not a tcomp schedule"):
    """Directive number `i` of a schedule file, its fields checked against its class."""
    from ..errors import ScheduleError
    where = f"{where}: directive {i}"
    if not isinstance(item, dict):
        raise ScheduleError(f"{where} must be a JSON object with a \"kind\", got "
                            f"{_json_type(item)}")
    kind = item.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        if "kind" not in item:
            what = "has no \"kind\""
        elif isinstance(kind, str):
            what = f"has an unknown kind {_short(kind)!r}"
        else:
            what = f"has a kind that is not a string ({_json_type(kind)})"
        raise ScheduleError(f"{where} {what} (kinds: {', '.join(KINDS)})")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    where = f"{where} ({kind})"
    extra = [k for k in item if k != "kind" and k not in names]
    if extra:
        raise ScheduleError(f"{where} has an unknown field {_short(extra[0])!r} (a {kind} has "
                            f"{', '.join(names)})")
    kwargs = {}
    for f in fields:
        if f.name not in item and f.default is not dataclasses.MISSING:
            kwargs[f.name] = f.default  # (a field added later: its default replays old JSON)
            continue
        if f.name not in item:
            raise ScheduleError(f"{where} lacks the field {f.name!r} (a {kind} has "
                                f"{', '.join(names)})")
        v = item[f.name]
        ok, expected = _FIELD_TYPES[f.type]
        if not ok(v):
            raise ScheduleError(f"{where} field {f.name!r} must be {expected}, got "
                                f"{_json_type(v)}")
        kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)
