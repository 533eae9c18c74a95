"""GPU-shaped schedules run on the sim target and compared with `tcomp.evaluate`.

Each op gets a hand-written schedule in the style of a real CUDA kernel:
blockIdx/threadIdx bindings, shared-memory tiles fetched cooperatively by the
threads of a block (cache_read + compute_at + fuse/split/bind), register tiles
(cache_write local), producers computed at the consumer's row loop
(compute_at) or substituted into it (compute_inline). Every schedule runs at
sizes that divide its tile sizes and at sizes that do not (primes), so both the
full-tile and the tail-guard paths execute. The sim checks out-of-bounds
accesses, reads of unwritten shared/local memory, shared-memory races and
divergent barriers on the way, so a passing run is also a well-formed kernel.

Sizes stay small (the sim interprets loops in Python, one block at a time).
"""
from __future__ import annotations

import numpy as np
import pytest

import tcomp

from .util import ROW_SOFTMAX, assert_matches, inputs_for, run_sim

DIVIDING, PRIME = "dividing", "prime"
BOTH = [DIVIDING, PRIME]


def coop(X, ty: int | None, tx: int):
    """Cooperative fetch: fuse every axis of cache stage X, spread the elements
    over tx (x) * ty (y) threads; the rest of the copy loops serially."""
    axes = X.axes
    f = axes[0]
    for a in axes[1:]:
        f = X.fuse(f, a)
    fo, fi = X.split(f, tx)
    X.bind(fi, "threadIdx.x")
    if ty is not None:
        foo, foi = X.split(fo, ty)
        X.bind(foi, "threadIdx.y")
    return X


def check(s, sizes, build_sizes=None, tol=None, **inputs_kw):
    args = inputs_for(s.op, sizes, **inputs_kw)
    return run_sim(s, args, sizes=build_sizes, tol=tol)


def sizes_of(which, dividing: dict, prime: dict) -> dict:
    return dividing if which == DIVIDING else prime


# =============================================================== matmul family
MATMUL = tcomp.op("def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }")


def matmul_3level(op, out="C", block=(8, 8), reg=(2, 2), kt=4):
    """Blocks of block[0] x block[1] outputs, threads of reg[0] x reg[1] outputs
    (register tile via cache_write local), K tiles of kt staged in shared memory."""
    s = tcomp.Schedule(op)
    C = s[out]
    CL = s.cache_write(C, "local")
    m, n = C.axes[-2:]
    mo, no, mi, ni = C.tile(m, n, *block)
    mio, mii = C.split(mi, reg[0])
    nio, nii = C.split(ni, reg[1])
    C.reorder(mo, no, mio, nio, mii, nii)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    CL.compute_at(C, nio)
    lm, ln = CL.axes[-2:]
    (lk,) = CL.reduce_axes
    ko, ki = CL.split(lk, kt)
    CL.reorder(ko, ki, lm, ln)
    CL.unroll(lm)
    CL.unroll(ln)
    ty, tx = block[0] // reg[0], block[1] // reg[1]
    for t in op.inputs:
        X = s.cache_read(t.name, "shared", [CL])
        X.compute_at(CL, ko)
        coop(X, ty, tx)
    return s


@pytest.mark.parametrize("which", BOTH)
def test_matmul_3level(which):
    s = matmul_3level(MATMUL)
    check(s, sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 17, "K": 11}))


@pytest.mark.parametrize("which", BOTH)
def test_matmul_3level_sizes_bound(which):
    sz = sizes_of(which, {"M": 16, "N": 8, "K": 12}, {"M": 11, "N": 7, "K": 5})
    check(matmul_3level(MATMUL), sz, build_sizes=sz)


@pytest.mark.parametrize("which", BOTH)
def test_matmul_shared_one_output_per_thread(which):
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    ko, ki = C.split(k, 4)
    C.reorder(mo, no, ko, mi, ni, ki)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    for t in ("A", "B"):
        X = s.cache_read(t, "shared", [C])
        X.compute_at(C, ko)
        coop(X, 4, 4)
    check(s, sizes_of(which, {"M": 8, "N": 8, "K": 8}, {"M": 7, "N": 11, "K": 13}))


