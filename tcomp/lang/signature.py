"""The call-time contract of an op, shared by every target.

`Signature` is plain data: per input its name, dtype and dimensions (an int or
a size-variable name), plus the `WriteCheck`s that range inference could not
decide when the op was checked. `tcomp.evaluate`, the sim kernel and the CUDA
kernel (also one from `tcomp.load`, which rebuilds the signature from its .json
sidecar) all call `Signature.check_call` before running anything, so a bad
call raises the same `LangError` text on every target and a GPU never sees it.

Argument policy (what `check_call` accepts for an input of dtype T):
  * an array or scalar that has a dtype (NumPy arrays and scalars, torch
    tensors, CuPy/JAX arrays, any object with `.shape` and `.dtype` or
    `__cuda_array_interface__`) must have dtype T exactly: tcomp never casts
    arrays (a float64 array for a `float` input is an error, not a rounding);
  * Python data (numbers, nested lists) is converted when its kind fits:
    bools for bool; ints for integer types (every value must fit T) and for
    float types; floats for float types (a finite value that overflows T is
    an error). Anything else is an error naming the input.
Then ranks, constant dimensions and repeated size variables are checked, size
variables are bound from the shapes, and the write checks are evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LangError, LoweringError
from . import dtypes
from .ast import Binary, Call, Const, Expr, Size, Unary
from .dtypes import DType
from .printer import expr_to_text
from .symbolic import eval_int

# ------------------------------------------------------------ size expressions
def size_to_json(e: Expr):
    """A size expression as JSON: int, size name, or [op, a, b]."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Size):
        return e.name
    if isinstance(e, Unary) and e.op == "-":
        x = size_to_json(e.x)
        return -x if isinstance(x, int) else ["-", 0, x]
    if isinstance(e, Binary) and e.op in ("+", "-", "*", "/"):
        return [e.op, size_to_json(e.a), size_to_json(e.b)]
    if isinstance(e, Call) and e.fn in ("min", "max") and len(e.args) == 2:
        return [e.fn, size_to_json(e.args[0]), size_to_json(e.args[1])]
    raise AssertionError(f"not a size expression: {e!r}")


def size_from_json(j) -> Expr:
    if isinstance(j, bool) or not isinstance(j, (int, str, list)):
        raise LangError(f"malformed size expression {j!r} in a kernel signature")
    if isinstance(j, int):
        c = Const(abs(j), dtypes.int32)
        return c if j >= 0 else Unary("-", c, dtypes.int32)
    if isinstance(j, str):
        return Size(j, dtypes.int32)
    if len(j) != 3 or j[0] not in ("+", "-", "*", "/", "min", "max"):
        raise LangError(f"malformed size expression {j!r} in a kernel signature")
    a, b = size_from_json(j[1]), size_from_json(j[2])
    if j[0] in ("min", "max"):
        return Call(j[0], (a, b), dtypes.int32)
    return Binary(j[0], a, b, dtypes.int32)


# ------------------------------------------------------------------ the data
@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: DType
    dims: tuple[int | str, ...]  # a constant extent or a size-variable name


@dataclass(frozen=True)
class WriteCheck:
    """A statement writes `tensor` at `var` in lo:hi along dimension `dim`, whose
    extent (set by the tensor's last statement) is `extent`; range inference
    could not prove hi <= extent for every size, so it is checked per call."""
    tensor: str
    dim: int
    var: str
    lo: Expr
    hi: Expr
    extent: Expr
    line: int  # the writing statement's source line
    last_line: int  # the line of the last statement writing `tensor`

    def check(self, sizes: dict) -> None:
        lo, hi, n = (eval_int(e, sizes) for e in (self.lo, self.hi, self.extent))
        if hi > n and hi > lo:
            lo_t, hi_t, ext_t = (expr_to_text(e) for e in (self.lo, self.hi, self.extent))
            raise LangError(
                f"the statement on line {self.line} writes '{self.tensor}' beyond its shape: "
                f"{self.var} runs over {lo_t}:{hi_t} = {lo}:{hi} there, but '{self.tensor}' "
                f"has extent {ext_t} = {n} in dimension {self.dim}, set by the last statement "
                f"that writes it (line {self.last_line}); restrict that statement with "
                f"'where {self.var} in {lo_t}:min({hi_t}, {ext_t})', or let the last "
                f"statement cover {lo_t}:{hi_t}")

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "dim": self.dim, "var": self.var,
                "lo": size_to_json(self.lo), "hi": size_to_json(self.hi),
                "extent": size_to_json(self.extent), "line": self.line,
                "last_line": self.last_line}

    @classmethod
    def from_json(cls, j: dict) -> "WriteCheck":
        return cls(j["tensor"], int(j["dim"]), j["var"], size_from_json(j["lo"]),
                   size_from_json(j["hi"]), size_from_json(j["extent"]), int(j["line"]),
                   int(j["last_line"]))


