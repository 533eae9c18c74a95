"""A deterministic sweep of the hygiene pools (names.py): every name, in
every role a TC program gives names to, built for the sim (against
`evaluate`) and compiled by NVRTC under schedules that make lowering
generate its own names (split, fuse, caches, rfactor).

Two program shapes, ten names each:

    def D(float(S1, S2) A, int32(S1) G) -> (O) {
        T(x, y) = A(x, y) * 2.0 + float(G(x) % 3) + L where L = 1.5
        O(x) +=! T(x, y)
    }

- "keywords": all ten names from the C++ keyword and CUDA builtin pools;
- "captures": x, y, A, T, O are plain (i, j, A, T, O) and D, S1, S2, G, L
  are what lowering generates from them (`i_o`, `A_shared`, `O_local`, ...).
"""
from __future__ import annotations

import numpy as np

import tcomp

from . import names as N

ROLES = ("D", "S1", "S2", "A", "G", "T", "O", "x", "y", "L")
TEMPLATE = """def {D}(float({S1}, {S2}) {A}, int32({S1}) {G}) -> ({O}) {{
    {T}({x}, {y}) = {A}({x}, {y}) * 2.0 + float({G}({x}) % 3) + {L} where {L} = 1.5
    {O}({x}) +=! {T}({x}, {y})
}}"""
PLAIN = {"x": "i", "y": "j", "A": "A", "T": "T", "O": "O"}
SIZES = (3, 4)


def keyword_chunks() -> list[dict]:
    pool = list(dict.fromkeys(N.CPP_KEYWORDS + N.CUDA_NAMES))
    out = []
    for k in range(0, len(pool), len(ROLES)):
        names = pool[k:k + len(ROLES)]
        names += [f"{r.lower()}_{k}" for r in ROLES[len(names):]]
        out.append(dict(zip(ROLES, names)))
    return out


def capture_chunks() -> list[dict]:
    made = sorted(set(N.derived("index", "i", "j") + N.derived("index", "j", "i")
                      + N.derived("tensor", "A", "f") + N.derived("tensor", "O", "f")
                      + N.derived("tensor", "T", "f") + ["f_O", "f_T", "O_rf", "i_j_f"]))
    free = ("D", "S1", "S2", "G", "L")
    out = []
    for k in range(0, len(made), len(free)):
        names = made[k:k + len(free)]
        names += [f"{r.lower()}_{k}" for r in free[len(names):]]
        out.append({**PLAIN, **dict(zip(free, names))})
    return out


def _split_both(s, n):
    O, T = s[n["O"]], s[n["T"]]
    O.split(O.axes[0], 2)
    T.split(T.axes[1], 2)
    xo, yo = T.leaf_axes[0], T.leaf_axes[1]
    T.fuse(xo, yo)


def _caches(s, n):
    O, T = s[n["O"]], s[n["T"]]
    s.cache_write(O, "local").compute_at(O, O.axes[0])
    s.cache_read(n["A"], "shared", [T]).compute_at(T, T.axes[1])


def _threads(s, n):
    O, T = s[n["O"]], s[n["T"]]
    xo, xi = O.split(O.axes[0], 2)
    O.bind(xo, "blockIdx.x")
    O.bind(xi, "threadIdx.x")
    T.compute_at(O, xi)


def _rfactor(s, n):
    O = s[n["O"]]
    yo, yi = O.split(O.reduce_axes[0], 2)
    O.rfactor(yi)


SCHEDULES = {"split_fuse": _split_both, "caches": _caches, "threads": _threads,
             "rfactor": _rfactor}


def check(names: dict, schedule: str, cuda: bool = True) -> list[str]:
    """What goes wrong with `names` under `schedule` (empty: nothing)."""
    src = TEMPLATE.format(**names)
    try:
        op = tcomp.op(src)
    except tcomp.LangError as e:  # the language may refuse a name, with a message
        return [] if "name" in e.message or "reserved" in e.message else [f"LangError: {e}"]
    rng = np.random.default_rng(0)
    a = (rng.integers(-8, 9, SIZES) / 4).astype(np.float32)
    g = rng.integers(-5, 6, SIZES[:1]).astype(np.int32)
    want = tcomp.evaluate(op, a, g)
    s = tcomp.Schedule(op)
    SCHEDULES[schedule](s, names)
    problems = []
    sizes = {names["S1"]: SIZES[0], names["S2"]: SIZES[1]}
    for bound in (sizes, None):
        got = tcomp.build(s, "sim", sizes=bound)(a, g)
        if not np.array_equal(got, want):
            problems.append(f"sim ({'sizes bound' if bound else 'symbolic sizes'}) computes "
                            f"{got.tolist()}, evaluate {want.tolist()}")
    if cuda:
        try:
            tcomp.build(s, "cuda", sizes=sizes)
        except tcomp.CudaError as e:
            problems.append("NVRTC: " + "\n".join(str(e).splitlines()[:4]))
    return [f"{p}\n  program:\n{src}\n  schedule: {schedule}" for p in problems]
