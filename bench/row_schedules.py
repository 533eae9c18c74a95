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


def softmax_src(dt="float32"):
    _check(dt)
    return f"""def softmax({dt}(N, D) X) -> ({dt}(N, D) O) {{
  mx(n) max=! float(X(n, d))
  e(n, d) = exp(float(X(n, d)) - mx(n))
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
    """D / vec pieces, about 4 per thread (fewer threads for short rows),
    at most 1024 threads (a 32768-float row: 8 pieces, 32 values a thread)."""
    pieces = -(-d // vec_of(dtype))
    t = 32
    while t < 1024 and pieces > 4 * t:
        t *= 2
    return t


def softmax(d, dtype="float32", threads=None):
    op = tcomp.op(softmax_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "O", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("mx", "e", "sm", "rs"))
    return op, s


def layernorm(d, dtype="float32", threads=None):
    op = tcomp.op(layernorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "Y", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("sx", "mu", "sq", "rstd"))
    return op, s


def rmsnorm(d, dtype="float32", threads=None):
    op = tcomp.op(rmsnorm_src(dtype))
    s = tcomp.Schedule(op)
    templates.row_in_registers(s, "Y", threads or default_threads(d, dtype), vec_of(dtype),
                               cache=("X",), local=("ss", "r"))
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


ROW_KINDS = {"softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm,
             "add_layernorm": add_layernorm}
