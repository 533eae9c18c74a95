"""Schedules: stages, axes and primitives (docs/schedules.md)."""
from .directives import from_json, to_json
from .schedule import Schedule, Stage
from .stage import Axis, StageDef

__all__ = ["Axis", "Schedule", "Stage", "StageDef", "from_json", "to_json"]
