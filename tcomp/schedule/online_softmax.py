"""`Schedule.online_softmax`: a chain of reductions over one axis rewritten
into one pass with a running max (Milakov and Gimelshein's online softmax;
FlashAttention's rescaling), for softmax, log-sum-exp, cross-entropy and
attention alike.

Before (over the same reduction axes r, for each point n):
    M(n)    max=! x(n, r)
    L(n)    +=!   exp(x(n, r) - M(n))                    (or through P(n, r) = exp(...))
    W(n, e) +=!   exp(x(n, r) - M(n)) * v(n, r, e)       (weighted; optional, several)
    W(n, e) +=!   exp(x(n, r) - M(n)) * v(n, r, e) / L(n)  (or normalised inside)
After:
    M(n), L(n)                     expsum=! x(n, r)           (stage M)
    W_max(n, e), W_sum(n, e), W(n, e) expsum=! x(n, r), v(n, r, e)   (stage W)
    normalised: W_max, W_sum, W_acc expsum=! ... (stage "W.online"); W(n, e) = W_acc / W_sum
The tuple reduction `expsum` (lang/monoids.py) keeps a running max m, and
rescales the running sums by exp(m_old - m_new) whenever the max grows. Its
value equals the chain's (the same max, the same sums up to rounding; the
same infinities and NaNs: a row that is all -inf gives NaN in both). An
elementwise temporary P that the chain reads is recomputed inside the pass
and its stage dropped when nothing else reads it; the (M, L) stage is dropped
when M and L are temporaries that nothing else reads any more.
"""
from __future__ import annotations

import dataclasses

from ..errors import ScheduleError
from ..lang import ast as A
from ..lang.printer import expr_to_text
from . import directives as D
from .stage import StageDef, StageState

P = "online_softmax"


def _subst(e: A.Expr, fn) -> A.Expr:
    """`e` with every node `fn` maps (not None) replaced, children first otherwise."""
    got = fn(e)
    if got is not None:
        return got
    kids = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, A.Expr):
            kids[f.name] = _subst(v, fn)
        elif isinstance(v, tuple) and v and isinstance(v[0], A.Expr):
            kids[f.name] = tuple(_subst(x, fn) for x in v)
    return dataclasses.replace(e, **kids) if kids else e


def _expand(d: StageDef) -> A.Expr:
    """A stage's right-hand side with its where-bindings substituted."""
    def fn(x):
        if isinstance(x, A.LetRef):
            return _subst(d.lets[x.name], fn)
        return None
    return _subst(d.rhs, fn)


def _rename(e: A.Expr, names: dict) -> A.Expr:
    return _subst(e, lambda x: dataclasses.replace(x, name=names[x.name])
                  if isinstance(x, A.Index) and x.name in names else None)


