"""Integer arguments of schedule primitives.

Factors often come out of NumPy (`np.int64` from a shape, an `arange`, a
search space), so every primitive that takes an int accepts any integer type
(`numbers.Integral`, which NumPy's integer types register as) and records it
as a Python int, so that the schedule still serialises to JSON. `bool` (and
`np.bool_`) is rejected although Python counts it as an int: `split(ax, True)`
is a mistake, not a factor of 1.
"""
from __future__ import annotations

import numbers

# Loop extents, factors and part counts are C ints in the generated code.
MAX_INT32 = 2 ** 31 - 1


def as_int(value) -> int | None:
    """`value` as a Python int if it is an integer other than a bool, else None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    return None


def too_large(value: int, primitive: str, what: str) -> str | None:
    """The message for an integer argument beyond MAX_INT32 (None when it fits)."""
    if value <= MAX_INT32:
        return None
    return (f"{primitive}: {what} must be below 2^31 (loop extents are 32-bit ints), got "
            f"{value}")
