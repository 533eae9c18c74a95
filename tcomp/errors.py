"""The error hierarchy of tcomp.

Every error a user can cause is a `TcompError`. Errors about source text carry
a location and render the offending line with a caret under the column, in
the style of a C compiler:

    <tc>:3:29: error: unknown tensor 'D'
        C(m, n) +=! A(m, r_k) * D(r_k, n)
                                ^
"""
from __future__ import annotations


class TcompError(Exception):
    """Base of every error tcomp raises for bad input."""


def _excerpt(loc) -> str:
    if loc is None or loc.source is None:
        return ""
    # Lines as the lexer numbers them: only '\n' ends a line (str.splitlines would
    # also split at '\r', '\f', '\v', '\x85', '\u2028', ... and show the wrong line).
    lines = loc.source.text.split("\n")
    if not 1 <= loc.line <= len(lines):
        return ""
    # Other control characters show as spaces, so the excerpt stays one line and the
    # caret keeps its column; tabs are kept so the caret lines up with what the user sees.
    line = lines[loc.line - 1].rstrip("\r")
    text = "".join(ch if ch == "\t" or ch.isprintable() else " " for ch in line)
    pad = "".join(ch if ch == "\t" else " " for ch in text[: max(loc.col - 1, 0)])
    return f"\n    {text}\n    {pad}^"


class LangError(TcompError):
    """An error in a tensor comprehension: syntax, semantics, inference or
    evaluation. `.line` and `.col` are 1-based (None when not tied to text)."""

    def __init__(self, message: str, loc=None):
        self.message = message
        self.loc = loc
        self.line = loc.line if loc is not None else None
        self.col = loc.col if loc is not None else None
        if loc is not None:
            name = loc.source.name if loc.source is not None else "<tc>"
            text = f"{name}:{loc.line}:{loc.col}: error: {message}{_excerpt(loc)}"
        else:
            text = f"error: {message}"
        super().__init__(text)


class ScheduleError(TcompError):
    """An illegal scheduling primitive: names the primitive, argument and reason."""


class LoweringError(TcompError):
    """Lowering could not turn an op and schedule into Kernel IR."""


class SimError(TcompError):
    """The "sim" target caught a kernel doing something a GPU would get wrong
    or undefined: an out-of-bounds access, a read of unwritten memory, a
    shared-memory race (missing barrier), a barrier not reached by all threads."""


class CudaError(TcompError):
    """NVRTC compile failure (with its log) or a CUDA driver error (with its name)."""
