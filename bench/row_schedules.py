"""Memory-bound row kernels with the row in registers (issue 14): the
comprehensions, in float32 or bfloat16 (float32 arithmetic inside), and their
schedules. bench/rows.py measures them; bench/schedules.py keeps the earlier
shared-memory row schedules.

Every schedule is `templates.row_in_registers`: one block per row, each
thread owning a strided slice of it (16-byte pieces: 4 float32 or 8
bfloat16), the row read from global memory once into registers and the
result written once, row statistics by warp shuffles and one shared step.
The exponentials of softmax are a temporary `e` kept in registers (computed
once). Sizes must be fixed at build (the slices are unrolled).
"""
from __future__ import annotations

import tcomp
from tcomp.schedule import templates

DTYPES = ("float32", "bfloat16")


def vec_of(dtype: str) -> int:
    """Elements per 16-byte access."""
    return 4 if dtype == "float32" else 8


def _check(dtype):
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return dtype


LOG2E = "1.4426950408889634"


def _exp_of(x, m, exp2):
    """exp(x - m); with `exp2`, as exp2(x * log2(e) - m * log2(e)): one FFMA
    (m * log2(e) is computed once) and exp2f's MUFU.EX2 with its range fixup
    instead of expf's range reduction (~4 fewer instructions per element;
    the same value to a few float32 ulps)."""
    return f"exp2({x} * {LOG2E} - {m} * {LOG2E})" if exp2 else f"exp({x} - {m})"


def softmax_src(dt="float32", exp2=False):
    _check(dt)
    return f"""def softmax({dt}(N, D) X) -> ({dt}(N, D) O) {{
  mx(n) max=! float(X(n, d))
  e(n, d) = {_exp_of("float(X(n, d))", "mx(n)", exp2)}
  sm(n) +=! e(n, d)
  rs(n) = 1.0 / sm(n)
  O(n, d) = {dt}(e(n, d) * rs(n))
}}"""


def layernorm_src(dt="float32"):
    _check(dt)
    return f"""def layernorm({dt}(N, D) X, {dt}(D) gamma, {dt}(D) beta) -> ({dt}(N, D) Y) {{
  sx(n) +=! float(X(n, d))
  mu(n) = sx(n) / float(D)
  sq(n) +=! (float(X(n, d)) - mu(n)) * (float(X(n, d)) - mu(n))
  rstd(n) = rsqrt(sq(n) / float(D) + 1e-5)
  Y(n, d) = {dt}((float(X(n, d)) - mu(n)) * rstd(n) * float(gamma(d)) + float(beta(d)))
}}"""


def rmsnorm_src(dt="float32"):
    _check(dt)
    return f"""def rmsnorm({dt}(N, D) X, {dt}(D) w) -> ({dt}(N, D) Y) {{
  ss(n) +=! float(X(n, d)) * float(X(n, d))
  r(n) = rsqrt(ss(n) / float(D) + 1e-6)
  Y(n, d) = {dt}(float(X(n, d)) * r(n) * float(w(d)))
}}"""


def add_layernorm_src(dt="bfloat16"):
    """Residual add + layernorm, two outputs: the sum S (rounded to `dt`,
    the next residual stream) and Y, the normalised float32 sum."""
    _check(dt)
    return f"""def add_layernorm({dt}(N, D) X, {dt}(N, D) R, {dt}(D) gamma, {dt}(D) beta)
    -> ({dt}(N, D) S, {dt}(N, D) Y) {{
  h(n, d) = float(X(n, d)) + float(R(n, d))
  S(n, d) = {dt}(h(n, d))
  sx(n) +=! h(n, d)
  mu(n) = sx(n) / float(D)
  sq(n) +=! (h(n, d) - mu(n)) * (h(n, d) - mu(n))
  rstd(n) = rsqrt(sq(n) / float(D) + 1e-5)
  Y(n, d) = {dt}((h(n, d) - mu(n)) * rstd(n) * float(gamma(d)) + float(beta(d)))
}}"""


