"""A convolution window read off a stage's definition, for the TMA engine's
im2col mode (the Hopper GEMM's A operand when it is such a window; see
hopper_plan.py and docs/hopper.md, "Convolution").

The stage must be written as the explicit im2col matrix of a stride-1,
dilation-1 convolution of an NHWC input X(N, H, W, C) with an R x S filter
and padding (ph, pw), output pixels p = (n, ho, wo) of Ho x Wo images
(Ho = H + 2 ph - R + 1, Wo = W + 2 pw - S + 1) and window positions
r = (kh, kw, c):

    A(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : 0
        where n = p / (Ho * Wo), h = p / Wo % Ho + r / (S * C) - ph,
              w = p % Wo + r / C % S - pw, p in 0:N * Ho * Wo, r in 0:R * S * C

(`r / C / S` for `r / (S * C)`, the conditions in any order, and any
spelling the simplifier brings to the same canonical form are the same
window). `window` finds R, S, ph and pw by comparing the definition, after
simplification, with that form for every filter and padding that could
give its extents; anything else is a LoweringError that shows the form.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError
from ..lang import dtypes
from . import ir
from .printer import expr
from .simplify import simplify_expr
from .translate import Translator

I32 = dtypes.int32
MAX_TAPS = 64  # filters of up to 64 positions (8 x 8) are looked for


@dataclass(frozen=True)
class Window:
    """The convolution window of an im2col stage: input X's tensor and
    dimensions, the filter (R x S), the padding and the output images."""
    tensor: str
    N: ir.Expr
    H: ir.Expr
    W: ir.Expr
    C: ir.Expr
    R: int
    S: int
    pad_h: int
    pad_w: int
    Ho: ir.Expr
    Wo: ir.Expr

    @property
    def lower(self) -> tuple[int, int]:
        """The TMA bounding box's lower corner (h, w): the window start of output pixel 0."""
        return (-self.pad_h, -self.pad_w)

    @property
    def upper(self) -> tuple[int, int]:
        """Its upper corner (h, w), from the last row and column: Wo window starts per row."""
        return (self.pad_h - (self.R - 1), self.pad_w - (self.S - 1))


def simplified(e):
    return simplify_expr(e)


_s = simplified


def _canon(e):
    """`e` (integer IR over sizes and the indices, all non-negative) as a
    SymPy expression: products and sums in canonical order, which the IR
    simplifier does not give (H * N * W and N * H * W); `/` floors. A
    comparison a op b becomes (op, a - b)."""
    if isinstance(e, ir.Bin) and e.op in _CMP:
        return (e.op, _canon(e.a) - _canon(e.b))
    import sympy
    if isinstance(e, ir.Imm):
        return sympy.Integer(int(e.value))
    if isinstance(e, ir.Var):
        return sympy.Symbol(e.name, integer=True, nonnegative=True)
    if isinstance(e, ir.Bin) and e.op in ("+", "-", "*", "/", "%"):
        a, b = _canon(e.a), _canon(e.b)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "/": lambda: sympy.floor(a / b), "%": lambda: sympy.Mod(a, b)}[e.op]()
    raise _NotCanon


_CMP = ("<", "<=", ">", ">=", "==", "!=")


class _NotCanon(Exception):
    pass


def same(x, y) -> bool:
    """x and y (simplified IR) are the same expression: equal, or equal in
    canonical SymPy form."""
    if x == y:
        return True
    try:
        cx, cy = _canon(x), _canon(y)
    except _NotCanon:
        return False
    if isinstance(cx, tuple) or isinstance(cy, tuple):
        return isinstance(cx, tuple) and isinstance(cy, tuple) and cx[0] == cy[0] and \
            (cx[1] - cy[1]) == 0
    return (cx - cy) == 0


def _b(op, x, y, dt=I32):
    return ir.Bin(op, x if isinstance(x, ir.Expr) else ir.const(x),
                  y if isinstance(y, ir.Expr) else ir.const(y), dt)


def _strip(e):
    while isinstance(e, ir.Cast):
        e = e.x
    return e


def _conjuncts(e):
    if isinstance(e, ir.Bin) and e.op == "&&":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


FORM = ("A(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : 0 where "
        "n = p / (Ho * Wo), h = p / Wo % Ho + r / (S * C) - ph, w = p % Wo + r / C % S - pw, "
        "p in 0:N * Ho * Wo, r in 0:R * S * C")


_WINDOWS: dict = {}  # what window() found, by everything it reads (a search lowers a
# convolution's candidates by the dozen; each comparison costs SymPy milliseconds)


def window(builder, st, bad) -> Window:
    """The window of stage state `st` (its definition an im2col matrix), or
    bad(the message)."""
    sched = builder.sched
    d = st.definition
    key = (d, tuple(d.lets.items()), tuple(d.ranges.items()),  # (StageDef's eq skips these)
           sched.tensors[st.tensor], tuple(sched.tensors[x] for x in sorted(d.reads())),
           tuple(t.name for t in builder.op.inputs), tuple(sorted(builder.sizes.items())),
           tuple(sorted(builder.divisors.items())))
    found = _WINDOWS.get(key)
    if found is None:
        found = _window(builder, st, bad)
        if len(_WINDOWS) >= 256:
            _WINDOWS.clear()
        _WINDOWS[key] = found
    return found


