"""Inputs of `tcomp run`: arrays from `--input NAME=FILE.npy`, random data
for the rest, and the sizes both imply.

Random integer inputs must be valid data for the op: an int tensor used as a
subscript of another tensor (a gather such as `LUT(I(i, k), j)`) gets values
inside that dimension of the tensor it indexes (shifted by a constant offset
when the subscript is `I(..) + c` or `I(..) - c`); used in several subscripts,
the ranges intersect. Other integer inputs get small non-negative values
(0..99, within the type). Bool inputs are random, floats standard normal.
"""
from __future__ import annotations

import tokenize

import numpy as np

from .errors import TcompError
from .lang import dtypes
from .lang.ast import (Binary, Cast, Const, ExistsClause, Expr, LetClause, LetRef, Read, Size,
                       walk)
from .lang.symbolic import eval_int

SMALL_INT = (0, 100)  # [lo, hi) of integer inputs that index nothing
MAX_SIZE = 2 ** 63 - 1  # a size variable's largest value (kernels take sizes as 64-bit ints)


def parse_sizes(text: str | None, op) -> dict[str, int]:
    """`--sizes M=1024,N=512` -> {"M": 1024, "N": 512}, checked against the op."""
    out: dict[str, int] = {}
    if text is None:
        return out
    for item in text.split(","):
        if "=" not in item:
            raise TcompError(f"--sizes: expected NAME=INT, got '{_short(item)}'")
        k, v = (x.strip() for x in item.split("=", 1))
        digits = v[1:] if v[:1] in ("+", "-") else v
        if digits.isascii() and digits.isdigit():  # int() refuses more than 4,300 digits
            digits = digits.lstrip("0") or "0"
            if len(digits) > len(str(MAX_SIZE)):
                n = -1 if v[0] == "-" else MAX_SIZE + 1
                shown = v if len(v) <= 24 else f"{v[:12]}... ({len(v)} characters)"
            else:
                n = -int(digits) if v[0] == "-" else int(digits)
                shown = str(n)
        else:
            try:
                n = int(v)
            except ValueError:
                raise TcompError(f"--sizes: {_short(k)} must be an integer, got "
                                 f"'{_short(v)}'") from None
            shown = str(n)
        if k not in op.size_vars:
            known = ", ".join(op.size_vars) or "none"
            raise TcompError(f"--sizes: '{_short(k)}' is not a size variable of '{op.name}' "
                             f"(sizes: {known})")
        if n < 0:
            raise TcompError(f"--sizes: {k} must be >= 0, got {shown}")
        if n > MAX_SIZE:
            raise TcompError(f"--sizes: {k} must be at most 2^63 - 1 (sizes are 64-bit ints), "
                             f"got {shown}")
        if k in out:
            raise TcompError(f"--sizes: {k} is given twice")
        out[k] = n
    return out


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def parse_input_flags(flags: list[str] | None, op) -> dict[str, str]:
    """`--input A=a.npy --input B=b.npy` -> {"A": "a.npy", "B": "b.npy"}."""
    out: dict[str, str] = {}
    names = [t.name for t in op.inputs]
    for flag in flags or ():
        if "=" not in flag:
            raise TcompError(f"--input: expected NAME=FILE.npy, got '{flag}'")
        name, path = (x.strip() for x in flag.split("=", 1))
        if name not in names:
            raise TcompError(f"--input: '{name}' is not an input of '{op.name}' (inputs: "
                             f"{', '.join(names) or 'none'})")
        if name in out:
            raise TcompError(f"--input: {name} is given twice")
        out[name] = path
    return out


