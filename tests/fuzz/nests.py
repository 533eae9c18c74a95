"""An exhaustive small-scope sweep of thread tags at two levels of one nest
(the shape of issue 22's defect 1), beside the random pairs: a consumer
loop bound to a thread tag, a producer computed at it that binds one of
its own loops (split by the consumer's extent, or a reduction loop) to
the same tag or to another one. Every case must be refused (ScheduleError,
LoweringError) or compute what `evaluate` computes, at fixed and at
symbolic sizes.
"""
from __future__ import annotations

import itertools

import numpy as np

import tcomp

PROGRAMS = {
    # the first example: an elementwise producer
    "map": ("def f(float(M) X) -> (O) { T(i) = X(i) * 2.0\n O(i) = T(i) + 1.0 }", "T", "O"),
    # a row sum whose reduction loop the producer binds (the second example)
    "rowsum": ("def f(float(M, K) X) -> (O) { S(i) +=! X(i, k)\n O(i) = S(i) * 2.0 }", "S", "O"),
    # a 2-d producer read by a reducing consumer
    "reduce_consumer": ("def f(float(M, K) X) -> (O) { T(i, k) = X(i, k) + 1.0\n"
                        " O(i) +=! T(i, k) }", "T", "O"),
}
TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
SIZES = {"M": 3, "K": 3}  # (equal: a tag bound to both has one extent)


def cases():
    for prog, outer, inner, how in itertools.product(
            PROGRAMS, TAGS, TAGS, ("split", "direct", "reduce")):
        if how == "reduce" and prog != "rowsum":
            continue
        if outer != TAGS[0] and inner not in (outer, TAGS[0]):
            continue  # (one tag pair of each kind is enough)
        yield prog, outer, inner, how


def schedule(prog: str, outer: str, inner: str, how: str):
    src, producer, consumer = PROGRAMS[prog]
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    p, c = s[producer], s[consumer]
    c.bind(c.axes[0], outer)
    p.compute_at(c, c.axes[0])
    if how == "split":
        _, ax = p.split(p.axes[0], SIZES["M"])
    elif how == "direct":
        ax = p.axes[0]
    else:
        ax = p.reduce_axes[0]
    p.bind(ax, inner)
    return op, s


def check(prog, outer, inner, how) -> list[str]:
    try:
        op, s = schedule(prog, outer, inner, how)
    except tcomp.ScheduleError:
        return []
    x = np.random.default_rng(0).integers(-8, 9, (SIZES["M"], SIZES["K"])) / 4
    x = x[:, 0] if prog == "map" else x
    x = x.astype(np.float32)
    want = tcomp.evaluate(op, x)
    problems = []
    for sizes in (SIZES if prog != "map" else {"M": SIZES["M"]}, None):
        try:
            k = tcomp.build(s, "sim", sizes=sizes)
        except (tcomp.LoweringError, tcomp.ScheduleError):
            continue
        try:
            got = k(x)
        except tcomp.SimError as e:
            problems.append(f"SimError: {e}")
            continue
        if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            problems.append(f"sim computes {got.tolist()}, evaluate {want.tolist()}")
    where = (f"{prog}: {PROGRAMS[prog][2]}.bind(axis, {outer!r}); {PROGRAMS[prog][1]} computed "
             f"there binds its {how} loop to {inner!r}\n{s.to_json()}")
    return [f"{p}\n  {where}" for p in problems]
