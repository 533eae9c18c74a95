"""Triton peer of the memory-bound benchmark rows (issue 14): the kernels a Triton user would
write for each row, to time in the same run as tcomp and torch (bench/suite.py imports this).

Every function takes torch tensors (any device Triton runs on; CPU tensors under
TRITON_INTERPRET=1), computes in float32 and returns tensors of the input dtype (float32,
bfloat16 or float16), except `cross_entropy`, whose per-row loss is float32. Rows are the last
dimension; leading dimensions are flattened (a copy is made where the input is not contiguous).

Row kernels (softmax, layernorm, rmsnorm, add_layernorm, cross_entropy, rowsum): one row per
program, the row length `D` a compile-time constant: where D is a multiple of the vector
width, row starts are known to be 16-byte aligned and the masks uniform over each vector, so
loads and stores are 16-byte vectors (each distinct row length compiles its own kernel). A program handles its row
in chunks of CHUNK elements, a power of two:

- CHUNK >= D: the row in registers. One read, one write; exact two-pass statistics.
- CHUNK < D: a loop over chunks. Statistics in a first pass (softmax and cross-entropy: a
  per-lane online max and sum of exponentials, one exponential per element and no reduction
  inside the loop; layernorm: each chunk's mean and squared deviations merged as Chan et al.;
  rmsnorm, rowsum: per-lane sums), then a second pass re-reads the row (mostly from L2) to
  write the output.

`triton.autotune`, keyed on the row length and the dtypes, times the candidates of
`row_configs` (the row in registers at each warp count that gives every thread between one
16-byte vector and 64 elements; for rows of 16384 or more also the chunk loop at chunks of 2048
to 16384). Cross-entropy over 128256 columns is always a loop: it reads the logits once (the
online logsumexp), its target logit once more, and writes 4 bytes per row, which is the byte
minimum; a two-pass version would read the logits twice.

`transpose` moves BM x BN tiles (Triton stages the tile through shared memory so that both the
load and the store are coalesced); `gelu` is one flat elementwise pass. Both autotune their tile
and warp count too.

Every public function takes `config=` (a dict of the kernel's meta-parameters and num_warps,
e.g. {"CHUNK": 256, "num_warps": 2}) to run one configuration without autotuning: the
interpreter tests use it (autotuning needs a GPU to time on), and so can anyone comparing
configurations. `CASES` names each case with its function, its input builder and its float64
reference; `bytes_moved` gives the minimum DRAM traffic for a TB/s figure.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
MAX_REGISTER_ROW = 32768   # longest row (padded to a power of two) kept whole in registers
MAX_ROW_PER_THREAD = 64    # row elements a thread may hold in the register path
MAX_CHUNK_PER_THREAD = 32  # chunk elements a thread may hold in the loop path
WIDE_ROW = 16384           # rows at least this long (padded) also try the chunk loop
ROW_WARPS = (1, 2, 4, 8, 16, 32)
LOOP_WARPS = (4, 8, 16)  # not 32: a 1024-thread block has 64 registers a thread, and the online
#                          softmax keeps two float32 of state per chunk element besides the chunk
LOOP_CHUNKS = (2048, 4096, 8192, 16384)

_NEG_BIG = tl.constexpr(-3.4028234663852886e38)  # lowest float32: a lane's max before any element
_RSQRT2 = tl.constexpr(0.7071067811865476)


# ---------------------------------------------------------------- configurations

def _vector(elem_bytes: int) -> int:
    """Elements of one 16-byte access."""
    return max(1, 16 // elem_bytes)


def row_configs(D: int, elem_bytes: int) -> list[dict]:
    """The (CHUNK, num_warps) candidates autotuning times for rows of length D whose elements
    take elem_bytes: the row in registers (CHUNK = D rounded up to a power of two, at most
    MAX_REGISTER_ROW) at every warp count giving each thread one 16-byte vector to
    MAX_ROW_PER_THREAD elements; for rows of WIDE_ROW or more, also the chunk loop (chunks
    shorter than the row, one vector to MAX_CHUNK_PER_THREAD elements per thread). A row too
    short for a full vector per thread gets the register path at one warp."""
    vec = _vector(elem_bytes)
    full = triton.next_power_of_2(max(D, 1))
    out = []
    if full <= MAX_REGISTER_ROW:
        out = [dict(CHUNK=full, num_warps=w) for w in ROW_WARPS
               if vec <= full // (32 * w) <= MAX_ROW_PER_THREAD]
        if not out:
            out = [dict(CHUNK=full, num_warps=1)]
    if full >= WIDE_ROW:
        out += [dict(CHUNK=c, num_warps=w) for c in LOOP_CHUNKS if c < full for w in LOOP_WARPS
                if vec <= c // (32 * w) <= MAX_CHUNK_PER_THREAD]
    return out


def transpose_configs(elem_bytes: int) -> list[dict]:
    """Tiles of 32 to 128 on a side, 4 or 8 warps, at most 64 elements per thread (the same
    for every element size)."""
    return [dict(BM=bm, BN=bn, num_warps=w) for bm in (32, 64, 128) for bn in (32, 64, 128)
            for w in (4, 8) if bm * bn // (32 * w) <= 64]


def gelu_configs(elem_bytes: int) -> list[dict]:
    """Blocks of 1024 to 8192 elements at 4, 8 or 16 warps, one 16-byte vector to 32 elements
    per thread."""
    vec = _vector(elem_bytes)
    return [dict(BLOCK=b, num_warps=w) for b in (1024, 2048, 4096, 8192) for w in (4, 8, 16)
            if vec <= b // (32 * w) <= 32]


def _all_pairs(key, sizes, warps):
    """Every (size, warps) pair as triton.Config; pruning keeps the candidates of one call."""
    return [triton.Config({key: s}, num_warps=w) for s in sizes for w in warps]


def _prune_rows(configs, nargs, **kwargs):
    a = {**nargs, **kwargs}
    want = {(c["CHUNK"], c["num_warps"]) for c in row_configs(a["D"], a["X"].element_size())}
    return [c for c in configs if (c.kwargs["CHUNK"], c.num_warps) in want]


def _prune_gelu(configs, nargs, **kwargs):
    a = {**nargs, **kwargs}
    want = {(c["BLOCK"], c["num_warps"]) for c in gelu_configs(a["X"].element_size())}
    return [c for c in configs if (c.kwargs["BLOCK"], c.num_warps) in want]


_ROW_CONFIGS = _all_pairs("CHUNK", [2 ** k for k in range(16)], ROW_WARPS)
_ROW_TUNE = dict(configs=_ROW_CONFIGS, key=["D"],
                 prune_configs_by={"early_config_prune": _prune_rows})
_TRANSPOSE_CONFIGS = [triton.Config({"BM": c["BM"], "BN": c["BN"]}, num_warps=c["num_warps"])
                      for c in transpose_configs(4)]
_GELU_CONFIGS = _all_pairs("BLOCK", (1024, 2048, 4096, 8192), (4, 8, 16))


# ---------------------------------------------------------------- kernels

@triton.jit
def _online(m, s, x):
    """One step of a per-lane online max `m` and sum `s` of exp(x - m), one exponential per
    element: when x is the new max, the old sum is rescaled by exp(m - x) and x adds 1;
    otherwise x adds exp(x - m). Masked lanes (x = -inf) add 0."""
    e = tl.exp(-tl.abs(x - m))
    s = tl.where(x > m, s * e + 1.0, s + e)
    return tl.maximum(m, x), s


@triton.jit
def _logsumexp_lanes(m, s):
    """The row's max and sum of exp(x - max) from the per-lane online state."""
    mx = tl.max(m, 0)
    return mx, tl.sum(s * tl.exp(m - mx), 0)


