"""`evaluate(op, *arrays)`: the semantic oracle, in vectorised NumPy.

Each statement is evaluated over the box of its index ranges as one NumPy
expression: an index variable is an `arange` along its own axis, an affine
read that stays in bounds is a zero-copy strided view (sliding windows for
convolutions), any other read is a gather whose indices are bounds-checked.
`+=` reductions of a product of reads go through `np.einsum`; other boxes
larger than CHUNK elements are split along their longest axis.

Semantics pinned here (and documented in docs/language.md and the README):
  * outputs start zero-filled; a statement writes its spatial range;
  * a statement's right-hand side sees the state before the statement; an
    ordered one (`where ordered t`) runs point by point in increasing `t`, and
    sees the points it stored before the current one (lang/check_ordered.py);
  * ternaries, `&&` and `||` are lazy: a read in a branch not taken may be out
    of bounds; a read that is taken and out of bounds raises `LangError`;
  * integer `/` and `%` floor toward negative infinity; division by zero
    raises; float `%` is C's fmod; integer overflow wraps;
  * a float -> integer cast saturates (toward zero, clamped, NaN -> 0), an
    integer -> integer cast wraps (npfuncs.convert);
  * float16/bfloat16 arithmetic is done in float32 and rounded on store; a
    reduction accumulates in the statement's `acc_dtype` (float32 for them)
    and is rounded once, when the result is stored; every conversion rounds
    once, to nearest even (npfuncs.convert: also float64 to bfloat16);
  * arguments are checked by signature.py, as on every target.
"""
from __future__ import annotations

import string

import numpy as np

from ..errors import LangError
from . import builtins, dtypes, minmax, monoids, npfuncs
from .ast import (Binary, Call, Cast, Const, Expr, Index, LetRef, Read, Select, Size, Unary)
from .op import Op, Statement
from .printer import expr_to_text
from .signature import Signature
from .symbolic import eval_int

CHUNK = 1 << 22  # elements of the largest intermediate array


def evaluate(op: Op, *arrays):
    """Reference result of `op` on NumPy arrays: one array, or a tuple in the
    def's output order when it has several outputs."""
    if not isinstance(op, Op):
        raise LangError(f"evaluate() needs an Op (from tcomp.op or tcomp.parse), got "
                        f"{type(op).__name__}")
    env, sizes = bind_inputs(op, arrays)
    for t in op.outputs + op.temporaries:
        shape = tuple(max(0, eval_int(d, sizes)) for d in t.shape)
        env[t.name] = np.zeros(shape, t.dtype.numpy)
    with np.errstate(all="ignore"):
        for st in op.statements:
            _run(op, st, env, sizes)
    for t in op.outputs:
        if t.declared_shape is not None:
            want = tuple(eval_int(d, sizes) for d in t.declared_shape)
            got = env[t.name].shape
            if want != got:
                raise LangError(f"output '{t.name}' is declared with shape {want} but its "
                                f"statements compute shape {got}")
    outs = tuple(env[t.name] for t in op.outputs)
    return outs[0] if len(outs) == 1 else outs


def bind_inputs(op: Op, arrays, compiled: dict | None = None) -> tuple[dict, dict]:
    """Check arrays against the inputs (signature.py: the checks and the dtype
    policy every target shares); returns (tensor env, size bindings)."""
    arrays, sizes = Signature.from_op(op).check_call(arrays, compiled)
    env = {}
    for t, a in zip(op.inputs, arrays):
        try:
            a = np.asarray(a)
        except Exception as e:  # e.g. a GPU tensor without a host copy
            raise LangError(f"input '{t.name}' cannot be read as a NumPy array: {e}") from None
        env[t.name] = np.require(a, requirements="C")  # keeps 0-d arrays 0-d
    return env, sizes


# ---------------------------------------------------------------- statements
def _identity(op: str, dt: np.dtype):
    if op == "+":
        return dt.type(0)
    if op == "*":
        return dt.type(1)
    if dt.kind == "f":
        return dt.type(-np.inf if op == "max" else np.inf)
    if dt.kind == "b":
        return np.bool_(op == "min")
    info = np.iinfo(dt)
    return dt.type(info.min if op == "max" else info.max)


def _combine(op: str, a, b):
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    return minmax.of(op)(a, b)