@dataclass(frozen=True)
class Signature:
    op: str
    inputs: tuple[InputSpec, ...]
    checks: tuple[WriteCheck, ...] = ()

    @classmethod
    def from_op(cls, op) -> "Signature":
        inputs = []
        for t in op.inputs:
            dims = tuple(d.name if isinstance(d, Size) else eval_int(d, {}) for d in t.shape)
            inputs.append(InputSpec(t.name, t.dtype, dims))
        return cls(op.name, tuple(inputs), tuple(op.write_checks))

    def to_json(self) -> dict:
        return {"op": self.op,
                "inputs": [{"name": s.name, "dtype": s.dtype.name, "dims": list(s.dims)}
                           for s in self.inputs],
                "write_checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, j: dict) -> "Signature":
        try:
            inputs = tuple(InputSpec(s["name"], dtypes.BY_NAME[s["dtype"]], tuple(s["dims"]))
                           for s in j["inputs"])
            return cls(j["op"], inputs, tuple(WriteCheck.from_json(c)
                                              for c in j["write_checks"]))
        except (KeyError, TypeError, ValueError) as e:
            raise LangError(f"malformed kernel signature (the 'signature' entry of the .json "
                            f"sidecar): {type(e).__name__}: {e}") from None

    # ---------------------------------------------------------------- checks
    def check_call(self, args, compiled: dict | None = None) -> tuple[list, dict]:
        """Check `args` against the inputs; returns (the arguments, with Python data
        converted to NumPy arrays of the input's dtype and everything else as
        given, the size bindings). `compiled`: sizes fixed when the kernel was
        built; the inputs must agree with them (LoweringError otherwise)."""
        if len(args) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs) or "none"
            raise LangError(f"'{self.op}' takes {len(self.inputs)} input(s) ({names}), got "
                            f"{len(args)}")
        out, shapes = [], []
        for spec, x in zip(self.inputs, args):
            x, shape = _coerce(spec, x)
            out.append(x)
            shapes.append(shape)
        sizes = self.bind(shapes)
        for name, v in (compiled or {}).items():
            if sizes.get(name, v) != v:
                raise LoweringError(f"'{self.op}' was compiled for {name}={v}, but the inputs "
                                    f"have {name}={sizes[name]}")
        sizes.update(compiled or {})
        for c in self.checks:
            c.check(sizes)
        return out, sizes

    def checker(self, compiled: dict | None = None):
        """A function `args -> (args, sizes)` that accepts exactly the calls
        `check_call(args, compiled)` accepts, with the same result, generated
        once for this signature (the per-call cost of a kernel launch).

        It handles the common call, every argument an array with `.shape` and
        `.dtype` (NumPy, torch, CuPy, JAX): ranks, dtypes (by a per-dtype-object
        cache of names), constant dimensions, repeated and compiled sizes are
        compared inline. Anything else (Python data to convert, objects known
        only by `__cuda_array_interface__`) and every call that fails a check
        goes to `check_call`, which converts the arguments or raises the
        error that names the problem."""
        return _compile_checker(self, dict(compiled or {}))

    def bind(self, shapes) -> dict:
        """Size bindings from the inputs' shapes; ranks, constant dimensions and
        repeated size variables checked."""
        sizes, origin = {}, {}
        for spec, shape in zip(self.inputs, shapes):
            if len(shape) != len(spec.dims):
                raise LangError(f"input '{spec.name}' must have {len(spec.dims)} dimension(s), "
                                f"got {len(shape)} (shape {tuple(shape)})")
            for i, (d, n) in enumerate(zip(spec.dims, shape)):
                if isinstance(d, str):
                    if d in sizes and sizes[d] != n:
                        raise LangError(f"input '{spec.name}' dimension {i} is {n}, but size "
                                        f"{d} is {sizes[d]} from {origin[d]}")
                    sizes.setdefault(d, n)
                    origin.setdefault(d, f"input '{spec.name}' dimension {i}")
                elif d != n:
                    raise LangError(f"input '{spec.name}' dimension {i} must be {d}, got {n}")
        return sizes


# ------------------------------------------------------------------ checkers
_NAMES: dict = {}  # dtype object (np.dtype, torch.dtype, ...) -> canonical tcomp name


class _Miss(Exception):
    """A compiled checker's way to hand a call to the general check."""


def _name_of(dt) -> str:
    name = _dtype_name(dt)
    _NAMES[dt] = name
    return name


