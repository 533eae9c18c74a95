"""auto_schedule's shape specialisation: a vectorized choice at symbolic sizes.

With a size left symbolic, a vectorized loop whose accesses need that size to
be a multiple of its lanes (a row of D floats read 4 at a time) runs lane by
lane: lowering cannot know D % 4 == 0. So when the chosen schedule has a
vectorized loop that lowering declines at the caller's sizes, the choice
becomes a specialised schedule (schedule/specialize.py): the same
directives, with a variant for the condition under which lowering gives the
loops their vectors, and itself as the general schedule for other sizes.

The condition is found by lowering, not guessed: multiples m of 2, 4, 8 and
16 of every symbolic size are tried, the smallest m that leaves the fewest
declined vectorize remarks is kept (none kept when no m helps), then each
size is dropped from the condition where that leaves the count as it is
(rows M need not be a multiple of 4 for D's vectors). A few lowerings of one
schedule: tens of milliseconds for a row kernel, seconds for a register-tiled
GEMM (an unrolled tile at symbolic sizes), so each is done once per choice
(`Lowerings`: auto_schedule's check that the choice lowers at the caller's
sizes is the first of them).
"""
from __future__ import annotations

from ..errors import TcompError
from ..schedule import Schedule
from ..schedule.directives import Vectorize

MULTIPLES = (2, 4, 8, 16)


class Lowerings:
    """`lower(s, sizes, divisors=...)` (every pass), each done once: the same
    directives at the same sizes and divisors give the program (or raise the
    error) of the first call. Lowering is a function of those three, so this
    changes nothing but the time; one is kept per auto_schedule call."""

    def __init__(self):
        self._done: dict = {}

    def __call__(self, s: Schedule, sizes: dict, divisors: dict | None = None):
        from ..lower.pipeline import lower
        if s.specializations:  # (a record's schedule with variants: tcomp.lower's own path)
            from ..build import lower as lower_all
            return lower_all(s, sizes)
        key = (s.to_json(), tuple(sorted(sizes.items())), tuple(sorted((divisors or {}).items())))
        got = self._done.get(key)
        if got is None:
            try:
                got = lower(s, sizes, divisors=divisors)
            except TcompError as e:
                got = e
            self._done[key] = got
        if isinstance(got, TcompError):
            raise got
        return got


def declined_vectors(s: Schedule, given: dict, divisors: dict | None = None,
                     lowerings: Lowerings | None = None) -> int | None:
    """How many vectorize remarks lowering makes at `given` sizes (None: it
    does not lower)."""
    try:
        prog = (lowerings or Lowerings())(s, given, divisors)
    except TcompError:
        return None
    return sum(1 for k in prog.kernels for r in k.remarks if r.startswith("vectorize:"))


def specialized(s: Schedule, given: dict, symbolic: list, remarks: list,
                lowerings: Lowerings | None = None) -> Schedule:
    """`s`, or `s` with a variant for the divisibility its vectorized loops
    need at symbolic sizes (see the module docstring). `lowerings`: where
    the lowerings of `s` done so far are kept."""
    if not symbolic or not any(isinstance(d, Vectorize) for d in s.directives):
        return s
    lowerings = lowerings or Lowerings()
    plain = declined_vectors(s, given, None, lowerings)
    if not plain:
        return s
    best = None  # (declined, m)
    for m in MULTIPLES:
        n = declined_vectors(s, given, {v: m for v in symbolic}, lowerings)
        if n is not None and (best is None or n < best[0]):
            best = (n, m)
    if best is None or best[0] >= plain:
        return s
    declined, m = best
    need = list(symbolic)
    for v in symbolic:
        rest = [x for x in need if x != v]
        if rest and declined_vectors(s, given, {x: m for x in rest}, lowerings) == declined:
            need = rest
    cond = " and ".join(f"{v} % {m} == 0" for v in need)
    general = Schedule(s.op)
    for d in s.directives:
        general.apply(d)
    general.specialize(cond)
    remarks.append(f"auto_schedule: specialized on {cond}: there, {plain - declined} of the "
                   f"{plain} vectorized loops that run lane by lane at symbolic sizes get their "
                   f"vector accesses; other sizes run the same schedule lane by lane")
    return general