def _run(op: Op, st: Statement, env: dict, sizes: dict):
    if st.ragged:
        from .evaluate_ragged import run_ragged
        return run_ragged(st, env, sizes)
    box = [(r.var, eval_int(r.lo, sizes), eval_int(r.hi, sizes)) for r in st.ranges]
    box = [(v, lo, max(lo, hi)) for v, lo, hi in box]
    out = env[st.tensor]
    nsp = len(st.spatial)
    if st.scatter:
        from .evaluate_scatter import run_scatter
        run_scatter(st, env, sizes, box)
        return
    for v, lo, hi in box[:nsp]:
        if lo < 0 and hi > lo:
            raise LangError(f"statement writes '{st.tensor}' at {v} = {lo}, a negative position",
                            st.stmt.loc)
    for (v, lo, hi), n in zip(box[:nsp], out.shape):
        if hi > n and hi > lo:
            raise LangError(f"statement writes '{st.tensor}' at {v} up to {hi - 1}, beyond its "
                            f"shape {out.shape} (set by its last statement)", st.stmt.loc)
    if st.monoid is not None:
        _run_tuple(st, env, sizes, box)
        return
    if st.ordered:
        _run_ordered(st, env, sizes, box)
        return
    reads_self = any(isinstance(x, Read) and x.tensor == st.tensor for x in _all_exprs(st))
    view = dict(env)
    if reads_self:
        view[st.tensor] = out.copy()
    ev = _Eval(st, view, sizes, [v for v, _, _ in box])
    result = ev.reduce_box(box)
    region = tuple(slice(lo, hi) for _, lo, hi in box[:nsp])
    if st.continues:
        prior = view[st.tensor][region].astype(st.acc_dtype.numpy)
        result = _combine(st.reduce_op, prior, result)
    out[region] = npfuncs.convert(result, out.dtype)


def _run_ordered(st: Statement, env: dict, sizes: dict, box):
    """An ordered statement (`where ordered t`): point by point over its ordered
    indices, lexicographically in increasing order; each point's elements are
    computed from the tensor as it is then (earlier points already stored, this
    and later ones as before the statement), then stored."""
    out, nsp = env[st.tensor], len(st.spatial)
    pos = [st.spatial.index(v) for v in st.ordered]
    ev = _Eval(st, env, sizes, [v for v, _, _ in box])
    for point in np.ndindex(*(box[k][2] - box[k][1] for k in pos)):
        sub = list(box)
        for k, p in zip(pos, point):
            v, lo, _ = box[k]
            sub[k] = (v, lo + p, lo + p + 1)
        result = ev.reduce_box(sub)
        region = tuple(slice(lo, hi) for _, lo, hi in sub[:nsp])
        if st.continues:
            prior = out[region].astype(st.acc_dtype.numpy)
            result = _combine(st.reduce_op, prior, result)
        out[region] = npfuncs.convert(result, out.dtype)


def _run_tuple(st: Statement, env: dict, sizes: dict, box):
    """A tuple reduction: its values over the box, reduced by the monoid's
    reference (monoids.reference: direct NumPy, no update rule)."""
    nsp = len(st.spatial)
    ev = _Eval(st, env, sizes, [v for v, _, _ in box])
    ev.box = {v: (lo, hi) for v, lo, hi in box}
    shape = tuple(hi - lo for _, lo, hi in box)
    flat = shape[:nsp] + (int(np.prod(shape[nsp:], dtype=np.int64)),)
    vals = []
    for v in st.values:
        ct = v.dtype.compute.numpy
        x = np.zeros(shape, ct) if 0 in shape else \
            np.broadcast_to(ev.ev(v, None), shape).astype(ct)
        vals.append(x.reshape(flat))
    outs = monoids.reference(st.monoid, vals, st.component_accs)
    region = tuple(slice(lo, hi) for _, lo, hi in box[:nsp])
    for name, out in zip(st.tensors, outs):
        env[name][region] = npfuncs.convert(out, env[name].dtype)


def _all_exprs(st: Statement):
    from .ast import walk
    yield from walk(st.rhs)
    for v in st.lets.values():
        yield from walk(v)