def _window(builder, st, bad) -> Window:
    sched = builder.sched
    d = st.definition
    name = st.name

    def no(why):
        bad(f"stage '{name}' is filled by the TMA engine in im2col mode, so it must be the "
            f"im2col matrix of a convolution, {FORM}; {why}")
    if len(d.spatial) != 2 or d.reduce or d.reduce_op is not None:
        no(f"it has {len(d.spatial)} spatial and {len(d.reduce)} reduction indices")
    p, r = d.spatial
    ext = {}
    for var in (p, r):
        lo, hi = d.ranges[var]
        if builder.lsize(lo) != ir.ZERO:
            no(f"'{var}' starts at {lo}")
        ext[var] = builder.lsize(hi)
    pv, rv = ir.Var(p, I32), ir.Var(r, I32)
    reads = []

    def read(tensor, args, dt):
        reads.append((tensor, args))
        return ir.Load(tensor, args, dt)
    value = _strip(Translator({p: pv, r: rv}, d.lets, builder.size, read)(d.rhs))
    if not isinstance(value, ir.Select) or len(reads) != 1:
        no("its value is not one read of the input under a condition")
    then, other = _strip(value.a), _strip(value.b)
    if not isinstance(then, ir.Load) or not isinstance(other, ir.Imm) or other.value != 0:
        no("its value is not `condition ? X(...) : 0`")
    x, args = reads[0]
    if x not in {t.name for t in builder.op.inputs} or len(args) != 4:
        no(f"it reads '{x}' at {len(args)} indices; the window reads a 4-D input X(N, H, W, C)")
    xdt, xshape = sched.tensors[x][0], sched.tensors[x][1]
    if xdt != sched.tensors[st.tensor][0]:
        no(f"its type {sched.tensors[st.tensor][0]} is not its input's ({xdt})")
    N, H, W, C = (builder.lsize(s) for s in xshape)
    got_args = [_s(a) for a in args]
    got_cond = _nontrivial(_s(c) for c in _conjuncts(value.cond))
    for R, S, ph, pw in _candidates(ext[r], C):
        Ho, Wo = _s(_b("+", H, 2 * ph - R + 1)), _s(_b("+", W, 2 * pw - S + 1))
        if not same(ext[p], _s(_b("*", _b("*", N, Ho), Wo))):
            continue
        ww = _b("-", _b("+", _b("%", pv, Wo), _b("%", _b("/", rv, C), S)), pw)
        want_args = [_s(_b("/", pv, _b("*", Ho, Wo))), None, _s(ww), _s(_b("%", rv, C))]
        if not all(same(g, w) for g, w in zip(got_args, want_args) if w is not None):
            continue
        row = _b("%", _b("/", pv, Wo), Ho)
        h_ = got_args[1]  # r / (S * C) or r / C / S: the same for r, C >= 0
        if not any(same(h_, _s(_b("-", _b("+", row, tap), ph))) for tap in (
                _b("/", rv, _b("*", S, C)), _b("/", _b("/", rv, C), S))):
            continue
        w_ = got_args[2]
        bool_ = dtypes.bool_
        want_cond = _nontrivial(_s(_b(op, x, y, bool_)) for op, x, y in (
            (">=", h_, 0), ("<", h_, H), (">=", w_, 0), ("<", w_, W)))
        if len(got_cond) != len(want_cond) or not all(any(same(g, w) for g in got_cond)
                                                      for w in want_cond):
            no(f"its condition ({expr(value.cond)}) is not exactly that the read is inside X "
               f"(the TMA engine reads zeros outside X and nowhere else)")
        return Window(x, N, H, W, C, R, S, ph, pw, Ho, Wo)
    no(f"no filter and padding give its reads X({', '.join(expr(a) for a in got_args)}) over "
       f"p in 0:{expr(ext[p])}, r in 0:{expr(ext[r])} (stride 1, dilation 1)")


def _nontrivial(conds) -> list:
    """The conjuncts that the simplifier did not decide true (a window
    coordinate that cannot leave X needs no test), once each."""
    return [c for c in dict.fromkeys(conds) if not (isinstance(c, ir.Imm) and c.value)]


def _candidates(r_ext, C):
    """(R, S, ph, pw) of every filter of R S positions with R S C = r_ext,
    and paddings 0 <= ph < R, 0 <= pw < S."""
    for taps in range(1, MAX_TAPS + 1):
        if not same(r_ext, _s(_b("*", C, taps))):
            continue
        for R in range(1, taps + 1):
            if taps % R:
                continue
            S = taps // R
            for ph in range(R):
                for pw in range(S):
                    yield R, S, ph, pw