def cross_entropy_src(chunk=16384, dt="bfloat16"):
    """Softmax cross-entropy loss per row over a vocabulary of V logits:
    loss(n) = logsumexp(L(n, :)) - L(n, T(n)). The row is cut into chunks of
    `chunk` logits, each small enough for registers: lse(n, c) is the
    chunk's log-sum-exp (its max and the sum of exponentials from the same
    registers), then the chunks' values combine per row. The logits are read
    once and never written; -3.4e38 (below every finite bfloat16/float32
    logit) pads the last chunk's max."""
    _check(dt)
    c = f"c in 0:(V + {chunk - 1}) / {chunk}, j in 0:{chunk}"
    return f"""def cross_entropy({dt}(N, V) L, int64(N) T) -> (loss) {{
  m(n, c) max=! c * {chunk} + j < V ? float(L(n, c * {chunk} + j)) : -3.4e38 where {c}
  s(n, c) +=! c * {chunk} + j < V ? exp(float(L(n, c * {chunk} + j)) - m(n, c)) : 0.0 where {c}
  lse(n, c) = m(n, c) + log(s(n, c))
  M(n) max=! lse(n, c)
  Z(n) +=! exp(lse(n, c) - M(n))
  loss(n) = M(n) + log(Z(n)) - float(L(n, T(n)))
}}"""


def cross_entropy_partials_src(threads=512, per_thread=32, dt="bfloat16", exp2=True):
    """The same loss in one kernel, with no barrier until the row's end: the
    row is cut into chunks of threads * per_thread logits and each thread
    takes its own `per_thread` logits of a chunk (16-byte pieces a
    threads * 8 apart, as `row_slices` lays them out: logit
    c * TP + (k * threads + t) * 8 + v), so the statistics m, s and lse of
    (row n, chunk c, thread t) are per thread, from its registers, with no
    cross-thread step. Only the row's combine (M, Z over every chunk and
    thread: the log-sum-exp of the partial log-sum-exps, exact in real
    arithmetic) crosses threads: two block-wide reductions per row instead of
    two per chunk, and no second kernel. A thread's chunk with no logit
    in range gives lse = -inf (s = 0), which adds exp(-inf) = 0 to Z."""
    _check(dt)
    vec = vec_of(dt)
    if per_thread % vec:
        raise ValueError(f"per_thread {per_thread} must be a multiple of {vec} (16-byte pieces "
                         f"of {dt})")
    tp = threads * per_thread
    x = f"c * {tp} + (k * {threads} + t) * {vec} + v"
    w = (f"where c in 0:(V + {tp - 1}) / {tp}, t in 0:{threads}, k in 0:{per_thread // vec}, "
         f"v in 0:{vec}")
    lx = f"float(L(n, {x}))"
    return f"""def cross_entropy({dt}(N, V) L, int64(N) T) -> (loss) {{
  m(n, c, t) max=! {x} < V ? {lx} : -3.4e38 {w}
  s(n, c, t) +=! {x} < V ? {_exp_of(lx, "m(n, c, t)", exp2)} : 0.0 {w}
  lse(n, c, t) = m(n, c, t) + log(s(n, c, t))
  M(n) max=! lse(n, c, t)
  Z(n) +=! exp(lse(n, c, t) - M(n))
  loss(n) = M(n) + log(Z(n)) - float(L(n, T(n)))
}}"""


def chain_src(dt="float32"):
    """The elementwise chain of bench/schedules.py GELU (scale, shift, exact
    GELU), in `dt` with float32 arithmetic."""
    _check(dt)
    return f"""def gelu_affine({dt}(N) X, float w, float b) -> ({dt}(N) O) {{
  O(i) = {dt}(0.5 * y * (1.0 + erf(y * 0.70710678118654752))) where y = float(X(i)) * w + b
}}"""


ROWSUM = "def rowsum(float(N, D) X) -> (S) { S(n) +=! X(n, d) }"