class _Eval:
    def __init__(self, st: Statement, env: dict, sizes: dict, axes: list[str]):
        self.st, self.env, self.sizes = st, env, sizes
        self.axes = {v: i for i, v in enumerate(axes)}
        self.nsp = len(st.spatial)
        self.lets = st.lets
        self.op = st.reduce_op
        self.acc = st.acc_dtype.numpy

    # ---------------------------------------------------------- reductions
    def reduce_box(self, box):
        """The statement's value over `box`, reduced over its reduction axes."""
        extents = [hi - lo for _, lo, hi in box]
        vol = int(np.prod(extents, dtype=np.int64)) if extents else 1
        if self.op == "+" and self.st.reduce and vol > 0:
            fast = self.einsum(box)
            if fast is not None:
                return fast
        if vol > CHUNK and max(extents) > 1:
            ax = int(np.argmax(extents))
            v, lo, hi = box[ax]
            mid = lo + (hi - lo) // 2
            b1, b2 = list(box), list(box)
            b1[ax], b2[ax] = (v, lo, mid), (v, mid, hi)
            r1, r2 = self.reduce_box(b1), self.reduce_box(b2)
            if ax < self.nsp:
                return np.concatenate([r1, r2], axis=ax)
            return _combine(self.op, r1, r2)
        shape = tuple(extents)
        self.box = {v: (lo, hi) for v, lo, hi in box}
        if vol == 0:
            val = np.zeros(shape, self.acc)
        else:
            val = np.broadcast_to(self.ev(self.st.rhs, None), shape).astype(self.acc)
        red = tuple(range(self.nsp, len(box)))
        if not red:
            return val
        spatial_shape = shape[:self.nsp]
        if 0 in shape[self.nsp:]:
            return np.full(spatial_shape, _identity(self.op, val.dtype), val.dtype)
        if self.op == "+":
            return val.sum(axis=red, dtype=val.dtype)
        if self.op == "*":
            return val.prod(axis=red, dtype=val.dtype)
        f = minmax.of(self.op)  # (floats: NaN ignored, -0 < +0)
        # Start from the identity, as compiled kernels do: float max/min ignore
        # NaN (fmaxf/fminf), so a row of NaNs only gives -inf (max) / +inf (min).
        # (the reduced length spelled out: -1 cannot be inferred when a spatial extent is 0)
        flat = val.reshape(spatial_shape + (int(np.prod(shape[self.nsp:], dtype=np.int64)),))
        return f.reduce(flat, axis=-1,
                        initial=_identity(self.op, val.dtype))

    def einsum(self, box):
        """`+=` of a product of in-bounds affine reads and constants, via einsum."""
        if self.st.acc_dtype.kind != "f":
            return None
        factors = []
        stack = [self.st.rhs]
        while stack:
            e = stack.pop()
            if isinstance(e, Binary) and e.op == "*" and e.dtype == self.st.value_dtype:
                stack += [e.a, e.b]
            else:
                factors.append(e)
        self.box = {v: (lo, hi) for v, lo, hi in box}
        letters = dict(zip(self.axes, string.ascii_letters))
        operands, subs, scale = [], [], 1.0
        for f in factors:
            if isinstance(f, Const):
                # The literal's value in its own type (the type it met: check.py).
                scale *= float(np.asarray(f.value, f.dtype.numpy))
                continue
            if isinstance(f, Size):
                scale *= float(self.sizes[f.name])
                continue
            if not isinstance(f, Read) or f.dtype.is_bool:
                return None
            view = self.strided(f, squeeze=True)
            if view is None:
                return None
            arr, vars_ = view
            operands.append(arr.astype(self.acc, copy=False))
            subs.append("".join(letters[v] for v in vars_))
        if not all(np.isfinite(a).all() for a in operands) or not np.isfinite(scale):
            # einsum may sum an index out of one operand before multiplying (inf *
            # (a + b) for the sum of inf * a and inf * b): with infinities or NaNs
            # that is another value (inf where the sum of products is NaN); the
            # sum of the products, elementwise, keeps IEEE semantics.
            return None
        used = set("".join(subs))
        sp = [v for v, _, _ in box[:self.nsp]]
        out_sub = "".join(letters[v] for v in sp if letters[v] in used)
        spec = ",".join(subs) + "->" + out_sub
        r = np.einsum(spec, *operands, optimize=True) if operands else np.asarray(1.0, self.acc)
        for v, lo, hi in box[self.nsp:]:
            if letters[v] not in used:
                scale *= hi - lo
        r = np.asarray(r * self.acc.type(scale), self.acc)
        # Re-insert spatial axes the product does not depend on.
        shape = [hi - lo if letters[v] in used else 1 for v, lo, hi in box[:self.nsp]]
        r = r.reshape(shape)
        return np.broadcast_to(r, tuple(hi - lo for _, lo, hi in box[:self.nsp])).copy()

    # ---------------------------------------------------------- expressions
    def index(self, name: str):
        lo, hi = self.box[name]
        shape = [1] * len(self.axes)
        shape[self.axes[name]] = hi - lo
        return np.arange(lo, hi, dtype=np.int32).reshape(shape)

    def affine(self, e: Expr):
        """({index: coefficient}, constant) with concrete sizes, or None."""
        if isinstance(e, Const) and isinstance(e.value, int):
            return {}, e.value
        if isinstance(e, Size):
            return {}, self.sizes[e.name]
        if isinstance(e, Index):
            return {e.name: 1}, 0
        if isinstance(e, LetRef):
            return self.affine(self.lets[e.name])
        if isinstance(e, Unary) and e.op == "-":
            a = self.affine(e.x)
            return None if a is None else ({k: -c for k, c in a[0].items()}, -a[1])
        if isinstance(e, Binary) and e.op in "+-*":
            a, b = self.affine(e.a), self.affine(e.b)
            if a is None or b is None:
                return None
            if e.op == "*":
                if a[0] and b[0]:
                    return None
                (k, s), c = (a, b[1]) if not b[0] else (b, a[1])
                return {v: x * c for v, x in k.items()}, s * c
            sign = 1 if e.op == "+" else -1
            k = dict(a[0])
            for v, x in b[0].items():
                k[v] = k.get(v, 0) + sign * x
            return k, a[1] + sign * b[1]
        return None

    def strided(self, r: Read, squeeze: bool = False):
        """A zero-copy view of an in-bounds affine read over the box, or None."""
        arr = self.env[r.tensor]
        affs = [self.affine(a) for a in r.args]
        if any(a is None for a in affs) or arr.size == 0:
            return None
        for (k, c), n in zip(affs, arr.shape):
            lo = c + sum(x * (self.box[v][0] if x > 0 else self.box[v][1] - 1) for v, x in k.items())
            hi = c + sum(x * (self.box[v][1] - 1 if x > 0 else self.box[v][0]) for v, x in k.items())
            if lo < 0 or hi >= n:
                return None
        item = arr.itemsize
        offset = sum((c + sum(x * self.box[v][0] for v, x in k.items())) * s // item
                     for (k, c), s in zip(affs, arr.strides))
        shape, strides, vars_ = [], [], []
        for v in self.axes:
            stride = sum(k.get(v, 0) * s for (k, _), s in zip(affs, arr.strides))
            used = any(v in k for k, _ in affs)
            if squeeze and not used:
                continue
            lo, hi = self.box[v]
            shape.append(hi - lo if used else 1)
            strides.append(stride if used else 0)
            vars_.append(v)
        base = arr.reshape(-1)[offset:]
        if base.dtype.name in dtypes.ML_DTYPES:
            # as_strided rebuilds the array from its __array_interface__, whose type string
            # NumPy cannot read back for ml_dtypes' types ('<f1' for float8_e5m2): stride
            # the bytes as unsigned integers of the same size and view the result back
            raw = base.view(f"u{base.itemsize}")
            view = np.lib.stride_tricks.as_strided(raw, tuple(shape), tuple(strides),
                                                   writeable=False).view(base.dtype)
        else:
            view = np.lib.stride_tricks.as_strided(base, tuple(shape), tuple(strides),
                                                   writeable=False)
        return view, vars_

    def ev(self, e: Expr, mask):
        t = e.dtype
        ct = t.compute.numpy
        if isinstance(e, Const):
            return np.asarray(e.value, ct)
        if isinstance(e, Size):
            return np.asarray(self.sizes[e.name], np.int32)
        if isinstance(e, Index):
            return self.index(e.name)
        if isinstance(e, LetRef):
            return self.ev(self.lets[e.name], mask)
        if isinstance(e, Read):
            return self.read(e, mask).astype(ct, copy=False)
        if isinstance(e, Cast):
            x = self.ev(e.x, mask)
            if t.is_bool:
                return x != 0
            return npfuncs.convert(x, t.numpy).astype(ct, copy=False)
        if isinstance(e, Unary):
            x = self.ev(e.x, mask)
            if e.op == "!":
                return np.logical_not(x != 0)
            return np.negative(x.astype(ct, copy=False))
        if isinstance(e, Select):
            c = self.ev(e.cond, mask) != 0
            a = self.ev(e.a, _and(mask, c)).astype(ct, copy=False)
            b = self.ev(e.b, _and(mask, ~c)).astype(ct, copy=False)
            return np.where(c, a, b)
        if isinstance(e, Binary):
            return self.binary(e, mask)
        if isinstance(e, Call):
            float_result = builtins.returns_float(e.fn)
            args = [self.ev(a, mask).astype(ct, copy=False) for a in e.args]
            return npfuncs.apply(e.fn, args, float_result)
        raise AssertionError(f"unexpected node {e!r}")

    def binary(self, e: Binary, mask):
        if e.op in ("&&", "||"):
            a = self.ev(e.a, mask) != 0
            b = self.ev(e.b, _and(mask, a if e.op == "&&" else ~a)) != 0
            return (a & b) if e.op == "&&" else (a | b)
        a, b = self.ev(e.a, mask), self.ev(e.b, mask)
        if e.op in ("<", "<=", ">", ">=", "==", "!="):
            ct = dtypes.promote(e.a.dtype, e.b.dtype).compute.numpy
            a, b = a.astype(ct, copy=False), b.astype(ct, copy=False)
            return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                    "==": np.equal, "!=": np.not_equal}[e.op](a, b)
        ct = e.dtype.compute.numpy
        a, b = a.astype(ct, copy=False), b.astype(ct, copy=False)
        if e.op == "+":
            return np.add(a, b)
        if e.op == "-":
            return np.subtract(a, b)
        if e.op == "*":
            return np.multiply(a, b)
        if e.dtype.is_float:
            return np.divide(a, b) if e.op == "/" else np.fmod(a, b)
        zero = b == 0
        if zero.any():
            live = np.broadcast_to(zero, np.broadcast(a, b, *([mask] if mask is not None else [])).shape)
            if mask is not None:
                live = live & mask
            if live.any():
                raise LangError(f"integer division by zero in {expr_to_text(e)}", e.loc)
            b = np.where(zero, np.ones((), ct), b)
        return np.floor_divide(a, b) if e.op == "/" else np.mod(a, b)

    def read(self, r: Read, mask):
        arr = self.env[r.tensor]
        if mask is None or not isinstance(mask, np.ndarray) or mask.all():
            view = self.strided(r)
            if view is not None:
                return view[0]
        if not r.args:
            return arr
        idx = [np.asarray(self.ev(a, mask), np.int64) for a in r.args]
        idx = np.broadcast_arrays(*idx)
        bad = np.zeros(idx[0].shape, bool)
        for i, n in zip(idx, arr.shape):
            bad |= (i < 0) | (i >= n)
        if mask is not None:
            bad = bad & np.broadcast_to(mask, np.broadcast(bad, mask).shape)
        if bad.any():
            pos = np.argwhere(bad)[0]
            bad_idx = tuple(int(np.broadcast_to(i, bad.shape)[tuple(pos)]) for i in idx)
            at = ", ".join(f"{v}={self.box[v][0] + int(pos[ax])}" for v, ax in self.axes.items()
                           if bad.ndim > ax and bad.shape[ax] > 1)
            raise LangError(f"{expr_to_text(r)} reads '{r.tensor}' out of bounds at index "
                            f"{bad_idx} (shape {arr.shape})" + (f" when {at}" if at else ""),
                            r.loc)
        clipped = tuple(np.clip(i, 0, max(n - 1, 0)) for i, n in zip(idx, arr.shape))
        if arr.size == 0:
            return np.zeros(idx[0].shape, arr.dtype)
        return arr[clipped]


def _and(mask, c):
    return c if mask is None else (mask & c)
