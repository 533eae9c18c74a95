"""Schedules: stages, axes and primitives (API.md "Schedules")."""
from .directives import from_json, to_json
from .schedule import Schedule, Stage
from .stage import Axis, StageDef

__all__ = ["Axis", "Schedule", "Stage", "StageDef", "from_json", "to_json"]
