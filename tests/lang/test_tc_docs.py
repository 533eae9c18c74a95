"""The programs of the Tensor Comprehensions documentation and examples, verbatim.

Each source below is copied byte for byte (indentation included) from the
TensorComprehensions repository at 680f8c9d (file and lines in each comment).
Template placeholders (`${sh}`, `<sH>`, `<kH>`, ...) are substituted with small
integers by `fill`, as TC's C++/Python wrappers do. Sources that TC itself
cannot parse are kept verbatim too, shown to fail, and then fixed minimally
(each fix is named in a comment). Every program that TC accepts parses here
and evaluates to the answer of a float64 NumPy reference.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import tcomp

from .programs import conv2d_ref, f64


def fill(src: str, **values) -> str:
    for k, v in values.items():
        src = src.replace("${" + k + "}", str(v)).replace("<" + k + ">", str(v))
    assert "${" not in src and "<s" not in src and "<k" not in src, src
    return src


@pytest.fixture
def rng():
    seed = int(os.environ.get("SEED") or np.random.SeedSequence().entropy)
    print(f"seed {seed}")  # shown with a failure's captured output
    return np.random.default_rng(seed)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(got, want, rtol=1e-4, atol=1e-4):
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


# 3.1 docs/source/inference.rst (lines 21-23)
MATMUL = """
    def matmul(float(M, K) A, float(K, N) B) -> (C) {
        C(m, n) +=! A(m, r_k) * B(r_k, n)
    }
"""

# 3.2 docs/source/introduction.rst (lines 85-87)
MV = """
    def mv(float(R,C) A, float(C) x) -> (o) {
        o(r) +=! A(r,r_c) * x(r_c)
    }
"""

# 3.3 docs/source/introduction.rst (lines 94-96)
CONV = """
    def conv(float(B,IP,H,W) input, float(OP,IP,KH,KW) weight) -> (output) {
        output(b, op, h, w) +=! input(b, r_ip, h + r_kh, w + r_kw) * weight(op, r_ip, r_kh, r_kw)
    }
"""

# 3.4 docs/source/introduction.rst (lines 105-108): a parse error in TC too (`0..2`)
MAXPOOL_VERBATIM = """
    def maxpool2x2(float(B,C,H,W) input) -> (output) {
        output(b,c,h,w) max=! input(b,c,2*h + r_kw, 2*w + r_kh)
            where r_kw in 0:2, r_kh in 0..2
    }
"""
# Fixed: `0..2` -> `0:2` (the intended range).
MAXPOOL = MAXPOOL_VERBATIM.replace("0..2", "0:2")

# 3.5 tc/library/convolution.h (lines 27-30), template ${sh} ${sw}
CONVOLUTION_STRIDED = """
  def convolution(float(N,C,H,W) I, float(M,C,KH,KW) W1, float(M) B) -> (O) {
    O(n, m, h, w) +=! I(n, c, ${sh} * h + kh, ${sw} * w + kw) * W1(m, c, kh, kw)
    O(n, m, h, w) = O(n, m, h, w) + B(m)
  }
"""

# 3.6 docs/source/framework/pytorch_integration/writing_layers.rst (lines 171-174)
AVGPOOL = """
        def avgpool(float(B, C, H, W) input) -> (output) {
            output(b, c, h, w) +=! input(b, c, h * <sH> + r_kh, w * <sW> + r_kw) / (<kH> * <kW>)
                where r_kh in 0:<kH>, r_kw in 0:<kW>
        }
"""

# 3.7 tc/library/group_convolution.h (lines 27-33), template <sh> <sw>
GROUP_CONVOLUTION = """
  def group_convolution(float(N,G,C,H,W) I, float(G,F,C,KH,KW) W1, float(G,F) B)
  -> (O)
  {
    O(n, g, f, h, w) +=!
      I(n, g, c, <sh> * h + kh, <sw> * w + kw) * W1(g, f, c, kh, kw)
    O(n, g, f, h, w) = O(n, g, f, h, w) + B(g, f)
  }
"""

# 3.8 tc/library/fcrelu.h (lines 23-27)
FCRELU = """
  def func_fcrelu(float(B,M) I, float(N,M) W1, float(N) B1) -> (O1) {
    O1(b, n) +=! I(b, m) * W1(n, m)
    O1(b, n) = O1(b, n) + B1(n)
    O1(b, n) = fmax(O1(b, n), 0)
  }
