"""Helpers shared by the lowering and sim tests: random inputs, comparison
against `tcomp.evaluate` with per-dtype tolerances."""
from __future__ import annotations

import numpy as np

import tcomp
from tcomp.lang.symbolic import eval_int

# (rtol, atol) per output dtype
TOL = {
    "float64": (1e-10, 1e-10),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}


def inputs_for(op: tcomp.Op, sizes: dict, seed: int = 0, scalars: dict | None = None,
               ints: dict | None = None):
    """Random arrays for the inputs of `op` at `sizes`. `ints` maps an integer
    input to the exclusive upper bound of its values (for gathers)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        dt = t.dtype.numpy
        if scalars and t.name in scalars:
            out.append(np.asarray(scalars[t.name], dt))
        elif t.dtype.is_float:
            out.append(rng.standard_normal(shape).astype(dt))
        elif t.dtype.is_bool:
            out.append(rng.random(shape) < 0.5)
        else:
            hi = (ints or {}).get(t.name, 5)
            out.append(rng.integers(0, hi, shape).astype(dt))
    return out


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_matches(op: tcomp.Op, got, want, tol: dict | None = None):
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want)
    for t, g, w in zip(op.outputs, got, want):
        assert g.shape == w.shape, f"output {t.name}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"output {t.name}: dtype {g.dtype} != {w.dtype}"
        name = t.dtype.name
        rtol, atol = (tol or {}).get(name, TOL.get(name, (0, 0)))
        if t.dtype.is_float:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"output {t.name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {t.name}")


def run_sim(s: tcomp.Schedule, args, sizes: dict | None = None, tol: dict | None = None):
    """Build `s` for the sim target, run it on `args` and compare with the oracle."""
    k = tcomp.build(s, target="sim", sizes=sizes)
    got = k(*args)
    want = tcomp.evaluate(s.op, *args)
    assert_matches(s.op, got, want, tol)
    return k


# Softmax with its exponentials a row-shaped temporary e (row schedules: e in registers).
ROW_SOFTMAX = """def softmax(float(N, D) X) -> (O) {
  mx(n) max=! X(n, d)
  e(n, d) = exp(X(n, d) - mx(n))
  sm(n) +=! e(n, d)
  O(n, d) = e(n, d) / sm(n)
}"""


# C then D = f(C), for schedules with two stages in one kernel (C computed at D's rows).
TWO_STAGES = tcomp.op("""def two(float(M,N) A) -> (C, D) {
  C(i, j) = A(i, j) + 1.0
  D(i, j) = C(i, j) * 2.0
}""")


def tile_on_blocks_and_threads(stage, a, b, ta, tb):
    """Tile (a, b) by (ta, tb): outer loops on blockIdx.y/x, inner on threadIdx.y/x."""
    ao, bo, ai, bi = stage.tile(a, b, ta, tb)
    stage.bind(ao, "blockIdx.y")
    stage.bind(bo, "blockIdx.x")
    stage.bind(ai, "threadIdx.y")
    stage.bind(bi, "threadIdx.x")
    return ao, bo, ai, bi


def check_golden(path, text: str, update: bool) -> None:
    """Compare `text` with the golden file at `path` (a pathlib.Path), or
    rewrite it with `update` (pytest --update-golden)."""
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    else:
        assert path.exists(), f"missing golden file {path}; run pytest with --update-golden"
        assert text == path.read_text(), (f"{path.name} differs from {path} (rerun with "
                                          f"--update-golden if intended, and review the diff)")
