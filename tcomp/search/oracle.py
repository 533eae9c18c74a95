"""Checking a candidate against the oracle (`tcomp.evaluate`) on random data.

Random inputs (`random_inputs`, seeded by the op and the sizes, so every
candidate of one op sees the same data):
  * floats: uniform in [-1, 1), rounded to the input's type;
  * integers: uniform in 1..4 (small and non-zero, so integer division by an
    input and indexing with an input at small sizes stay defined);
  * bool: fair coin flips.
An op whose oracle fails on such data (a gather whose index input must lie
in a range, say) needs inputs of its own: pass `inputs=` to the runner, a
module-level function `(op, sizes, rng) -> list of arrays`.

Comparison (`compare`): integer and bool outputs must be equal. A float
output passes where |got - want| <= tol * (|want| + scale), `scale` being
the largest finite |want| of that output (at least 1e-30), and `tol` by the
output's type: 1e-4 for float32, 1e-2 for float16, 4e-2 for bfloat16, 1e-9
for float64, at least 1e-2 for an output computed from a reduction over fp8
values (FP8_INPUT_TOLERANCE).
(Reductions in another order round differently; a wrong index
or a missing tile is off by far more.) NaN must meet NaN, and an infinity
the same infinity.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..errors import TcompError
from ..lang.evaluate import evaluate
from ..lang.op import Op
from ..lang.symbolic import eval_int
from .identity import op_hash, sizes_text

TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2,
             "float8_e4m3fn": 0.25, "float8_e5m2": 0.5}  # (one fp8 ulp: 2^-3, 2^-2 relative)
# An output computed from a reduction over fp8 values (fp8_products): compared at float16's
# tolerance at least. Hopper's
# fp8 wgmma accumulates in fewer bits than float32 (about 14, as DeepSeek-V3's report
# measured on the H800; 5e-3 relative at 4096^3 here, bench/fp8_gemm.py), so a float32
# output of an fp8 product is not float32-exact on the Hopper path.
FP8_INPUT_TOLERANCE = 1e-2


class OracleError(TcompError):
    """The oracle itself fails on the random inputs: no candidate of this op
    can be checked until the runner is given valid inputs (`inputs=`)."""


def seed_of(op: Op, sizes: dict) -> int:
    text = f"{op_hash(op)}|{sizes_text(sizes)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def random_inputs(op: Op, sizes: dict, rng: np.random.Generator) -> list[np.ndarray]:
    """One random array per input of `op` at `sizes` (see the module docstring)."""
    out = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        dt = t.dtype
        if dt.is_float:
            a = rng.uniform(-1.0, 1.0, shape).astype(dt.numpy)
        elif dt.is_int:
            a = rng.integers(1, 5, shape).astype(dt.numpy)
        else:
            a = rng.integers(0, 2, shape).astype(bool)
        out.append(a)
    return out


def make_case(op: Op, sizes: dict, inputs=None) -> tuple[list, list]:
    """(inputs, expected outputs) at `sizes`: `inputs(op, sizes, rng)` or
    `random_inputs`, and the oracle's outputs (always a list). Raises
    OracleError when the oracle fails on them."""
    rng = np.random.default_rng(seed_of(op, sizes))
    if inputs is None:
        arrays = random_inputs(op, sizes, rng)
    else:
        try:
            arrays = [np.asarray(a) for a in inputs(op, dict(sizes), rng)]
        except Exception as e:
            raise OracleError(f"cannot check candidates of '{op.name}' at {sizes_text(sizes)}: "
                              f"the inputs= function "
                              f"{getattr(inputs, '__name__', repr(inputs))} failed "
                              f"({type(e).__name__}: {e})") from None
    try:
        want = evaluate(op, *arrays)
    except TcompError as e:
        raise OracleError(
            f"cannot check candidates of '{op.name}' at {sizes_text(sizes)}: the oracle "
            f"(tcomp.evaluate) fails on {'the given' if inputs else 'random'} inputs; give the "
            f"runner inputs= a module-level function (op, sizes, rng) -> arrays that makes "
            f"valid inputs. The oracle's error:\n{e}") from None
    return arrays, list(want) if isinstance(want, tuple) else [want]


def compare(op: Op, got, want: list) -> str | None:
    """None when `got` (one array or a tuple, as a kernel returns) matches the
    oracle's `want`; else a message naming the first output that differs,
    where, and by how much."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(want):
        return f"the kernel returned {len(got)} outputs, the op has {len(want)}"
    fed = fp8_products(op)
    for t, g, w in zip(op.outputs, got, want):
        floor = FP8_INPUT_TOLERANCE if t.name in fed else 0.0
        g = np.asarray(g)
        if g.shape != w.shape:
            return f"output '{t.name}' has shape {g.shape}, expected {w.shape}"
        problem = _differs(t.dtype.name, g, w, floor)
        if problem is not None:
            return f"output '{t.name}': {problem}"
    return None


def fp8_products(op: Op) -> set:
    """The tensors computed from a reduction over fp8 values (directly, or from
    such a tensor through later statements): the outputs that get
    FP8_INPUT_TOLERANCE. A copy or a cast of fp8 values is exact everywhere and
    keeps its own type's tolerance."""
    from ..lang.ast import Read, walk
    fp8 = {t.name for t in op.inputs + op.temporaries + op.outputs if t.dtype.is_fp8}
    out: set = set()
    for st in op.statements:
        reads = {x.tensor for e in (st.rhs, *st.lets.values()) for x in walk(e)
                 if isinstance(x, Read)}
        if (st.reduce and reads & fp8) or reads & out:
            out.add(st.tensor)
    return out


def _differs(dtype: str, g: np.ndarray, w: np.ndarray, floor: float = 0.0) -> str | None:
    if dtype not in TOLERANCE:  # integers and bool: exact
        bad = np.argwhere(g != w)
        if bad.size:
            at = tuple(int(i) for i in bad[0])
            return (f"{len(bad)} of {w.size} elements differ; first at {at}: got "
                    f"{g[at].item()}, expected {w[at].item()}")
        return None
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    finite = np.isfinite(w64)
    scale = float(np.max(np.abs(w64[finite]))) if finite.any() else 0.0
    tol = max(TOLERANCE[dtype], floor)
    with np.errstate(invalid="ignore"):
        close = np.abs(g64 - w64) <= tol * (np.abs(w64) + max(scale, 1e-30))
    # NaN meets NaN; an infinity meets the same infinity
    close = np.where(finite, close, (g64 == w64) | (np.isnan(g64) & np.isnan(w64)))
    if close.all():
        return None
    bad = np.argwhere(~close)
    at = tuple(int(i) for i in bad[0])
    return (f"{len(bad)} of {w.size} elements differ beyond the {dtype} tolerance {tol:g} "
            f"(relative to the output's scale {scale:.3g}); first at {at}: got "
            f"{float(g64[at]):.9g}, expected {float(w64[at]):.9g}")