@triton.jit
def _softmax_kernel(X, Y, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    yr = Y + row * D
    cols = tl.arange(0, CHUNK)
    if CHUNK >= D:
        mask = cols < D
        x = tl.load(xr + cols, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(yr + cols, (e * (1.0 / tl.sum(e, 0))).to(Y.dtype.element_ty), mask=mask)
    else:
        m = tl.full([CHUNK], _NEG_BIG, tl.float32)
        s = tl.zeros([CHUNK], tl.float32)
        for c in tl.range(0, D, CHUNK):
            x = tl.load(xr + c + cols, mask=c + cols < D, other=float("-inf")).to(tl.float32)
            m, s = _online(m, s, x)
        mx, sm = _logsumexp_lanes(m, s)
        inv = 1.0 / sm
        for c in tl.range(0, D, CHUNK):
            mask = c + cols < D
            x = tl.load(xr + c + cols, mask=mask, other=float("-inf")).to(tl.float32)
            tl.store(yr + c + cols, (tl.exp(x - mx) * inv).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_store(xr, yr, W, B, c, cols, mean, rstd, D: tl.constexpr, HAS_B: tl.constexpr):
    """Normalise and store one chunk: (x - mean) * rstd * w (+ b)."""
    mask = c + cols < D
    x = tl.load(xr + c + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x - mean) * rstd * tl.load(W + c + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_B:
        y += tl.load(B + c + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(yr + c + cols, y.to(yr.dtype.element_ty), mask=mask)


@triton.jit
def _chan_merge(n, mean, m2, x, mask, cnt):
    """Merge one chunk (cnt valid lanes of x) into the running count, mean and sum of squared
    deviations (Chan, Golub and LeVeque): exact two-pass statistics within the chunk, no
    cancellation across chunks."""
    cmean = tl.sum(x, 0) / cnt
    dx = tl.where(mask, x - cmean, 0.0)
    delta = cmean - mean
    tot = n + cnt
    m2 += tl.sum(dx * dx, 0) + delta * delta * (n * cnt / tot)
    return tot, mean + delta * (cnt / tot), m2


@triton.jit
def _layernorm_kernel(X, W, B, Y, eps, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    yr = Y + row * D
    cols = tl.arange(0, CHUNK)
    if CHUNK >= D:
        mask = cols < D
        x = tl.load(xr + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - tl.sum(x, 0) / D, 0.0)
        rstd = tl.rsqrt(tl.sum(d * d, 0) / D + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(yr + cols, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    else:
        n = 0.0
        mean = 0.0
        m2 = 0.0
        for c in tl.range(0, D, CHUNK):
            mask = c + cols < D
            x = tl.load(xr + c + cols, mask=mask, other=0.0).to(tl.float32)
            n, mean, m2 = _chan_merge(n, mean, m2, x, mask, tl.minimum(D - c, CHUNK).to(tl.float32))
        rstd = tl.rsqrt(m2 / D + eps)
        for c in tl.range(0, D, CHUNK):
            _norm_store(xr, yr, W, B, c, cols, mean, rstd, D, True)


@triton.jit
def _rmsnorm_kernel(X, W, Y, eps, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    yr = Y + row * D
    cols = tl.arange(0, CHUNK)
    if CHUNK >= D:
        mask = cols < D
        x = tl.load(xr + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, 0) / D + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(yr + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([CHUNK], tl.float32)
        for c in tl.range(0, D, CHUNK):
            x = tl.load(xr + c + cols, mask=c + cols < D, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, 0) / D + eps)
        for c in tl.range(0, D, CHUNK):
            _norm_store(xr, yr, W, W, c, cols, 0.0, rstd, D, False)


@triton.jit
def _add_layernorm_kernel(X, R, W, B, S, Y, eps, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    rr = R + row * D
    sr = S + row * D
    yr = Y + row * D
    cols = tl.arange(0, CHUNK)
    if CHUNK >= D:
        mask = cols < D
        s = (tl.load(xr + cols, mask=mask, other=0.0).to(tl.float32)
             + tl.load(rr + cols, mask=mask, other=0.0).to(tl.float32))
        tl.store(sr + cols, s.to(S.dtype.element_ty), mask=mask)
        d = tl.where(mask, s - tl.sum(s, 0) / D, 0.0)
        rstd = tl.rsqrt(tl.sum(d * d, 0) / D + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(yr + cols, (d * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    else:
        n = 0.0
        mean = 0.0
        m2 = 0.0
        for c in tl.range(0, D, CHUNK):
            mask = c + cols < D
            s = (tl.load(xr + c + cols, mask=mask, other=0.0).to(tl.float32)
                 + tl.load(rr + c + cols, mask=mask, other=0.0).to(tl.float32))
            tl.store(sr + c + cols, s.to(S.dtype.element_ty), mask=mask)
            n, mean, m2 = _chan_merge(n, mean, m2, s, mask, tl.minimum(D - c, CHUNK).to(tl.float32))
        rstd = tl.rsqrt(m2 / D + eps)
        # x and r again, not the stored s: y is the layernorm of the float32 sum on both paths
        for c in tl.range(0, D, CHUNK):
            mask = c + cols < D
            s = (tl.load(xr + c + cols, mask=mask, other=0.0).to(tl.float32)
                 + tl.load(rr + c + cols, mask=mask, other=0.0).to(tl.float32))
            y = ((s - mean) * rstd * tl.load(W + c + cols, mask=mask, other=0.0).to(tl.float32)
                 + tl.load(B + c + cols, mask=mask, other=0.0).to(tl.float32))
            tl.store(yr + c + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _cross_entropy_kernel(X, T, L, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    cols = tl.arange(0, CHUNK)
    m = tl.full([CHUNK], _NEG_BIG, tl.float32)
    s = tl.zeros([CHUNK], tl.float32)
    for c in tl.range(0, D, CHUNK):
        x = tl.load(xr + c + cols, mask=c + cols < D, other=float("-inf")).to(tl.float32)
        m, s = _online(m, s, x)
    mx, sm = _logsumexp_lanes(m, s)
    t = tl.load(T + row).to(tl.int64)
    ok = (t >= 0) & (t < D)
    xt = tl.load(xr + tl.where(ok, t, 0)).to(tl.float32)
    tl.store(L + row, tl.where(ok, mx + tl.log(sm) - xt, float("nan")))


@triton.jit
def _rowsum_kernel(X, S, D: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = X + row * D
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], tl.float32)
    for c in tl.range(0, D, CHUNK):
        acc += tl.load(xr + c + cols, mask=c + cols < D, other=0.0).to(tl.float32)
    tl.store(S + row, tl.sum(acc, 0).to(S.dtype.element_ty))


@triton.jit
def _transpose_kernel(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # a 1-D grid (row tiles fastest): no 65535 limit on the second grid dimension
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    rm = (pid % tiles_m) * BM + tl.arange(0, BM)
    rn = (pid // tiles_m) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(X + rm[:, None].to(tl.int64) * N + rn[None, :], mask=mask)
    tl.store(Y + rn[None, :].to(tl.int64) * M + rm[:, None], tile, mask=mask)


@triton.jit
def _gelu_kernel(X, Y, A, B, n, A_PTR: tl.constexpr, B_PTR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if A_PTR:
        a = tl.load(A).to(tl.float32)
    else:
        a = A
    if B_PTR:
        b = tl.load(B).to(tl.float32)
    else:
        b = B
    y = x * a + b
    out = 0.5 * y * (1.0 + tl.math.erf(y * _RSQRT2))
    tl.store(Y + offs, out.to(Y.dtype.element_ty), mask=mask)


_softmax_tuned = triton.autotune(**_ROW_TUNE)(_softmax_kernel)
_layernorm_tuned = triton.autotune(**_ROW_TUNE)(_layernorm_kernel)
_rmsnorm_tuned = triton.autotune(**_ROW_TUNE)(_rmsnorm_kernel)
_add_layernorm_tuned = triton.autotune(**_ROW_TUNE)(_add_layernorm_kernel)
_cross_entropy_tuned = triton.autotune(**_ROW_TUNE)(_cross_entropy_kernel)
_rowsum_tuned = triton.autotune(**_ROW_TUNE)(_rowsum_kernel)
_transpose_tuned = triton.autotune(configs=_TRANSPOSE_CONFIGS, key=["M", "N"])(_transpose_kernel)
_gelu_tuned = triton.autotune(configs=_GELU_CONFIGS, key=["n"],
                              prune_configs_by={"early_config_prune": _prune_gelu})(_gelu_kernel)

_TUNED = {"softmax": _softmax_tuned, "layernorm": _layernorm_tuned, "rmsnorm": _rmsnorm_tuned,
          "add_layernorm": _add_layernorm_tuned, "cross_entropy": _cross_entropy_tuned,
          "rowsum": _rowsum_tuned, "transpose": _transpose_tuned, "gelu": _gelu_tuned}


def tuned_configs(case: str) -> dict:
    """What autotuning chose so far for `case` (a CASES key): {tuning key: config dict}, the
    tuning key being the autotune key values then the argument dtypes."""
    if case not in _TUNED:
        raise ValueError(f"tuned_configs: unknown case '{case}'; expected one of {sorted(_TUNED)}")
    return {k: {**c.kwargs, "num_warps": c.num_warps} for k, c in _TUNED[case].cache.items()}


# ---------------------------------------------------------------- launching and checks

def _launch(fn_name, tuned, kernel, grid, args, config, meta_keys, **const):
    """Run `tuned` (autotuning) or, with `config`, `kernel` at that one configuration."""
    if config is None:
        tuned[grid](*args, **const)
        return
    want = set(meta_keys) | {"num_warps"}
    if not isinstance(config, dict) or set(config) != want:
        raise ValueError(f"{fn_name}: config must be a dict with exactly the keys {sorted(want)} "
                         f"(e.g. {dict.fromkeys(sorted(want), 4)}); got {config!r}")
    for k, v in config.items():
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"{fn_name}: config['{k}'] must be a positive power of two "
                             f"(Triton block shapes and warp counts are); got {v!r}")
    if config["num_warps"] > 32:
        raise ValueError(f"{fn_name}: config['num_warps'] is at most 32 (1024 threads per "
                         f"block); got {config['num_warps']}")
    kernel[grid](*args, **const, **config)


def _check_float(fn_name, name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn_name}: {name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in FLOATS:
        raise TypeError(f"{fn_name}: {name} has dtype {t.dtype}; expected one of "
                        f"{[str(d) for d in FLOATS]} (convert it with .to(torch.float32))")


def _check_same_device(fn_name, x, **others):
    for name, t in others.items():
        if t.device != x.device:
            raise ValueError(f"{fn_name}: {name} is on {t.device} but x is on {x.device}; "
                             f"move both to one device")


def _rows(fn_name, x):
    """x as a contiguous (rows, D) view, D its last dimension."""
    _check_float(fn_name, "x", x)
    if x.dim() < 1:
        raise ValueError(f"{fn_name}: x must have at least one dimension (the rows are its "
                         f"last dimension); got a 0-d tensor")
    return x.contiguous().view(math.prod(x.shape[:-1]), x.shape[-1])


def _check_vector(fn_name, name, v, D, x):
    _check_float(fn_name, name, v)
    if tuple(v.shape) != (D,):
        raise ValueError(f"{fn_name}: {name} must have shape ({D},) (the row length of x); "
                         f"got {tuple(v.shape)}")
    _check_same_device(fn_name, x, **{name: v})
    return v.contiguous()


def _check_eps(fn_name, eps):
    if not isinstance(eps, (int, float)) or not eps >= 0 or math.isinf(eps):
        raise ValueError(f"{fn_name}: eps must be a finite number >= 0; got {eps!r}")
    return float(eps)


# ---------------------------------------------------------------- public functions

def softmax(x, *, config=None):
    """softmax over the last dimension, as bench/schedules.py SOFTMAX:
    exp(x - max) / sum(exp(x - max)); float32 inside, output in x's dtype."""
    x2 = _rows("softmax", x)
    y = torch.empty_like(x2)
    if x2.numel():
        _launch("softmax", _softmax_tuned, _softmax_kernel, (x2.shape[0],), (x2, y), config,
                ("CHUNK",), D=x2.shape[1])
    return y.reshape(x.shape)


def layernorm(x, w, b, eps=1e-5, *, config=None):
    """Layer normalisation over the last dimension, as bench/schedules.py LAYERNORM:
    (x - mean) * rsqrt(var + eps) * w + b, var the population variance (divided by D);
    float32 inside, output in x's dtype; w and b of any float dtype."""
    x2 = _rows("layernorm", x)
    D = x2.shape[1]
    w = _check_vector("layernorm", "w", w, D, x)
    b = _check_vector("layernorm", "b", b, D, x)
    eps = _check_eps("layernorm", eps)
    y = torch.empty_like(x2)
    if x2.numel():
        _launch("layernorm", _layernorm_tuned, _layernorm_kernel, (x2.shape[0],),
                (x2, w, b, y, eps), config, ("CHUNK",), D=D)
    return y.reshape(x.shape)


def rmsnorm(x, w, eps=1e-6, *, config=None):
    """RMS normalisation over the last dimension: x * rsqrt(mean(x^2) + eps) * w, the weight
    multiplied in float32 before the one rounding to x's dtype; w of any float dtype."""
    x2 = _rows("rmsnorm", x)
    D = x2.shape[1]
    w = _check_vector("rmsnorm", "w", w, D, x)
    eps = _check_eps("rmsnorm", eps)
    y = torch.empty_like(x2)
    if x2.numel():
        _launch("rmsnorm", _rmsnorm_tuned, _rmsnorm_kernel, (x2.shape[0],), (x2, w, y, eps),
                config, ("CHUNK",), D=D)
    return y.reshape(x.shape)


def add_layernorm(x, r, w, b, eps=1e-5, *, config=None):
    """Residual add then layernorm: returns (s, y), s = x + r stored in x's dtype, y the
    layernorm (as `layernorm`) of the float32 sum (not of s rounded to x's dtype)."""
    x2 = _rows("add_layernorm", x)
    _check_float("add_layernorm", "r", r)
    if r.shape != x.shape or r.dtype != x.dtype:
        raise ValueError(f"add_layernorm: r must match x in shape and dtype ({tuple(x.shape)}, "
                         f"{x.dtype}); got {tuple(r.shape)}, {r.dtype}")
    _check_same_device("add_layernorm", x, r=r)
    D = x2.shape[1]
    w = _check_vector("add_layernorm", "w", w, D, x)
    b = _check_vector("add_layernorm", "b", b, D, x)
    eps = _check_eps("add_layernorm", eps)
    r2 = r.contiguous().reshape(x2.shape)
    s, y = torch.empty_like(x2), torch.empty_like(x2)
    if x2.numel():
        _launch("add_layernorm", _add_layernorm_tuned, _add_layernorm_kernel, (x2.shape[0],),
                (x2, r2, w, b, s, y, eps), config, ("CHUNK",), D=D)
    return s.reshape(x.shape), y.reshape(x.shape)


def cross_entropy(logits, targets, *, config=None):
    """Per-row softmax cross-entropy loss, float32: logsumexp(row) - row[target], in one pass
    over the logits (never written). A target outside [0, V) gives NaN for its row (there is
    no ignore_index); checking on the host would cost a device synchronisation per call."""
    _check_float("cross_entropy", "logits", logits)
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise ValueError(f"cross_entropy: logits must be 2-D (rows, V) with V >= 1; got shape "
                         f"{tuple(logits.shape)}")
    if (not isinstance(targets, torch.Tensor) or targets.dtype.is_floating_point
            or targets.dtype.is_complex or targets.dtype == torch.bool
            or tuple(targets.shape) != (logits.shape[0],)):
        raise ValueError(f"cross_entropy: targets must be an integer tensor of shape "
                         f"({logits.shape[0]},) (one class index per row); got "
                         f"{getattr(targets, 'dtype', type(targets).__name__)} "
                         f"{tuple(getattr(targets, 'shape', ()))}")
    _check_same_device("cross_entropy", logits, targets=targets)
    x2, t = logits.contiguous(), targets.contiguous()
    loss = torch.empty(x2.shape[0], dtype=torch.float32, device=x2.device)
    if x2.shape[0]:
        _launch("cross_entropy", _cross_entropy_tuned, _cross_entropy_kernel, (x2.shape[0],),
                (x2, t, loss), config, ("CHUNK",), D=x2.shape[1])
    return loss


def rowsum(x, *, config=None):
    """Sum over the last dimension, accumulated in float32, returned in x's dtype."""
    x2 = _rows("rowsum", x)
    out = torch.zeros(x2.shape[0], dtype=x.dtype, device=x.device)
    if x2.numel():
        _launch("rowsum", _rowsum_tuned, _rowsum_kernel, (x2.shape[0],), (x2, out), config,
                ("CHUNK",), D=x2.shape[1])
    return out.reshape(x.shape[:-1])


def transpose(x, *, config=None):
    """x.T of a 2-D tensor, as a new contiguous tensor (tiles staged through shared memory)."""
    _check_float("transpose", "x", x)
    if x.dim() != 2:
        raise ValueError(f"transpose: x must be 2-D; got shape {tuple(x.shape)}")
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty((N, M), dtype=x.dtype, device=x.device)
    if x.numel():
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
        _launch("transpose", _transpose_tuned, _transpose_kernel, grid, (x, y, M, N), config,
                ("BM", "BN"))
    return y


def _scalar(fn_name, name, v, x):
    """A scalar operand as (kernel argument, is it a pointer): Python numbers pass by value, a
    one-element tensor (e.g. bench/suite.py's 0-d w and b) by pointer, with no host sync."""
    if isinstance(v, torch.Tensor):
        numeric = v.dtype.is_floating_point or v.dtype in (torch.int32, torch.int64)
        if v.numel() != 1 or not numeric:
            raise ValueError(f"{fn_name}: {name} must be a number or a one-element numeric tensor; "
                             f"got {v.dtype} of shape {tuple(v.shape)}")
        _check_same_device(fn_name, x, **{name: v})
        return v.reshape(1), True
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v), False
    raise TypeError(f"{fn_name}: {name} must be a number or a one-element tensor; got "
                    f"{type(v).__name__}")


def gelu(x, a, b, *, config=None):
    """The elementwise chain of bench/schedules.py GELU: with y = x * a + b,
    0.5 * y * (1 + erf(y / sqrt(2))) (exact GELU), elementwise over x of any shape; a and b are
    numbers or one-element tensors on x's device."""
    _check_float("gelu", "x", x)
    a, a_ptr = _scalar("gelu", "a", a, x)
    b, b_ptr = _scalar("gelu", "b", b, x)
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    if n:
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
        _launch("gelu", _gelu_tuned, _gelu_kernel, grid, (x, y, a, b, n), config, ("BLOCK",),
                A_PTR=a_ptr, B_PTR=b_ptr)
    return y


# ---------------------------------------------------------------- float64 references

def softmax_ref(x):
    x = x.double()
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _ln64(s, w, b, eps):
    mean = s.mean(-1, keepdim=True)
    var = ((s - mean) ** 2).mean(-1, keepdim=True)
    return (s - mean) * torch.rsqrt(var + eps) * w.double() + b.double()


def layernorm_ref(x, w, b, eps=1e-5):
    return _ln64(x.double(), w, b, eps)


def rmsnorm_ref(x, w, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def add_layernorm_ref(x, r, w, b, eps=1e-5):
    s = x.double() + r.double()
    return s, _ln64(s, w, b, eps)


def cross_entropy_ref(logits, targets):
    x = logits.double()
    return torch.logsumexp(x, -1) - x.gather(1, targets.long()[:, None])[:, 0]


def rowsum_ref(x):
    return x.double().sum(-1)


def transpose_ref(x):
    return x.double().t()


def gelu_ref(x, a, b):
    a = a.double() if isinstance(a, torch.Tensor) else float(a)
    b = b.double() if isinstance(b, torch.Tensor) else float(b)
    y = x.double() * a + b
    return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))


# ---------------------------------------------------------------- cases

def _randn(shape, dtype, device):
    return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)


def _rows_shape(case, shape):
    if len(shape) != 2:
        raise ValueError(f"{case}: shape must be (rows, row length); got {tuple(shape)}")
    return shape


def make_softmax(shape, dtype, device="cuda"):
    return (_randn(_rows_shape("softmax", shape), dtype, device),)


def make_layernorm(shape, dtype, device="cuda"):
    R, D = _rows_shape("layernorm", shape)
    return _randn((R, D), dtype, device), _randn((D,), dtype, device), _randn((D,), dtype, device)


def make_rmsnorm(shape, dtype, device="cuda"):
    R, D = _rows_shape("rmsnorm", shape)
    return _randn((R, D), dtype, device), _randn((D,), dtype, device)


def make_add_layernorm(shape, dtype, device="cuda"):
    R, D = _rows_shape("add_layernorm", shape)
    return (_randn((R, D), dtype, device), _randn((R, D), dtype, device),
            _randn((D,), dtype, device), _randn((D,), dtype, device))


def make_cross_entropy(shape, dtype, device="cuda"):
    R, V = _rows_shape("cross_entropy", shape)
    return _randn((R, V), dtype, device), torch.randint(0, V, (R,), device=device)


def make_rowsum(shape, dtype, device="cuda"):
    return (_randn(_rows_shape("rowsum", shape), dtype, device),)


def make_transpose(shape, dtype, device="cuda"):
    return (_randn(_rows_shape("transpose", shape), dtype, device),)


def make_gelu(shape, dtype, device="cuda"):
    """x of `shape` and the scalars of bench/suite.py's case_gelu (0-d float32 tensors)."""
    return (_randn(shape, dtype, device), torch.tensor(0.75, device=device),
            torch.tensor(-0.25, device=device))


class Case(NamedTuple):
    """One case: fn(*args) runs the Triton kernel, make(shape, dtype, device="cuda") builds
    random args, ref(*args) the float64 result (a tuple for add_layernorm, like fn)."""
    fn: Callable
    make: Callable
    ref: Callable


CASES = {
    "softmax": Case(softmax, make_softmax, softmax_ref),
    "layernorm": Case(layernorm, make_layernorm, layernorm_ref),
    "rmsnorm": Case(rmsnorm, make_rmsnorm, rmsnorm_ref),
    "add_layernorm": Case(add_layernorm, make_add_layernorm, add_layernorm_ref),
    "cross_entropy": Case(cross_entropy, make_cross_entropy, cross_entropy_ref),
    "rowsum": Case(rowsum, make_rowsum, rowsum_ref),
    "transpose": Case(transpose, make_transpose, transpose_ref),
    "gelu": Case(gelu, make_gelu, gelu_ref),
}


def bytes_moved(case: str, shape, dtype) -> int:
    """The least DRAM traffic (bytes read + written) of `case` at `shape` with inputs of
    `dtype`, for the arguments `CASES[case].make` builds: every input read once, every output
    written once (weights and scalars included; the targets are int64, the loss float32)."""
    e = torch.empty((), dtype=dtype).element_size()
    n = math.prod(shape)
    if case == "gelu":
        return 2 * n * e + 2 * 4
    if case not in CASES:
        raise ValueError(f"bytes_moved: unknown case '{case}'; expected one of {sorted(CASES)}")
    R, D = _rows_shape(case, shape)
    return {"softmax": 2 * n * e,
            "layernorm": 2 * n * e + 2 * D * e,
            "rmsnorm": 2 * n * e + D * e,
            "add_layernorm": 4 * n * e + 2 * D * e,
            "cross_entropy": n * e + R * 8 + R * 4,
            "rowsum": n * e + R * e,
            "transpose": 2 * n * e}[case]
