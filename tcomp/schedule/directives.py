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


KINDS = {cls.__name__: cls for cls in (Split, Tile, Reorder, Fuse, Bind, Unroll, UnrollBy,
                                         Vectorize,
                                         ComputeAt, ComputeInline, ComputeRoot, CacheRead,
                                         CacheWrite, Rfactor, StorageAlign, StorageOrder, SetScope,
                                         Pipeline, Tensorize, Swizzle)}


# The version of the JSON format `to_json` writes (the field "tcomp_schedule").
# Bump it when a directive's fields change meaning; `from_json` reads only this one.
FORMAT_VERSION = 1


def to_json(directives) -> str:
    items = []
    for d in directives:
        item = {"kind": type(d).__name__}
        for f in dataclasses.fields(d):
            v = getattr(d, f.name)
            item[f.name] = list(v) if isinstance(v, tuple) else v
        items.append(item)
    return json.dumps({"tcomp_schedule": FORMAT_VERSION, "directives": items}, indent=1)


def from_json(text: str) -> list:
    from ..errors import ScheduleError
    try:
        data = json.loads(text)
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
    try:
        items = data["directives"]
        out = []
        for item in items:
            item = dict(item)
            cls = KINDS[item.pop("kind")]
            kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in item.items()}
            out.append(cls(**kwargs))
        return out
    except (ValueError, KeyError, TypeError) as e:
        raise ScheduleError(f"from_json: not a tcomp schedule ({type(e).__name__}: {e})") from None