class _Chain:
    def __init__(self, sched, mx, sm, weighted):
        self.s = sched
        self.m = self.stage(mx, "max")
        self.l = self.stage(sm, "sum")
        self.ws = [self.stage(w, "weighted") for w in weighted]
        md = self.m.definition
        if md.reduce_op != "max" or not md.reduce:
            raise ScheduleError(f"{P}: stage '{self.m.name}' must be a max=! reduction (the "
                                f"running max), not {_what(md)}")
        self.inlined: set[str] = set()
        self.x = self.inline(_expand(md))
        if not self.x.dtype.is_float:
            raise ScheduleError(f"{P}: the max of '{self.m.name}' is over {self.x.dtype} "
                                f"values; the rewrite needs float values")
        self.S, self.R = md.spatial, md.reduce

    def stage(self, ref, role) -> StageState:
        st = self.s._state(ref, P)
        if st.definition.monoid is not None:
            raise ScheduleError(f"{P}: stage '{st.name}' ({role}) already computes a tuple "
                                f"reduction")
        if st.origin != "statement" or st.transformed() or st.attach != ("root",):
            raise ScheduleError(f"{P}: stage '{st.name}' ({role}) is already scheduled; call "
                                f"{P} before other primitives on the stages of the chain")
        others = [w for w in self.s.writers(st.tensor) if w != st.name]
        if others:
            raise ScheduleError(f"{P}: '{st.tensor}' ({role}) is also written by stage "
                                f"'{others[0]}'; the rewrite needs the tensor written once")
        return st

    def matched(self, st: StageState, role: str, extra_ok: bool) -> tuple[A.Expr, dict]:
        """The stage's expanded right-hand side in the max's index names (the
        chain's temporaries inlined), and the renaming of its extra spatial indices."""
        d, md = st.definition, self.m.definition
        if d.reduce_op != "+" or not d.init:
            raise ScheduleError(f"{P}: the {role} '{st.name}' must be a +=! reduction, not "
                                f"{_what(d)}")
        n = len(self.S)
        if len(d.spatial) < n or (len(d.spatial) > n and not extra_ok) or \
                len(d.reduce) != len(self.R):
            want = f"{len(self.R)} reduction ind{'ex' if len(self.R) == 1 else 'ices'}"
            raise ScheduleError(f"{P}: the {role} '{st.name}' reduces over "
                                f"{', '.join(d.reduce) or 'nothing'} at "
                                f"({', '.join(d.spatial)}); the max '{self.m.name}' reduces "
                                f"over {', '.join(self.R)} at ({', '.join(self.S)}): the "
                                f"{role} needs the same points first and {want}")
        names = dict(zip(d.spatial[:n] + d.reduce, self.S + self.R))
        extra = {}
        for v in d.spatial[n:]:
            new, i = v, 1
            while new in self.S + self.R or new in extra.values():
                new, i = f"{v}{i}", i + 1
            extra[v] = new
        names.update(extra)
        for a, b in zip(d.spatial[:n] + d.reduce, self.S + self.R):
            if _text(d.ranges[a]) != _text(md.ranges[b]):
                raise ScheduleError(f"{P}: the {role} '{st.name}' runs '{a}' over "
                                    f"{_text(d.ranges[a])}, the max '{self.m.name}' runs '{b}' "
                                    f"over {_text(md.ranges[b])}: the chain must reduce over "
                                    f"the same axis")
        return _rename(self.inline(_expand(d)), names), extra

    def inline(self, e: A.Expr) -> A.Expr:
        """Reads of elementwise temporaries (P = exp(x - M)) replaced by their definition."""
        def fn(x):
            if not isinstance(x, A.Read):
                return None
            ws = self.s.writers(x.tensor)
            if len(ws) != 1 or x.tensor in {t.name for t in self.s.op.inputs}:
                return None
            pd = self.s.states[ws[0]].definition
            if pd.reduce_op is not None or pd.reduce or pd.monoid is not None:
                return None
            dt = self.s.tensors[x.tensor][0]
            if dt != dt.compute:
                raise ScheduleError(f"{P}: '{x.tensor}' is stored as {dt}, rounding its "
                                    f"values; the rewrite computes them in {dt.compute} "
                                    f"inside the pass and would not round them; store "
                                    f"'{x.tensor}' as {dt.compute}")
            self.inlined.add(x.tensor)
            body = self.inline(_expand(pd))
            args = dict(zip(pd.spatial, (self.inline(a) for a in x.args)))
            return _subst(body, lambda y: args[y.name]
                          if isinstance(y, A.Index) and y.name in args else None)
        return _subst(e, fn)

    def shifted(self) -> A.Expr:
        """exp(x - M(S)): what the chain sums."""
        md = self.m.definition
        mread = A.Read(md.tensor, tuple(A.Index(v, _int32()) for v in self.S),
                       self.s.tensors[md.tensor][0])
        t = self.x.dtype
        return A.Call("exp", (A.Binary("-", self.x, mread, t),), t)

    def check_exp(self, term: A.Expr, st: StageState, role: str) -> None:
        want = self.shifted()
        if term == want:
            return
        mtext = expr_to_text(want.args[0].b)
        if not (isinstance(term, A.Call) and term.fn == "exp"):
            raise ScheduleError(f"{P}: the {role} '{st.name}' must add exp(x - {mtext}) with x "
                                f"the max's value {expr_to_text(self.x)}; it adds "
                                f"{expr_to_text(term)}")
        arg = term.args[0]
        if not (isinstance(arg, A.Binary) and arg.op == "-" and arg.b == want.args[0].b):
            raise ScheduleError(f"{P}: the {role} '{st.name}' adds exp({expr_to_text(arg)}); "
                                f"its exponent must be shifted by the max, "
                                f"'... - {mtext}' (read at the stage's own indices)")
        raise ScheduleError(f"{P}: the {role} '{st.name}' adds exp({expr_to_text(arg.a)} - "
                            f"{mtext}), but the max '{self.m.name}' is over "
                            f"{expr_to_text(self.x)}: the shifted values must be the max's")


