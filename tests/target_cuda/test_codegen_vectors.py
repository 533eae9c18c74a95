"""16-byte vector accesses in the CUDA codegen (CPU only: source text and PTX).

A vectorized loop whose body is one store becomes vector loads of every
contiguous, aligned load, and one vector store when the store is contiguous and
aligned too; otherwise (a local array, a transposed shared layout) one scalar
store per element from the loaded vector. Local arrays are never vector
accessed, so they stay in registers.
"""
from __future__ import annotations

import re

import pytest

import tcomp

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
ARCH = "cuda:sm_90a"


def tiled(transpose_a: bool, fragments: bool):
    """32 x 32 blocks of 8 x 8 threads with 4 x 4 outputs each, K tiles of 8 in
    shared memory fetched as float4 (A k-major when `transpose_a`), 4-element
    register fragments loaded as one float4 each (`fragments`)."""
    op = tcomp.op(MATMUL)
    s = tcomp.Schedule(op)
    C = s["C"]
    CL = s.cache_write(C, "local")
    mo, no, mi, ni = C.tile(*C.axes, 32, 32)
    mio, mii = C.split(mi, 4)
    nio, nii = C.split(ni, 4)
    C.reorder(mo, no, mio, nio, mii, nii)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    CL.compute_at(C, nio)
    ko, ki = CL.split(CL.reduce_axes[0], 8)
    CL.reorder(ko, ki, *CL.axes)
    for ax in (ki, *CL.axes):
        CL.unroll(ax)
    for name in ("A", "B"):
        S = s.cache_read(name, "shared", [CL])
        S.compute_at(CL, ko)
        a0, a1 = S.axes
        if transpose_a and name == "A":
            S.storage_order(a1, a0)
        f, fv = S.split(S.fuse(a0, a1), 4)
        S.vectorize(fv)
        fo, fi = S.split(f, 8)
        S.bind(fi, "threadIdx.x")
        S.bind(fo, "threadIdx.y")
    if fragments:
        for name in ("A_shared", "B_shared"):
            L = s.cache_read(name, "local", [CL])
            L.compute_at(CL, ki)
            a0, a1 = L.axes
            c, o = (a0, a1) if name == "A_shared" else (a1, a0)
            co, cv = L.split(c, 4)  # (the extent is 4: vectorize needs a constant)
            L.reorder(o, co, cv)
            L.unroll(o)
            L.unroll(co)
            L.vectorize(cv)
    return s


def vec_accesses(src):
    """{buffer: number of float4 loads}, {buffer: number of float4 stores}."""
    from collections import Counter
    loads = re.findall(r"reinterpret_cast<const float4\*>\(&(\w+)\[", src)
    stores = re.findall(r"\*reinterpret_cast<float4\*>\(&(\w+)\[", src)
    return dict(Counter(loads)), dict(Counter(stores))


def test_transposed_tile_and_register_fragments():
    k = tcomp.build(tiled(True, True), target=ARCH, sizes={"M": 64, "N": 64, "K": 64})
    src = k.source
    loads, stores = vec_accesses(src)
    # global fetches of A and B (one float4 each per thread), and the two fragments
    # (one float4 each per k of the unrolled K tile) as float4 loads
    assert loads == {"A": 1, "B": 1, "A_shared": 8, "B_shared": 8}
    # B's tile is stored as a float4; A's k-major tile by 4 scalar stores (C's
    # stores are not vectorized by this schedule)
    assert stores == {"B_shared": 1}
    assert re.search(r"A_shared\[[^\]]*\] = tc_vec\w+\[", src)
    # the fragments are register arrays written element by element from the vector
    assert re.search(r"A_shared_local\[\w+\] = tc_vec\w+\[\w+\];", src)
    assert re.search(r"B_shared_local\[\w+\] = tc_vec\w+\[\w+\];", src)
    assert k.meta["kernels"][0]["aligned_buffers"] == ["A", "B"]
    ptx = k.ptx
    assert ptx.count("ld.shared.v4.f32") == 2 * 8  # two fragments per k, 8 k per tile
    assert "ld.global.nc.v4.f32" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx  # nothing spilled to local memory