# ----------------------------------------------------------------------- schedules
# threads per row: a row's 16-byte pieces over the block, a few per thread.
def default_threads(d: int, dtype: str) -> int:
    """D / vec pieces, at most 2 per thread (fewer threads for short rows),
    at most 1024 threads (a 32768-float row: 8 pieces, 32 values a thread).
    (Up to the sixth session: 4 per thread; 2 measured 1% faster on the
    float32 rows of 4096 and equal on the bfloat16 ones: BENCHMARKS.md.)"""
    pieces = -(-d // vec_of(dtype))
    t = 32
    while t < 1024 and pieces > 2 * t:
        t *= 2
    return t


def softmax(d, dtype="float32", threads=None, exp2=False):
    """`exp2`: the exponentials as exp2 of a fused multiply-add
    (softmax_src): fewer instructions per element, for wide bfloat16 rows
    where one 1024-thread block per SM leaves the block's arithmetic
    after its loads exposed (bench/rows_sass.py counts them)."""
    op = tcomp.op(softmax_src(dtype, exp2))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "O", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("mx", "e", "sm", "rs"))
    return op, s


def layernorm(d, dtype="float32", threads=None, shared_weights=False):
    """`shared_weights`: gamma and beta staged in shared memory at the
    block's start (row_in_registers' `shared`), their loads issued with the
    row's instead of after its two reductions; 2 * D elements of shared
    memory (128 KiB for a 32768-long bfloat16 row; too much for float32)."""
    op = tcomp.op(layernorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "Y", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("sx", "mu", "sq", "rstd"),
                               shared=("gamma", "beta") if shared_weights else ())
    return op, s


