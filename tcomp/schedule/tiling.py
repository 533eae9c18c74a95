"""Multi-level tiling with shared-memory caches for any reduction stage over
two or more spatial axes whose reads are affine (Ansor's "SSRSRS" sketch on
the SIMT levels): batched and transposed matrix products, contractions of
several operands, convolution-like windows.

    O(b, m, n) += X(b, m, k) * Y(b, n, k)        (any affine reads)

  blocks        bm x bn tiles of the last two spatial axes (m, n); the other
                spatial axes fused onto blockIdx.z
  threads       (bm/tm) x (bn/tn), each a tm x tn register tile (cache_write
                local), optionally a warp as an ln x lm lane grid
  reduction     the first reduce axis split by bk, each other one by its
                factor in `rk` (None: kept whole, inside); the outer parts
                outermost
  shared tiles  every tensor read is copied into shared memory at the
                innermost outer reduction loop (cache_read + compute_at),
                the copy spread over all threads in the tensor's global
                order (coalesced), `vec`-wide when the innermost copied axis
                is contiguous; the tile laid out with the axis the thread
                tile steps along (n, else m) innermost (`storage_order`), so
                a thread's tm (or tn) values are contiguous, its rows padded
                by 4 elements with `pad` when that transposes the tile
  fragments     optionally the values one reduction step reads, in registers
  pipeline      optionally the next shared tiles fetched while this one is
                computed (2: through registers; 3..5: a cp.async ring)

`simt_gemm` (templates.py) is the hand-tuned form of the same idea for
exactly C(m, n) += A(m, k) * B(k, n); this template reads the subscripts
(`affine_reads`) instead of assuming them.
"""
from __future__ import annotations

from ..lang.ast import Read, walk
from ..lang.ranges import _affine
from ..errors import ScheduleError
from .templates import bind_thread_tiles, spread_over_threads

VECTOR_BYTES = 16


def affine_reads(d) -> dict | None:
    """{tensor: per dimension ({index: coefficient}, offset is zero)} of a
    StageDef's reads, or None when a subscript is not affine in the stage's
    indices (a gather, a product of indices) or a tensor is read at two
    different subscripts (one shared tile per tensor must cover one pattern)."""
    indices = set(d.spatial) | set(d.reduce)
    out: dict = {}
    for e in [d.rhs, *d.lets.values()]:
        for r in walk(e):
            if not isinstance(r, Read):
                continue
            dims = []
            for sub in r.args:
                aff = _affine(sub, indices, d.lets)
                if aff is None:
                    return None
                coeffs, rest = aff
                dims.append((tuple(sorted(coeffs.items())), bool(rest == 0)))
            dims = tuple(dims)
            if out.setdefault(r.tensor, dims) != dims:
                return None
    return out


def tile_extents(spatial, reduce, bm, bn, bk, rk=(), tm=None, tn=None, inner=False,
                 whole=None) -> dict:
    """Extent of each index (a stage's `spatial` and `reduce` names) over one
    shared tile (one iteration of the innermost outer reduction loop in one
    block; a reduce index kept whole spans its extent in `whole`, or None
    when `whole` is not given), or, with
    `inner`, over one register fragment (one reduction step of one thread:
    m and n over tm and tn, reduce indices fixed). Other spatial indices: 1."""
    *outer, m, n = spatial
    ext = {v: 1 for v in outer}
    ext[m], ext[n] = (tm, tn) if inner else (bm, bn)
    for i, r in enumerate(reduce):
        ext[r] = 1 if inner else (bk if i == 0 else rk[i - 1])
        if ext[r] is None and whole is not None:
            ext[r] = whole[r]
    return ext


def padded(row: int) -> int:
    """A shared tile's row length under `pad`: storage_align(.., 32, 4), the
    least length >= row that is 4 modulo 32 (rows start 4 banks apart)."""
    return row + (4 - row) % 32


def footprint(dims, ext: dict, shape=None) -> tuple[int, ...]:
    """Per dimension, how many elements a read with subscripts `dims`
    (affine_reads' form) touches when each index spans `ext[index]` values
    (an index with extent None: the dimension's whole size in `shape`),
    at most the dimension's size."""
    out = []
    for i, (coeffs, _) in enumerate(dims):
        if any(ext.get(v) is None for v, _ in coeffs):
            out.append(shape[i])
            continue
        n = 1 + sum(abs(c) * (ext[v] - 1) for v, c in coeffs)
        out.append(min(n, shape[i]) if shape is not None else n)
    return tuple(out)


def inner_dim(dims, m: str, n: str) -> int | None:
    """The dimension a thread tile steps along in a read with subscripts
    `dims`: the one indexed by n, else by m (None: neither)."""
    for v in (n, m):
        for i, (coeffs, _) in enumerate(dims):
            if v in dict(coeffs):
                return i
    return None


def vector_width(itemsize: int) -> int:
    return VECTOR_BYTES // itemsize