def test_m_major_tile_fragments_stay_scalar():
    """Without storage_order, A's 4 values at one k are a column of the tile
    (stride 8): that fragment is loaded element by element; B's stays a float4."""
    k = tcomp.build(tiled(False, True), target=ARCH, sizes={"M": 64, "N": 64, "K": 64})
    loads, stores = vec_accesses(k.source)
    assert loads == {"A": 1, "B": 1, "B_shared": 8}
    assert stores == {"A_shared": 1, "B_shared": 1}
    assert "ld.local" not in k.ptx


def test_unaligned_sizes_fall_back_to_scalars():
    """K = 63: rows of A start at unaligned offsets: no global vectors of A (the
    shared fragment vectors stay, their strides are constants). B's rows (N = 64)
    stay aligned: its copy's guard (k < 63) holds for all lanes or none, so it
    moves outside the vector loop and B is still read as float4."""
    k = tcomp.build(tiled(True, True), target=ARCH, sizes={"M": 64, "N": 64, "K": 63})
    loads, stores = vec_accesses(k.source)
    assert "A" not in loads and loads["B"] == 1
    assert "< 63) {" in k.source
    assert k.meta["kernels"][0]["aligned_buffers"] == ["B"]


def half_scale(dt: str, lanes: int):
    """O = A * 2 in `dt` (half or bfloat16), 4 threads per block, each loading
    `lanes` contiguous elements as one vector (8 lanes: 16 bytes, 4: 8 bytes)."""
    op = tcomp.op(f"def h({dt}(N) A) -> (O) {{ O(i) = A(i) * {dt}(2.0) }}")
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    io, ii = O.split(i, lanes)
    O.vectorize(ii)
    ioo, ioi = O.split(io, 4)
    O.bind(ioo, "blockIdx.x")
    O.bind(ioi, "threadIdx.x")
    return s


@pytest.mark.parametrize("dt", ["half", "bfloat16"])
@pytest.mark.parametrize("lanes,vtype,ptx_load", [(8, "float4", "ld.global.nc.v4.f32"),
                                                  (4, "float2", "ld.global.nc.v2.f32")])
def test_half_vectors_of_16_and_8_bytes(dt, lanes, vtype, ptx_load):
    """2-byte elements: 8 lanes move as one float4, 4 lanes as one float2."""
    k = tcomp.build(half_scale(dt, lanes), target=ARCH, sizes={"N": 256})
    assert f"*reinterpret_cast<{vtype}*>(&O[" in k.source
    assert f"*reinterpret_cast<const {vtype}*>(&A[" in k.source
    assert ptx_load in k.ptx
    assert k.meta["kernels"][0]["aligned_buffers"] == ["A", "O"]


def test_sim_agrees(tmp_path):
    """The same schedules compute the product (sim target, prime and tile sizes)."""
    import numpy as np
    rng = np.random.default_rng(0)
    for t in (True, False):
        for m, n, kk in ((64, 64, 64), (37, 29, 23)):
            a = rng.standard_normal((m, kk)).astype(np.float32)
            b = rng.standard_normal((kk, n)).astype(np.float32)
            out = tcomp.build(tiled(t, True), target="sim", sizes={"M": m, "N": n, "K": kk})(a, b)
            np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
def test_gpu_agrees():
    """On the GPU: both layouts, with and without fragments, aligned and prime sizes."""
    import numpy as np
    rng = np.random.default_rng(1)
    for t in (True, False):
        for frag in (True, False):
            for m, n, kk in ((64, 64, 64), (37, 29, 23), (96, 32, 130)):
                a = rng.standard_normal((m, kk)).astype(np.float32)
                b = rng.standard_normal((kk, n)).astype(np.float32)
                k = tcomp.build(tiled(t, frag), target="cuda", sizes={"M": m, "N": n, "K": kk})
                np.testing.assert_allclose(k(a, b), a.astype(np.float64) @ b, rtol=1e-4,
                                           atol=1e-4)