"""

# 3.9 README.md (lines 17-19)
TENSORDOT = """
def tensordot(float(N, C1, C2, H, W) I0, float(N, C2, C3, H, W) I1) -> (O) {
    O(n, c1, c3, h, w) +=! I0(n, c1, c2, h, w) * I1(n, c2, c3, h, w)
}
"""

# 3.10 docs/source/ml_with_tc.rst (lines 46-49)
SOFTMAX = """
    def softmax(float(N, D) I) -> (O, expsum) {
        expsum(n) +=! exp(I(n, d))
           O(n, d) =  exp(I(n, d)) / expsum(n)
    }
"""

# 3.11 docs/source/framework/pytorch_integration/frequently_asked_questions.rst (lines 35-40)
SOFTMAX_STABLE = """
    def softmax(float(N, D) I) -> (O, maxVal, expDistance, expSum) {
        maxVal(n) max=! I(n, d)
        expDistance(n, d) = exp(I(n, d) - maxVal(n))
        expSum(n) +=! expDistance(n, d)
        O(n, d) = expDistance(n, d) / expSum(n)
    }
"""

# 3.12 tc/library/batchnorm.h (lines 23-38; the C++ raw-string terminator dropped)
BATCHNORM = """
   def spatialBatchNorm(
     float momentum, float eps,
     float(N,C,H,W) I, float(C) rMeanIn, float(C) rVarIn)
   -> (O, rMeanOut, rVarOut, mean, centered, variance, expectedVariance, normalizedOut)
   {
      mean(c) +=! I(nn, c, hh, ww)
      mean(c)  = mean(c) / (N * H * W)
      rMeanOut(c) = (1 - momentum) * rMeanIn(c) + momentum * mean(c)
      centered(n, c, h, w) = I(n, c, h, w) - rMeanOut(c)
      variance(n, c, h, w) = centered(n, c, h, w) * centered(n, c, h, w)
      expectedVariance(c) +=! (variance(n, c, h, w) + eps) / (N * H * W)
      rVarOut(c) = rsqrt(
        (1 - momentum) * rVarIn(c) + momentum * expectedVariance(c))
      O(n, c, h, w) = centered(n, c, h, w) * rVarOut(c)
      normalizedOut(n, c, h, w) = O(n, c, h, w)
   }
"""

# 3.13 test/cuda/test_autotuner.cc (lines 92-99)
LAYERNORM = """
def layernorm(float(T, B, C) I) -> (O, mean, centered, var) {
        mean(t, b)    +=! I(t, b, c) / C
    centered(t, b, c)  = I(t, b, c) - mean(t, b)

    var(t, b)   +=! centered(t, b, c) * centered(t, b, c)
    var(t, b)    =       var(t, b) / C
      O(t, b, c) =  centered(t, b, c) / rsqrt(var(t, b))
}
"""

# 3.14 python/tests/test_tc.py (lines 217-233)
MOMENTS_GROUP_NORM = """
            def moments(float(N, K) I) -> (mean, var) {
                # var = E(x^2) - mean^2.
                mean(n) +=! I(n, r_k)
                 var(n) +=! I(n, r_k) * I(n, r_k)
                mean(n)  = mean(n) / (K)
                 var(n)  =  var(n) / (K) - mean(n) * mean(n)
            }

            def group_normalization(
                float(N, G, D, H, W) I, float(G, D) gamma, float(G, D) beta,
                float(N, G) mean, float(N, G) var) -> (O)
            {
                O(n, g, d, h, w) = gamma(g, d)
                    * ( I(n, g, d, h, w) - mean(n, g) )
                    * rsqrt( var(n, g) + 1e-5 )
                    + beta(g, d)
            }
"""

# 3.15 tc/library/lut.h (lines 23-25)
LUT = """
   def lut(float(E, D) LUT, int32(B, L) I) -> (O) {
     O(i, j) +=! LUT(I(i, k), j)
   }