def load_array(name: str, path: str, dt: dtypes.DType) -> np.ndarray:
    """The .npy file for input `name`, which must hold `dt` values (no silent casts)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic[:2] == b"PK":
            raise TcompError(f"--input {name}: {path} is an .npz archive; save the one array "
                             f"with numpy.save")
        if magic != b"\x93NUMPY":
            raise TcompError(f"--input {name}: {path} is not a .npy file; save the array with "
                             f"numpy.save")
        a = np.load(path, allow_pickle=False)
    except OSError as e:
        raise TcompError(f"--input {name}: cannot read {path}: {e.strerror or e}") from None
    except (ValueError, SyntaxError, tokenize.TokenError) as e:  # a damaged header, objects
        if "'<f1'" in str(e):  # numpy.save writes float8_e5m2 as '<f1', which it cannot read
            raise TcompError(f"--input {name}: {path} holds float8_e5m2 values, which "
                             f"numpy.load cannot read back; save x.view(numpy.uint8) (the "
                             f"bytes are taken as {dt.name})") from None
        raise TcompError(f"--input {name}: cannot load {path}: {e}") from None
    if dt.name in dtypes.ML_DTYPES and a.dtype.kind == "V" and a.dtype.itemsize == dt.bits // 8:
        a = a.view(dt.numpy)  # numpy.save writes ml_dtypes' bfloat16 and e4m3fn as raw records
    if dt.is_fp8 and a.dtype == np.uint8:
        a = a.view(dt.numpy)  # fp8 given as its bytes (float8_e5m2 cannot go through .npy)
    if a.dtype != dt.numpy:
        raise TcompError(f"--input {name}: {path} holds {a.dtype} values but '{name}' is "
                         f"{dt.name}; save it as {dt.name} (tcomp does not cast inputs)")
    return a


def bind_sizes(op, given: dict[str, np.ndarray], sizes: dict[str, int]) -> dict[str, int]:
    """Sizes from --sizes plus those the loaded arrays' shapes imply; a
    disagreement is an error that names both sources."""
    sizes = dict(sizes)
    origin = {k: "--sizes" for k in sizes}
    for t in op.inputs:
        if t.name not in given:
            continue
        a = given[t.name]
        if a.ndim != t.ndim:
            raise TcompError(f"--input {t.name}: the array has shape {a.shape}, but '{t.name}' "
                             f"has {t.ndim} dimension(s)")
        for d, (dim, n) in enumerate(zip(t.shape, a.shape)):
            if isinstance(dim, Size):
                if dim.name in sizes and sizes[dim.name] != n:
                    raise TcompError(f"--input {t.name}: dimension {d} is {n}, but "
                                     f"{dim.name}={sizes[dim.name]} (from {origin[dim.name]})")
                sizes.setdefault(dim.name, int(n))
                origin.setdefault(dim.name, f"--input {t.name}")
    for t in op.inputs:  # constant dimensions, once every size is known
        if t.name in given:
            for d, (dim, n) in enumerate(zip(t.shape, given[t.name].shape)):
                if not isinstance(dim, Size) and _known(dim, sizes) and \
                        eval_int(dim, sizes) != n:
                    raise TcompError(f"--input {t.name}: dimension {d} is {n}, but '{t.name}' "
                                     f"declares it as {eval_int(dim, sizes)}")
    return sizes


def check_memory(op, given: dict[str, np.ndarray], sizes: dict[str, int],
                 limit: int | None = None) -> None:
    """Refuse, before allocating anything, sizes whose arrays do not fit in memory
    (`limit` bytes; default: this machine's physical memory): the random inputs
    (floats drawn in float64 first), and the outputs and temporaries, which
    tcomp.evaluate and the kernel each compute."""
    limit = _physical_memory() if limit is None else limit
    if limit is None:
        return
    arrays, draw = [], 0
    for t in op.inputs + op.outputs + op.temporaries:
        if t.name in given or not all(_known(d, sizes) for d in t.shape):
            continue
        n = 1
        for d in t.shape:
            n *= max(eval_int(d, sizes), 0)
        copies = 1 if t in op.inputs else 2
        arrays.append((n * t.dtype.numpy.itemsize * copies, t.name))
        if t in op.inputs:
            draw = max(draw, n * 8)
    need = sum(b for b, _ in arrays) + draw
    if need > limit:
        biggest = max(arrays)[1]
        raise TcompError(f"run: at these sizes the arrays need {_bytes(need)} ('{biggest}' the "
                         f"most), more than the {_bytes(limit)} of memory free here; give smaller "
                         f"--sizes")


def _physical_memory() -> int | None:
    """The memory free for new arrays: MemAvailable where Linux tells it, else the
    physical memory, else None (no check)."""
    import os
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def make_inputs(op, given: dict[str, np.ndarray], sizes: dict[str, int], rng) -> list:
    """One array per input: the given ones, random data for the rest."""
    missing = sorted({n for t in op.inputs if t.name not in given for d in t.shape
                      for n in _names(d) if n not in sizes})
    if missing:
        raise TcompError(f"run: give the size(s) {', '.join(missing)} with --sizes (or the "
                         f"inputs that have them with --input)")
    ranges = index_ranges(op, sizes)
    arrays = []
    for t in op.inputs:
        if t.name in given:
            arrays.append(given[t.name])
            continue
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        dt = t.dtype
        if dt.is_float:
            a = rng.standard_normal(shape).astype(dt.numpy)
        elif dt.is_bool:
            a = rng.random(shape) < 0.5
        else:
            info = np.iinfo(dt.numpy)
            lo, hi = ranges.get(t.name, SMALL_INT)
            lo, hi = max(lo, int(info.min)), min(hi, int(info.max) + 1)
            if lo >= hi:
                raise TcompError(f"run: no value of {dt.name} indexes what '{t.name}' indexes "
                                 f"in bounds (valid range {lo}..{hi - 1}); give '{t.name}' "
                                 f"with --input")
            a = rng.integers(lo, hi, shape).astype(dt.numpy)
        arrays.append(a)
    return arrays


def index_ranges(op, sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """[lo, hi) of the values of each integer input that subscripts a tensor."""
    ints = {t.name for t in op.inputs if t.dtype.is_int}
    out: dict[str, tuple[int, int]] = {}
    for st in op.statements:
        lets = {c.name: c.value for c in st.stmt.where if isinstance(c, LetClause)}
        roots = [st.rhs] + list(lets.values()) + \
            [c.read for c in st.stmt.where if isinstance(c, ExistsClause)]
        for root in roots:
            for r in walk(root):
                if not isinstance(r, Read):
                    continue
                shape = op.tensor(r.tensor).shape
                for sub, dim in zip(r.args, shape):
                    sub = _expand(sub, lets)
                    for x in walk(sub):
                        if isinstance(x, Read) and x.tensor in ints:
                            n = eval_int(dim, sizes)
                            off = _offset(sub, x)
                            lo, hi = -off, n - off
                            old = out.get(x.tensor, (lo, hi))
                            out[x.tensor] = (max(old[0], lo), min(old[1], hi))
    return out


def _offset(sub, read) -> int:
    """c when `sub` is `read + c` or `read - c` (through int casts), else 0:
    a subscript of any other shape gets the dimension's own range."""
    sub = _strip_casts(sub)
    if sub == read:
        return 0
    if isinstance(sub, Binary) and sub.op in "+-":
        a, b = _strip_casts(sub.a), _strip_casts(sub.b)
        if a == read and isinstance(b, Const) and isinstance(b.value, int):
            return b.value if sub.op == "+" else -b.value
        if sub.op == "+" and b == read and isinstance(a, Const) and isinstance(a.value, int):
            return a.value
    return 0


def _strip_casts(e):
    while isinstance(e, Cast) and e.dtype is not None and e.dtype.is_int:
        e = e.x
    return e


def _expand(e, lets):
    """`e` with where-bindings substituted (a gather through `where x = I(i)`)."""
    import dataclasses
    if isinstance(e, LetRef) and e.name in lets:
        return _expand(lets[e.name], lets)
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple) and v and all(isinstance(x, Expr) for x in v):
            changes[f.name] = tuple(_expand(x, lets) for x in v)
        elif isinstance(v, Expr):
            changes[f.name] = _expand(v, lets)
    return dataclasses.replace(e, **changes) if changes else e


def _names(e) -> list[str]:
    return [x.name for x in walk(e) if isinstance(x, Size)]


def _known(e, sizes) -> bool:
    return all(n in sizes for n in _names(e))