def layernorm_streamed(d, dtype="bfloat16", threads=512, unroll=4):
    """Layernorm as three passes over a streamed row (templates.row_streamed): the sum,
    the squared deviations, the output. bf16 4096x32768 on the H200: 3.54 TB/s
    (1.01x Triton) against 3.29 for the row in registers (one 1024-thread block
    per SM by registers)."""
    op = tcomp.op(layernorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_streamed(s, "Y", threads, vec_of(dtype), unroll, ("sx", "sq"), ("mu", "rstd"))
    return op, s


def rmsnorm_streamed(d, dtype="bfloat16", threads=512, unroll=4):
    """RMSNorm as two passes over a streamed row (templates.row_streamed)."""
    op = tcomp.op(rmsnorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_streamed(s, "Y", threads, vec_of(dtype), unroll, ("ss",), ("r",))
    return op, s


def rmsnorm(d, dtype="float32", threads=None, shared_weights=False):
    """`shared_weights`: w staged in shared memory at the block's start (as
    layernorm's)."""
    op = tcomp.op(rmsnorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "Y", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("ss", "r"),
                               shared=("w",) if shared_weights else ())
    return op, s


def add_layernorm(d, dtype="bfloat16", threads=None):
    """The sum h in float32 registers (X and R each read once, 16-byte
    loads), S stored from them, the statistics and Y from the same registers:
    one kernel, 2 reads and 2 writes of the row."""
    op = tcomp.op(add_layernorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "Y", threads or default_threads(d, dtype), vec_of(dtype),
                               local=("h", "sx", "mu", "sq", "rstd"), outputs=("S",))
    return op, s


def cross_entropy(chunk=16384, threads=1024, dtype="bfloat16", combine_threads=128):
    """Two kernels. lse: one block per (row, chunk) — grid (chunks, rows) —
    the chunk in registers (chunk / threads logits per thread, 16-byte loads),
    its max and sum of exponentials by cross-thread reductions, one float32
    per chunk written. loss: one thread per row combining its chunks
    (log-sum-exp of the chunks' values) and reading the target's logit."""
    op = tcomp.op(cross_entropy_src(chunk, dtype))
    s = tcomp.Schedule(op)
    vec = vec_of(dtype)
    if chunk % (threads * vec):
        raise ValueError(f"chunk {chunk} must be a multiple of threads * {vec}")
    lse = s["lse"]
    n, c = lse.axes
    lse.bind(c, "blockIdx.x")
    lse.bind(n, "blockIdx.y")
    cache = s.cache_read("L", "local", [s["m"], s["s"]])
    cache.compute_at(lse, c)
    templates.row_slices(cache, cache.axes[-1], threads, vec)
    for name in ("m", "s"):
        st = s[name]
        st.compute_at(lse, c)
        st.set_scope("local")
        templates.row_slices(st, st.reduce_axes[-1], threads, vec)
    loss = s["loss"]
    (n,) = loss.axes
    no, ni = loss.split(n, combine_threads)
    loss.bind(no, "blockIdx.x")
    loss.bind(ni, "threadIdx.x")
    for name in ("M", "Z"):
        s[name].compute_at(loss, ni)
        s[name].set_scope("local")
    return op, s


def cross_entropy_one_kernel(threads=512, per_thread=32, dtype="bfloat16", exp2=True):
    """cross_entropy_partials_src in one kernel: one block per row; per
    chunk (unrolled) each thread loads its per_thread logits (16-byte
    loads) and computes its own max, sum of exponentials and log-sum-exp
    (registers, no barrier); then the row's M and Z by two block-wide
    reductions over (chunk, thread), and thread 0 writes the loss. With no
    barrier inside the chunk loop, the warps of a block drift apart and one
    warp's loads overlap another's arithmetic."""
    op = tcomp.op(cross_entropy_partials_src(threads, per_thread, dtype, exp2))
    s = tcomp.Schedule(op)
    loss = s["loss"]
    (n,) = loss.axes
    loss.bind(n, "blockIdx.x")
    lse = s["lse"]
    lse.compute_at(loss, n)
    lse.set_scope("local")
    _, c, t = lse.axes
    lse.bind(t, "threadIdx.x")
    lse.unroll(c)  # lse[c] at constant subscripts: registers
    for name in ("M", "Z"):
        st = s[name]
        st.compute_at(loss, n)
        st.set_scope("local")
        rc, rt = st.reduce_axes
        st.reorder(rt, rc)  # the thread loop outermost: a cross-thread reduction
        st.bind(rt, "threadIdx.x")
        st.unroll(rc)
    cache = s.cache_read("L", "local", [s["m"], s["s"]])
    cache.compute_at(lse, c)
    templates.row_slices(cache, cache.axes[-1], threads, vec_of(dtype))
    for name in ("m", "s"):
        st = s[name]
        st.compute_at(lse, c)
        st.set_scope("local")
        st.bind(st.axes[-1], "threadIdx.x")
        for ax in st.reduce_axes:
            st.unroll(ax)
    return op, s


def rowsum(d, threads=None):
    """The row in registers (16-byte loads, all in flight), summed per
    thread, then across the block."""
    op = tcomp.op(ROWSUM)
    s = tcomp.Schedule(op)
    S = s["S"]
    (n,) = S.axes
    S.bind(n, "blockIdx.x")
    t = threads or default_threads(d, "float32")
    C = s.cache_read("X", "local", [S])
    C.compute_at(S, n)
    templates.row_slices(C, C.axes[-1], t, 4)
    templates.row_slices(S, S.reduce_axes[-1], t, 4)
    return op, s


def chain(dtype="float32", threads=256, per_thread=4):
    """Blocks of threads * per_thread 16-byte pieces; each thread's pieces a
    block-stride apart (coalesced), all loaded before any is stored."""
    op = tcomp.op(chain_src(dtype))
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    io, iv = O.split(i, vec_of(dtype))
    io, it = O.split(io, threads)
    ib, iu = O.split(io, per_thread)
    O.bind(ib, "blockIdx.x")
    O.bind(it, "threadIdx.x")
    O.unroll(iu)
    O.vectorize(iv)
    return op, s


TRANSPOSE = "def transpose(float(M, N) A) -> (O) { O(j, i) = A(i, j) }"


def transpose_vec(tile=64, rows=16, vec=4):
    """tile x tile blocks of O through shared memory: A's tile read with
    16-byte loads (vec floats along A's rows) into rows padded by `vec`
    floats (16-byte aligned), O written vec consecutive floats per thread
    (the vectorize pass leaves these stores scalar: the lanes come from vec
    different rows of the shared tile); (tile / vec) x rows threads."""
    op = tcomp.op(TRANSPOSE)
    s = tcomp.Schedule(op)
    O = s["O"]
    j, i = O.axes
    jo, io, ji, ii = O.tile(j, i, tile, tile)
    O.bind(jo, "blockIdx.y")
    O.bind(io, "blockIdx.x")
    iio, iiv = O.split(ii, vec)
    jio, jii = O.split(ji, rows)
    O.reorder(jo, io, jio, jii, iio, iiv)
    O.bind(jii, "threadIdx.y")
    O.bind(iio, "threadIdx.x")
    O.vectorize(iiv)
    AS = s.cache_read("A", "shared", [O])
    AS.compute_at(O, io)
    a0, a1 = AS.axes
    a1o, a1v = AS.split(a1, vec)
    a0o, a0i = AS.split(a0, rows)
    AS.reorder(a0o, a0i, a1o, a1v)
    AS.bind(a0i, "threadIdx.y")
    AS.bind(a1o, "threadIdx.x")
    AS.vectorize(a1v)
    AS.storage_align(a0, tile, vec)
    return op, s


ROW_KINDS = {"softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm,
             "add_layernorm": add_layernorm}


def pipelined(kind, n, dtype="bfloat16", rows=None, threads=512, stages=3, sms=132,
              e_regs=True, x_regs=False):
    """`kind` ("softmax", "layernorm", "rmsnorm", "add_layernorm": the sum h in
    registers, S stored from them) over `n` rows as persistent
    blocks prefetching their rows into a shared-memory ring
    (templates.row_pipelined): `rows` rows a block (default: n / sms rounded
    up, one block per SM), `stages` rows in the ring. Softmax's exponentials
    are computed once into registers (`e_regs`), or inlined (computed twice:
    by the sum and by the output). With `x_regs`, layernorm's and RMSNorm's
    row is converted to float32 once, into registers (a temporary xf read
    by every pass), instead of by each pass from the shared row."""
    rows = rows or -(-n // sms)
    if kind == "softmax":
        op = tcomp.op(softmax_src(dtype, True))
        s = tcomp.Schedule(op)
        if not e_regs:
            s["e"].compute_inline()
        templates.row_pipelined(s, "O", rows, threads, vec_of(dtype), ("mx", "sm"), ("rs",),
                                stages=stages, local=("e",) if e_regs else ())
    elif kind == "layernorm":
        op = tcomp.op(_x_in_registers(layernorm_src(dtype)) if x_regs else layernorm_src(dtype))
        s = tcomp.Schedule(op)
        templates.row_pipelined(s, "Y", rows, threads, vec_of(dtype), ("sx", "sq"),
                                ("mu", "rstd"), stages=stages, local=("xf",) if x_regs else ())
    elif kind == "rmsnorm":
        op = tcomp.op(_x_in_registers(rmsnorm_src(dtype)) if x_regs else rmsnorm_src(dtype))
        s = tcomp.Schedule(op)
        templates.row_pipelined(s, "Y", rows, threads, vec_of(dtype), ("ss",), ("r",),
                                stages=stages, local=("xf",) if x_regs else ())
    elif kind == "add_layernorm":
        op = tcomp.op(add_layernorm_src(dtype))
        s = tcomp.Schedule(op)
        templates.row_pipelined(s, "Y", rows, threads, vec_of(dtype), ("sx", "sq"),
                                ("mu", "rstd"), stages=stages, local=("h",), outputs=("S",))
    else:
        raise ValueError(f"kind must be softmax, layernorm, rmsnorm or add_layernorm, "
                         f"got {kind!r}")
    return op, s


def _x_in_registers(src: str) -> str:
    """`src` (layernorm_src, rmsnorm_src) with float(X(n, d)) read through a
    row-shaped float32 temporary xf(n, d), defined first."""
    head, body = src.split("{\n", 1)
    return head + "{\n  xf(n, d) = float(X(n, d))\n" + body.replace("float(X(n, d))", "xf(n, d)")