"""

# 3.16 docs/source/inference.rst (lines 139-141): a parse error in TC (`-> A`), and
# with `-> (A)` a semantic error in TC (C is float, so C(i) cannot be a subscript)
LUT_CLAMPED_VERBATIM = """
    def lut(float(J) B, float(I) C) -> A {
      A(i) = B(max(min(C(i), J-1), 0))
    }
"""
LUT_CLAMPED = LUT_CLAMPED_VERBATIM.replace("-> A {", "-> (A) {")  # fixed: parenthesised outputs

# 3.17 docs/source/inference.rst (lines 230-232): a parse error in TC (`-> A`), and
# with `-> (A)` a semantic error in TC (`=` with the reduction index k)
AVERAGE_POOL_2_VERBATIM = """
    def average_pool_2(float(I) B) -> A {
      A(i) = B(2*i + k) where k in 0:2
    }
"""
AVERAGE_POOL_2 = AVERAGE_POOL_2_VERBATIM.replace("-> A {", "-> (A) {")  # fixed: parentheses

# 3.18 docs/source/inference.rst (lines 280-282): a parse error in TC (`-> B`)
CONSTANT_FILL_VERBATIM = """
    def constant_fill(float(N) A, float c) -> B {
      B(i) = c where exists A(i)
    }
"""
CONSTANT_FILL = CONSTANT_FILL_VERBATIM.replace("-> B {", "-> (B) {")  # fixed: parentheses

# 3.19 python/examples/masked_conv.py (lines 68-75)
MASKED_CONV = """
def masked_convolve(float(B, C, H, W) Input,
                    float(F, C, K, K) Weights,
                    uint8(F, C) Mask) -> (Output) {
    Output(b, f, h, w) +=! (Mask(f, r_c) == 1) ?
        fmax(0.0, Input(b, r_c, h + r_k1, w + r_k2)) *
        Weights(f, r_c, r_k1, r_k2) :
        0.0
}
"""

# 3.20 python/examples/min_distance.py (lines 52-57)
MIN_ARGMIN = """
def min_2d(float(N) S) -> (v) {
    v min=! S(r_n)
}
def argmin_2d(float(N) S, float v) -> (min_idx) {
    min_idx min=! (S(r_n) == v) ? r_n : N
}
"""

# 3.21 python/examples/min_distance.py (lines 40-44)
MINDIS = """
def mindis(float(M, 256) L, uint8(N, M) Codes) -> (S, v, min_idx) {
          S(n) +=! L(r_m, int32(Codes(n, r_m)))
          v  min=! S(r_n)
    min_idx  min=! (S(r_n) == v) ? r_n : N
}
"""

# 3.22 python/examples/tum.py (lines 116-118)
MAKE_IDX = """
def make_idx(int32(K) Segments) -> (Idx) {
    Idx(k) +=! (r_k < k) ? Segments(r_k) : 0 where k in 0:K+1
}
"""

# 3.23 tc/examples/blockdiagperm.cc (lines 77-79)
BLOCKDIAGPERM = """
def blockdiagperm2dfissioned_2(float(B, N) I, int32(N) Idx) -> (O) {
    O(b, n) = I(b, Idx(n)) where n in 0:N
}
"""

# 3.24 docs/source/framework/pytorch_integration/autograd_with_tc.rst (lines 11-25)
CONV_GRADS = """
        def convolution(float(N,C,H,W) I, float(M,C,KH,KW) W1) -> (O) {
            O(n, m, h, w) +=!
                I(n, r_c, h + r_kh, w + r_kw) * W1(m, r_c, r_kh, r_kw)
        }
        def convolution_igrad(float(M,C,KH,KW) W1, float(N,M,H,W) d_O)
            -> (d_I)
        {
            d_I(n, c, h, w) +=!
                d_O(  n, r_m, h - r_kh, w - r_kw) * W1(r_m, c, r_kh, r_kw)
        }
        def convolution_wgrad(float(N,C,H,W) I, float(N,M,H,W) d_O) -> (d_W1)
        {
            d_W1(m, c, kh, kw) +=!
                d_O(r_n,   m, r_h - kh, r_w - kw) *  I(r_n, c,  r_h,  r_w)
        }
"""

# 3.25 docs/source/framework/pytorch_integration/writing_layers.rst (lines 195-197)
RELU = """
        def relu(float(B,M) I) -> (O) {
            O(b, m) = fmax(I(b, m), 0)
        }