def _int32():
    from ..lang import dtypes
    return dtypes.int32


def _text(r) -> str:
    return f"{expr_to_text(r[0], 1)}:{expr_to_text(r[1], 1)}"


def _what(d: StageDef) -> str:
    if d.reduce_op is None:
        return "a plain assignment"
    return f"a {d.reduce_op}={'!' if d.init else ''} reduction"


def _factors(e: A.Expr, num: list, den: list, top: bool = True) -> None:
    if isinstance(e, A.Binary) and e.op == "*":
        _factors(e.a, num, den, top)
        _factors(e.b, num, den, top)
    elif isinstance(e, A.Binary) and e.op == "/" and e.dtype.is_float and top:
        _factors(e.a, num, den, top)
        den.append(e.b)
    else:
        num.append(e)


def online_softmax(sched, mx, sm, weighted=()) -> list:
    """The rewrite (module docstring); returns the new stages."""
    from .primitives import Stage
    if isinstance(weighted, (str, Stage)):
        weighted = [weighted]
    if not isinstance(weighted, (list, tuple)):
        raise ScheduleError(f"{P}: weighted must be a stage or a list of stages, got "
                            f"{weighted!r}")
    c = _Chain(sched, mx, sm, weighted)
    names = [c.m.name, c.l.name] + [w.name for w in c.ws]
    if len(set(names)) != len(names):
        raise ScheduleError(f"{P}: a stage appears twice in the chain ({', '.join(names)})")
    body, _ = c.matched(c.l, "sum", False)
    c.check_exp(body, c.l, "sum")
    md, ld = c.m.definition, c.l.definition
    new_states = []  # (position stage, [(name, StageState)]) replacing it
    ms = StageState(c.m.name, StageDef(
        md.tensor, c.S, c.R, dict(md.ranges), A.Values((c.x,)), "expsum", True, md.acc_dtype,
        {}, (ld.tensor,), "expsum", (md.acc_dtype, ld.acc_dtype)))
    replace = {c.m.name: [ms], c.l.name: []}
    for w in c.ws:
        replace[w.name] = _weighted(sched, c, w)
    order = list(sched.states)
    directive = D.OnlineSoftmax(c.m.name, c.l.name, tuple(w.name for w in c.ws))
    items = []
    for n in order:
        if n in replace:
            items += [(x.name, x) for x in replace[n]]
        else:
            items.append((n, sched.states[n]))
    sched.states = dict(items)
    for w in replace.values():
        for st in w:
            for t, dt in getattr(st, "_new_tensors", {}).items():
                sched.tensors[t] = dt
    _drop_unread(sched, c, ms)
    sched.directives.append(directive)
    new_states = [n for n in sched.states if any(n == x.name for r in replace.values()
                                                    for x in r)]
    return [Stage(sched, n) for n in new_states]


