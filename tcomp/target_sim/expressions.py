"""Expressions of the sim target, compiled once per launch into closures.

`compile_expr(e)` returns `f(env, mask) -> value`: a NumPy scalar when the
value is the same for every lane, else an array with one element per lane.
`mask` is None when every lane of the batch is active, else a bool array over
the lanes. Dispatch on node types, dtype lookups and the choice of NumPy
function happen here, once, not at every evaluation; constant operands are
converted once. Ternaries, `&&` and `||` evaluate their branches only on the
lanes that take them (a guarded division or load in the other branch is not
executed), as in the language.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lang import dtypes, minmax, npfuncs
from ..lower import ir
from ..lower.printer import expr as expr_text
from .memory import Local, Shared

COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}
ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply}
# Integer bitwise operators (two's complement, as in C; `>>` arithmetic).
BITWISE = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor,
           "<<": np.left_shift, ">>": np.right_shift}


_NP: dict = {}      # DType -> NumPy dtype (DType.numpy builds one per call)
_CONV: dict = {}    # NumPy dtype -> converter


def _np(dtype):
    dt = _NP.get(dtype)
    if dt is None:
        dt = _NP[dtype] = dtype.numpy
    return dt


def _converter(dt):
    """x as dtype `dt` (unchanged when it already is)."""
    conv = _CONV.get(dt)
    if conv is None:
        if dt.name in dtypes.ML_DTYPES:  # rounded once (fp8: saturating), as in `evaluate`
            # (npfuncs.convert)
            def conv(x):
                return x if x.dtype == dt else npfuncs.convert(x, dt)
        else:
            def conv(x):
                return x if x.dtype == dt else x.astype(dt)
        _CONV[dt] = conv
    return conv


class Expressions:
    """Mixin of the launch (executor._Launch): the expression compiler.

    An expression is *invariant* when its value is the same at every
    evaluation within a batch of blocks: it reads no memory, its variables
    are thread/block indices, sizes or `let`s of invariant values (not loop
    variables), and it divides only by nonzero constants (so it raises for no
    lane). Its value is computed once per batch, for all lanes, and reused:
    the index arithmetic of a tile (e.g. `tx / 4 % 8 * 8`) is not recomputed
    in every iteration of the loops around it. `self.invariant` holds the
    names of invariant variables at the point being compiled, `self.scope_id`
    numbers that scope (the closures of a scope are reused: `self.compiled`)."""

    def compile_expr(self, e: ir.Expr):
        return self._compile(e)[0]

    def _compile(self, e: ir.Expr):
        """(closure, invariant). A node object met again in the same scope (the
        rewriters share unchanged subtrees, e.g. between unrolled copies of a
        loop body) gets the same closure, and so one cached invariant value."""
        key = (id(e), self.scope_id)
        hit = self.compiled.get(key)
        if hit is not None:
            return hit
        method = _X.get(type(e))
        if method is None:
            method = getattr(Expressions, "_x_" + type(e).__name__, None)
            if method is None:
                raise SimError(f"kernel {self.kname}: cannot evaluate {type(e).__name__}")
            _X[type(e)] = method
        f, inv = method(self, e)
        if inv and not isinstance(e, (ir.Imm, ir.Var)):
            f = self._once_per_batch(f)
        self.compiled[key] = f, inv
        return f, inv

    def _once_per_batch(self, f):
        memo = [_NEVER, None]  # the batch it was computed for, its value

        def cached(env, mask):
            if memo[0] is not self.batch:
                memo[1] = f(env, None)
                memo[0] = self.batch
            return memo[1]
        return cached

    def _x_Imm(self, e):
        v = _np(e.dtype).type(e.value)
        return (lambda env, mask: v), True

    def _x_Var(self, e):
        name, kname = e.name, self.kname

        def var(env, mask):
            try:
                return env[name]
            except KeyError:
                raise SimError(f"kernel {kname}: variable '{name}' is not bound") from None
        return var, name in self.invariant

    def _x_Ref(self, e):
        # A reference is an intrinsic's operand (its rule reads the subscripts
        # itself); evaluated as a value, it has none.
        kname, text = self.kname, expr_text(e)

        def ref(env, mask):
            raise SimError(f"kernel {kname}: {text} is the address of an element, not a value; "
                           f"only an intrinsic that takes an address operand can use it")
        return ref, False

    def _x_Load(self, e):
        name = e.buffer
        idx = [self.compile_expr(i) for i in e.indices]
        if all(isinstance(i, ir.Imm) for i in e.indices):
            key = tuple(int(i.value) for i in e.indices)
            return self._const_load(name, key, self.const_offset(name, key)), False

        def load(env, mask):
            return self._load_from(name, self.mem.get(name), [f(env, mask) for f in idx], mask)
        return load, False

    def _load_from(self, name, h, subs, mask):
        """A checked load of `subs` from buffer `name` (`h`: its shared/local
        handle, None for a global tensor)."""
        if h is None:
            arr = self.globals.get(name)
            if arr is None:
                raise SimError(f"kernel {self.kname}: unknown buffer '{name}'")
            return self.load_global(name, arr, subs, mask)
        if type(h) is Local:
            return self.load_local(name, h, subs, mask)
        if not isinstance(h, Shared):
            raise SimError(f"kernel {self.kname}: a load of mbarrier '{name}' (use the mbarrier "
                           f"intrinsics)")
        return self.load_shared(name, h, subs, mask)

    def _const_load(self, name, key, off):
        """A load at constant subscripts `key` (flat offset `off` into a local
        buffer, else None): registers of a local tile read as a view of one
        column, without checks once every lane has written them."""

        def load(env, mask):
            h = self.mem.get(name)
            if off is not None and type(h) is Local and off in h.full:
                return h.data[:, off]
            return self._load_from(name, h, [np.int32(i) for i in key], mask)
        return load

    def _x_Cast(self, e):
        x, inv = self._compile(e.x)
        if e.dtype.is_bool:
            return (lambda env, mask: np.asarray(x(env, mask)) != 0), inv
        if e.x.dtype.is_float and e.dtype.is_int:  # saturating, NaN -> 0 (npfuncs.saturate)
            dt = _np(e.dtype)
            return (lambda env, mask: npfuncs.saturate(x(env, mask), dt)), inv
        conv = _converter(_np(e.dtype))
        return (lambda env, mask: conv(x(env, mask))), inv

    def _x_Un(self, e):
        x, inv = self._compile(e.x)
        f = np.logical_not if e.op == "!" else np.negative
        return (lambda env, mask: f(x(env, mask))), inv

    def _x_Select(self, e):
        (cond, i1), (a, i2), (b, i3) = (self._compile(x) for x in (e.cond, e.a, e.b))
        dt = _np(e.dtype)
        zero = np.zeros((), dt)

        def select(env, mask):
            c = cond(env, mask)
            if np.ndim(c) == 0:
                return (a if c else b)(env, mask)
            ma = c if mask is None else mask & c
            mb = ~c if mask is None else mask & ~c
            va = a(env, ma) if ma.any() else zero
            vb = b(env, mb) if mb.any() else zero
            return np.where(c, va, vb).astype(dt)
        return select, i1 and i2 and i3

    def _x_Call(self, e):
        compiled = [self._compile(a) for a in e.args]
        args = [f for f, _ in compiled]
        dt, fn = _np(e.dtype), e.fn
        return (lambda env, mask: npfuncs.apply(
            fn, [np.asarray(f(env, mask)).astype(dt) for f in args], True)), \
            all(inv for _, inv in compiled)

    # ------------------------------------------------------------ binary
    def _x_Bin(self, e):
        if e.op in ("&&", "||"):
            return self._logic(e)
        dt = _np(e.dtype)
        if e.op in COMPARE:
            f, conv = COMPARE[e.op], None
        elif e.op in ARITH:
            f, conv = ARITH[e.op], _converter(dt)
        elif e.op in BITWISE and dt.kind in "iu":
            f, conv = BITWISE[e.op], _converter(dt)
        elif e.op in ("min", "max"):
            f = minmax.of(e.op)
            conv = _converter(dt)
        elif e.op in ("/", "%"):
            if dt.kind != "f":
                return self._int_division(e)
            f = np.divide if e.op == "/" else np.fmod
            conv = _converter(dt)
        else:
            raise SimError(f"kernel {self.kname}: unknown operator '{e.op}'")
        return self._binary(e, f, conv)

    def _binary(self, e, f, conv):
        """f(a, b) with each operand converted by `conv` (None: as they are);
        an immediate operand is converted once, here."""
        (fa, ia), (fb, ib) = self._compile(e.a), self._compile(e.b)
        if conv is None:
            conv = _identity
        if isinstance(e.b, ir.Imm):
            cb = conv(self._const(e.b))
            return (lambda env, mask: f(conv(fa(env, mask)), cb)), ia
        if isinstance(e.a, ir.Imm):
            ca = conv(self._const(e.a))
            return (lambda env, mask: f(ca, conv(fb(env, mask)))), ib
        return (lambda env, mask: f(conv(fa(env, mask)), conv(fb(env, mask)))), ia and ib

    @staticmethod
    def _const(e: ir.Imm):
        return _np(e.dtype).type(e.value)

    def _int_division(self, e):
        """Integer `/` and `%` (floor semantics); a division by zero on an active
        lane is an error, on an inactive one (a guarded lane) no matter."""
        (fa, ia), (fb, _) = self._compile(e.a), self._compile(e.b)
        dt = _np(e.dtype)
        conv = _converter(dt)
        f = np.floor_divide if e.op == "/" else np.mod
        if isinstance(e.b, ir.Imm) and e.b.value != 0:
            cb = conv(self._const(e.b))
            return (lambda env, mask: f(conv(fa(env, mask)), cb)), ia
        one = np.ones((), dt)
        text = expr_text(e)

        def div(env, mask):
            a, b = conv(fa(env, mask)), conv(fb(env, mask))
            zero = b == 0
            if np.any(zero):
                live = zero if np.ndim(zero) else np.full(self.L, bool(zero))
                if mask is not None:
                    live = live & mask
                if np.any(live):
                    raise SimError(f"kernel {self.kname}: integer division by zero in {text}")
                b = np.where(zero, one, b)
            return f(a, b)
        return div, False

    def _logic(self, e):
        (fa, ia), (fb, ib) = self._compile(e.a), self._compile(e.b)
        is_and = e.op == "&&"
        false = np.bool_(False)

        def logic(env, mask):
            a = fa(env, mask)
            if np.ndim(a) == 0:
                if is_and != bool(a):
                    return np.bool_(a)
                return fb(env, mask)
            take = a if is_and else ~a
            sub = take if mask is None else mask & take
            b = fb(env, sub) if sub.any() else false
            return (a & b) if is_and else (a | b)
        return logic, ia and ib


_NEVER = object()
_X: dict = {}  # node type -> compiling method


def _identity(x):
    return x