"""

ACCEPTED_BY_TC = {
    "matmul": MATMUL, "mv": MV, "conv": CONV, "maxpool_fixed": MAXPOOL,
    "convolution_strided": fill(CONVOLUTION_STRIDED, sh=2, sw=3),
    "avgpool": fill(AVGPOOL, sH=2, sW=1, kH=3, kW=2),
    "group_convolution": fill(GROUP_CONVOLUTION, sh=1, sw=2), "fcrelu": FCRELU,
    "tensordot": TENSORDOT, "softmax": SOFTMAX, "softmax_stable": SOFTMAX_STABLE,
    "batchnorm": BATCHNORM, "layernorm": LAYERNORM, "moments_group_norm": MOMENTS_GROUP_NORM,
    "lut": LUT, "constant_fill_fixed": CONSTANT_FILL, "masked_conv": MASKED_CONV,
    "min_argmin": MIN_ARGMIN, "mindis": MINDIS, "make_idx": MAKE_IDX,
    "blockdiagperm": BLOCKDIAGPERM, "conv_grads": CONV_GRADS, "relu": RELU,
}


@pytest.mark.parametrize("name", list(ACCEPTED_BY_TC))
def test_parses_and_prints_back(name):
    prog = tcomp.parse(ACCEPTED_BY_TC[name])
    assert len(prog) >= 1
    assert str(tcomp.parse(str(prog))) == str(prog)


@pytest.mark.parametrize("src", [MAXPOOL_VERBATIM, LUT_CLAMPED_VERBATIM, AVERAGE_POOL_2_VERBATIM,
                                 CONSTANT_FILL_VERBATIM],
                         ids=["maxpool_dotdot", "lut_arrow", "average_pool_2_arrow",
                              "constant_fill_arrow"])
def test_tc_parse_errors_are_parse_errors_here_too(src):
    with pytest.raises(tcomp.LangError) as e:
        tcomp.lang.parse_module(src)
    assert e.value.line is not None


def test_lut_with_float_subscript_is_rejected_as_in_tc():
    with pytest.raises(tcomp.LangError, match="integer"):
        tcomp.parse(LUT_CLAMPED)


def test_average_pool_with_reduction_in_plain_assignment_is_rejected_as_in_tc():
    with pytest.raises(tcomp.LangError, match="'k'"):
        tcomp.parse(AVERAGE_POOL_2)


# ------------------------------------------------------------ evaluation
def test_matmul(rng):
    A, B = randn(rng, 7, 13), randn(rng, 13, 5)
    close(tcomp.evaluate(tcomp.op(MATMUL), A, B), f64(A) @ f64(B))


def test_mv(rng):
    A, x = randn(rng, 11, 7), randn(rng, 7)
    close(tcomp.evaluate(tcomp.op(MV), A, x), f64(A) @ f64(x))


def test_conv(rng):
    I, W = randn(rng, 2, 3, 9, 8), randn(rng, 5, 3, 3, 2)
    close(tcomp.evaluate(tcomp.op(CONV), I, W), conv2d_ref(I, W))


def test_maxpool_fixed(rng):
    I = randn(rng, 2, 3, 7, 9)
    got = tcomp.evaluate(tcomp.op(MAXPOOL), I)
    # r_kw walks h and r_kh walks w (names swapped in the original; harmless).
    want = f64(I)[:, :, :6, :8].reshape(2, 3, 3, 2, 4, 2).max(axis=(3, 5))
    close(got, want, rtol=0, atol=0)


def test_convolution_strided(rng):
    I, W, B = randn(rng, 2, 3, 11, 13), randn(rng, 4, 3, 3, 2), randn(rng, 4)
    got = tcomp.evaluate(tcomp.op(fill(CONVOLUTION_STRIDED, sh=2, sw=3)), I, W, B)
    close(got, conv2d_ref(I, W, stride=(2, 3)) + f64(B)[None, :, None, None])


def test_avgpool(rng):
    I = randn(rng, 2, 3, 9, 7)
    got = tcomp.evaluate(tcomp.op(fill(AVGPOOL, sH=2, sW=1, kH=3, kW=2)), I)
    want = conv2d_ref(I.reshape(6, 1, 9, 7), np.ones((1, 1, 3, 2)), stride=(2, 1)) / 6
    close(got, want.reshape(2, 3, *want.shape[2:]), rtol=1e-5, atol=1e-5)


def test_group_convolution(rng):
    I, W, B = randn(rng, 2, 3, 2, 7, 9), randn(rng, 3, 4, 2, 3, 3), randn(rng, 3, 4)
    got = tcomp.evaluate(tcomp.op(fill(GROUP_CONVOLUTION, sh=1, sw=2)), I, W, B)
    want = np.stack([conv2d_ref(I[:, g], W[g], stride=(1, 2)) for g in range(3)], axis=1)
    close(got, want + f64(B)[None, :, :, None, None])


def test_fcrelu(rng):
    I, W, B = randn(rng, 5, 7), randn(rng, 3, 7), randn(rng, 3)
    close(tcomp.evaluate(tcomp.op(FCRELU), I, W, B), np.maximum(f64(I) @ f64(W).T + f64(B), 0))


def test_tensordot(rng):
    a, b = randn(rng, 2, 3, 4, 2, 5), randn(rng, 2, 4, 3, 2, 5)
    close(tcomp.evaluate(tcomp.op(TENSORDOT), a, b), np.einsum("nabhw,nbchw->nachw", *f64(a, b)))


def test_softmax(rng):
    I = randn(rng, 5, 7)
    O, expsum = tcomp.evaluate(tcomp.op(SOFTMAX), I)
    e = np.exp(f64(I))
    close(expsum, e.sum(1))
    close(O, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_softmax_stable(rng):
    I = randn(rng, 5, 7) * 10
    O, mx, ed, es = tcomp.evaluate(tcomp.op(SOFTMAX_STABLE), I)
    x = f64(I)
    e = np.exp(x - x.max(1, keepdims=True))
    close(mx, x.max(1), rtol=0, atol=0)
    close(ed, e, rtol=1e-5, atol=1e-6)
    close(es, e.sum(1))
    close(O, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_batchnorm(rng):
    momentum, eps = np.float32(0.1), np.float32(1e-5)
    I, rm, rv = randn(rng, 3, 4, 5, 6) + 1, randn(rng, 4), rng.uniform(0.5, 2, 4).astype(np.float32)
    got = tcomp.evaluate(tcomp.op(BATCHNORM), momentum, eps, I, rm, rv)
    x, m, e = f64(I), float(momentum), float(eps)
    mean = x.mean(axis=(0, 2, 3))
    rmo = (1 - m) * f64(rm) + m * mean
    centered = x - rmo[None, :, None, None]
    variance = centered ** 2
    ev = (variance + e).mean(axis=(0, 2, 3))
    rvo = 1 / np.sqrt((1 - m) * f64(rv) + m * ev)
    O = centered * rvo[None, :, None, None]
    for g, w in zip(got, (O, rmo, rvo, mean, centered, variance, ev, O)):
        close(g, w)


def test_layernorm(rng):
    I = randn(rng, 3, 4, 7)
    O, mean, centered, var = tcomp.evaluate(tcomp.op(LAYERNORM), I)
    x = f64(I)
    m = x.mean(2)
    c = x - m[..., None]
    v = (c * c).sum(2) / 7
    close(mean, m)
    close(centered, c)
    close(var, v)
    close(O, c * np.sqrt(v)[..., None])


def test_moments_group_norm(rng):
    prog = tcomp.parse(MOMENTS_GROUP_NORM)
    assert list(prog.ops) == ["moments", "group_normalization"]
    I = randn(rng, 2, 3, 4, 5, 6) * 2 + 1
    mean, var = tcomp.evaluate(prog["moments"], I.reshape(6, -1))
    x = f64(I).reshape(6, -1)
    close(mean, x.mean(1))
    close(var, (x * x).mean(1) - x.mean(1) ** 2, rtol=1e-3, atol=1e-3)
    gamma, beta = randn(rng, 3, 4), randn(rng, 3, 4)
    O = tcomp.evaluate(prog["group_normalization"], I, gamma, beta, mean.reshape(2, 3),
                       var.reshape(2, 3))
    m, v = f64(mean).reshape(2, 3, 1, 1, 1), f64(var).reshape(2, 3, 1, 1, 1)
    want = (f64(gamma)[None, :, :, None, None] * (f64(I) - m) / np.sqrt(v + np.float32(1e-5))
            + f64(beta)[None, :, :, None, None])
    close(O, want)


def test_lut(rng):
    table, idx = randn(rng, 11, 4), rng.integers(0, 11, (3, 5)).astype(np.int32)
    close(tcomp.evaluate(tcomp.op(LUT), table, idx), f64(table)[idx].sum(1))


def test_constant_fill(rng):
    A = randn(rng, 6)
    got = tcomp.evaluate(tcomp.op(CONSTANT_FILL), A, np.float32(2.5))
    close(got, np.full(6, 2.5), rtol=0, atol=0)


def test_masked_conv(rng):
    I, W = randn(rng, 2, 3, 8, 7), randn(rng, 4, 3, 3, 3)
    mask = rng.integers(0, 2, (4, 3)).astype(np.uint8)
    mask[0, 0], mask[0, 1] = 1, 0
    got = tcomp.evaluate(tcomp.op(MASKED_CONV), I, W, mask)
    want = conv2d_ref(np.maximum(I, 0), W * (mask == 1)[:, :, None, None])
    close(got, want)


def test_min_argmin(rng):
    prog = tcomp.parse(MIN_ARGMIN)
    S = randn(rng, 17)
    v = tcomp.evaluate(prog["min_2d"], S)
    assert v.shape == () and float(v) == S.min()
    idx = tcomp.evaluate(prog["argmin_2d"], S, v)
    assert idx.dtype == np.int32 and int(idx) == int(S.argmin())


def test_mindis(rng):
    L = randn(rng, 5, 256)
    codes = rng.integers(0, 256, (9, 5)).astype(np.uint8)
    S, v, idx = tcomp.evaluate(tcomp.op(MINDIS), L, codes)
    want = f64(L)[np.arange(5), codes].sum(1)
    close(S, want)
    assert float(v) == S.min() and int(idx) == int(np.argmin(S))


def test_make_idx(rng):
    seg = rng.integers(1, 10, 7).astype(np.int32)
    got = tcomp.evaluate(tcomp.op(MAKE_IDX), seg)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.concatenate([[0], np.cumsum(seg)]))


def test_blockdiagperm(rng):
    I, perm = randn(rng, 3, 8), rng.permutation(8).astype(np.int32)
    close(tcomp.evaluate(tcomp.op(BLOCKDIAGPERM), I, perm), f64(I)[:, perm], rtol=0, atol=0)


def test_conv_grads(rng):
    prog = tcomp.parse(CONV_GRADS)
    I, W1 = randn(rng, 2, 3, 8, 7), randn(rng, 4, 3, 3, 2)
    O = tcomp.evaluate(prog["convolution"], I, W1)
    close(O, conv2d_ref(I, W1))
    # igrad: by TC's range inference h starts at KH - 1 (reads of d_O stay in bounds)
    # and stops at d_O's H; the rows below KH - 1 keep the zero fill.
    d_O = randn(rng, 2, 4, 6, 6)
    d_I = tcomp.evaluate(prog["convolution_igrad"], W1, d_O)
    want = np.zeros((2, 3, 6, 6))
    for kh in range(3):
        for kw in range(2):
            window = f64(d_O)[:, :, 2 - kh:6 - kh, 1 - kw:6 - kw]
            want[:, :, 2:, 1:] += np.einsum("nmhw,mc->nchw", window, f64(W1)[:, :, kh, kw])
    close(d_I, want)
    # wgrad: r_h already spans all of H, so kh (and kw) can only be 0.
    d_O2 = randn(rng, 2, 4, 8, 7)
    d_W1 = tcomp.evaluate(prog["convolution_wgrad"], I, d_O2)
    close(d_W1, np.einsum("nmhw,nchw->mc", f64(d_O2), f64(I))[:, :, None, None])


def test_relu(rng):
    I = randn(rng, 4, 5)
    close(tcomp.evaluate(tcomp.op(RELU), I), np.maximum(f64(I), 0), rtol=0, atol=0)
