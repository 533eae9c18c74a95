"""A registry of small TC programs with random inputs and NumPy references.

Each `Case` holds TC source, `inputs(rng, big)` (random, never all-zero input
arrays; sizes are deliberately awkward: primes, odd extents) and `ref(*arrays)`,
a hand-written NumPy reference computed in float64 (or exact integers) that
returns the outputs in def order. `big=True` gives moderately larger sizes for
the programs with `has_big` (matmul, conv, pool: the chunked evaluation path).

Used by test_golden.py (printed form, round trips) and test_evaluate.py
(`tcomp.evaluate` against the reference).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

import tcomp

BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class Case:
    name: str
    src: str
    inputs: Callable[[np.random.Generator, bool], tuple]
    ref: Callable[..., object]
    # Tolerances for float outputs (one value, or one per output); half and
    # bfloat16 outputs get at least their own precision; integer and bool
    # outputs are always compared exactly.
    rtol: float | tuple[float, ...] = 1e-5
    atol: float | tuple[float, ...] = 1e-5
    # Multi-def sources: run(prog, *arrays) -> outputs compared with ref.
    run: Callable | None = None
    has_big: bool = False
    # Expected output dtypes (NumPy names), in def order, where they are part of the point.
    dtypes: tuple[str, ...] | None = None

    def tol(self, i: int) -> tuple[float, float]:
        pick = lambda t: t[i] if isinstance(t, tuple) else t  # noqa: E731
        return pick(self.rtol), pick(self.atol)

    def program(self) -> tcomp.Program:
        return tcomp.parse(self.src)

    def evaluate(self, *arrays):
        prog = self.program()
        if self.run is not None:
            return self.run(prog, *arrays)
        (op,) = prog
        return tcomp.evaluate(op, *arrays)


# ------------------------------------------------------------------ helpers
def _nonzero(a: np.ndarray) -> np.ndarray:
    if a.size and not np.any(a != 0):
        a.flat[0] = 1
    return a


def normal(rng, *shape, dtype=np.float32):
    return _nonzero(rng.standard_normal(shape).astype(dtype))


def uniform(rng, lo, hi, *shape, dtype=np.float32):
    return _nonzero(rng.uniform(lo, hi, shape).astype(dtype))


def away(rng, lo, hi, *shape, dtype=np.float32):
    """Uniform magnitude in [lo, hi) with a random sign (bounded away from 0)."""
    return (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)


def ints(rng, lo, hi, *shape, dtype=np.int32):
    """Integers in [lo, hi)."""
    return _nonzero(rng.integers(lo, hi, shape).astype(dtype))


def scalar(value, dtype=np.float32):
    return np.array(value, dtype)


def f64(*arrays):
    out = tuple(np.asarray(a).astype(np.float64) for a in arrays)
    return out[0] if len(out) == 1 else out


def conv2d_ref(I, W, stride=(1, 1), dilation=(1, 1)):
    """Valid (unpadded) NCHW cross-correlation, in float64."""
    I, W = f64(I, W)
    N, C, H, Wd = I.shape
    M, _, KH, KW = W.shape
    (sh, sw), (dh, dw) = stride, dilation
    OH = (H - dh * (KH - 1) - 1) // sh + 1
    OW = (Wd - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((N, M, OH, OW))
    for kh in range(KH):
        for kw in range(KW):
            patch = I[:, :, kh * dh: kh * dh + sh * (OH - 1) + 1: sh,
                      kw * dw: kw * dw + sw * (OW - 1) + 1: sw]
            out += np.einsum("nchw,mc->nmhw", patch, W[:, :, kh, kw])
    return out


CASES: list[Case] = []


def case(name, src, inputs, ref, **kw):
    CASES.append(Case(name, src, inputs, ref, **kw))


# ------------------------------------------------------------ linear algebra
case("matmul", """
def matmul(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) +=! A(m, r_k) * B(r_k, n)
}
""", lambda rng, big: (normal(rng, 257, 131) if big else normal(rng, 13, 7),
                       normal(rng, 131, 193) if big else normal(rng, 7, 11)),
     lambda A, B: f64(A) @ f64(B), rtol=1e-4, atol=1e-4, has_big=True)

case("batched_matmul", """
def batched_matmul(float(B, M, K) X, float(B, K, N) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
}
""", lambda rng, big: (normal(rng, 3, 5, 7), normal(rng, 3, 7, 4)),
     lambda X, Y: f64(X) @ f64(Y), rtol=1e-4, atol=1e-4)

case("matmul_nt", """
# C = A * B^T: the second operand is read transposed
def matmul_nt(float(M, K) A, float(N, K) B) -> (C) {
    C(m, n) +=! A(m, k) * B(n, k)
}
""", lambda rng, big: (normal(rng, 11, 17), normal(rng, 5, 17)),
     lambda A, B: f64(A) @ f64(B).T, rtol=1e-4, atol=1e-4)

case("tensordot", """
def tensordot(float(N, C1, C2, H, W) I0, float(N, C2, C3, H, W) I1) -> (O) {
    O(n, c1, c3, h, w) +=! I0(n, c1, c2, h, w) * I1(n, c2, c3, h, w)
}
""", lambda rng, big: (normal(rng, 2, 3, 5, 3, 7), normal(rng, 2, 5, 4, 3, 7)),
     lambda a, b: np.einsum("nabhw,nbchw->nachw", *f64(a, b)), rtol=1e-4, atol=1e-4)

case("matvec", """
def matvec(float(M, K) A, float(K) x) -> (y) {
    y(m) +=! A(m, k) * x(k)
}
""", lambda rng, big: (normal(rng, 19, 23), normal(rng, 23)),
     lambda A, x: f64(A) @ f64(x), rtol=1e-4, atol=1e-4)

case("outer", """
def outer(float(M) a, float(N) b) -> (O) {
    O(i, j) = a(i) * b(j)
}
""", lambda rng, big: (normal(rng, 7), normal(rng, 11)),
     lambda a, b: np.outer(*f64(a, b)))

case("transpose", """
def transpose(float(M, N) A) -> (O) {
    O(j, i) = A(i, j)
}
""", lambda rng, big: (normal(rng, 5, 9),), lambda A: f64(A).T)

case("permute3d", """
def permute3d(float(I, J, K) A) -> (O) {
    O(k, i, j) = A(i, j, k)
}
""", lambda rng, big: (normal(rng, 3, 5, 7),), lambda A: np.transpose(f64(A), (2, 0, 1)))

# ------------------------------------------------------------- convolutions
case("conv1d", """
def conv1d(float(N, C, L) I, float(F, C, K) W) -> (O) {
    O(n, f, x) +=! I(n, c, x + k) * W(f, c, k)
}
""", lambda rng, big: (normal(rng, 2, 3, 17), normal(rng, 5, 3, 4)),
     lambda I, W: conv2d_ref(I[:, :, None, :], W[:, :, None, :])[:, :, 0, :],
     rtol=1e-4, atol=1e-4)

case("conv2d_bias", """
def conv2d_bias(float(N, C, H, W) I, float(M, C, KH, KW) Wt, float(M) bias) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw)
    O(n, m, h, w) = O(n, m, h, w) + bias(m)
}
""", lambda rng, big: ((normal(rng, 4, 13, 37, 29), normal(rng, 17, 13, 3, 3), normal(rng, 17))
                       if big else
                       (normal(rng, 2, 3, 11, 9), normal(rng, 5, 3, 3, 2), normal(rng, 5))),
     lambda I, W, b: conv2d_ref(I, W) + f64(b)[None, :, None, None],
     rtol=1e-4, atol=1e-4, has_big=True)

case("conv2d_strided", """
def conv2d_strided(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
    O(n, m, h, w) +=! I(n, c, 2 * h + kh, 3 * w + kw) * Wt(m, c, kh, kw)
}
""", lambda rng, big: ((normal(rng, 3, 7, 41, 43), normal(rng, 11, 7, 3, 2)) if big else
                       (normal(rng, 2, 3, 13, 14), normal(rng, 4, 3, 3, 2))),
     lambda I, W: conv2d_ref(I, W, stride=(2, 3)), rtol=1e-4, atol=1e-4, has_big=True)

case("conv2d_dilated", """
def conv2d_dilated(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + 2 * r, w + 2 * s) * Wt(m, c, r, s)
}
""", lambda rng, big: (normal(rng, 2, 3, 11, 10), normal(rng, 4, 3, 3, 2)),
     lambda I, W: conv2d_ref(I, W, dilation=(2, 2)), rtol=1e-4, atol=1e-4)


def _grouped_ref(I, W):
    G, F, CG = W.shape[:3]
    return np.stack([conv2d_ref(I[:, g * CG:(g + 1) * CG], W[g]) for g in range(G)], axis=1)


case("conv2d_grouped", """
# channel g * CG + c of I belongs to group g: the subscript has a symbolic
# coefficient, so it does not constrain g (Wt does)
def conv2d_grouped(float(N, CI, H, W) I, float(G, F, CG, KH, KW) Wt) -> (O) {
    O(n, g, f, h, w) +=! I(n, g * CG + c, h + kh, w + kw) * Wt(g, f, c, kh, kw)
}
""", lambda rng, big: (normal(rng, 2, 6, 7, 9), normal(rng, 3, 2, 2, 3, 2)),
     _grouped_ref, rtol=1e-4, atol=1e-4)


def _padded_ref(I, W):
    KH, KW = W.shape[2:]
    P = np.pad(f64(I), ((0, 0), (0, 0), (KH // 2, KH - 1 - KH // 2), (KW // 2, KW - 1 - KW // 2)))
    return conv2d_ref(P, W)


case("conv2d_padded", """
# "same" padding: the guard keeps the read in bounds (the branch not taken is
# never evaluated); the where clause sets every range, since guarded reads
# still take part in range inference
def conv2d_padded(float(N, C, H, W) I, float(M, C, KH, KW) Wt) -> (O) {
    O(n, m, h, w) +=! (h + kh - KH / 2 >= 0 && h + kh - KH / 2 < H &&
                       w + kw - KW / 2 >= 0 && w + kw - KW / 2 < W)
        ? I(n, c, h + kh - KH / 2, w + kw - KW / 2) * Wt(m, c, kh, kw)
        : 0.0
        where h in 0:H, w in 0:W, kh in 0:KH, kw in 0:KW
}
""", lambda rng, big: ((normal(rng, 4, 8, 31, 29), normal(rng, 16, 8, 3, 4)) if big else
                       (normal(rng, 2, 3, 7, 6), normal(rng, 4, 3, 3, 4))),
     _padded_ref, rtol=1e-4, atol=1e-4, has_big=True)


def _depthwise_ref(I, W):
    C = W.shape[0]
    return np.concatenate([conv2d_ref(I[:, c:c + 1], W[c][None, None]) for c in range(C)], axis=1)


case("conv2d_depthwise", """
def conv2d_depthwise(float(N, C, H, W) I, float(C, KH, KW) Wt) -> (O) {
    O(n, c, h, w) +=! I(n, c, h + kh, w + kw) * Wt(c, kh, kw)
}
""", lambda rng, big: (normal(rng, 2, 5, 9, 8), normal(rng, 5, 3, 3)),
     _depthwise_ref, rtol=1e-4, atol=1e-4)

case("conv1d_causal", """
# Y(i) reads X(i - k): i starts at K - 1, so Y(0..K-2) keep the zero fill
def conv1d_causal(float(N) X, float(K) Wt) -> (Y) {
    Y(i) +=! X(i - k) * Wt(k)
}
""", lambda rng, big: (normal(rng, 13), normal(rng, 4)),
     lambda X, W: np.array([sum(f64(X)[i - k] * f64(W)[k] for k in range(len(W)))
                            if i >= len(W) - 1 else 0.0 for i in range(len(X))]),
     rtol=1e-5, atol=1e-5)

# ------------------------------------------------------------------ pooling
case("maxpool", """
def maxpool(float(N, C, H, W) I) -> (O) {
    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2
}
""", lambda rng, big: ((normal(rng, 16, 64, 67, 66),) if big else (normal(rng, 2, 3, 9, 8),)),
     lambda I: (lambda N, C, H, W: f64(I)[:, :, :H // 2 * 2, :W // 2 * 2]
                .reshape(N, C, H // 2, 2, W // 2, 2).max(axis=(3, 5)))(*I.shape),
     rtol=0, atol=0, has_big=True)


def _avgpool_ref(I):
    I = f64(I)
    N, C, H, W = I.shape
    OH, OW = (H - 3) // 2 + 1, (W - 3) // 2 + 1
    out = np.zeros((N, C, OH, OW))
    for kh in range(3):
        for kw in range(3):
            out += I[:, :, kh: kh + 2 * (OH - 1) + 1: 2, kw: kw + 2 * (OW - 1) + 1: 2]
    return out / 9


case("avgpool", """
def avgpool(float(N, C, H, W) I) -> (O) {
    O(n, c, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) / 9.0 where kh in 0:3, kw in 0:3
}
""", lambda rng, big: ((normal(rng, 16, 32, 71, 67),) if big else (normal(rng, 2, 3, 10, 11),)),
     _avgpool_ref, rtol=1e-5, atol=1e-5, has_big=True)

case("global_avgpool", """
def global_avgpool(float(N, C, H, W) I) -> (O) {
    O(n, c) +=! I(n, c, h, w) / (H * W)
}
""", lambda rng, big: (normal(rng, 2, 5, 7, 3),), lambda I: f64(I).mean(axis=(2, 3)))

# ---------------------------------------------------------- normalisations
def _softmax_ref(X):
    X = f64(X)
    mx = X.max(axis=1)
    ex = np.exp(X - mx[:, None])
    sm = ex.sum(axis=1)
    return ex / sm[:, None], mx, ex, sm


case("softmax", """
def softmax(float(N, D) X) -> (O, mx, ex, sm) {
    mx(n) max=! X(n, d)
    ex(n, d) = exp(X(n, d) - mx(n))
    sm(n) +=! ex(n, d)
    O(n, d) = ex(n, d) / sm(n)
}
""", lambda rng, big: (normal(rng, 7, 13) * 5,), _softmax_ref)


def _log_softmax_ref(X):
    X = f64(X)
    mx = X.max(axis=1)
    lse = np.log(np.exp(X - mx[:, None]).sum(axis=1)) + mx
    return X - lse[:, None], mx, lse


case("log_softmax", """
def log_softmax(float(N, D) X) -> (O, mx, lse) {
    mx(n) max=! X(n, d)
    lse(n) +=! exp(X(n, d) - mx(n))
    lse(n) = log(lse(n)) + mx(n)
    O(n, d) = X(n, d) - lse(n)
}
""", lambda rng, big: (normal(rng, 5, 11) * 4,), _log_softmax_ref)


def _layernorm_ref(X, g, b, eps):
    X, g, b, eps = f64(X, g, b, eps)
    mean = X.mean(axis=1)
    var = ((X - mean[:, None]) ** 2).mean(axis=1)
    Y = (X - mean[:, None]) / np.sqrt(var[:, None] + eps) * g + b
    return Y, mean, var


case("layernorm", """
def layernorm(float(N, D) X, float(D) gamma, float(D) beta, float eps) -> (Y, mean, var) {
    mean(n) +=! X(n, d) / D
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D
    Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + eps) * gamma(d) + beta(d)
}
""", lambda rng, big: (normal(rng, 5, 17) + 3, normal(rng, 17), normal(rng, 17), scalar(1e-5)),
     _layernorm_ref, rtol=1e-4, atol=1e-4)


def _batchnorm_ref(X, g, b):
    X, g, b = f64(X, g, b)
    mean = X.mean(axis=(0, 2, 3))
    var = ((X - mean[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))
    c = lambda v: v[None, :, None, None]  # noqa: E731
    Y = c(g) * (X - c(mean)) / np.sqrt(c(var) + np.float32(1e-5)) + c(b)
    return Y, mean, var


case("batchnorm", """
def batchnorm(float(N, C, H, W) X, float(C) gamma, float(C) beta) -> (Y, mean, var) {
    mean(c) +=! X(n, c, h, w)
    mean(c) = mean(c) / (N * H * W)
    var(c) +=! (X(n, c, h, w) - mean(c)) * (X(n, c, h, w) - mean(c))
    var(c) = var(c) / (N * H * W)
    Y(n, c, h, w) = gamma(c) * (X(n, c, h, w) - mean(c)) * rsqrt(var(c) + 1e-5) + beta(c)
}
""", lambda rng, big: (normal(rng, 3, 5, 7, 6) * 2 + 1, normal(rng, 5), normal(rng, 5)),
     _batchnorm_ref, rtol=1e-4, atol=1e-4)


def _rmsnorm_ref(X, g):
    X, g = f64(X, g)
    r = 1 / np.sqrt((X * X).mean(axis=1) + np.float32(1e-6))
    return X * r[:, None] * g, r


case("rmsnorm", """
def rmsnorm(float(N, D) X, float(D) g) -> (Y, r) {
    r(n) +=! X(n, d) * X(n, d)
    r(n) = rsqrt(r(n) / D + 1e-6)
    Y(n, d) = X(n, d) * r(n) * g(d)
}
""", lambda rng, big: (normal(rng, 6, 19), normal(rng, 19)), _rmsnorm_ref, rtol=1e-4, atol=1e-5)

# --------------------------------------------------------------- reductions
case("row_reduce", """
def row_reduce(float(M, N) A) -> (s, mx, mn, p) {
    s(i) +=! A(i, j)
    mx(i) max=! A(i, j)
    mn(i) min=! A(i, j)
    p(i) *=! A(i, j)
}
""", lambda rng, big: (away(rng, 0.5, 1.5, 7, 13),),
     lambda A: (f64(A).sum(1), f64(A).max(1), f64(A).min(1), f64(A).prod(1)), rtol=1e-5, atol=1e-5)

case("col_reduce", """
def col_reduce(float(M, N) A) -> (cs, cm) {
    cs(j) +=! A(i, j)
    cm(j) max=! A(i, j)
}
""", lambda rng, big: (normal(rng, 11, 6),), lambda A: (f64(A).sum(0), f64(A).max(0)))

case("full_reduce", """
def full_reduce(float(M, N) A) -> (s, m) {
    s() +=! A(i, j)
    m max=! A(i, j)
}
""", lambda rng, big: (normal(rng, 7, 5),),
     lambda A: (np.float64(f64(A).sum()), np.float64(f64(A).max())), dtypes=("float32", "float32"))

case("continue_reduce", """
# reductions without ! continue from the tensor's earlier value
def continue_reduce(float(M, N) A, float(M, K) B) -> (O, P) {
    O(i) +=! A(i, j)
    O(i) += B(i, k)
    P(i) max=! A(i, j)
    P(i) max= B(i, k)
    P(i) min= 0.5
}
""", lambda rng, big: (normal(rng, 5, 7), normal(rng, 5, 3)),
     lambda A, B: (f64(A).sum(1) + f64(B).sum(1),
                   np.minimum(np.maximum(f64(A).max(1), f64(B).max(1)), 0.5)))

# ----------------------------------------------------- elementwise builtins
case("math_exp_log", """
def math_exp_log(float(N) X, float(N) P) -> (E1, E2, L, S) {
    E1(i) = exp(X(i)) * exp2(X(i))
    E2(i) = exp10(X(i) / 4.0) - expm1(X(i))
    L(i) = log(P(i)) + log2(P(i)) * log10(P(i)) - log1p(P(i))
    S(i) = sqrt(P(i)) * rsqrt(P(i) + 1.0) + cbrt(X(i)) - rcbrt(P(i))
}
""", lambda rng, big: (uniform(rng, -3, 3, 29), uniform(rng, 0.1, 10, 29)),
     lambda X, P: (lambda X, P: (
         np.exp(X) * np.exp2(X), 10 ** (X / 4) - np.expm1(X),
         np.log(P) + np.log2(P) * np.log10(P) - np.log1p(P),
         np.sqrt(P) / np.sqrt(P + 1) + np.cbrt(X) - 1 / np.cbrt(P)))(*f64(X, P)),
     rtol=1e-5, atol=1e-5)

case("math_trig", """
def math_trig(float(N) X, float(N) U) -> (T1, T2, T3) {
    T1(i) = sin(X(i)) * cos(X(i)) + tan(X(i) / 3.0)
    T2(i) = asin(U(i)) + acos(U(i)) * atan(X(i))
    T3(i) = sinpi(X(i)) - cospi(X(i)) + atan2(U(i), X(i))
}
""", lambda rng, big: (np.concatenate([uniform(rng, -3, 3, 23),
                                       np.float32([0, 1, -1, 2, 0.5, -0.5, 1.5, 1001])]),
                       uniform(rng, -0.99, 0.99, 31)),
     lambda X, U: (lambda X, U: (
         # X / 3.0 is a float32 division: tan(1001 / 3) is sensitive to its rounding
         np.sin(X) * np.cos(X) + np.tan(f64(np.float32(X) / np.float32(3))),
         np.arcsin(U) + np.arccos(U) * np.arctan(X),
         np.sin(np.pi * np.fmod(X, 2)) - np.cos(np.pi * np.fmod(X, 2)) + np.arctan2(U, X)))(
         *f64(X, U)),
     rtol=1e-5, atol=2e-6)

case("math_hyperbolic", """
def math_hyperbolic(float(N) X, float(N) U, float(N) Q) -> (H1, H2) {
    H1(i) = tanh(X(i)) + sinh(X(i)) / cosh(X(i))
    H2(i) = asinh(X(i)) + acosh(Q(i)) - atanh(U(i))
}
""", lambda rng, big: (uniform(rng, -3, 3, 17), uniform(rng, -0.9, 0.9, 17),
                       uniform(rng, 1, 5, 17)),
     lambda X, U, Q: (lambda X, U, Q: (np.tanh(X) + np.sinh(X) / np.cosh(X),
                                       np.arcsinh(X) + np.arccosh(Q) - np.arctanh(U)))(
         *f64(X, U, Q)), rtol=1e-5, atol=1e-5)


def _special_ref(X, G):
    X, G = f64(X, G)
    v = np.vectorize
    erf, erfc = v(math.erf), v(math.erfc)
    return (erf(X) + erfc(X) * 0.5 * erfc(-X / math.sqrt(2)),
            v(math.lgamma)(G) + v(math.gamma)(G) / 10)


case("math_special", """
def math_special(float(N) X, float(N) G) -> (S1, S2) {
    S1(i) = erf(X(i)) + erfc(X(i)) * normcdf(X(i))
    S2(i) = lgamma(G(i)) + tgamma(G(i)) / 10.0
}
""", lambda rng, big: (uniform(rng, -3, 3, 19), uniform(rng, 0.3, 6, 19)), _special_ref,
     rtol=1e-5, atol=1e-5)

# Values where rounding functions are easy to get wrong in float32.
_ROUNDING_EDGES = np.float32([0.49999997, -0.49999997, 0.5, -0.5, 1.5, 2.5, -2.5, 8388609,
                              -8388609, 16777215, 4194303.5, 1e-40, -3e-45, 0.75, 1.0])


def _c_round(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)  # exact in float64 for float32 x


def _logb(x):
    return np.where(x == 0, -np.inf, np.frexp(x)[1] - 1.0)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


case("math_rounding", """
def math_rounding(float(N) R) -> (F, C, RD, T, A, LB, SG) {
    F(i) = floor(R(i))
    C(i) = ceil(R(i))
    RD(i) = round(R(i))
    T(i) = trunc(R(i))
    A(i) = fabs(R(i))
    LB(i) = logb(R(i))
    SG(i) = sigmoid(R(i) / 8.0)
}
""", lambda rng, big: (np.concatenate([ints(rng, -40, 40, 12).astype(np.float32) / 2,
                                       normal(rng, 12) * 50, _ROUNDING_EDGES]),),
     lambda R: (lambda R: (np.floor(R), np.ceil(R), _c_round(R), np.trunc(R), np.abs(R),
                           _logb(R), _sigmoid(R / 8)))(f64(R)),
     rtol=(0, 0, 0, 0, 0, 0, 1e-6), atol=(0, 0, 0, 0, 0, 0, 1e-7))  # all exact but sigmoid


def _binary_ref(X, Y, P):
    X32, Y32 = X, Y
    X, Y, P = f64(X, Y, P)
    return (np.fmax(X, Y) - np.fmin(X, Y) + np.maximum(X - Y, 0),
            P ** (X / 2) + X / P,
            np.fmod(X, Y),
            np.vectorize(math.remainder)(X, Y),
            np.nextafter(X32, Y32).astype(np.float64),
            np.copysign(P, Y) * np.hypot(X, Y) + 1 / np.hypot(X, Y))


case("math_binary", """
def math_binary(float(N) X, float(N) Y, float(N) P) -> (B1, B2, B3, B4, B5, B6) {
    B1(i) = fmax(X(i), Y(i)) - fmin(X(i), Y(i)) + fdim(X(i), Y(i))
    B2(i) = pow(P(i), X(i) / 2.0) + fdivide(X(i), P(i))
    B3(i) = fmod(X(i), Y(i))
    B4(i) = remainder(X(i), Y(i))
    B5(i) = nextafter(X(i), Y(i))
    B6(i) = copysign(P(i), Y(i)) * hypot(X(i), Y(i)) + rhypot(X(i), Y(i))
}
""", lambda rng, big: (uniform(rng, -9, 9, 31), away(rng, 0.5, 3, 31), uniform(rng, 0.2, 4, 31)),
     _binary_ref, rtol=2e-6, atol=2e-6)


def _multi_ref(X, Y, Z, W):
    X, Y, Z, W = f64(X, Y, Z, W)
    n3 = np.sqrt(X * X + Y * Y + Z * Z)
    n4 = np.sqrt(X * X + Y * Y + Z * Z + W * W)
    return (X * Y + Z + _sigmoid(W), n3 / n4, n4 - 1 / n3,
            np.maximum(X, Y) - np.minimum(Z, W) + np.abs(X))


case("math_multi", """
def math_multi(float(N) X, float(N) Y, float(N) Z, float(N) W) -> (M1, M2, M3, M4) {
    M1(i) = fma(X(i), Y(i), Z(i)) + sigmoid(W(i))
    M2(i) = norm3d(X(i), Y(i), Z(i)) * rnorm4d(X(i), Y(i), Z(i), W(i))
    M3(i) = norm4d(X(i), Y(i), Z(i), W(i)) - rnorm3d(X(i), Y(i), Z(i))
    M4(i) = max(X(i), Y(i)) - min(Z(i), W(i)) + abs(X(i))
}
""", lambda rng, big: tuple(away(rng, 0.3, 3, 23) for _ in range(4)), _multi_ref,
     rtol=1e-5, atol=1e-5)

case("gelu", """
def gelu(float(M, N) X) -> (Y) {
    Y(i, j) = 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        where x = X(i, j)
}
""", lambda rng, big: (normal(rng, 5, 7) * 3,),
     lambda X: (lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))(
         f64(X)), rtol=1e-5, atol=1e-5)

# ----------------------------------------------------- masks and attention
case("causal_mask", """
def causal_mask(float(T, T) A) -> (O) {
    O(i, j) = j <= i ? A(i, j) : -1e30
}
""", lambda rng, big: (normal(rng, 7, 7),),
     lambda A: np.where(np.tril(np.ones((len(A), len(A)), bool)), f64(A), -1e30))


def _attention_ref(Q, K, V):
    Q, K, V = f64(Q, K, V)
    T, D = Q.shape[1:]
    S = np.einsum("bid,bjd->bij", Q, K)
    causal = np.tril(np.ones((T, T), bool))
    S = np.where(causal, S / np.sqrt(D), -1e30)
    mx = S.max(axis=2)
    P = np.exp(S - mx[..., None])
    den = P.sum(axis=2)
    O = np.einsum("bij,bje->bie", P, V) / den[..., None]
    return O, S, mx, P, den


case("attention", """
def attention(float(B, T, D) Q, float(B, T, D) K, float(B, T, E) V) -> (O, S, mx, P, den) {
    S(b, i, j) +=! Q(b, i, d) * K(b, j, d)
    S(b, i, j) = j <= i ? S(b, i, j) / sqrt(float(D)) : -1e30  # causal mask
    mx(b, i) max=! S(b, i, j)
    P(b, i, j) = exp(S(b, i, j) - mx(b, i))
    den(b, i) +=! P(b, i, j)
    O(b, i, e) +=! P(b, i, j) * V(b, j, e) / den(b, i)
}
""", lambda rng, big: (normal(rng, 2, 7, 5), normal(rng, 2, 7, 5), normal(rng, 2, 7, 3)),
     _attention_ref, rtol=1e-4, atol=1e-5)

# ----------------------------------------------------------------- gathers
case("embedding", """
def embedding(float(V, D) E, int32(B, L) idx) -> (O) {
    O(b, l, d) = E(idx(b, l), d)
}
""", lambda rng, big: (normal(rng, 11, 5), ints(rng, 0, 11, 3, 4)),
     lambda E, idx: f64(E)[idx], rtol=0, atol=0)

case("argmax_argmin", """
def argmax_argmin(float(M, N) A) -> (mx, am, mn, an) {
    mx(i) max=! A(i, j)
    am(i) min=! A(i, j) == mx(i) ? j : N
    mn(i) min=! A(i, j)
    an(i) min=! A(i, j) == mn(i) ? j : N
}
""", lambda rng, big: (normal(rng, 6, 11),),
     lambda A: (f64(A).max(1), A.argmax(1), f64(A).min(1), A.argmin(1)),
     rtol=0, atol=0, dtypes=("float32", "int32", "float32", "int32"))

case("tuple_reductions", """
# argmax, Welford and expsum as tuple reductions (docs/language.md), not emulated
def tuple_reductions(float(M, N) A) -> (mx, ix, c, mu, m2, m, l) {
    mx(i), ix(i) argmax=! A(i, j), j
    c(i), mu(i), m2(i) welford=! A(i, j)
    m(i), l(i) expsum=! A(i, j)
}
""", lambda rng, big: (normal(rng, 6, 11),),
     lambda A: (f64(A).max(1), A.argmax(1), np.full(A.shape[0], A.shape[1], np.float64),
                f64(A).mean(1), ((f64(A) - f64(A).mean(1)[:, None]) ** 2).sum(1),
                f64(A).max(1), np.exp(f64(A) - f64(A).max(1)[:, None]).sum(1)),
     rtol=1e-5, atol=1e-5)

case("strided_reads", """
def strided_reads(float(N) B) -> (pair, rev, shift) {
    pair(i) = B(2 * i) + B(2 * i + 1)
    rev(i) = B(10 - i)      # i in max(0, 11 - N):11
    shift(i) = B(i - 3)     # i in 3:N + 3
}
""", lambda rng, big: (normal(rng, 7),),
     lambda B: (f64(B)[0:6:2] + f64(B)[1:7:2],
                np.array([B[10 - i] if 10 - i < len(B) else 0.0 for i in range(11)], np.float64),
                np.concatenate([np.zeros(3), f64(B)])))

# ---------------------------------------------------------------- integers
case("int8_matmul", """
# int8 operands promote to int32: no overflow at int8 width
def int8_matmul(int8(M, K) A, int8(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
""", lambda rng, big: (ints(rng, -128, 128, 5, 23, dtype=np.int8),
                       ints(rng, -128, 128, 23, 7, dtype=np.int8)),
     lambda A, B: A.astype(np.int64) @ B.astype(np.int64), dtypes=("int32",))


def _pydiv(a, b):
    return a // b  # Python floors: the reference for TC's integer / and %


case("int_divmod", """
def int_divmod(int8(N) A, int8(N) B) -> (Q, R, Z, M) {
    Q(i) = A(i) / B(i)
    R(i) = A(i) % B(i)
    Z(i) = -7 / B(i) + (-7) % B(i) * 100
    M(i) = max(A(i), B(i)) - min(A(i), B(i)) + abs(A(i))
}
""", lambda rng, big: (np.concatenate([ints(rng, -128, 128, 20, dtype=np.int8),
                                       np.int8([-128, -7, 7, -1, 0])]),
                       np.concatenate([away(rng, 1, 128, 20).astype(np.int8),
                                       np.int8([-1, 2, -2, -3, 5])])),
     lambda A, B: (lambda a, b: (
         np.array([x // y for x, y in zip(a, b)]), np.array([x % y for x, y in zip(a, b)]),
         np.array([-7 // y + (-7 % y) * 100 for y in b]),
         np.maximum(a, b) - np.minimum(a, b) + np.abs(a)))(
         [int(x) for x in A], [int(x) for x in B]),
     dtypes=("int32", "int32", "int32", "int32"))

case("uint8_ops", """
def uint8_ops(uint8(N) A, uint8(N) B) -> (S, D, uint8(N) M, W, T) {
    S(i) = A(i) + B(i)
    D(i) = A(i) - B(i)
    M(i) = uint8(max(A(i), B(i)))
    W(i) = uint8(A(i) + B(i))
    T max=! A(i)
}
""", lambda rng, big: tuple(ints(rng, 0, 256, 13, dtype=np.uint8) for _ in range(2)),
     lambda A, B: (lambda a, b: (a + b, a - b, np.maximum(a, b), (a + b) % 256, a.max()))(
         A.astype(np.int64), B.astype(np.int64)),
     dtypes=("int32", "int32", "uint8", "uint8", "uint8"))

case("mixed_int", """
# C promotion: int16 + uint32 -> uint32 (negative values wrap), uint32 + int64 -> int64
def mixed_int(int16(N) A, uint32(N) B, int64(N) C) -> (O, P, S) {
    O(i) = A(i) + B(i)
    P(i) = B(i) + C(i)
    S +=! C(i) * A(i)
}
""", lambda rng, big: (ints(rng, -1000, 1000, 11, dtype=np.int16),
                       ints(rng, 0, 5000, 11, dtype=np.uint32),
                       ints(rng, -2**40, 2**40, 11, dtype=np.int64)),
     lambda A, B, C: ((A.astype(np.int64) + B.astype(np.int64)) % 2**32,
                      B.astype(np.int64) + C, sum(int(c) * int(a) for a, c in zip(A, C))),
     dtypes=("uint32", "int64", "int64"))


def _bool_inputs(rng, big):
    A, B = normal(rng, 13), normal(rng, 13)
    mask = rng.random(13) < 0.5
    mask[0], mask[1] = True, False
    return A, B, mask


case("bool_ops", """
def bool_ops(float(N) A, float(N) B, bool(N) mask) -> (G, E, C, cnt, anyg) {
    G(i) = A(i) > B(i)
    E(i) = mask(i) && !G(i) || A(i) <= -1.0
    C(i) = float(mask(i)) * A(i)
    cnt +=! int32(mask(i))
    anyg max=! G(i) && mask(i)
}
""", _bool_inputs,
     lambda A, B, m: (A > B, (m & ~(A > B)) | (A <= -1), np.where(m, f64(A), 0.0), m.sum(),
                      np.any((A > B) & m)),
     dtypes=("bool", "bool", "float32", "int32", "bool"))

# ------------------------------------------------------ half and bfloat16
case("half_ops", """
def half_ops(half(M, N) A, half(M, N) B) -> (O, H, R, S) {
    O(i, j) = A(i, j) * B(i, j) + A(i, j)    # stays half
    H(i, j) = A(i, j) * half(0.5) - B(i, j)  # stays half
    R(i, j) = A(i, j) * 2.0                  # a float literal takes A's type: half
    S(i) +=! A(i, j)                         # half: accumulates in float32, stored as half
}
""", lambda rng, big: (normal(rng, 5, 9, dtype=np.float16), normal(rng, 5, 9, dtype=np.float16)),
     lambda A, B: (lambda A, B: (A * B + A, A * 0.5 - B, A * 2, A.sum(1)))(*f64(A, B)),
     rtol=1e-5, atol=1e-5, dtypes=("float16", "float16", "float16", "float16"))

case("half_matmul", """
def half_matmul(float16(M, K) A, float16(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
""", lambda rng, big: (normal(rng, 7, 29, dtype=np.float16), normal(rng, 29, 5, dtype=np.float16)),
     lambda A, B: f64(A) @ f64(B), rtol=1e-5, atol=1e-5, dtypes=("float16",))

case("bf16_ops", """
def bf16_ops(bfloat16(M, K) A, bfloat16(K, N) B, bfloat16(N) bias) -> (C, Y, Z, float(M, N) F) {
    C(m, n) +=! A(m, k) * B(k, n)            # accumulates in float32, stored as bfloat16
    Y(m, n) = C(m, n) + bias(n)              # reads the rounded C
    Z(n) = bias(n) * bias(n) - bias(n)
    F(m, n) +=! A(m, k) * B(k, n)            # a typed output keeps the float32 sum
}
""", lambda rng, big: (normal(rng, 5, 13, dtype=BF16), normal(rng, 13, 6, dtype=BF16),
                       normal(rng, 6, dtype=BF16)),
     lambda A, B, b: (lambda A, B, b: (A @ B, f64((A @ B).astype(BF16)) + b, b * b - b, A @ B))(
         *f64(A, B, b)),
     rtol=1e-5, atol=1e-5, dtypes=("bfloat16", "bfloat16", "bfloat16", "float32"))

case("typed_outputs", """
def typed_outputs(float(M, N) A, int32(M, N) I) -> (int32(M, N) O, half(M) H, double(M) D) {
    O(i, j) = int32(A(i, j) * 4.0) + I(i, j)
    H(i) +=! A(i, j)
    D(i) max=! A(i, j)
}
""", lambda rng, big: (normal(rng, 5, 7), ints(rng, -50, 50, 5, 7)),
     lambda A, I: (np.trunc(A * np.float32(4)).astype(np.int64) + I, f64(A).sum(1), f64(A).max(1)),
     dtypes=("int32", "float16", "float64"))

case("double_precision", """
# float64 arithmetic; the literal 0.1 meets a double: the double nearest 0.1
def double_precision(double(N) A, float(N) B) -> (O, S) {
    O(i) = A(i) * B(i) + 0.1
    S +=! A(i) * A(i)
}
""", lambda rng, big: (normal(rng, 17, dtype=np.float64), normal(rng, 17)),
     lambda A, B: (A * f64(B) + 0.1, (A * A).sum()),
     rtol=1e-13, atol=1e-13, dtypes=("float64", "float64"))

case("casts", """
def casts(float(N) A, float(N) B) -> (F, I, D, H, U) {
    F(i) = float(A(i) <= B(i))
    I(i) = int32(A(i) * 10.0)
    D(i) = double(A(i)) * 2
    H(i) = half(A(i))
    U(i) = int32(bool(I(i)))
}
""", lambda rng, big: (normal(rng, 19), normal(rng, 19)),
     lambda A, B: (lambda t: ((A <= B).astype(np.float64), t, f64(A) * 2, f64(A), (t != 0) * 1))(
         np.trunc(A * np.float32(10)).astype(np.int64)),
     dtypes=("float32", "int32", "float64", "float16", "int32"))

# ------------------------------------------------------- language features
case("scalars", """
def scalars(float alpha, float(N) X, float beta, float(N) Y) -> (Z) {
    Z(i) = alpha * X(i) + beta() * Y(i)
}
""", lambda rng, big: (scalar(rng.uniform(0.5, 2)), normal(rng, 9), scalar(rng.uniform(-2, -0.5)),
                       normal(rng, 9)),
     lambda a, X, b, Y: f64(a) * f64(X) + f64(b) * f64(Y))

case("no_inputs", """
def no_inputs() -> (O, S) {
    O(i) = float(i) * 0.5 where i in 0:8
    S(i, j) = i * 8 + j where i in 0:3, j in 0:8
}
""", lambda rng, big: (), lambda: (np.arange(8) * 0.5, np.arange(24).reshape(3, 8)),
     dtypes=("float32", "int32"))


def _mlp_run(prog, X, W, b):
    Y = tcomp.evaluate(prog["linear"], X, W, b)
    return Y, tcomp.evaluate(prog["relu"], Y)


def _mlp_ref(X, W, b):
    Y = f64(X) @ f64(W).T + f64(b)
    return Y, np.maximum(Y, 0)


case("mlp_two_defs", """
def linear(float(B, I) X, float(O, I) W, float(O) b) -> (Y) {
    Y(n, o) +=! X(n, i) * W(o, i)
    Y(n, o) = Y(n, o) + b(o)
}

def relu(float(B, O) X) -> (Y) {
    Y(n, o) = fmax(X(n, o), 0.0)
}
""", lambda rng, big: (normal(rng, 5, 7), normal(rng, 3, 7), normal(rng, 3)), _mlp_ref,
     run=_mlp_run, rtol=1e-4, atol=1e-4)

case("size_var_expr", """
def size_var_expr(float(N) A) -> (mean, O, H) {
    mean +=! A(i) / N
    O(i) = A(i) - mean + float(N - i) / N
    H(i) = A(N - 1 - i) * float(i / 2) where i in 0:N / 2 + 1
}
""", lambda rng, big: (normal(rng, 11),),
     lambda A: (lambda A, N: (np.float64(A.mean()), A - A.mean() + (N - np.arange(N)) / N,
                              np.array([A[N - 1 - i] * (i // 2) for i in range(N // 2 + 1)])))(
         f64(A), len(A)))

case("let_bindings", """
def let_bindings(float(M, N) A, float(N) B) -> (O, R) {
    O(i, j) = d * d + s where d = A(i, j) - B(j), s = d / 2.0
    R(i, j) = A(i, jj) where jj = N - 1 - j
}
""", lambda rng, big: (normal(rng, 3, 7), normal(rng, 7)),
     lambda A, B: (lambda d: (d * d + d / 2, f64(A)[:, ::-1]))(f64(A) - f64(B)))

case("where_exists", """
def where_exists(float(N) A, float c) -> (B, C) {
    B(i) = c where exists A(i)
    C(i, j) = float(i) - float(j) where exists A(i), exists A(j)
}
""", lambda rng, big: (normal(rng, 5), scalar(rng.uniform(1, 2))),
     lambda A, c: (np.full(len(A), float(c)),
                   np.subtract.outer(np.arange(len(A)), np.arange(len(A)))))

case("comments", """
# a comment before the def
def comments(float(N) A, float(N) B) -> (O) {  # after the header
    # before a statement
    O(i) = A(i)   # first term
         * B(i)   # times the second
         +        # plus
         1.0      # one
}  # after the def
""", lambda rng, big: (normal(rng, 7), normal(rng, 7)), lambda A, B: f64(A) * f64(B) + 1)

case("equivalent", """
def equivalent(float(M, K) A, float(K, N) B) -> (C, D) {
    C(m, n) +=! A(m, k) * B(k, n) <=> matmul(A(m, k), B(k, n))
    D(m, n) = C(m, n) * 2.0 where m in 0:M, n in 0:N <=> scale(C(m, n))
}
""", lambda rng, big: (normal(rng, 3, 5), normal(rng, 5, 4)),
     lambda A, B: (f64(A) @ f64(B), 2 * f64(A) @ f64(B)), rtol=1e-5, atol=1e-5)

case("nested_ternary", """
def nested_ternary(float(N) A, float(N) B) -> (O, P) {
    O(i) = A(i) < -1.0 ? -1.0 : A(i) > 1.0 ? 1.0 : A(i)
    P(i) = A(i) > 0.0 ? (B(i) > 0.0 ? 1 : 2) : B(i) > 0.0 ? 3 : 4
}
""", lambda rng, big: (normal(rng, 17) * 2, normal(rng, 17)),
     lambda A, B: (np.clip(f64(A), -1, 1),
                   np.where(A > 0, np.where(B > 0, 1, 2), np.where(B > 0, 3, 4))),
     dtypes=("float32", "int32"))

# ------------------------------------------------------------ in-place updates
# A statement's right-hand side sees the tensor as it was before the statement.
# The references loop over the points in float64 and read only `old`.
def _inplace_shift_ref(A):
    old = f64(A).copy()
    new = old.copy()
    for i in range(1, len(A)):
        new[i] = old[i] + old[i - 1]
    return new


case("inplace_shift", """
# each element plus its old left neighbour (not a prefix sum)
def inplace_shift(float(N) A) -> (O) {
    O(i) = A(i)
    O(i) = O(i) + O(i - 1) where i in 1:N
}
""", lambda rng, big: (normal(rng, 13),), _inplace_shift_ref)


def _inplace_diag_ref(A):
    M, N = A.shape
    old = f64(A).copy()
    new = old.copy()
    for i in range(1, M):
        for j in range(N - 1):
            new[i, j] = old[i - 1, j + 1] - old[i, j]
    return new * new + 1.0


case("inplace_diag", """
def inplace_diag(float(M, N) A) -> (O) {
    O(i, j) = A(i, j)
    O(i, j) = O(i - 1, j + 1) - O(i, j) where i in 1:M, j in 0:N - 1
    O(i, j) = O(i, j) * O(i, j) + 1.0 where i in 0:M, j in 0:N
}
""", lambda rng, big: (normal(rng, 5, 7),), _inplace_diag_ref, rtol=1e-5, atol=1e-5)


def _inplace_reduce_ref(A):
    M, N = A.shape
    A = f64(A)
    old = A[:, 0].copy()
    new = old.copy()
    for i in range(M):
        for j in range(N):
            new[i] += old[i] * A[i, j]
    return new


case("inplace_reduce", """
# a continuing reduction that reads its own tensor: every term sees the old O(i)
def inplace_reduce(float(M, N) A) -> (O) {
    O(i) = A(i, 0)
    O(i) += O(i) * A(i, j)
}
""", lambda rng, big: (normal(rng, 6, 9),), _inplace_reduce_ref, rtol=1e-5, atol=1e-5)


def _inplace_init_ref(A):
    M, N = A.shape
    A = f64(A)
    old = A[:, 0].copy()
    new = np.zeros(M)
    for i in range(M):
        for j in range(N):
            new[i] += (old[i + 1] if i + 1 < M else 1.0) * A[i, j]
    return new


case("inplace_init", """
# `+=!` starts O(i) from 0, but the terms read the old O(i + 1)
def inplace_init(float(M, N) A) -> (O) {
    O(i) = A(i, 0)
    O(i) +=! (i + 1 < M ? O(i + 1) : 1.0) * A(i, j) where i in 0:M
}
""", lambda rng, big: (normal(rng, 7, 5),), _inplace_init_ref, rtol=1e-5, atol=1e-5)

BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "duplicate case names"
