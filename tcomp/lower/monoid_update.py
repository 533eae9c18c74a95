"""The identity, update rule and final values of each tuple (monoid)
reduction (lang/monoids.py), as Kernel IR: what compiled kernels run (sim
and CUDA alike); `tcomp.evaluate` holds the reference semantics.

An update is a list of steps, each an expression over the state, the values
and the earlier steps (`step(j, dtype)`: the register holding step j); `STATE`
says which steps are the new state. The algebra, state s, value x:

  argmax  (m, i), x, p:  x' = NaN ? -inf : x;  take = x' > m || (x' == m && p < i)
                         m <- take ? x' : m;  i <- take ? p : i
          identity (-inf, largest payload); argmin mirrors it (+inf, `<`).
  welford (c, mu, M2):   c <- c + 1;  d = x - mu;  mu <- mu + d / c;  M2 <- M2 + d * (x - mu)
          identity (0, 0, 0). Final: the mean is NaN where M2 is (an inf or NaN value).
  expsum  (m, l[, a]), x[, w]:  m <- max(m, x) (NaN ignored);
          r = m_old == m ? 1 : exp(m_old - m);  e = x == m ? 1 : exp(x - m)
          l <- l * r + e;  a <- a * r + e * w;   identity (-inf, 0[, 0]).
          Final: l and a are NaN where m is infinite and l != 0 (what
          exp(x - m) gives there: the chain `max`, `sum exp(x - max)` does
          the same), else as accumulated. The `== ? 1` keeps a run of -inf
          (masked) values from poisoning the state with exp(-inf - -inf).
"""
from __future__ import annotations

from ..lang import dtypes
from ..lang.monoids import payload_identity
from . import ir
from .translate import cast

INF = float("inf")


def _imm(v, dt) -> ir.Imm:
    return ir.Imm(float(v) if dt.is_float else int(v), dt)


def _cmp(op, a, b):
    return ir.Bin(op, a, b, dtypes.bool_)


def value_types(monoid: str, accs: tuple, nvalues: int) -> tuple:
    """The type each value is computed in before the update."""
    if monoid in ("argmax", "argmin"):
        return accs[0], accs[1]
    if monoid == "welford":
        return (accs[0],)
    return (accs[0],) + ((accs[2],) if nvalues == 2 else ())


def identity(monoid: str, accs: tuple) -> list[ir.Imm]:
    if monoid in ("argmax", "argmin"):
        v, p = accs
        if v.is_float:
            best = _imm(-INF if monoid == "argmax" else INF, v)
        else:
            best = ir.identity("max" if monoid == "argmax" else "min", v)
        return [best, _imm(payload_identity(p), p)]
    if monoid == "welford":
        return [_imm(0, t) for t in accs]
    return [_imm(-INF, accs[0])] + [_imm(0, t) for t in accs[1:]]


def update(monoid: str, accs: tuple, state: list, values: list, step) -> tuple[list, tuple]:
    """(steps, the indices of the steps that are the new state)."""
    if monoid in ("argmax", "argmin"):
        m, i = state
        x, p = values
        big = monoid == "argmax"
        t = accs[0]
        if t.is_float:
            x = ir.Select(_cmp("!=", x, x), _imm(-INF if big else INF, t), x, t)
        xs, take = step(0, t), step(1, dtypes.bool_)
        better = _cmp(">" if big else "<", xs, m)
        tie = ir.Bin("&&", _cmp("==", xs, m), _cmp("<", p, i), dtypes.bool_)
        steps = [x, ir.Bin("||", better, tie, dtypes.bool_), ir.Select(take, xs, m, t),
                 ir.Select(take, p, i, accs[1])]
        return steps, (2, 3)
    if monoid == "welford":
        c, mu, m2 = state
        (x,) = values
        t = accs[0]
        steps = [ir.Bin("+", c, _imm(1, t), t), ir.Bin("-", x, mu, t)]
        steps.append(ir.Bin("+", mu, ir.Bin("/", step(1, t), step(0, t), t), t))
        steps.append(ir.Bin("+", m2, ir.Bin("*", step(1, t), ir.Bin("-", x, step(2, t), t), t),
                            t))
        return steps, (0, 2, 3)
    m, l, *a = state
    x, *w = values
    t = accs[0]
    one = _imm(1, t)

    def rescale(old):
        return ir.Select(_cmp("==", old, step(0, t)), one,
                         ir.Call("exp", (ir.Bin("-", old, step(0, t), t),), t), t)
    lt = accs[1]
    r, e = step(1, t), step(2, t)
    steps = [ir.Bin("max", m, x, t), rescale(m), rescale(x),
             ir.Bin("+", ir.Bin("*", l, cast(r, lt), lt), cast(e, lt), lt)]
    out = (0, 3)
    if a:
        at = accs[2]
        steps.append(ir.Bin("+", ir.Bin("*", a[0], cast(r, at), at),
                            ir.Bin("*", cast(e, at), w[0], at), at))
        out = (0, 3, 4)
    return steps, out


def final(monoid: str, accs: tuple, state: list) -> list:
    """The values stored, from the accumulated state."""
    if monoid == "welford":  # an infinite or NaN value made M2 NaN: the mean is NaN too
        c, mu, m2 = state
        return [c, ir.Select(_cmp("!=", m2, m2), _imm(float("nan"), accs[1]), mu, accs[1]), m2]
    if monoid != "expsum":
        return list(state)
    m, *rest = state
    t = accs[0]
    infinite = ir.Bin("||", _cmp("==", m, _imm(-INF, t)), _cmp("==", m, _imm(INF, t)),
                      dtypes.bool_)
    bad = ir.Bin("&&", infinite, _cmp("!=", state[1], _imm(0, accs[1])), dtypes.bool_)
    return [m] + [ir.Select(bad, _imm(float("nan"), dt), s, dt) for s, dt in zip(rest, accs[1:])]
