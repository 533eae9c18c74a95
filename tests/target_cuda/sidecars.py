"""Exported kernels to take apart: small programs whose sidecars use every
field (two launches, two outputs, a declared shape, a temporary, bound sizes,
the 64-bit variant, write checks), and helpers that edit a sidecar on disk."""
from __future__ import annotations

import copy
import json
import os

import tcomp
from tcomp.target_cuda import sidecar

NORMALIZE = """def f(float(N, D) X, float(N) Y) -> (S, float(N, D) O) {
    S(n) +=! X(n, d)
    O(n, d) = X(n, d) / S(n) + Y(n)
}"""
MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
DOT = "def dot(float(N) X, float(N) Y) -> (D) { D +=! X(i) * Y(i) }"
WRITES = "def w(float(N) A, float(M) C) -> (B) {\n  B(i) = C(i)\n  B(i) = A(i)\n}"


def normalize(threads: int = 32):
    """Two launches (S, then O) with 32-thread blocks, two outputs, a declared shape."""
    s = tcomp.Schedule(tcomp.op(NORMALIZE))
    for name in ("S", "O"):
        st = s[name]
        no, ni = st.split(st.axes[0], threads)
        st.bind(no, "blockIdx.x")
        st.bind(ni, "threadIdx.x")
    return s


def tiled_matmul(t: int = 8):
    s = tcomp.Schedule(tcomp.op(MM))
    C = s["C"]
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, t, t)
    for ax, tag in ((mo, "blockIdx.y"), (no, "blockIdx.x"), (mi, "threadIdx.y"),
                    (ni, "threadIdx.x")):
        C.bind(ax, tag)
    return s


def dot_rfactor():
    """A temporary (the partial sums D_rf) and sizes fixed at build."""
    s = tcomp.Schedule(tcomp.op(DOT))
    (i,) = s["D"].reduce_axes
    io, ii = s["D"].split(i, 4)
    s["D"].rfactor(ii)
    return s


def exports(folder) -> dict:
    """name -> the path of each sample kernel exported into `folder`."""
    out = {}
    for name, sched, sizes in (("normalize", normalize(), None),
                               ("matmul", tiled_matmul(), {"K": 24}),
                               ("dot", dot_rfactor(), {"N": 16}),
                               ("writes", tcomp.Schedule(tcomp.op(WRITES)), None)):
        path = os.path.join(str(folder), name, name + ".cubin")
        tcomp.build(sched, target="cuda:sm_90a", sizes=sizes).export(path)
        out[name] = path
    return out


def read(path: str) -> dict:
    return json.load(open(path[:-len(".cubin")] + ".json"))


def write(path: str, meta, reseal: bool = False) -> None:
    """Write `meta` as the sidecar of `path`; `reseal`: with a fresh digest, as a
    writer that means it would (then only the other checks can refuse it)."""
    if reseal and isinstance(meta, dict):
        meta = sidecar.seal(meta)
    with open(path[:-len(".cubin")] + ".json", "w") as f:
        json.dump(meta, f)


def nodes(value, path=()):
    """(path, value) of every field and element below `value`, depth first."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for k, v in items:
        yield path + (k,), v
        yield from nodes(v, path + (k,))


def edited(meta: dict, path: tuple, new=None, drop: bool = False) -> dict:
    out = copy.deepcopy(meta)
    at = out
    for k in path[:-1]:
        at = at[k]
    if drop:
        del at[path[-1]]
    else:
        at[path[-1]] = new
    return out


def wrong_type(v):
    """A value of another JSON type than `v`."""
    if isinstance(v, bool):
        return "true"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return 7
    if isinstance(v, list):
        return {"0": v[0] if v else 0}
    if isinstance(v, dict):
        return list(v.values())
    return 1  # null


def single_field_edits(meta: dict):
    """(what, edited sidecar) for every single-field edit of `meta`: each field
    or element dropped, given a value of another type, and each integer out of
    range (negative, and past 2^64)."""
    for path, v in nodes(meta):
        where = "/".join(map(str, path))
        yield f"drop {where}", edited(meta, path, drop=True)
        yield f"{where} as {type(wrong_type(v)).__name__}", edited(meta, path, wrong_type(v))
        if isinstance(v, int) and not isinstance(v, bool):
            yield f"{where} = -1", edited(meta, path, -1)
            yield f"{where} = 2^64", edited(meta, path, 2**64)