def shared_tiles(s, stage, bm, bn, bk, tm, tn, rk=(), fragments=True, pipeline=0, vector=True,
                 lanes=None, pad=False):
    """Multi-level tiling of `stage` on Schedule `s` (the module docstring
    describes each level). `rk`: a split factor or None (kept whole) per
    reduce axis after the first; `pipeline`: 0 (off) or 2..5 stages;
    `lanes=(ln, lm)`: a warp as an ln x lm grid of threads."""
    st = s.states[stage]
    d = st.definition
    if len(d.spatial) < 2 or not d.reduce:
        raise ScheduleError(f"shared_tiles: stage '{stage}' needs two or more spatial axes and a "
                            f"reduction, it has spatial ({', '.join(d.spatial)}) and reduce "
                            f"({', '.join(d.reduce)})")
    reads = affine_reads(d)
    if reads is None:
        raise ScheduleError(f"shared_tiles: stage '{stage}' reads a tensor at a subscript that "
                            f"is not affine in its indices (or one tensor at two subscripts); "
                            f"shared tiles need affine reads")
    if len(rk) != len(d.reduce) - 1:
        raise ScheduleError(f"shared_tiles: rk needs one factor (or None) per reduce axis after "
                            f"the first ({len(d.reduce) - 1}), got {list(rk)!r}")
    *_, vm, vn = d.spatial
    C = s[stage]
    CL = s.cache_write(C, "local")
    *outer, m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, bm, bn)
    mio, mii = C.split(mi, tm)
    nio, nii = C.split(ni, tn)
    C.reorder(mo, no, mio, nio, mii, nii)
    if outer:
        C.bind(_fuse_all(C, outer), "blockIdx.z")
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    at, tx, ty = bind_thread_tiles(C, mio, nio, bm // tm, bn // tn, lanes)
    C.unroll(mii)
    out_vec = vector_width(s.tensors[d.tensor][0].numpy.itemsize)
    if vector and tn % out_vec == 0 and tn > out_vec:
        niio, niiv = C.split(nii, out_vec)
        C.unroll(niio)
        C.vectorize(niiv)
    elif vector and tn == out_vec:
        C.vectorize(nii)
    else:
        C.unroll(nii)
    CL.compute_at(C, at)
    *_, lm_, ln_ = CL.axes
    k0, *krest = CL.reduce_axes
    ko, ki = CL.split(k0, bk)
    outer_k, inner_k = [ko], [ki]
    for r, f in zip(krest, rk):
        if f is None:
            inner_k.append(r)
        else:
            ro, ri = CL.split(r, f)
            outer_k.append(ro)
            inner_k.append(ri)
    CL.reorder(*outer_k, *inner_k, lm_, ln_)
    at_k = outer_k[-1]
    if pipeline:
        CL.pipeline(at_k, stages=pipeline)
    CL.unroll(inner_k[-1])
    CL.unroll(lm_)
    CL.unroll(ln_)
    shared = {}
    for name, dims in sorted(reads.items()):
        S = s.cache_read(name, "shared", [CL])
        shared[name] = (S.tensor, dims)
        S.compute_at(CL, at_k)
        axes = list(S.axes)
        j = inner_dim(dims, vm, vn)
        if j is not None and j != len(axes) - 1:
            order = [a for i, a in enumerate(axes) if i != j] + [axes[j]]
            S.storage_order(*order)  # the thread tile's axis contiguous in shared memory
            if pad:
                S.storage_align(order[-2], 32, 4)  # rows padded: the transposed stores spread
        f = _fuse_all(S, axes)
        w = vector_width(s.tensors[name][0].numpy.itemsize)
        spread_over_threads(S, f, tx, ty,
                            w if vector and _contiguous_last(dims, d, bm, bn, bk, rk, w) else None)
    if fragments:
        at_r = inner_k[-1]
        for name, (buf, dims) in shared.items():
            L = s.cache_read(buf, "local", [CL])
            L.compute_at(CL, at_r)
            axes = list(L.axes)
            j = inner_dim(dims, vm, vn)
            step = None
            if j is not None:
                coeffs = dict(dims[j][0])
                step = tn if vn in coeffs else tm
            w = vector_width(s.tensors[name][0].numpy.itemsize)
            if vector and step is not None and step % w == 0 and dims[j][1] and \
                    len(dims[j][0]) == 1 and dims[j][0][0][1] == 1:
                co, cv = L.split(axes[j], w)
                rest = [a for i, a in enumerate(axes) if i != j]
                L.reorder(*rest, co, cv)
                for a in rest + [co]:
                    L.unroll(a)
                L.vectorize(cv)
            else:
                for a in axes:
                    L.unroll(a)


def _contiguous_last(dims, d, bm, bn, bk, rk, w) -> bool:
    """Whether a shared tile's copy can move `w` elements at a time: the
    tensor's innermost dimension is read as one index (coefficient 1, no
    offset) whose tile spans a multiple of `w` elements from a multiple of
    `w` (its block or reduction tile start)."""
    coeffs, zero = dims[-1]
    if not zero or len(coeffs) != 1 or coeffs[0][1] != 1:
        return False
    ext = tile_extents(d.spatial, d.reduce, bm, bn, bk, rk)
    e = ext[coeffs[0][0]]
    return e is not None and e % w == 0 and e > 1


def _fuse_all(st, axes):
    f = axes[0]
    for a in axes[1:]:
        f = st.fuse(f, a)
    return f