def check_lines(sig: Signature, compiled: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """The inline checks of a compiled checker (see Signature.checker), for
    other generated code to share: lines over arguments named x0, x1, ...
    (unpacked by the caller) that raise `_Miss` (from CHECK_ENV) when the
    common call's fast comparison does not accept them, and the sizes' items
    in the order of the checker's `sizes` dict as (name, Python expression):
    the size variables bound from the shapes, then the compiled ones the
    shapes do not bind. (The write checks, `sig.checks`, are not among them.)"""
    body, bound = [], {}
    for i, spec in enumerate(sig.inputs):
        body.append(f"s{i} = x{i}.shape; d{i} = x{i}.dtype")
        body.append(f"if len(s{i}) != {len(spec.dims)} or (_NAMES.get(d{i}) or _name_of(d{i})) "
                    f"!= {spec.dtype.name!r}: raise _Miss")
        for k, d in enumerate(spec.dims):
            if isinstance(d, str) and d not in bound:
                bound[d] = f"v{len(bound)}"
                body.append(f"{bound[d]} = int(s{i}[{k}])")
            else:
                want = bound[d] if isinstance(d, str) else repr(int(d))
                body.append(f"if int(s{i}[{k}]) != {want}: raise _Miss")
    for name, v in compiled.items():
        if name in bound:
            body.append(f"if {bound[name]} != {int(v)}: raise _Miss")
    items = list(bound.items()) + [(k, repr(int(v))) for k, v in compiled.items()
                                   if k not in bound]
    return body, items


CHECK_ENV = {"_NAMES": _NAMES, "_name_of": _name_of, "_Miss": _Miss}


def _compile_checker(sig: Signature, compiled: dict):
    """Python source of a checker for `sig` (see Signature.checker), compiled."""
    n = len(sig.inputs)
    body, items = check_lines(sig, compiled)
    bound = [(k, v) for k, v in items if v.startswith("v")]  # (the rest: sizes.update)
    unpack = (", ".join(f"x{i}" for i in range(n)) + ("," if n == 1 else "") + " = args"
              if n else "if args: raise _Miss")
    sizes = "{" + ", ".join(f"{k!r}: {v}" for k, v in bound) + "}"
    lines = ["def check(args):", "    try:", f"        {unpack}"]
    lines += [f"        {line}" for line in body]
    # (slow is called after the try statement: its errors are the caller's own,
    # not raised "during handling" of the miss)
    lines += ["    except Exception:", "        pass", "    else:", f"        sizes = {sizes}"]
    if compiled:
        lines.append("        sizes.update(compiled)")
    if sig.checks:
        lines += ["        for c in checks:", "            c.check(sizes)"]
    lines += ["        return args, sizes", "    return slow(args)"]
    env = {"_NAMES": _NAMES, "_name_of": _name_of, "_Miss": _Miss, "compiled": compiled,
           "checks": sig.checks, "slow": lambda args: sig.check_call(args, compiled)}
    exec("\n".join(lines), env)  # noqa: S102 - our own text, as dataclasses does
    return env["check"]


# ------------------------------------------------------------------ arguments
def _given_dtype(x) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype name) of an argument that carries a dtype, else None."""
    if isinstance(x, (np.ndarray, np.generic)):
        return tuple(x.shape), _dtype_name(x.dtype)
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # torch, CuPy, JAX, ...
        try:
            return tuple(int(n) for n in x.shape), _dtype_name(x.dtype)
        except TypeError:
            pass
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and "shape" in cai and "typestr" in cai:
        return tuple(int(n) for n in cai["shape"]), _dtype_name(cai["typestr"])
    return None


def _dtype_name(dt) -> str:
    """Canonical tcomp name of a NumPy-like or torch dtype (else its own text)."""
    text = str(dt)
    if text.startswith("torch."):
        return text[len("torch."):]  # torch.float16 -> float16, torch.bool -> bool
    try:
        t = dtypes.from_numpy(np.dtype(dt))
    except (TypeError, ValueError):
        return text
    return t.name if t is not None else str(np.dtype(dt))


def _coerce(spec: InputSpec, x):
    """(argument, shape) after the dtype policy of the module docstring."""
    want = spec.dtype
    given = _given_dtype(x)
    if given is not None:
        shape, name = given
        if name != want.name:
            raise LangError(f"input '{spec.name}' is {want}, but the array passed for it is "
                            f"{name}; convert it explicitly (NumPy: .astype(), torch: .to()), "
                            f"tcomp never casts arrays")
        return x, shape
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists, ...
        raise LangError(f"input '{spec.name}': cannot read a {type(x).__name__} as an array "
                        f"({e})") from None
    kind = a.dtype.kind
    what = {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(kind)
    fits = (kind == "b" and want.is_bool) or (kind in "iu" and not want.is_bool) or (
        kind == "f" and want.is_float)
    if a.size == 0 and what is not None:
        fits = True  # an empty list has no values to mistype
    if not fits:
        kinds = "bool" if want.is_bool else "int" if want.is_int else "float or int"
        given = f"{what} values" if what else f"a {type(x).__name__} ({a.dtype})"
        raise LangError(f"input '{spec.name}' is {want}, but the Python data passed for it "
                        f"holds {given}; pass {kinds} values, or an array of dtype {want}")
    if want.is_int and a.size:
        info = np.iinfo(want.numpy)
        if a.min() < info.min or a.max() > info.max:
            raise LangError(f"input '{spec.name}' is {want}, but the Python data passed for it "
                            f"holds values outside its range ({a.min()}..{a.max()})")
    with np.errstate(all="ignore"):
        b = a.astype(want.numpy)
    if want.is_float and (np.isinf(b) & np.isfinite(a.astype(np.float64))).any():
        raise LangError(f"input '{spec.name}': values of the Python data overflow {want}")
    return b, b.shape
