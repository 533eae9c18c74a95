"""Shape specialisation: variants of a schedule for conditions on sizes.

    fast = s.specialize("D % 4 == 0")     # a copy of s as it is now
    fast["O"].vectorize(di)               # scheduled further on its own

`s.specialize(cond)` returns a new Schedule, a variant, that starts as a
copy of `s`'s directives so far; what is scheduled on it afterwards applies
to it alone, and what is scheduled on `s` afterwards applies to `s` alone.
Building `s` builds every variant and `s` itself (the general schedule,
"otherwise"); at each call the first variant whose condition holds at the
call's sizes runs, else the general one (Halide's `specialize`, Triton's
divisibility specialisation). The choice is host-side: nothing is tested
inside a kernel.

A condition is one or more comparisons of a size with an integer, joined by
`and`:

    D % 4 == 0        D is a multiple of 4
    N >= 1024         also >, <, <=
    K == 4096         D is that size: the variant is lowered at that size

A variant is lowered knowing its condition: a size that is a multiple of
`m` is written `D / m * m` in its IR (equal to D where the condition holds;
lower/divisibility.py reads the factor), so a split by a divisor of m needs
no tail guard and a vectorized loop gets its vector accesses with D
symbolic; a size fixed by `==` is a constant there. Comparisons only choose
the variant.

In JSON (`to_json`) the variants follow the directives, each with its
condition and its whole directive list:

    {"tcomp_schedule": 1, "directives": [...],
     "specialize": [{"when": "D % 4 == 0", "directives": [...]}]}

and a schedule without variants writes no "specialize" field.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import ScheduleError

_ATOM = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:(%)\s*(-?\d+)\s*==\s*(-?\d+)|"
                   r"(<=|>=|==|<|>)\s*(-?\d+))\s*$")
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b}
MAX_VALUE = 1 << 62


@dataclass(frozen=True)
class SizeCondition:
    """A conjunction of (size, op, value) atoms: op "%" is "size % value == 0",
    else a comparison of the size with value."""
    atoms: tuple[tuple[str, str, int], ...]

    @classmethod
    def parse(cls, text, size_vars, what: str = "specialize") -> "SizeCondition":
        if not isinstance(text, str):
            raise ScheduleError(f"{what}: the condition must be a str such as \"D % 4 == 0\" or "
                                f"\"N >= 1024 and K % 8 == 0\", got {type(text).__name__}")
        atoms = []
        for part in re.split(r"\band\b", text):
            m = _ATOM.match(part)
            if m is None:
                raise ScheduleError(f"{what}: cannot read {part.strip()!r} in {text!r}: a "
                                    f"condition is comparisons of a size with an integer joined "
                                    f"by 'and': 'D % 4 == 0', 'N >= 1024', 'K == 4096' (also "
                                    f"<, <=, >)")
            name = m.group(1)
            if name not in size_vars:
                raise ScheduleError(f"{what}: {name!r} in {text!r} is not a size of the op "
                                    f"(sizes: {', '.join(size_vars) or 'none'})")
            if m.group(2):
                mod, rest = int(m.group(3)), int(m.group(4))
                if rest != 0 or not 2 <= mod <= MAX_VALUE:
                    raise ScheduleError(f"{what}: {part.strip()!r}: divisibility is written "
                                        f"'{name} % m == 0' with m an integer from 2 to 2^62")
                atoms.append((name, "%", mod))
            else:
                v = int(m.group(6))
                if abs(v) > MAX_VALUE:
                    raise ScheduleError(f"{what}: {part.strip()!r}: the integer is out of range "
                                        f"(at most 2^62 in magnitude)")
                atoms.append((name, m.group(5), v))
        return cls(tuple(atoms))

    @property
    def text(self) -> str:
        return " and ".join(f"{n} % {v} == 0" if op == "%" else f"{n} {op} {v}"
                            for n, op, v in self.atoms)

    def __str__(self) -> str:
        return self.text

    def holds(self, sizes: dict) -> bool:
        """Whether it holds at these sizes (every size it names given)."""
        for n, op, v in self.atoms:
            x = sizes[n]
            if not (x % v == 0 if op == "%" else _COMPARE[op](x, v)):
                return False
        return True

    def sizes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for n, _, _ in self.atoms))

    def divisors(self) -> dict[str, int]:
        """Size -> the multiple it is known to be (the lcm of its `%` atoms)."""
        out: dict[str, int] = {}
        for n, op, v in self.atoms:
            if op == "%":
                out[n] = math.lcm(out.get(n, 1), v)
        return out

    def fixed(self) -> dict[str, int]:
        """Size -> its value, for the `==` atoms."""
        return {n: v for n, op, v in self.atoms if op == "=="}

    def possible(self) -> str | None:
        """None, or why no sizes satisfy it (a size fixed twice differently, or
        fixed to a value its other atoms exclude, or negative)."""
        for n, v in self.fixed().items():
            if v < 0:
                return f"{n} == {v}: sizes are not negative"
            for m, op, w in self.atoms:
                if m == n and not (v % w == 0 if op == "%" else _COMPARE[op](v, w)):
                    return f"{n} == {v} contradicts {n} {op} {w}" + (" == 0" if op == "%" else "")
        return None


def specialize(schedule, condition):
    """`Schedule.specialize` (see the module docstring)."""
    cond = _new_condition(schedule, condition, "specialize")
    variant = type(schedule)(schedule.op)
    for d in schedule.directives:
        variant.apply(d)
    return _attach(schedule, cond, variant)


def _new_condition(schedule, condition, what: str) -> SizeCondition:
    if schedule.specialized_from is not None:
        raise ScheduleError(f"{what}: this schedule is itself a variant (of a specialised "
                            f"schedule); specialise the general one, with the conditions "
                            f"joined by 'and'")
    cond = SizeCondition.parse(condition, schedule.op.size_vars, what)
    why = cond.possible()
    if why is not None:
        raise ScheduleError(f"{what}: the condition {cond.text!r} never holds ({why})")
    if any(c == cond for c, _ in schedule.specializations):
        raise ScheduleError(f"{what}: there is a variant for {cond.text!r} already")
    return cond


def _attach(schedule, cond: SizeCondition, variant):
    variant.specialized_from = schedule
    schedule.specializations.append((cond, variant))
    return variant


def specializations_to_json(schedule) -> list:
    from .directives import directive_items
    return [{"when": c.text, "directives": directive_items(v.directives)}
            for c, v in schedule.specializations]


def specializations_from_json(schedule, items) -> None:
    """Replay the "specialize" field of a schedule file onto `schedule`."""
    from .directives import directives_of
    if not isinstance(items, list):
        raise ScheduleError("from_json: not a tcomp schedule: \"specialize\" must be a list of "
                            "objects {\"when\": condition, \"directives\": [...]}")
    for i, item in enumerate(items):
        where = f"from_json: specialize[{i}]"
        if not isinstance(item, dict) or set(item) != {"when", "directives"}:
            raise ScheduleError(f"{where} must be an object with exactly the fields \"when\" (a "
                                f"condition) and \"directives\" (a list)")
        cond = _new_condition(schedule, item["when"], where)
        variant = type(schedule)(schedule.op)
        for j, d in enumerate(directives_of(item["directives"], where)):
            try:
                variant.apply(d)
            except ScheduleError as e:
                raise ScheduleError(f"{where}: directive {j}: {e}") from None
            except (TypeError, AttributeError, KeyError, ValueError) as e:
                raise ScheduleError(f"{where}: directive {j} ({type(d).__name__}) is malformed "
                                    f"({type(e).__name__}: {e})") from None
        _attach(schedule, cond, variant)
