"""Source text and locations.

A `Loc` is attached to every syntax node. It never takes part in equality or
hashing (nodes compare by structure), so a program printed and parsed again
compares equal to the original.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)
class Source:
    text: str
    name: str = "<tc>"

    def line_text(self, line: int) -> str | None:
        lines = self.text.splitlines()
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None


@dataclass(frozen=True)
class Loc:
    source: Source | None = field(compare=False, repr=False)
    line: int
    col: int

    def __str__(self) -> str:
        name = self.source.name if self.source is not None else "<tc>"
        return f"{name}:{self.line}:{self.col}"


def loc_field():
    """A dataclass field for a node's location: excluded from ==, hash and repr."""
    return field(default=None, compare=False, repr=False, kw_only=True)
