"""Memory-bound row kernels against torch eager, Triton and a device copy
(issue 14). Run on the GPU machine:

    PYTHONPATH=. python3 bench/rows.py [--only softmax,ce] [--reps 20] [--sweep]
    (also: PYTHONPATH=. python3 bench/suite.py --rows)

Per case: build the tcomp kernel once (bench/row_schedules.py), check every
result — tcomp's, torch's and Triton's — against a float64 reference on fresh
random data, then time tcomp, torch eager, the Triton peer
(bench/triton_rows.py, when it imports) and a device copy of the same number
of bytes (read + write), each as the median of `reps` calls with CUDA events,
the L2 cache flushed before every call. Prints TB/s (the case's minimum
traffic: each input read once, each output written once, over the time) and
the ratios tcomp/Triton, tcomp/copy and tcomp/torch (> 1: tcomp is faster);
writes $OUT/rows.json when $OUT is set. A case that fails to build, run or
check is reported and the run goes on.

Predictions (H200, copy ceiling ~4.28 TB/s measured): every row kernel here
moves its minimum bytes once, in 16-byte accesses, with the row in registers,
so each should run at the copy's rate less its synchronisation: ~0.95-0.98x
copy for softmax/layernorm/RMSNorm at 32768x4096 (16 KB rows, several blocks
per SM overlap one's reductions with another's loads); ~0.93-0.97x at
4096x32768 (128 KB rows: 1024 threads and 32 values a thread in fp32 allow
one block per SM, so the two block-wide reductions are not hidden: --sweep
tries 512 threads too); bf16 halves the bytes and the registers, same
fractions. add+layernorm bf16: 4 streams, ~0.95x copy (torch eager makes two
passes plus a write: ~1.6x slower). Cross-entropy: the logits read once
(~0.95x copy; torch reads them 2-3 times and writes a float32 log-softmax:
>= 2x slower). Row-sum: reads only, ~0.97x copy. Elementwise chain: a
stream, ~0.97x copy. Transpose: 32x32 tiles through shared memory, ~0.90x
copy (the 64x64 variant in --sweep).

Defaults are the forms measured best on the H200 (BENCHMARKS.md, fourth
session of 2026-11-30): softmax with exp2 of an FFMA (bf16 4096x32768: 1.02x
Triton, 0.78x copy; fp32 equal), cross-entropy in one kernel from per-thread
partial log-sum-exps (2 blocks of 512 threads per SM: 1.28x Triton, 1.00x
copy, 4.09x torch). With --sweep also: other thread counts, softmax with
expf, the two-kernel chunked cross-entropy, the one-kernel form with 1024 or
256 threads or expf, layernorm/RMSNorm bf16 with their weights staged in
shared memory (measured slower: 0.82 and 0.98x Triton), the other
transpose tiles. Fifth session's defaults (same day): transpose 64x64 tiles
of 8 rows (4.01 TB/s, 0.97x copy, 1.00x Triton; 32x32: 3.85), bf16 softmax
4096x32768 at 512 threads (3.32 TB/s; 1024: 3.25), bf16 RMSNorm 4096x32768
with the row in shared memory, 512 threads (3.90 TB/s, 0.95x copy, 1.04x
Triton; in registers: 3.73): WIDE_BF16_DEFAULTS. --sweep also runs the
shared-row schedule for the three wide bf16 rows (softmax: 0.41-0.49x copy,
it computes the exponentials twice).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import row_schedules as R  # noqa: E402
import schedules as S  # noqa: E402
import tcomp  # noqa: E402
from timing import Timer  # noqa: E402

TORCH_DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOL = {"float32": 1e-5, "bfloat16": 1e-2}  # relative (Frobenius) error against float64


def triton_peer():
    """bench/triton_rows.py, or None when it is absent or does not import."""
    try:
        import triton_rows
        return triton_rows
    except Exception as e:  # absent, or triton missing: measured without the peer
        print(f"(no Triton peer: {type(e).__name__}: {e})", flush=True)
        return None


# ----------------------------------------------------------------------- cases
def _row_bytes(n, d, dt, streams, vectors):
    """`streams` row-sized tensors moved once, `vectors` D-sized ones."""
    es = torch.finfo(TORCH_DT[dt]).bits // 8
    return (streams * n * d + vectors * d) * es


def case_softmax(n, d, dt, threads=None, exp2=True):
    def make():
        return (torch.randn(n, d, device="cuda", dtype=TORCH_DT[dt]) * 3,)
    return dict(name=f"softmax_{dt}_{n}x{d}", build=lambda: R.softmax(d, dt, threads, exp2),
                sizes={"N": n, "D": d}, make=make, tol=TOL[dt],
                ref=lambda x: (torch.softmax(x.double(), -1),),
                torch=lambda x: torch.softmax(x, -1),
                triton=lambda T, x: T.softmax(x), bytes=_row_bytes(n, d, dt, 2, 0))


def _weights(d, dt):
    return (torch.randn(d, device="cuda", dtype=TORCH_DT[dt]),
            torch.randn(d, device="cuda", dtype=TORCH_DT[dt]))


def case_layernorm(n, d, dt, threads=None, shared_weights=False):
    w, b = _weights(d, dt)

    def make():
        return torch.randn(n, d, device="cuda", dtype=TORCH_DT[dt]) * 2 + 0.5, w, b
    return dict(name=f"layernorm_{dt}_{n}x{d}", build=lambda: R.layernorm(d, dt, threads, shared_weights),
                sizes={"N": n, "D": d}, make=make, tol=TOL[dt],
                ref=lambda x, w, b: (F.layer_norm(x.double(), (d,), w.double(), b.double(),
                                                  1e-5),),
                torch=lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5),
                triton=lambda T, x, w, b: T.layernorm(x, w, b, 1e-5),
                bytes=_row_bytes(n, d, dt, 2, 2))


def _rms_ref(x, w, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def case_rmsnorm(n, d, dt, threads=None, shared_weights=False):
    w, _ = _weights(d, dt)

    def make():
        return torch.randn(n, d, device="cuda", dtype=TORCH_DT[dt]) * 2, w

    def eager(x, w):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (d,), w, 1e-6)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w
    return dict(name=f"rmsnorm_{dt}_{n}x{d}", build=lambda: R.rmsnorm(d, dt, threads, shared_weights),
                sizes={"N": n, "D": d}, make=make, tol=TOL[dt],
                ref=lambda x, w: (_rms_ref(x, w),), torch=eager,
                triton=lambda T, x, w: T.rmsnorm(x, w, 1e-6), bytes=_row_bytes(n, d, dt, 2, 1))


def case_add_layernorm(n, d, dt="bfloat16", threads=None):
    w, b = _weights(d, dt)

    def make():
        return (torch.randn(n, d, device="cuda", dtype=TORCH_DT[dt]),
                torch.randn(n, d, device="cuda", dtype=TORCH_DT[dt]), w, b)

    def ref(x, r, w, b):
        s = x.double() + r.double()
        return s, F.layer_norm(s, (d,), w.double(), b.double(), 1e-5)

    def eager(x, r, w, b):
        s = x + r
        return s, F.layer_norm(s, (d,), w, b, 1e-5)
    return dict(name=f"add_layernorm_{dt}_{n}x{d}", build=lambda: R.add_layernorm(d, dt, threads),
                sizes={"N": n, "D": d}, make=make, tol=TOL[dt], ref=ref, torch=eager,
                triton=lambda T, x, r, w, b: T.add_layernorm(x, r, w, b, 1e-5),
                bytes=_row_bytes(n, d, dt, 4, 2))


def case_cross_entropy(n, v, chunk=16384, threads=1024, one_kernel=(512, 32, True)):
    """`one_kernel=(threads, per_thread, exp2)`: R.cross_entropy_one_kernel;
    None: the two-kernel chunked form (chunk, threads)."""
    build = ((lambda: R.cross_entropy(chunk, threads)) if one_kernel is None else
             (lambda: R.cross_entropy_one_kernel(one_kernel[0], one_kernel[1],
                                                 exp2=one_kernel[2])))
    def make():
        return (torch.randn(n, v, device="cuda", dtype=torch.bfloat16) * 4,
                torch.randint(0, v, (n,), device="cuda", dtype=torch.int64))

    def ref(x, t):
        return (F.cross_entropy(x.double(), t, reduction="none"),)
    return dict(name=f"cross_entropy_bfloat16_{n}x{v}",
                build=build, sizes={"N": n, "V": v},
                make=make, tol=1e-5, ref=ref,
                torch=lambda x, t: F.cross_entropy(x, t, reduction="none"),
                triton=lambda T, x, t: T.cross_entropy(x, t), bytes=n * v * 2 + n * 8 + n * 4)


def case_rowsum(n, d, threads=None):
    return dict(name=f"rowsum_float32_{n}x{d}", build=lambda: R.rowsum(d, threads),
                sizes={"N": n, "D": d},
                make=lambda: (torch.randn(n, d, device="cuda"),), tol=1e-5,
                ref=lambda x: (x.double().sum(-1),), torch=lambda x: x.sum(-1),
                triton=lambda T, x: T.rowsum(x), bytes=n * d * 4 + n * 4)


def case_transpose(m, tile=32, rows=8, vec=1):
    """vec > 1: R.transpose_vec (16-byte loads of A's tile)."""
    build = ((lambda: S.transpose({}, tile=tile, rows=rows)) if vec == 1 else
             (lambda: R.transpose_vec(tile, rows, vec)))
    return dict(name=f"transpose_float32_{m}x{m}[{tile}x{tile},{rows} rows"
                     f"{f',v{vec}' if vec > 1 else ''}]",
                build=build, sizes={"M": m, "N": m},
                make=lambda: (torch.randn(m, m, device="cuda"),), tol=0.0,
                ref=lambda a: (a.double().t(),), torch=lambda a: a.t().contiguous(),
                triton=lambda T, a: T.transpose(a), bytes=2 * m * m * 4)


def case_chain(n, dt):
    w = torch.tensor(0.75, device="cuda")
    b = torch.tensor(-0.25, device="cuda")

    def make():
        return torch.randn(n, device="cuda", dtype=TORCH_DT[dt]), w, b

    def triton(T, x, w, b):
        fn = next((getattr(T, f) for f in ("gelu_affine", "chain", "elementwise_chain", "gelu")
                   if hasattr(T, f)), None)
        if fn is None:
            raise AttributeError("triton_rows has no elementwise chain (gelu_affine/chain)")
        return fn(x, 0.75, -0.25)  # (w and b as numbers: no device read while timed)
    return dict(name=f"chain_gelu(x*w+b)_{dt}_2^{n.bit_length() - 1}", build=lambda: R.chain(dt),
                sizes={"N": n}, make=make, tol=TOL[dt],
                ref=lambda x, w, b: (F.gelu(x.double() * w.double() + b.double()),),
                torch=lambda x, w, b: F.gelu(x.float() * w + b).to(x.dtype), triton=triton,
                bytes=2 * n * torch.finfo(TORCH_DT[dt]).bits // 8)


# Where another schedule than R's default (row in registers, default_threads) measured
# faster, one run of 2026-11-30 (BENCHMARKS.md): bf16 softmax 4096x32768 with 512 threads
# (3.32 TB/s against 3.25 at 1024), bf16 RMSNorm 4096x32768 with the row in shared memory,
# 512 threads, 4-element passes (3.90 TB/s against 3.73: 32 registers, 3 blocks per SM).
# bf16 layernorm 4096x32768 streamed (R.layernorm_streamed: three passes, 512 threads, piece
# loops unrolled by 4: 3.54 TB/s against 3.29, a probe of the same kernel), until:
# bf16 softmax 4096x32768: persistent blocks prefetching rows into a shared ring
# (R.pipelined, 32 rows a block, 512 threads, 3 stages: 3.53 TB/s against 3.31 for the row
# in registers at 512 threads, one run of the sixth session); bf16 layernorm 4096x32768 the
# same with the row converted to float32 once, into registers (3.56 against 3.49 streamed),
# until the vector_loads pass (a reduction's 8-element piece of a shared row read as one
# 16-byte vector) made the shared-row schedule with 8-element passes faster still (3.73 TB/s,
# 3 blocks per SM, against 3.58 for the ring and 3.55 streamed, one run).
WIDE_BF16_DEFAULTS = {("softmax", "bfloat16", 32768): ("pipelined", 512, 3),
                      ("rmsnorm", "bfloat16", 32768): ("shared row", 512, 4),
                      ("layernorm", "bfloat16", 32768): ("shared row", 512, 8)}


def _default_case(kind, n, d, dt):
    name = kind.__name__.removeprefix("case_")
    how = WIDE_BF16_DEFAULTS.get((name, dt, d))
    if how is None:
        return kind(n, d, dt)
    if how[0] == "threads":
        return kind(n, d, dt, how[1])
    c = kind(n, d, dt)
    if how[0] == "pipelined":
        c["build"] = lambda: R.pipelined(name, n, dt, None, how[1], how[2],
                                         x_regs="x in registers" in how)
    elif how[0] == "streamed":
        c["build"] = lambda: _streamed(name, d, dt, how[1], how[2])
    else:
        c["build"] = lambda: _shared_row(name, dt, how[1], how[2])
    return c


def _streamed(kind, d, dt, threads, unroll):
    fn = {"layernorm": R.layernorm_streamed, "rmsnorm": R.rmsnorm_streamed}[kind]
    return fn(d, dt, threads, unroll)


def _streamed_case(kind, dt, threads, unroll):
    make = {"layernorm": case_layernorm, "rmsnorm": case_rmsnorm}[kind]
    c = make(4096, 32768, dt)
    c["build"] = lambda: _streamed(kind, 32768, dt, threads, unroll)
    return _tag(c, f"[streamed,{threads}t,unroll {unroll}]")


def cases(sweep=False):
    out = []
    for kind in (case_softmax, case_layernorm, case_rmsnorm):
        for dt in ("float32", "bfloat16"):
            for n, d in ((32768, 4096), (4096, 32768)):
                out.append(lambda k=kind, n=n, d=d, dt=dt: _default_case(k, n, d, dt))
                if sweep:
                    t = R.default_threads(d, dt)
                    how = WIDE_BF16_DEFAULTS.get((kind.__name__.removeprefix("case_"), dt, d))
                    for other in (t // 2, t * 2):
                        # (a thread count the default already runs is not measured twice)
                        if 32 <= other <= 1024 and how != ("threads", other):
                            out.append(lambda k=kind, n=n, d=d, dt=dt, o=other: _tag(
                                k(n, d, dt, o), f"[{o}t]"))
                    if how is not None:
                        # R's default (row in registers, default_threads), now a variant
                        out.append(lambda k=kind, n=n, d=d, dt=dt, t=t: _tag(
                            k(n, d, dt, t), f"[{t}t]"))
    # add + layernorm bf16 16384x8192 at 1024 threads, one 8-element piece a thread (Triton's
    # choice too): 4.13 TB/s, 1.00x Triton, against 4.07 at R's default 512 (one run, sixth session)
    out += [lambda: case_add_layernorm(16384, 8192, threads=1024),
            lambda: case_cross_entropy(4096, 128256),
            lambda: case_rowsum(32768, 4096), lambda: case_rowsum(4096, 32768),
            lambda: case_transpose(8192, 64, 8),  # 4.01 TB/s against 3.85 for 32x32 (2026-11-30)
            lambda: case_chain(1 << 28, "float32"), lambda: case_chain(1 << 28, "bfloat16")]
    if sweep:
        out += [lambda t=t: _tag(case_add_layernorm(16384, 8192, threads=t), f"[{t}t]")
                for t in (256, 512)] + [
                lambda: case_transpose(8192, 64, 16)] + SWEEP_VARIANTS + [
            lambda t=t, r=r: case_transpose(8192, t, r)
            for t, r in ((32, 4), (32, 8), (32, 16), (32, 32), (64, 4))] + [
            lambda k=k, t=t, v=v: _shared_row_case(k, t, v)
            for k in ("softmax", "layernorm", "rmsnorm") for t, v in ((512, 4), (512, 8), (256, 8))
            if WIDE_BF16_DEFAULTS.get((k, "bfloat16", 32768)) != ("shared row", t, v)] + [
            lambda k=k, dt=dt, t=t, u=u: _streamed_case(k, dt, t, u)
            for k, dt, t, u in (("layernorm", "bfloat16", 512, 4),  # the default before the ring
                                ("layernorm", "bfloat16", 512, 2), ("layernorm", "bfloat16", 256, 4),
                                ("layernorm", "bfloat16", 1024, 4),
                                ("layernorm", "float32", 512, 4), ("layernorm", "float32", 1024, 2),
                                ("rmsnorm", "bfloat16", 512, 4), ("rmsnorm", "float32", 512, 4))] + [
            lambda v=v: _pipelined_case(*v) for v in PIPELINED_VARIANTS if not _is_default(v)]
    return out


def _shared_row(kind, dt, threads, vec):
    """The first wave's shared-row schedule (bench/schedules.py `_row_op`) on the bf16
    comprehensions of row_schedules: the row staged once in shared memory, every pass
    reading it from there, `threads` a row. Few registers (36-40 a thread): 3 blocks of
    512 threads per SM for a 64 KiB bf16 row, where the row-in-registers kernel fits one."""
    if kind == "softmax":
        return S._row_op(R.softmax_src(dt, True), "O", ("mx", "sm"), threads, True, True, vec,
                         extra=("rs",), inline=("e",))
    if kind == "layernorm":
        return S._row_op(R.layernorm_src(dt), "Y", ("sx", "sq"), threads, True, True, vec,
                         extra=("mu", "rstd"))
    return S._row_op(R.rmsnorm_src(dt), "Y", ("ss",), threads, True, True, vec, extra=("r",))


def _shared_row_case(kind, threads, vec):
    make = {"softmax": case_softmax, "layernorm": case_layernorm, "rmsnorm": case_rmsnorm}[kind]
    c = make(4096, 32768, "bfloat16")
    c["build"] = lambda: _shared_row(kind, "bfloat16", threads, vec)
    return _tag(c, f"[shared row,{threads}t,v{vec}]")


def _pipelined_case(kind, n, d, dt, threads, stages, per_sm=1, x_regs=False):
    """Persistent blocks prefetching rows into a shared ring (R.pipelined):
    `per_sm` blocks per SM of the H200's 132; `x_regs`: the row converted to
    float32 once, into registers."""
    make = {"softmax": case_softmax, "layernorm": case_layernorm, "rmsnorm": case_rmsnorm,
            "add_layernorm": case_add_layernorm}[kind]
    c = make(n, d, dt)
    rows = -(-n // (132 * per_sm))
    c["build"] = lambda: R.pipelined(kind, n, dt, rows, threads, stages, x_regs=x_regs)
    return _tag(c, f"[pipelined,{rows} rows,{threads}t,{stages} stages"
                   f"{',x in registers' if x_regs else ''}]")


def _is_default(v) -> bool:
    """Whether pipelined variant `v` is the schedule a WIDE_BF16_DEFAULTS case runs."""
    kind, n, d, dt, threads, stages, per_sm, *x_regs = v
    how = ("pipelined", threads, stages) + (("x in registers",) if any(x_regs) else ())
    return per_sm == 1 and WIDE_BF16_DEFAULTS.get((kind, dt, d)) == how


# Persistent prefetching blocks (issue 14, sixth session): (kind, n, d, dtype, threads,
# stages, blocks per SM[, the row in float32 registers]).
PIPELINED_VARIANTS = [
    (k, n, d, dt, t, st, b)
    for k in ("softmax", "layernorm", "rmsnorm")
    for n, d, dt, t, st, b in ((4096, 32768, "bfloat16", 512, 3, 1),
                               (4096, 32768, "bfloat16", 1024, 3, 1),
                               (4096, 32768, "bfloat16", 512, 2, 1),
                               (32768, 4096, "bfloat16", 256, 3, 4),
                               (32768, 4096, "bfloat16", 512, 3, 2),
                               (32768, 4096, "float32", 256, 3, 4),
                               (32768, 4096, "float32", 512, 3, 2))] + [
    (k, 4096, 32768, "bfloat16", t, 3, 1, True) for k in ("layernorm", "rmsnorm")
    for t in (512, 1024)] + [
    ("add_layernorm", 16384, 8192, "bfloat16", t, st, b)
    for t, st, b in ((512, 3, 2), (1024, 3, 2), (256, 3, 2), (1024, 3, 1), (512, 2, 2))]
# (float32 4096x32768: two 128 KiB rows do not fit in the 227 KiB of a block)


# The other forms of issue 14's missed rows, measured slower or equal
# (BENCHMARKS.md; bench/rows_sass.py gives their SASS figures): --sweep.
SWEEP_VARIANTS = [
    lambda: _tag(case_softmax(4096, 32768, "bfloat16", exp2=False), "[expf]"),
    lambda: _tag(case_softmax(4096, 32768, "float32", exp2=False), "[expf]"),
    lambda: _tag(case_layernorm(4096, 32768, "bfloat16", shared_weights=True), "[smem w]"),
    lambda: _tag(case_rmsnorm(4096, 32768, "bfloat16", shared_weights=True), "[smem w]"),
    lambda: _tag(case_cross_entropy(4096, 128256, one_kernel=None), "[2 kernels]"),
    lambda: _tag(case_cross_entropy(4096, 128256, 8192, 512, one_kernel=None),
                 "[2 kernels,8192c,512t]"),
    lambda: _tag(case_cross_entropy(4096, 128256, one_kernel=(1024, 32, True)),
                 "[1 kernel,1024t,32]"),
    lambda: _tag(case_cross_entropy(4096, 128256, one_kernel=(512, 32, False)),
                 "[1 kernel,512t,32,exp]"),
    lambda: _tag(case_cross_entropy(4096, 128256, one_kernel=(256, 64, True)),
                 "[1 kernel,256t,64]"),
    lambda: _tag(case_layernorm(32768, 4096, "bfloat16", shared_weights=True), "[smem w]"),
    lambda: case_transpose(8192, 64, 16, vec=4),
]


def _tag(c, tag):
    c["name"] += tag
    return c


# ----------------------------------------------------------------------- measuring
# (Timer: bench/timing.py, the one timing method of the bench scripts)
def rel_err(outs, refs) -> float:
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} outputs, the reference has {len(refs)}")
    worst = 0.0
    for o, r in zip(outs, refs):
        if tuple(o.shape) != tuple(r.shape):
            raise ValueError(f"output shape {tuple(o.shape)} != reference {tuple(r.shape)}")
        o = o.double()
        if not torch.isfinite(o).all():
            return float("inf")
        worst = max(worst, float((o - r).norm() / r.norm().clamp_min(1e-30)))
    return worst


def run_case(c, timer, peer):
    r = dict(case=c["name"], bytes=c["bytes"])
    t0 = time.perf_counter()
    op, s = c["build"]()
    k = tcomp.build(s, target="cuda", sizes=c["sizes"])
    r["build_s"] = round(time.perf_counter() - t0, 2)
    args = c["make"]()
    with torch.no_grad():
        ref = c["ref"](*args)
        r["rel_err"] = rel_err(k(*args), ref)
        r["ok"] = r["rel_err"] <= max(c["tol"], 1e-7)
        r["torch_rel_err"] = rel_err(c["torch"](*args), ref)
        fns = {"tcomp": k, "torch": c["torch"]}
        if peer is not None:
            try:
                r["triton_rel_err"] = rel_err(c["triton"](peer, *args), ref)
                fns["triton"] = lambda *a: c["triton"](peer, *a)
            except Exception as e:
                r["triton_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        del ref
        half = c["bytes"] // 2
        src = torch.empty(half, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns["copy"] = lambda *a: dst.copy_(src)
        for name, fn in fns.items():
            try:
                ms = timer(fn, args)
                r[f"{name}_ms"] = ms
                r[f"{name}_tbps"] = c["bytes"] / ms / 1e9
            except Exception as e:
                r[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    tc = r.get("tcomp_ms")
    for peer_name in ("triton", "copy", "torch"):
        if tc and r.get(f"{peer_name}_ms"):
            r[f"vs_{peer_name}"] = r[f"{peer_name}_ms"] / tc
    return r


def line(r) -> str:
    if "error" in r:
        return f"{r['case']:40s} ERROR {r['error'][:300]}"

    def f(key, fmt="{:.2f}"):
        v = r.get(key)
        return fmt.format(v) if v is not None else "-"
    return (f"{r['case']:40s} {'ok ' if r['ok'] else 'BAD'} err={r['rel_err']:.1e} | TB/s tcomp "
            f"{f('tcomp_tbps')} torch {f('torch_tbps')} triton {f('triton_tbps')} copy "
            f"{f('copy_tbps')} | tcomp/triton {f('vs_triton')} tcomp/copy {f('vs_copy')} "
            f"tcomp/torch {f('vs_torch')} | build {r['build_s']}s"
            + (f" | triton: {r['triton_error'][:120]}" if "triton_error" in r else ""))


def _triton_configs(peer) -> dict:
    """What Triton's autotuning chose in this run, per kernel and tuning key (JSON-able)."""
    if peer is None or not hasattr(peer, "tuned_configs"):
        return {}
    out = {}
    for case in ("softmax", "layernorm", "rmsnorm", "add_layernorm", "cross_entropy", "rowsum",
                 "transpose", "gelu"):
        try:
            got = peer.tuned_configs(case)
        except Exception as e:  # a peer without that kernel: say so, go on
            got = {"error": f"{type(e).__name__}: {e}"}
        out[case] = {str(k): v for k, v in got.items()}
    return out


def _selects(pattern, name) -> bool:
    """--only: a substring of the case's name; ending in '$', the whole name."""
    return name == pattern[:-1] if pattern.endswith("$") else pattern in name


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated substrings of case names (NAME$: exactly NAME)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", action="store_true", help="also other thread counts and tiles")
    a = ap.parse_args(argv)
    peer = triton_peer()
    timer = Timer(a.reps)
    results = []
    start = time.perf_counter()
    for make in cases(a.sweep):
        name = "?"
        try:
            c = make()
            name = c["name"]
            if a.only and not any(_selects(o, name) for o in a.only.split(",")):
                continue
            r = run_case(c, timer, peer)
        except Exception as e:  # report and go on with the other cases
            r = dict(case=name, ok=False, error=f"{type(e).__name__}: {str(e)[:2000]}",
                     trace=traceback.format_exc()[-2000:])
        torch.cuda.empty_cache()
        results.append(r)
        print(line(r), flush=True)
    info = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                cuda=torch.version.cuda, triton_peer=peer is not None,
                date=time.strftime("%Y-%m-%d"), seconds=round(time.perf_counter() - start, 1),
                results=results, triton_configs=_triton_configs(peer))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "rows.json"), "w") as f:
            json.dump(info, f, indent=1)
    print(f"\n{len(results)} cases in {info['seconds']} s; "
          f"{sum(1 for r in results if not r.get('ok'))} failed or BAD")
    print("case | tcomp TB/s | tcomp/triton | tcomp/copy | tcomp/torch | check")
    for r in results:
        if "error" in r:
            print(f"{r['case']} | error | | | | {r['error'][:80]}")
            continue
        vals = [f"{r[k]:.2f}" if r.get(k) is not None else "-"
                for k in ("tcomp_tbps", "vs_triton", "vs_copy", "vs_torch")]
        print(f"{r['case']} | {' | '.join(vals)} | {'ok' if r['ok'] else 'BAD'} "
              f"({r['rel_err']:.1e})")
    return results


if __name__ == "__main__":
    main()