BMM = tcomp.op("""def bmm(float(B,M,K) X, float(B,K,N) Y) -> (Z) {
  Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_batched_matmul(which):
    s = tcomp.Schedule(BMM)
    Z = s["Z"]
    ZL = s.cache_write(Z, "local")
    b, m, n = Z.axes
    mo, no, mi, ni = Z.tile(m, n, 4, 8)
    nio, nii = Z.split(ni, 2)
    Z.reorder(b, mo, no, mi, nio, nii)
    Z.bind(b, "blockIdx.z")
    Z.bind(mo, "blockIdx.y")
    Z.bind(no, "blockIdx.x")
    Z.bind(mi, "threadIdx.y")
    Z.bind(nio, "threadIdx.x")
    ZL.compute_at(Z, nio)
    (k,) = ZL.reduce_axes
    ko, ki = ZL.split(k, 4)
    lb, lm, ln = ZL.axes
    ZL.reorder(ko, ki, lb, lm, ln)
    for t in ("X", "Y"):
        S = s.cache_read(t, "shared", [ZL])
        S.compute_at(ZL, ko)
        coop(S, 4, 4)
    check(s, sizes_of(which, {"B": 2, "M": 8, "N": 16, "K": 8}, {"B": 3, "M": 5, "N": 11, "K": 7}))


MATVEC = tcomp.op("def matvec(float(M,K) A, float(K) x) -> (y) { y(i) +=! A(i, k) * x(k) }")
MATVEC64 = tcomp.op("def matvec64(double(M,K) A, double(K) x) -> (y) { y(i) +=! A(i, k) * x(k) }")


@pytest.mark.parametrize("op", [MATVEC, MATVEC64], ids=["float32", "float64"])
@pytest.mark.parametrize("which", BOTH)
def test_matvec(which, op):
    """One row per thread; x staged in shared memory K-tile by K-tile."""
    s = tcomp.Schedule(op)
    y = s["y"]
    (i,) = y.axes
    (k,) = y.reduce_axes
    io, ii = y.split(i, 8)
    ko, ki = y.split(k, 8)
    y.reorder(io, ko, ii, ki)
    y.bind(io, "blockIdx.x")
    y.bind(ii, "threadIdx.x")
    xs = s.cache_read("x", "shared", [y])
    xs.compute_at(y, ko)
    coop(xs, None, 8)
    check(s, sizes_of(which, {"M": 16, "K": 24}, {"M": 13, "K": 19}))


HALF_MM = tcomp.op("""def hmm(half(M,K) A, half(K,N) B) -> (half(M,N) C) {
  C(m, n) +=! A(m, k) * B(k, n)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_half_matmul_cache_write(which):
    """float16 inputs/outputs, float32 accumulation in the register tile."""
    s = matmul_3level(HALF_MM, block=(8, 8), reg=(2, 2), kt=4)
    sz = sizes_of(which, {"M": 16, "N": 8, "K": 16}, {"M": 11, "N": 13, "K": 9})
    args = inputs_for(HALF_MM, sz)
    k = tcomp.build(s, target="sim")
    got = k(*args)
    assert got.dtype == np.float16
    assert_matches(HALF_MM, got, tcomp.evaluate(HALF_MM, *args))
    # The float32 accumulator: exact float64 product, rounded once to half.
    A, B = (a.astype(np.float64) for a in args)
    np.testing.assert_allclose(got.astype(np.float64), A @ B, rtol=2e-3, atol=2e-3)


def test_half_matmul_needs_cache_write():
    """Accumulating a float16 reduction in memory is refused, with the fix named."""
    s = tcomp.Schedule(HALF_MM)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.reorder(k, m, n)
    with pytest.raises(tcomp.LoweringError, match="cache_write"):
        tcomp.build(s, target="sim")


# =============================================================== convolutions
CONV = tcomp.op("""def conv(float(N,C,H,W) I, float(K,C,R,S) Wt) -> (O) {
  O(n, k, h, w) +=! I(n, c, h + r, w + s) * Wt(k, c, r, s)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_conv2d_nchw(which):
    """Output tile 4x4 per block, one output per thread; the input tile with
    its halo, per input channel, in shared memory (constant size: R, S bound)."""
    s = tcomp.Schedule(CONV)
    O = s["O"]
    n, k, h, w = O.axes
    c, r, sx = O.reduce_axes
    ho, wo, hi, wi = O.tile(h, w, 4, 4)
    nk = O.fuse(n, k)
    O.reorder(nk, ho, wo, c, hi, wi, r, sx)
    O.bind(nk, "blockIdx.z")
    O.bind(ho, "blockIdx.y")
    O.bind(wo, "blockIdx.x")
    O.bind(hi, "threadIdx.y")
    O.bind(wi, "threadIdx.x")
    IS = s.cache_read("I", "shared", [O])
    IS.compute_at(O, c)
    coop(IS, 4, 4)
    sz = sizes_of(which, {"N": 1, "C": 2, "H": 10, "W": 10, "K": 2, "R": 3, "S": 3},
                  {"N": 2, "C": 3, "H": 9, "W": 11, "K": 2, "R": 3, "S": 2})
    check(s, sz, build_sizes={"R": sz["R"], "S": sz["S"]})


def test_conv2d_shared_needs_constant_region():
    """Left symbolic, R and S make the shared halo non-constant: a clear LoweringError."""
    s = tcomp.Schedule(CONV)
    O = s["O"]
    n, k, h, w = O.axes
    c, r, sx = O.reduce_axes
    ho, wo, hi, wi = O.tile(h, w, 4, 4)
    O.reorder(n, k, ho, wo, c, hi, wi, r, sx)
    IS = s.cache_read("I", "shared", [O])
    IS.compute_at(O, c)
    with pytest.raises(tcomp.LoweringError, match="non-constant extent"):
        tcomp.build(s, target="sim")


SCONV = tcomp.op("""def sconv(float(N,C,H,W) I, float(K,C,R,S) Wt, float(K) bias) -> (O) {
  O(n, k, h, w) +=! I(n, c, 2 * h + r, 2 * w + s) * Wt(k, c, r, s)
  O(n, k, h, w) = O(n, k, h, w) + bias(k)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_strided_conv_bias(which):
    """Stride 2: the shared input tile is (2*4 - 1 + R) x (2*4 - 1 + S); the
    bias is a second statement (stage O.1) with its own thread mapping."""
    s = tcomp.Schedule(SCONV)
    O = s["O"]
    n, k, h, w = O.axes
    c, r, sx = O.reduce_axes
    ho, wo, hi, wi = O.tile(h, w, 4, 4)
    nk = O.fuse(n, k)
    O.reorder(nk, ho, wo, c, hi, wi, r, sx)
    O.bind(nk, "blockIdx.z")
    O.bind(ho, "blockIdx.y")
    O.bind(wo, "blockIdx.x")
    O.bind(hi, "threadIdx.y")
    O.bind(wi, "threadIdx.x")
    IS = s.cache_read("I", "shared", [O])
    IS.compute_at(O, c)
    coop(IS, 4, 4)
    O1 = s["O.1"]
    n1, k1, h1, w1 = O1.axes
    f = O1.fuse(O1.fuse(O1.fuse(n1, k1), h1), w1)
    fo, fi = O1.split(f, 32)
    O1.bind(fo, "blockIdx.x")
    O1.bind(fi, "threadIdx.x")
    sz = sizes_of(which, {"N": 1, "C": 2, "H": 17, "W": 17, "K": 2, "R": 3, "S": 3},
                  {"N": 2, "C": 3, "H": 13, "W": 11, "K": 3, "R": 3, "S": 3})
    check(s, sz, build_sizes={"R": 3, "S": 3})


DWCONV = tcomp.op("""def dwconv(float(N,C,H,W) I, float(C,R,S) Wt) -> (O) {
  O(n, c, h, w) +=! I(n, c, h + r, w + s) * Wt(c, r, s)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_depthwise_conv(which):
    """One channel plane tile per block; the weights of the channel in shared
    memory, the input tile with halo in shared memory."""
    s = tcomp.Schedule(DWCONV)
    O = s["O"]
    n, c, h, w = O.axes
    r, sx = O.reduce_axes
    ho, wo, hi, wi = O.tile(h, w, 4, 8)
    nc = O.fuse(n, c)
    O.reorder(nc, ho, wo, hi, wi, r, sx)
    O.bind(nc, "blockIdx.y")
    f = O.fuse(ho, wo)
    O.bind(f, "blockIdx.x")
    O.bind(hi, "threadIdx.y")
    O.bind(wi, "threadIdx.x")
    for t in ("I", "Wt"):
        X = s.cache_read(t, "shared", [O])
        X.compute_at(O, f)
        coop(X, 4, 8)
    sz = sizes_of(which, {"N": 1, "C": 3, "H": 10, "W": 10, "R": 3, "S": 3},
                  {"N": 2, "C": 2, "H": 11, "W": 13, "R": 3, "S": 2})
    check(s, sz, build_sizes={"R": sz["R"], "S": sz["S"]})


MAXPOOL = tcomp.op("""def maxpool(float(N,C,H,W) I) -> (O) {
  O(n, c, h, w) max=! I(n, c, 2 * h + r, 2 * w + s) where r in 0:3, s in 0:3
}""")


@pytest.mark.parametrize("which", BOTH)
def test_max_pool(which):
    """3x3 windows, stride 2; the (2*4+1) x (2*8+1) input tile per block in shared memory."""
    s = tcomp.Schedule(MAXPOOL)
    O = s["O"]
    n, c, h, w = O.axes
    ho, wo, hi, wi = O.tile(h, w, 4, 8)
    nc = O.fuse(n, c)
    O.reorder(nc, ho, wo, hi, wi)
    O.bind(nc, "blockIdx.z")
    O.bind(ho, "blockIdx.y")
    O.bind(wo, "blockIdx.x")
    O.bind(hi, "threadIdx.y")
    O.bind(wi, "threadIdx.x")
    IS = s.cache_read("I", "shared", [O])
    IS.compute_at(O, wo)
    coop(IS, 4, 8)
    check(s, sizes_of(which, {"N": 1, "C": 2, "H": 17, "W": 17}, {"N": 2, "C": 1, "H": 13, "W": 23}))


AVGPOOL = tcomp.op("""def avgpool(float(N,C,H,W) I) -> (O) {
  O(n, c, h, w) +=! I(n, c, 2 * h + r, 2 * w + s) / 4.0 where r in 0:2, s in 0:2
}""")


@pytest.mark.parametrize("which", BOTH)
def test_avg_pool(which):
    """2x2 windows, stride 2; windows unrolled, each thread reads its window
    through a local copy computed at its own loop."""
    s = tcomp.Schedule(AVGPOOL)
    O = s["O"]
    n, c, h, w = O.axes
    r, sx = O.reduce_axes
    f = O.fuse(O.fuse(O.fuse(n, c), h), w)
    fo, fi = O.split(f, 16)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    O.unroll(r)
    O.unroll(sx)
    IL = s.cache_read("I", "local", [O])
    IL.compute_at(O, fi)
    check(s, sizes_of(which, {"N": 2, "C": 2, "H": 8, "W": 8}, {"N": 1, "C": 3, "H": 7, "W": 11}))


# =============================================================== normalisations
SOFTMAX = tcomp.op("""def softmax(float(N, D) X) -> (O, mx, ex, sm) {
  mx(n) max=! X(n, d)
  ex(n, d) = exp(X(n, d) - mx(n))
  sm(n) +=! ex(n, d)
  O(n, d) = ex(n, d) / sm(n)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_softmax_row_per_block(which):
    """One row per block: max, exp and sum computed at the row loop of O,
    O's columns spread over 8 threads."""
    s = tcomp.Schedule(SOFTMAX)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 8)
    O.bind(di, "threadIdx.x")
    for p in ("mx", "ex", "sm"):
        s[p].compute_at(O, n)
    ex = s["ex"]
    _, ed = ex.axes
    edo, edi = ex.split(ed, 8)
    ex.bind(edi, "threadIdx.x")
    sz = sizes_of(which, {"N": 4, "D": 16}, {"N": 5, "D": 13})
    args = inputs_for(SOFTMAX, sz)
    args[0] = args[0] * 5
    k = run_sim(s, args)
    # Against a float64 reference too: rows sum to 1, values within float32 rounding.
    X = args[0].astype(np.float64)
    e = np.exp(X - X.max(axis=1, keepdims=True))
    O = k(*args)[0]
    np.testing.assert_allclose(O, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(O.astype(np.float64).sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("which", BOTH)
def test_softmax_row_per_thread(which):
    """One row per thread; the row statistics computed at the thread loop."""
    s = tcomp.Schedule(SOFTMAX)
    O = s["O"]
    n, d = O.axes
    no, ni = O.split(n, 4)
    O.bind(no, "blockIdx.x")
    O.bind(ni, "threadIdx.x")
    for p in ("mx", "ex", "sm"):
        s[p].compute_at(O, ni)
    check(s, sizes_of(which, {"N": 8, "D": 8}, {"N": 7, "D": 11}))


LOGSOFTMAX = tcomp.op("""def log_softmax(float(N, D) X) -> (O, mx, lse) {
  mx(n) max=! X(n, d)
  lse(n) +=! exp(X(n, d) - mx(n))
  lse(n) = log(lse(n)) + mx(n)
  O(n, d) = X(n, d) - lse(n)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_log_softmax(which):
    """mx at O's row loop; lse has two statements, so it stays at root with
    its rows spread over threads; the row of X in shared memory for O."""
    s = tcomp.Schedule(LOGSOFTMAX)
    for st in ("lse", "lse.1"):
        L = s[st]
        (n,) = L.axes
        no, ni = L.split(n, 4)
        L.bind(no, "blockIdx.x")
        L.bind(ni, "threadIdx.x")
    s["mx"].compute_at(s["lse"], s["lse"].leaf_axes[1])
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 4)
    O.bind(di, "threadIdx.x")
    XS = s.cache_read("X", "shared", [O])
    XS.compute_at(O, n)
    coop(XS, None, 4)
    sz = sizes_of(which, {"N": 8, "D": 12}, {"N": 7, "D": 13})
    check(s, sz, build_sizes={"D": sz["D"]})


LAYERNORM = tcomp.op("""def layernorm(float(N, D) X, float(D) gamma, float(D) beta, float eps)
    -> (Y, mean, var) {
  mean(n) +=! X(n, d) / float(D)
  var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
  Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + eps) * gamma(d) + beta(d)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_layernorm(which):
    """Row per block; the row of X in shared memory (read three times), mean
    and var computed at the row loop, Y's columns over 8 threads."""
    s = tcomp.Schedule(LAYERNORM)
    Y = s["Y"]
    n, d = Y.axes
    Y.bind(n, "blockIdx.x")
    do, di = Y.split(d, 8)
    Y.bind(di, "threadIdx.x")
    s["var"].compute_at(Y, n)
    s["mean"].compute_at(Y, n)
    sz = sizes_of(which, {"N": 3, "D": 16}, {"N": 5, "D": 11})
    check(s, sz, tol={"float32": (1e-4, 1e-4)}, scalars={"eps": 1e-5})


BATCHNORM = tcomp.op("""def batchnorm(float(N,C,H,W) I, float(C) gamma, float(C) beta, float eps)
    -> (O, mean, var, scale, shift) {
  mean(c) +=! I(nn, c, hh, ww)
  mean(c) = mean(c) / float(N * H * W)
  var(c) +=! (I(nn, c, hh, ww) - mean(c)) * (I(nn, c, hh, ww) - mean(c))
  var(c) = var(c) / float(N * H * W)
  scale(c) = gamma(c) * rsqrt(var(c) + eps)
  shift(c) = beta(c) - mean(c) * scale(c)
  O(n, c, h, w) = I(n, c, h, w) * scale(c) + shift(c)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_batchnorm_multi_statement(which):
    """Channel statistics: two statements each (reduce, then divide), so at
    root, channels over threads; scale and shift inlined into O, whose
    elements are spread over blocks of 32 threads."""
    s = tcomp.Schedule(BATCHNORM)
    for st in ("mean", "mean.1", "var", "var.1"):
        X = s[st]
        (c,) = X.axes
        co, ci = X.split(c, 4)
        X.bind(co, "blockIdx.x")
        X.bind(ci, "threadIdx.x")
    s["shift"].compute_inline()
    s["scale"].compute_inline()
    O = s["O"]
    n, c, h, w = O.axes
    O.reorder(c, n, h, w)
    O.bind(c, "blockIdx.y")
    hw = O.fuse(h, w)
    f = O.fuse(n, hw)
    fo, fi = O.split(f, 32)
    O.bind(fo, "blockIdx.x")
    O.bind(fi, "threadIdx.x")
    sz = sizes_of(which, {"N": 2, "C": 4, "H": 4, "W": 4}, {"N": 3, "C": 5, "H": 3, "W": 5})
    check(s, sz, tol={"float32": (1e-4, 1e-4)}, scalars={"eps": 1e-5})


# =============================================================== reductions
ROWRED = tcomp.op("""def rowred(float(M, N) A) -> (s, mx) {
  s(i) +=! A(i, j)
  mx(i) max=! A(i, j)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_row_sum_and_max(which):
    """Rows over threads; each thread's row read through a shared tile of
    8 rows x 8 columns fetched cooperatively per column tile."""
    s = tcomp.Schedule(ROWRED)
    for name in ("s", "mx"):
        R = s[name]
        (i,) = R.axes
        (j,) = R.reduce_axes
        io, ii = R.split(i, 8)
        jo, ji = R.split(j, 8)
        R.reorder(io, jo, ii, ji)
        R.bind(io, "blockIdx.x")
        R.bind(ii, "threadIdx.x")
        AS = s.cache_read("A", "shared", [R])
        AS.compute_at(R, jo)
        coop(AS, None, 8)
    check(s, sizes_of(which, {"M": 16, "N": 16}, {"M": 11, "N": 19}))


COLSUM = tcomp.op("def colsum(float(M, N) A) -> (cs) { cs(j) +=! A(i, j) }")


@pytest.mark.parametrize("which", BOTH)
def test_row_sum_cross_thread(which):
    """One row per block; the row's columns reduced across 8 threads (reduce
    axis bound to threadIdx.x: a block-wide all-reduce)."""
    s = tcomp.Schedule(ROWRED)
    for name in ("s", "mx"):
        R = s[name]
        (i,) = R.axes
        (j,) = R.reduce_axes
        R.bind(i, "blockIdx.x")
        jo, ji = R.split(j, 8)
        R.bind(ji, "threadIdx.x")
    k = check(s, sizes_of(which, {"M": 3, "N": 16}, {"M": 5, "N": 13}))
    assert "allreduce_sum" in str(k.program) and "allreduce_max" in str(k.program)


@pytest.mark.parametrize("which", BOTH)
def test_softmax_cross_thread_reductions(which):
    """The GPU softmax: one row per block, max and sum as block all-reduces over
    8 threads, exp and the division spread over the same threads."""
    s = tcomp.Schedule(SOFTMAX)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 8)
    O.bind(di, "threadIdx.x")
    for p in ("mx", "ex", "sm"):
        s[p].compute_at(O, n)
    for p in ("mx", "sm"):
        X = s[p]
        (r,) = X.reduce_axes
        ro, ri = X.split(r, 8)
        X.bind(ri, "threadIdx.x")
    ex = s["ex"]
    _, ed = ex.axes
    edo, edi = ex.split(ed, 8)
    ex.bind(edi, "threadIdx.x")
    check(s, sizes_of(which, {"N": 3, "D": 16}, {"N": 2, "D": 13}))


@pytest.mark.parametrize("which", BOTH)
def test_column_sum(which):
    """Columns over threads (coalesced reads), rows reduced serially in a register."""
    s = tcomp.Schedule(COLSUM)
    cs = s["cs"]
    (j,) = cs.axes
    jo, ji = cs.split(j, 8)
    cs.bind(jo, "blockIdx.x")
    cs.bind(ji, "threadIdx.x")
    (i,) = cs.reduce_axes
    io, ii = cs.split(i, 4)
    cs.unroll(ii)
    check(s, sizes_of(which, {"M": 12, "N": 16}, {"M": 13, "N": 11}))


FULLRED = tcomp.op("def total(float(M, N) A) -> (t) { t +=! A(i, j) }")


@pytest.mark.parametrize("which", BOTH)
def test_full_reduction_0d(which):
    """To a 0-d output in one thread: rows tiled by 4, columns by 2 (unrolled)."""
    s = tcomp.Schedule(FULLRED)
    t = s["t"]
    i, j = t.reduce_axes
    io, ii = t.split(i, 4)
    jo, ji = t.split(j, 2)
    t.reorder(io, jo, ii, ji)
    t.unroll(ji)
    check(s, sizes_of(which, {"M": 8, "N": 8}, {"M": 7, "N": 5}))


@pytest.mark.parametrize("which", BOTH)
def test_full_reduction_0d_rfactor_threads(which):
    """Two launches: rfactor over the inner half of a split rows loop gives 8
    partial sums (t.rf, one per thread), then t all-reduces them over 8 threads."""
    s = tcomp.Schedule(FULLRED)
    t = s["t"]
    i, j = t.reduce_axes
    io, ii = t.split(i, 8)
    rf = t.rfactor(ii)
    (r,) = rf.axes
    rf.bind(r, "threadIdx.x")
    t.bind(t.leaf_axes[0], "threadIdx.x")
    k = check(s, sizes_of(which, {"M": 16, "N": 4}, {"M": 11, "N": 3}))
    assert len(k.program.kernels) == 2


@pytest.mark.parametrize("which", BOTH)
def test_full_reduction_0d_shared_tiles(which):
    """4-row tiles of A fetched into shared memory by 8 threads; every thread
    then reduces the tile redundantly and all store the same 0-d result (the
    sim accepts identical values from several threads)."""
    s = tcomp.Schedule(FULLRED)
    t = s["t"]
    i, j = t.reduce_axes
    io, ii = t.split(i, 4)
    t.reorder(io, ii, j)
    AS = s.cache_read("A", "shared", [t])
    AS.compute_at(t, io)
    coop(AS, None, 8)
    sz = sizes_of(which, {"M": 8, "N": 8}, {"M": 7, "N": 5})
    check(s, sz, build_sizes={"N": sz["N"]})


# =============================================================== data movement
TRANSPOSE = tcomp.op("def transpose(float(M, N) A) -> (O) { O(j, i) = A(i, j) }")


@pytest.mark.parametrize("which", BOTH)
def test_transpose_shared_tile(which):
    """The classic: an 8x8 tile of A read row-wise into shared memory (padded
    by storage_align against bank conflicts), written out column-wise."""
    s = tcomp.Schedule(TRANSPOSE)
    O = s["O"]
    j, i = O.axes
    jo, io, ji, ii = O.tile(j, i, 8, 8)
    O.bind(jo, "blockIdx.y")
    O.bind(io, "blockIdx.x")
    O.bind(ji, "threadIdx.y")
    O.bind(ii, "threadIdx.x")
    AS = s.cache_read("A", "shared", [O])
    AS.compute_at(O, io)
    a0, a1 = AS.axes
    AS.storage_align(a0, 8, 1)
    AS.bind(a0, "threadIdx.y")
    AS.bind(a1, "threadIdx.x")
    check(s, sizes_of(which, {"M": 16, "N": 8}, {"M": 13, "N": 11}))


PERMUTE = tcomp.op("def permute(float(I, J, K) A) -> (O) { O(k, i, j) = A(i, j, k) }")


@pytest.mark.parametrize("which", BOTH)
def test_permute_3d(which):
    s = tcomp.Schedule(PERMUTE)
    O = s["O"]
    k, i, j = O.axes
    O.bind(k, "blockIdx.y")
    io, ii = O.split(i, 4)
    jo, ji = O.split(j, 4)
    O.reorder(k, io, jo, ii, ji)
    O.bind(io, "blockIdx.x")
    O.bind(ii, "threadIdx.y")
    O.bind(ji, "threadIdx.x")
    check(s, sizes_of(which, {"I": 8, "J": 8, "K": 3}, {"I": 5, "J": 7, "K": 3}))


ELTWISE = tcomp.op("""def chain(float(M, N) A, float(N) b) -> (O, t1, t2) {
  t1(i, j) = A(i, j) + b(j)
  t2(i, j) = tanh(t1(i, j)) * sigmoid(t1(i, j)) + fabs(A(i, j))
  O(i, j) = t2(i, j) > 0.5 ? sqrt(t2(i, j)) : exp(-t2(i, j)) - pow(t1(i, j), 2.0)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_elementwise_chain_inlined(which):
    """Both producers inlined into O; O flattened and vectorized by 2 per thread."""
    s = tcomp.Schedule(ELTWISE)
    s["t1"].compute_inline()
    s["t2"].compute_inline()
    O = s["O"]
    i, j = O.axes
    f = O.fuse(i, j)
    fo, fi = O.split(f, 2)
    fo_o, fo_i = O.split(fo, 16)
    O.bind(fo_o, "blockIdx.x")
    O.bind(fo_i, "threadIdx.x")
    O.vectorize(fi)
    check(s, sizes_of(which, {"M": 8, "N": 8}, {"M": 7, "N": 13}))


CAUSAL = tcomp.op("""def causal(float(T, D) Q, float(T, D) Kt) -> (P, S) {
  S(i, j) +=! Q(i, d) * Kt(j, d)
  P(i, j) = (j <= i) ? S(i, j) * 0.5 : -1e30
}""")


@pytest.mark.parametrize("which", BOTH)
def test_causal_masked_scores(which):
    """Scores S (global) computed per 4x4 tile at P's block loop, one score per
    thread; the 4 rows of Q the tile needs staged in shared memory; the causal
    mask a ternary in P (lazy: S is only read where j <= i)."""
    s = tcomp.Schedule(CAUSAL)
    P = s["P"]
    i, j = P.axes
    io, jo, ii, ji = P.tile(i, j, 4, 4)
    P.bind(io, "blockIdx.y")
    P.bind(jo, "blockIdx.x")
    P.bind(ii, "threadIdx.y")
    P.bind(ji, "threadIdx.x")
    S = s["S"]
    S.compute_at(P, jo)
    si, sj = S.axes
    S.bind(si, "threadIdx.y")
    S.bind(sj, "threadIdx.x")
    QS = s.cache_read("Q", "shared", [S])
    QS.compute_at(P, jo)
    sz = sizes_of(which, {"T": 8, "D": 4}, {"T": 7, "D": 5})
    check(s, sz, build_sizes={"D": sz["D"]})


GATHER = tcomp.op("""def gather(float(V, D) E, int32(B, L) idx) -> (O) {
  O(b, l, d) = E(idx(b, l), d)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_gather_int32_index(which):
    """Embedding lookup: one (b, l) per block, d over threads."""
    s = tcomp.Schedule(GATHER)
    O = s["O"]
    b, l, d = O.axes
    bl = O.fuse(b, l)
    O.bind(bl, "blockIdx.x")
    do, di = O.split(d, 4)
    O.bind(di, "threadIdx.x")
    sz = sizes_of(which, {"V": 10, "D": 8, "B": 2, "L": 3}, {"V": 7, "D": 5, "B": 3, "L": 2})
    check(s, sz, ints={"idx": sz["V"]})


SELECT_INDEX = tcomp.op("def f(float(N) A) -> (O) { O(i) = A(i % 2 == 0 ? i + 4 : i) where i in 0:N-4 }")


@pytest.mark.parametrize("which", BOTH)
def test_shared_tile_of_a_ternary_subscript(which):
    """A staged in shared memory per block of 8 outputs; the subscript picks
    i + 4 or i: the tile spans from the smaller branch's low end to the larger
    one's high end (12 elements)."""
    s = tcomp.Schedule(SELECT_INDEX)
    O = s["O"]
    (i,) = O.axes
    io, ii = O.split(i, 8)
    O.bind(io, "blockIdx.x")
    O.bind(ii, "threadIdx.x")
    S = s.cache_read("A", "shared", [O])
    S.compute_at(O, io)
    coop(S, None, 8)
    check(s, sizes_of(which, {"N": 36}, {"N": 31}))


MULTI = """
def first(float(M, N) A) -> (B) { B(i, j) = A(i, j) * 3.0 }
def second(float(M, N) A, float(N) v) -> (y, z) {
  y(i) +=! A(i, j) * v(j)
  z(i) = y(i) * y(i)
}
"""


@pytest.mark.parametrize("which", BOTH)
def test_multi_def_second_op(which):
    op = tcomp.parse(MULTI)["second"]
    s = tcomp.Schedule(op)
    z = s["z"]
    (i,) = z.axes
    io, ii = z.split(i, 4)
    z.bind(io, "blockIdx.x")
    z.bind(ii, "threadIdx.x")
    s["y"].compute_at(z, ii)
    vs = s.cache_read("v", "shared", [s["y"]])
    vs.compute_at(z, io)
    coop(vs, None, 4)
    sz = sizes_of(which, {"M": 8, "N": 8}, {"M": 7, "N": 5})
    check(s, sz, build_sizes={"N": sz["N"]})


UPDATE = tcomp.op("""def update(float(M, N) A) -> (O) {
  O(i, j) = A(i, j) + 1.0
  O(i, j) = O(i, j) * 2.0
}""")


@pytest.mark.parametrize("which", BOTH)
def test_update_statement(which):
    """O written twice: stages O and O.1, each with its own block/thread mapping."""
    s = tcomp.Schedule(UPDATE)
    assert [st.name for st in s.stages] == ["O", "O.1"]
    for name, t in (("O", 4), ("O.1", 8)):
        X = s[name]
        i, j = X.axes
        X.bind(i, "blockIdx.x")
        jo, ji = X.split(j, t)
        X.bind(ji, "threadIdx.x")
    check(s, sizes_of(which, {"M": 4, "N": 8}, {"M": 5, "N": 7}))


# =============================================================== register accumulation + caches
@pytest.mark.parametrize("scope", ["shared", "local"])
@pytest.mark.parametrize("which", BOTH)
def test_matmul_shared_register_accumulation(scope, which):
    """The textbook shared-memory matmul: every output in a register (the K
    loops innermost), the A and B tiles of each K tile cached at k_o. The
    cached tiles must be read relative to their region (A_shared[m_i, k_i])."""
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    ko, ki = C.split(k, 4)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    for t in ("A", "B"):
        X = s.cache_read(t, scope, [C])
        X.compute_at(C, ko)
        if scope == "shared":
            coop(X, 4, 4)
    sz = sizes_of(which, {"M": 8, "N": 8, "K": 8}, {"M": 7, "N": 5, "K": 11})
    k = check(s, sz)
    assert "C_acc" in str(k.program)


@pytest.mark.parametrize("which", BOTH)
def test_row_max_register_local_tile(which):
    """Row max with the reduction in a register and 4-column tiles of the row
    read through a local copy computed at the reduction's outer loop."""
    s = tcomp.Schedule(ROWRED)
    mx = s["mx"]
    (i,) = mx.axes
    (j,) = mx.reduce_axes
    io, ii = mx.split(i, 4)
    mx.bind(io, "blockIdx.x")
    mx.bind(ii, "threadIdx.x")
    jo, ji = mx.split(j, 4)
    AL = s.cache_read("A", "local", [mx])
    AL.compute_at(mx, jo)
    check(s, sizes_of(which, {"M": 8, "N": 8}, {"M": 5, "N": 7}))


@pytest.mark.parametrize("which", BOTH)
def test_matmul_shared_then_local_two_level(which):
    """TVM-style: A, B -> shared tiles at k_o -> per-thread local fragments at
    k_i -> register tile. The shared tile must stay the block's 8x4 / 4x8 tile
    (bound inference through the local stage computed deeper inside)."""
    s = matmul_3level(MATMUL, block=(8, 8), reg=(2, 2), kt=4)
    CL = s["C.local"]
    ki = CL.leaf_axes[1]
    for t in ("A_shared", "B_shared"):
        X = s.cache_read(t, "local", [CL])
        X.compute_at(CL, ki)
    sz = sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 11, "K": 7})
    k = check(s, sz)
    text = str(k.program)
    assert "alloc shared float32 A_shared[8, 4]" in text
    assert "alloc shared float32 B_shared[4, 8]" in text


@pytest.mark.parametrize("acc", ["register", "memory"])
@pytest.mark.parametrize("which", BOTH)
def test_matmul_shared_tiles_at_two_levels(which, acc):
    """A's tile cached per K tile (k_o), B's row cached per k (k_i): two shared
    buffers synchronised at different loop levels; the per-thread output
    accumulated in a register (K loops innermost) or in C_local (K loops outside
    C.local's own, extent-1, spatial loops)."""
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.y")
    C.bind(ni, "threadIdx.x")
    CL.compute_at(C, ni)
    (k,) = CL.reduce_axes
    ko, ki = CL.split(k, 4)
    if acc == "memory":
        lm, ln = CL.axes
        CL.reorder(ko, ki, lm, ln)
    AS = s.cache_read("A", "shared", [CL])
    AS.compute_at(CL, ko)
    coop(AS, 4, 4)
    BS = s.cache_read("B", "shared", [CL])
    BS.compute_at(CL, ki)
    coop(BS, 4, 4)
    sz = sizes_of(which, {"M": 8, "N": 8, "K": 8}, {"M": 5, "N": 7, "K": 6})
    check(s, sz)


# =============================================================== synchronisation of global producers
def test_softmax_cross_thread_producer_synchronised():
    """ex is computed at O's row loop with its columns over 8 threads; sm (at the
    same loop, every thread) then reads all of ex's row: the ex stores and the
    sm loads need a barrier between them (other threads' global writes), or the
    schedule must be refused."""
    s = tcomp.Schedule(SOFTMAX)
    O = s["O"]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    do, di = O.split(d, 8)
    O.bind(di, "threadIdx.x")
    for p in ("mx", "ex", "sm"):
        s[p].compute_at(O, n)
    ex = s["ex"]
    _, ed = ex.axes
    edo, edi = ex.split(ed, 8)
    ex.bind(edi, "threadIdx.x")
    prog = tcomp.lower(s, sizes={"N": 4, "D": 16})  # accepted (a refusal would also be safe)
    lines = str(prog).splitlines()
    store = max(i for i, l in enumerate(lines) if l.strip().startswith("ex["))
    load = min(i for i, l in enumerate(lines) if "sm_acc[0] + ex[" in l)
    assert any(l.strip() == "barrier()" for l in lines[store:load]), str(prog)


# =============================================================== scalar inputs (literal variants)
LAYERNORM_LIT = tcomp.op("""def layernorm_lit(float(N, D) X, float(D) gamma, float(D) beta)
    -> (Y, mean, var) {
  mean(n) +=! X(n, d) / float(D)
  var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
  Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) * gamma(d) + beta(d)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_layernorm_literal_eps(which):
    """test_layernorm's schedule with eps a literal (no 0-d input), plus the
    row of X in shared memory for Y."""
    s = tcomp.Schedule(LAYERNORM_LIT)
    Y = s["Y"]
    n, d = Y.axes
    Y.bind(n, "blockIdx.x")
    do, di = Y.split(d, 8)
    Y.bind(di, "threadIdx.x")
    s["var"].compute_at(Y, n)
    s["mean"].compute_at(Y, n)
    XS = s.cache_read("X", "shared", [Y])
    XS.compute_at(Y, n)
    coop(XS, None, 8)
    sz = sizes_of(which, {"N": 3, "D": 16}, {"N": 5, "D": 11})
    check(s, sz, build_sizes={"D": sz["D"]}, tol={"float32": (1e-4, 1e-4)})


BATCHNORM_LIT = tcomp.op("""def batchnorm_lit(float(N,C,H,W) I, float(C) gamma, float(C) beta)
    -> (O, mean, var, scale, shift) {
  mean(c) +=! I(nn, c, hh, ww)
  mean(c) = mean(c) / float(N * H * W)
  var(c) +=! (I(nn, c, hh, ww) - mean(c)) * (I(nn, c, hh, ww) - mean(c))
  var(c) = var(c) / float(N * H * W)
  scale(c) = gamma(c) * rsqrt(var(c) + 1e-5)
  shift(c) = beta(c) - mean(c) * scale(c)
  O(n, c, h, w) = I(n, c, h, w) * scale(c) + shift(c)
}""")


@pytest.mark.parametrize("which", BOTH)
def test_batchnorm_literal_eps(which):
    """test_batchnorm_multi_statement's schedule with eps a literal; scale and
    shift computed at O's channel (block) loop instead of inlined."""
    s = tcomp.Schedule(BATCHNORM_LIT)
    for st in ("mean", "mean.1", "var", "var.1"):
        X = s[st]
        (c,) = X.axes
        co, ci = X.split(c, 4)
        X.bind(co, "blockIdx.x")
        X.bind(ci, "threadIdx.x")
    O = s["O"]
    n, c, h, w = O.axes
    O.reorder(c, n, h, w)
    O.bind(c, "blockIdx.x")
    hw = O.fuse(h, w)
    f = O.fuse(n, hw)
    fo, fi = O.split(f, 32)
    O.bind(fi, "threadIdx.x")
    s["shift"].compute_at(O, c)
    s["scale"].compute_at(O, c)
    sz = sizes_of(which, {"N": 2, "C": 4, "H": 4, "W": 4}, {"N": 3, "C": 5, "H": 3, "W": 5})
    check(s, sz, tol={"float32": (1e-4, 1e-4)})


# =============================================================== stages not bound to the block's threads
@pytest.mark.parametrize("which", BOTH)
def test_memory_accumulation_in_a_kernel_with_threads(which):
    """C accumulates in global memory (k outside n) and is not bound to threads,
    but the kernel has 4 threads (A's row is fetched cooperatively into shared
    memory). Every thread runs C's loops: the read-modify-write of C[m, n] must
    not race (one thread updates it, or the threads are synchronised), or the
    schedule must be refused."""
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    m, n = C.axes
    (k,) = C.reduce_axes
    C.reorder(m, k, n)
    AS = s.cache_read("A", "shared", [C])
    AS.compute_at(C, m)
    a0, a1 = AS.axes
    a1o, a1i = AS.split(a1, 4)
    AS.bind(a1i, "threadIdx.x")
    sz = sizes_of(which, {"M": 2, "N": 3, "K": 8}, {"M": 3, "N": 2, "K": 7})
    check(s, sz, build_sizes={"K": sz["K"]})  # accepted (a refusal would also be safe)


@pytest.mark.parametrize("which", BOTH)
def test_local_cache_outside_the_thread_loops(which):
    """x's local copy computed at the block loop, outside the thread loop: local
    memory is per thread, so every thread must fill its own copy (it is not a
    redundant store that one thread can do for all)."""
    s = tcomp.Schedule(MATVEC)
    y = s["y"]
    (i,) = y.axes
    io, ii = y.split(i, 4)
    y.bind(io, "blockIdx.x")
    y.bind(ii, "threadIdx.x")
    XL = s.cache_read("x", "local", [y])
    XL.compute_at(y, io)
    sz = sizes_of(which, {"M": 8, "K": 8}, {"M": 7, "K": 5})
    check(s, sz, build_sizes={"K": sz["K"]})


@pytest.mark.parametrize("which", BOTH)
def test_register_tile_outside_the_thread_loops(which):
    """C.local computed at the block loop covers the block's whole 4x4 tile;
    each of the 4 threads then copies out one row of it: every thread needs the
    full local tile in its own registers."""
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 4, 4)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mi, "threadIdx.x")
    CL.compute_at(C, no)
    check(s, sizes_of(which, {"M": 8, "N": 8, "K": 4}, {"M": 7, "N": 5, "K": 3}))


# =============================================================== storage_order
def _kmajor(s, name="A.shared", align=None):
    """Store the 2-d copy `name` with its dimensions swapped (A's tile k-major)."""
    X = s[name]
    a0, a1 = X.axes
    X.storage_order(a1, a0)
    if align is not None:
        X.storage_align(a1, *align)
    return X


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
@pytest.mark.parametrize("which", BOTH)
def test_matmul_kmajor_a_tile(which, pipeline):
    """matmul_3level with the A tile stored k-major (A_shared[k][m]): the
    cooperative fetch (fused, split over the threads) stores transposed, the
    register-tile update reads A_shared[k_i, m]; with pipeline, both halves of
    the double buffer are k-major (A_shared[2, 4, 8])."""
    s = matmul_3level(MATMUL)
    _kmajor(s)
    CL = s["C.local"]
    if pipeline:
        CL.pipeline(CL.leaf_axes[0])
    k = check(s, sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 17, "K": 11}))
    text = str(k.program)
    half = "2, " if pipeline else ""
    assert f"alloc shared float32 A_shared[{half}4, 8]" in text  # k-major: 4 k x 8 m
    assert f"alloc shared float32 B_shared[{half}4, 8]" in text  # as defined: 4 k x 8 n
    assert ("A_shared_prefetch" in text) == pipeline


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
@pytest.mark.parametrize("which", BOTH)
def test_matmul_kmajor_a_tile_padded(which, pipeline):
    """As above, with the k-major rows padded (storage_align(ax1, 32, 4)): rows of
    8 m values become 36 long; the padding is never read."""
    s = matmul_3level(MATMUL)
    _kmajor(s, align=(32, 4))
    CL = s["C.local"]
    if pipeline:
        CL.pipeline(CL.leaf_axes[0])
    k = check(s, sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 17, "K": 11}))
    assert "A_shared[" + ("2, " if pipeline else "") + "4, 36]" in str(k.program)


def matmul_vector_gemm(pipeline=False, order=True, fragments=True):
    """The GEMM of bench/schedules.py in small: 8x8 blocks, 4x4 register tiles
    (2x2 threads), K tiles of 8; A and B tiles fetched in 4-wide vectorized
    pieces (the A tile k-major, so its vector of 4 consecutive k is stored
    transposed, one element per row); per-k fragments of the tiles in
    registers, the contiguous dimension (m of A, n of B) vectorized."""
    s = tcomp.Schedule(MATMUL)
    C = s["C"]
    CL = s.cache_write(C, "local")
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, 8, 8)
    mio, mii = C.split(mi, 4)
    nio, nii = C.split(ni, 4)
    C.reorder(mo, no, mio, nio, mii, nii)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    C.unroll(mii)
    C.vectorize(nii)
    CL.compute_at(C, nio)
    lm, ln = CL.axes
    (lk,) = CL.reduce_axes
    ko, ki = CL.split(lk, 8)
    CL.reorder(ko, ki, lm, ln)
    CL.unroll(lm)
    CL.unroll(ln)
    for name in ("A", "B"):
        S = s.cache_read(name, "shared", [CL])
        S.compute_at(CL, ko)
        a0, a1 = S.axes
        if order and name == "A":
            S.storage_order(a1, a0)
        f = S.fuse(a0, a1)
        f, fv = S.split(f, 4)
        S.vectorize(fv)
        fo, fi = S.split(f, 2)
        S.bind(fi, "threadIdx.x")
        foo, foi = S.split(fo, 2)
        S.bind(foi, "threadIdx.y")
    if fragments:
        for name in ("A_shared", "B_shared"):
            L = s.cache_read(name, "local", [CL])
            L.compute_at(CL, ki)
            a0, a1 = L.axes
            c, o = (a0, a1) if name == "A_shared" else (a1, a0)
            co, cv = L.split(c, 4)
            L.reorder(o, co, cv)
            L.unroll(o)
            L.unroll(co)
            L.vectorize(cv)
    if pipeline:
        CL.pipeline(ko)
    return s


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
@pytest.mark.parametrize("which", BOTH)
def test_matmul_kmajor_vectorized_copies(which, pipeline):
    """Vectorized copies into a k-major tile, and (pipelined) the vectorized
    prefetch into registers followed by the transposing stores."""
    s = matmul_vector_gemm(pipeline=pipeline)
    k = check(s, sizes_of(which, {"M": 16, "N": 16, "K": 16}, {"M": 13, "N": 17, "K": 11}))
    text = str(k.program)
    assert "alloc shared float32 A_shared[" + ("2, " if pipeline else "") + "8, 8]" in text
    assert "@vectorize" in text


def test_matmul_kmajor_vectorized_copies_layout():
    """The k-major tile differs from the m-major one in A_shared's subscripts
    only, and so in which accesses of the vectorized loops around them are
    vectors (the vectorize pass's record); before flattening, the transposed
    store shows its swapped indices."""
    sizes = {"M": 16, "N": 16, "K": 16}
    for pipeline in (False, True):
        ordered = tcomp.lower(matmul_vector_gemm(pipeline=pipeline), sizes=sizes)
        plain = tcomp.lower(matmul_vector_gemm(pipeline=pipeline, order=False), sizes=sizes)
        # (the remarks say which vectorized loops got no vector: compared through the loops)
        a, b = ([x for x in str(p).splitlines() if "# remark:" not in x] for p in (ordered, plain))
        assert len(a) == len(b)
        diff = [(x, y) for x, y in zip(a, b) if x != y]
        vector_record = lambda x, y: (x.strip().startswith("for ") and  # noqa: E731
                                      x.split("@vectorize")[0] == y.split("@vectorize")[0])
        assert diff and all(("A_shared[" in x and "A_shared[" in y) or vector_record(x, y)
                            for x, y in diff), diff
    from tcomp.lower.pipeline import lower as lower_pipeline
    unflat = str(lower_pipeline(matmul_vector_gemm(), sizes, until="flatten_storage"))
    # the A tile element (m, k) lives at A_shared[k, m]: stores and loads agree
    store = next(line.strip() for line in unflat.splitlines()
                 if line.strip().startswith("A_shared[") and "= A[" in line)
    lhs, rhs = store.split(" = ")
    m_idx, k_idx = rhs[len("A["):-1].split(", ")
    assert lhs == f"A_shared[{k_idx.replace('k_o * 8 + ', '')}, " \
                  f"{m_idx.replace('m_o * 8 + ', '')}]", store


@pytest.mark.parametrize("which", BOTH)
def test_local_register_tile_storage_order(which):
    """A local-scope cache laid out transposed: the 2x4 register tile of
    cache_write stored n-major (C_local[4, 2]); the accumulation and the copy-out
    both index it as [n, m]."""
    s = matmul_3level(MATMUL, block=(8, 8), reg=(2, 4), kt=4)
    CL = s["C.local"]
    lm, ln = CL.axes
    CL.storage_order(ln, lm)
    k = check(s, sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 17, "K": 11}))
    text = str(k.program)
    assert "alloc local float32 C_local[4, 2]" in text


@pytest.mark.parametrize("which", BOTH)
def test_local_fragments_storage_order(which):
    """Per-thread local fragments of the shared tiles (two-level caching), each
    stored with its dimensions swapped, on top of a k-major A tile."""
    s = matmul_3level(MATMUL, block=(8, 8), reg=(2, 2), kt=4)
    _kmajor(s)
    CL = s["C.local"]
    ki = CL.leaf_axes[1]
    for t in ("A_shared", "B_shared"):
        X = s.cache_read(t, "local", [CL])
        X.compute_at(CL, ki)
        a0, a1 = X.axes
        X.storage_order(a1, a0)
    k = check(s, sizes_of(which, {"M": 16, "N": 16, "K": 8}, {"M": 13, "N": 11, "K": 7}))
    text = str(k.program)
    assert "alloc shared float32 A_shared[4, 8]" in text
    assert "alloc local float32 A_shared_local[1, 2]" in text
    assert "alloc local float32 B_shared_local[2, 1]" in text


@pytest.mark.parametrize("order", [("k", "i", "j"), ("j", "k", "i"), ("i", "j", "k")])
@pytest.mark.parametrize("which", BOTH)
def test_permute_3d_shared_tile_storage_order(which, order):
    """A 3-d shared tile (4 x 4 x K of A) in each of several dimension orders
    (the two cyclic rotations, and the identity)."""
    s = tcomp.Schedule(PERMUTE)
    O = s["O"]
    k, i, j = O.axes
    io, ii = O.split(i, 4)
    jo, ji = O.split(j, 4)
    O.reorder(io, jo, k, ii, ji)
    O.bind(io, "blockIdx.y")
    O.bind(jo, "blockIdx.x")
    O.bind(ii, "threadIdx.y")
    O.bind(ji, "threadIdx.x")
    AS = s.cache_read("A", "shared", [O])
    AS.compute_at(O, jo)
    axes = dict(zip("ijk", AS.axes))
    AS.storage_order(*[axes[d] for d in order])
    coop(AS, 4, 4)
    sz = sizes_of(which, {"I": 8, "J": 8, "K": 3}, {"I": 5, "J": 7, "K": 3})
    k = check(s, sz, build_sizes=sz)  # K bound: the tile's k extent is constant
    shape = dict(zip("ijk", (4, 4, 3)))
    assert (f"alloc shared float32 A_shared[{', '.join(str(shape[d]) for d in order)}]"
            in str(k.program))


def test_a_sibling_reading_through_an_inlined_copy_widens_the_region():
    """e computed at O's element loop, and sm (at the same loop) reading the whole
    row of e through an inlined cache of it: e's region there must cover sm's
    reads (it covered only O's element: a silent wrong answer, found by a random
    run of the property test)."""
    op = tcomp.op(ROW_SOFTMAX)
    s = tcomp.Schedule(op)
    s.cache_read("e", "shared", [s["sm"]])
    O = s["O"]
    s["sm"].compute_at(O, O.axes[1])
    s["e"].compute_at(O, O.axes[1])
    s["e.shared"].compute_inline()
    sizes = {"N": 2, "D": 5}
    assert "for e_d in 0:5" in str(tcomp.lower(s, sizes=sizes))  # the row, not one element
    run_sim(s, inputs_for(op, sizes, seed=3), sizes)


def test_a_sibling_whose_cache_reads_the_producer_gets_the_whole_tensor():
    """As above, sm reading e through a local cache computed at sm's loop: e's
    region at O's element loop is then not known from sm's own reads; the whole
    of e is computed there (correct, if redundant) instead of one element."""
    op = tcomp.op(ROW_SOFTMAX)
    s = tcomp.Schedule(op)
    el = s.cache_read("e", "local", [s["sm"]])
    O = s["O"]
    s["sm"].compute_at(O, O.axes[1])
    s["e"].compute_at(O, O.axes[1])
    el.compute_at(s["sm"], s["sm"].axes[0])
    for sizes in ({"N": 1, "D": 2}, {"N": 3, "D": 5}):
        run_sim(s, inputs_for(op, sizes, seed=4), sizes)


def test_a_memory_accumulation_inside_a_thread_loop_runs_in_one_thread():
    """expSum (its reduction loop outermost: it accumulates in expSum itself)
    computed at O's element loop bound to threadIdx.x: every thread would
    update expSum[n] at once (the sim reported the race; on a GPU, a wrong
    sum). Thread 0 of that loop computes it; the barrier after it publishes it
    (found by a random run of the property test)."""
    op = tcomp.op("""def softmax(float(N, D) I) -> (O, maxVal, expDistance, expSum) {
        maxVal(n) max=! I(n, d)
        expDistance(n, d) = exp(I(n, d) - maxVal(n))
        expSum(n) +=! expDistance(n, d)
        O(n, d) = expDistance(n, d) / expSum(n)
    }""")
    s = tcomp.Schedule(op)
    s["maxVal"].compute_at(s["expDistance"], s["expDistance"].axes[0])
    es = s["expSum"]
    n, d = es.leaf_axes
    es.reorder(d, n)
    O = s["O"]
    O.bind(O.axes[1], "threadIdx.x")
    es.compute_at(O, O.axes[1])
    sizes = {"N": 3, "D": 4}
    text = str(tcomp.lower(s, sizes=sizes))
    assert "if d == 0" in text
    run_sim(s, inputs_for(op, sizes, seed=5), sizes)


def test_a_global_copy_holding_shared_copies_inside_a_thread_loop_runs_in_every_thread():
    """A global copy computed at a thread-bound loop, with shared copies inside it
    (which get barriers): it is not narrowed to one thread (a barrier that only
    some threads reach; found by a random run of the property test)."""
    op = tcomp.op("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    s = tcomp.Schedule(op)
    C = s["C"]
    AG = s.cache_read("A", "global", [C])
    AS = s.cache_read("A", "shared", [AG])
    AS.compute_at(AG, AG.axes[0])
    AS1 = s.cache_read("A", "shared", [AS])
    C.bind(C.axes[1], "threadIdx.x")
    AS1.compute_at(AS, AS.axes[0])
    AG.compute_at(C, C.axes[1])
    sizes = {"M": 2, "K": 3, "N": 2}
    run_sim(s, inputs_for(op, sizes, seed=6), sizes)
