"""What identifies a measurement: the op (by the hash of its canonical text),
the sizes, the target and the schedule (by its canonical JSON).

Records and runners share these so that "already measured" means the same
thing everywhere: two schedules that differ only in JSON formatting (key
order, indentation) are the same candidate; two ops that print to the same
TC text are the same op.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from ..errors import TcompError
from ..lang.op import Op
from ..lang.symbolic import eval_int


def op_hash(op: Op) -> str:
    """16 hex digits of the SHA-256 of the op's canonical TC text (the printer's
    output without notes: the def's name, signature and statements)."""
    return hashlib.sha256(op.to_text(notes=False).encode()).hexdigest()[:16]


def canonical_schedule(text: str) -> str:
    """A schedule's JSON text with sorted keys and no whitespace: equal for
    equal directive lists however the text was formatted. Raises TcompError
    for text that is not JSON (the full check is `Schedule.from_json`)."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as e:
        raise TcompError(f"schedule: not JSON text from Schedule.to_json() "
                         f"({type(e).__name__}: {e})") from None
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def check_sizes(op: Op, sizes, who: str) -> dict[str, int]:
    """`sizes` as a dict of every size variable of `op` to a positive int,
    in the op's order; a TcompError naming `who` for anything else."""
    if not isinstance(sizes, Mapping):
        raise TcompError(f"{who}: sizes must be a dict of size name to int (e.g. "
                         f"{{'M': 1024}}), got {type(sizes).__name__}")
    names = list(op.size_vars)
    unknown = [k for k in sizes if k not in names]
    if unknown:
        raise TcompError(f"{who}: '{op.name}' has no size named {', '.join(map(repr, unknown))} "
                         f"(its sizes: {', '.join(names) or 'none'})")
    missing = [n for n in names if n not in sizes]
    if missing:
        raise TcompError(f"{who}: sizes must give every size of '{op.name}' "
                         f"({', '.join(names)}); missing {', '.join(missing)}")
    out = {}
    for n in names:
        v = sizes[n]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TcompError(f"{who}: size {n} must be a positive int, got {v!r}")
        out[n] = int(v)
    return out


def sizes_text(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items()) or "(none)"


def work_of(op: Op, sizes: Mapping[str, int]) -> int:
    """A measure of how much the oracle and the sim must do at `sizes`: the
    larger of the iterations of all statements (the product of each one's
    range extents) and the elements of all tensors."""
    iters = 0
    for st in op.statements:
        n = 1
        for r in st.ranges:
            if r.var in st.ragged:  # its extent is data: counted as one (a lower bound)
                continue
            n *= max(0, eval_int(r.hi, sizes) - eval_int(r.lo, sizes))
        iters += n
    elems = 0
    for t in op.inputs + op.outputs + op.temporaries:
        n = 1
        for d in t.shape:
            n *= max(0, eval_int(d, sizes))
        elems += n
    return max(iters, elems)


def _nonempty(op: Op, sizes: Mapping[str, int]) -> set:
    """The tensor dimensions and statement ranges that are non-empty at `sizes`."""
    out = set()
    for t in op.inputs + op.outputs + op.temporaries:
        for i, d in enumerate(t.shape):
            if eval_int(d, sizes) >= 1:
                out.add((t.name, i))
    for j, st in enumerate(op.statements):
        for r in st.ranges:
            if r.var not in st.ragged and eval_int(r.hi, sizes) > eval_int(r.lo, sizes):
                out.add((j, r.var))
    return out


def small_sizes(op: Op, sizes: Mapping[str, int], budget: int) -> dict[str, int]:
    """Sizes at which a candidate is checked against the oracle.

    `sizes` itself when `work_of(op, sizes) <= budget`. Otherwise the largest
    size is halved (rounding up), again and again, until the work fits the
    budget — but never so far that a tensor dimension or a statement range
    that is non-empty at `sizes` becomes empty (a convolution keeps H >= KH).
    Halving keeps a power-of-two size a power of two, so tiles that divide
    the real sizes mostly divide the small ones too. When no size can shrink
    any further, the result may still exceed the budget. A tensor's
    innermost dimension that is a multiple of 16 bytes stays one (halved and
    rounded up to the multiple), and the channels of a convolution's im2col
    stage stay a multiple of its K tile (64 16-bit or 128 fp8 values) where
    they are one at `sizes`: the Hopper path moves rows by TMA and fills such a
    stage by TMA im2col copies, one K tile at a time (`_steps`); a size equal
    to such a stage's window extent R S C at `sizes` (the filter bank's
    height) stays equal to it (`_tied`)."""
    cur = dict(sizes)
    keep = _nonempty(op, cur)
    steps = _steps(op, cur)
    while work_of(op, cur) > budget:
        for name in sorted(cur, key=lambda n: -cur[n]):
            if cur[name] <= 1:
                continue
            step = steps.get(name, 1)
            half = -(-((cur[name] + 1) // 2) // step) * step  # rounded up to the step
            if half >= cur[name]:
                continue
            trial = dict(cur, **{name: half})
            if keep <= _nonempty(op, trial):
                cur = trial
                break
        else:
            return _tied(op, sizes, cur)
    return _tied(op, sizes, cur)


def _steps(op: Op, sizes: Mapping[str, int]) -> dict[str, int]:
    """Sizes that must stay multiples of a step when shrunk, where they are at
    `sizes`: a tensor's innermost dimension, a multiple of 16 bytes (the TMA
    engine's rows and 16-byte vectors: a schedule that uses them at `sizes`
    must be checkable at the small ones), and the channels C of an input
    X(N, H, W, C) read by a statement shaped as a convolution's im2col matrix
    (schedule/primitives_hopper.looks_like_window), a multiple of the K tile."""
    import math
    from ..lang.ast import Size
    out: dict[str, int] = {}

    def need(dim, step):
        if isinstance(dim, Size) and sizes.get(dim.name, 0) % step == 0:
            out[dim.name] = math.lcm(out.get(dim.name, 1), step)
    for t in op.inputs + op.outputs + op.temporaries:
        if t.shape and t.dtype.bits >= 8:
            need(t.shape[-1], max(1, 128 // t.dtype.bits))
    for st in _windows(op):  # the K tile: 64 16-bit values, 128 fp8 ones
        x = op.tensors[st.rhs.a.tensor]
        need(x.shape[-1], 64 if x.dtype.bits >= 16 else 128)
    return out


def _windows(op: Op):
    from ..schedule.primitives_hopper import looks_like_window
    return [st for st in op.statements if looks_like_window(op, st)]


def _tied(op: Op, sizes: Mapping[str, int], cur: dict) -> dict:
    """`cur` with every size that equals an im2col statement's window extent
    (its second index's range) at `sizes` set to that extent at `cur`."""
    for st in _windows(op):
        r = st.range_of(st.spatial[1])
        lo, hi = r.lo, r.hi
        try:
            was, now = (eval_int(hi, sizes) - eval_int(lo, sizes),
                        eval_int(hi, cur) - eval_int(lo, cur))
        except Exception:  # noqa: BLE001 - a range the sizes do not fix
            continue
        for name in cur:
            if sizes[name] == was and cur[name] != now and name not in _names_in(hi):
                cur = dict(cur, **{name: now})
    return cur


def _names_in(e) -> set:
    from ..lang.ast import Size, walk
    return {x.name for x in walk(e) if isinstance(x, Size)}