def _weighted(sched, c: _Chain, w: StageState) -> list:
    body, extra = c.matched(w, "weighted sum", True)
    num, den = [], []
    _factors(body, num, den)
    want = c.shifted()
    exps = [f for f in num if isinstance(f, A.Call) and f.fn == "exp"]
    if len(exps) != 1:
        raise ScheduleError(f"{P}: the weighted sum '{w.name}' must add a product with one "
                            f"factor exp(x - {expr_to_text(want.args[0].b)}); it adds "
                            f"{expr_to_text(body)}")
    c.check_exp(exps[0], w, "weighted sum")
    ltensor = c.l.definition.tensor
    lread = A.Read(ltensor, tuple(A.Index(v, _int32()) for v in c.S),
                   sched.tensors[ltensor][0])
    if any(d != lread for d in den):
        bad = next(d for d in den if d != lread)
        raise ScheduleError(f"{P}: the weighted sum '{w.name}' divides by {expr_to_text(bad)}; "
                            f"it may divide only by the sum {expr_to_text(lread)}")
    rest = [f for f in num if f is not exps[0]]
    forbidden = {c.m.definition.tensor, ltensor, w.tensor}
    for f in rest:
        for x in A.walk(f):
            if isinstance(x, A.Read) and x.tensor in forbidden:
                raise ScheduleError(f"{P}: the weight {expr_to_text(f)} of '{w.name}' reads "
                                    f"'{x.tensor}', which the rewrite computes in the same pass")
    from ..lang import dtypes
    v = rest[0] if rest else A.Const(1.0, want.dtype)
    for f in rest[1:]:
        v = A.Binary("*", v, f, dtypes.promote(v.dtype, f.dtype))
    wd = w.definition
    S2 = c.S + tuple(extra[e] for e in wd.spatial[len(c.S):])
    ranges = dict(c.m.definition.ranges)
    for e in wd.spatial[len(c.S):]:
        ranges[extra[e]] = wd.ranges[e]
    shape = sched.tensors[w.tensor][1]
    mdt, ldt = sched.tensors[c.m.definition.tensor][0], sched.tensors[ltensor][0]
    fresh = lambda base: _fresh(sched, base)  # noqa: E731
    tmax, tsum = fresh(f"{w.tensor}_max"), fresh(f"{w.tensor}_sum")
    accs = (c.m.definition.acc_dtype, c.l.definition.acc_dtype, wd.acc_dtype)
    new = {tmax: (mdt, shape, "global"), tsum: (ldt, shape, "global")}
    if not den:
        st = StageState(w.name, StageDef(w.tensor, S2, c.R, ranges, A.Values((c.x, v)), "expsum",
                                         True, mdt.compute, {}, (tsum, w.tensor), "expsum", accs))
        st.definition = dataclasses.replace(st.definition, tensor=tmax)
        st._new_tensors = new
        return [st]
    tacc = fresh(f"{w.tensor}_acc")
    new[tacc] = (wd.acc_dtype, shape, "global")
    st = StageState(f"{w.name}.online", StageDef(tmax, S2, c.R, ranges, A.Values((c.x, v)),
                                                 "expsum", True, mdt.compute, {}, (tsum, tacc),
                                                 "expsum", accs))
    st._new_tensors = new
    idx = tuple(A.Index(e, _int32()) for e in S2)
    div = A.Binary("/", A.Read(tacc, idx, wd.acc_dtype), A.Read(tsum, idx, ldt), wd.acc_dtype)
    sranges = {k: ranges[k] for k in S2}
    final = StageState(w.name, StageDef(w.tensor, S2, (), sranges, div, None, True,
                                        wd.acc_dtype.compute, {}))
    return [st, final]


def _fresh(sched, base: str) -> str:
    name, i = base, 1
    while name in sched.tensors:
        name, i = f"{base}{i}", i + 1
    return name


def _drop_unread(sched, c: _Chain, ms: StageState) -> None:
    """Drop the stages whose tensors are temporaries nothing reads any more: the
    chain's elementwise temporaries and, then, the (max, sum) stage."""
    temps = {t.name for t in sched.op.temporaries}

    def unread(t):
        return t in temps and not any(t in st.definition.reads() for st in sched.states.values())
    for t in sorted(c.inlined):
        ws = sched.writers(t)
        if unread(t) and len(ws) == 1:
            del sched.states[ws[0]]
            del sched.tensors[t]
    if all(unread(t) for t in ms.definition.tensors):
        del sched.states[ms.name]
        for t in ms.definition.tensors:
            del sched.tensors[t]
