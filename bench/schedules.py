"""Hand-written schedules for the benchmark suite (bench/suite.py).

Each function takes sizes and returns (op, schedule). The programs are plain
tensor comprehensions; everything about how they run is here.
"""
from __future__ import annotations

import tcomp
from tcomp.schedule import templates
from tcomp.schedule.matmul_shape import matmul_shape

GEMM = "def gemm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"

SOFTMAX = """def softmax(float(N, D) X) -> (O) {
  mx(n) max=! X(n, d)
  sm(n) +=! exp(X(n, d) - mx(n))
  O(n, d) = exp(X(n, d) - mx(n)) / sm(n)
}"""

LAYERNORM = """def layernorm(float(N, D) X, float(D) gamma, float(D) beta) -> (Y) {
  mean(n) +=! X(n, d) / float(D)
  var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
  Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) * gamma(d) + beta(d)
}"""

ROWSUM = "def rowsum(float(N, D) X) -> (S) { S(n) +=! X(n, d) }"

FMA = "def fma(float(N) A, float(N) B) -> (C) { C(i) = A(i) * B(i) + A(i) }"

TRANSPOSE = "def transpose(float(M, N) A) -> (O) { O(j, i) = A(i, j) }"

GELU = """def gelu_affine(float(N) X, float w, float b) -> (O) {
  O(i) = 0.5 * y * (1.0 + erf(y * 0.70710678118654752)) where y = X(i) * w + b
}"""


def gemm(sizes, bm=128, bn=128, bk=8, tm=8, tn=8, fragments=True, pipeline=False,
         vector=True, lanes=None, group=None, pad=False):
    """Blocks of bm x bn outputs; (bm/tm) x (bn/tn) threads, each a tm x tn
    register tile (cache_write local); A and B tiles of bk in shared memory,
    fetched by all threads; per-k fragments of them in registers (or read from
    shared memory directly when `fragments` is False); with `pipeline`, the
    next K tile is loaded into registers while this one is computed.

    With `vector`, the A tile is stored k-major (`storage_order`), so a
    thread's tm values of A at one k are contiguous like its tn values of B:
    both fragments load as 16-byte vectors from shared memory, and both tiles
    are fetched from global memory with 16-byte loads.

    With `lanes=(ln, lm)`, the 32 lanes of a warp are an ln x lm grid of threads
    (e.g. 4 x 8 instead of a 16 x 2 row): a warp then reads fewer distinct
    fragments of A and B from shared memory per k, and the 8 lanes of a
    16-byte load phase hit distinct banks. All threads are then one fused
    threadIdx.x axis. With `group=G`, blocks are numbered G block rows at a
    time, column by column (grid rasterization: blocks running together share
    A rows and B columns in the L2 cache; `rasterize`). With `pad`, the k-major A tile's
    rows are padded by 4 elements against bank conflicts of its stores."""
    op = tcomp.op(GEMM)
    s = tcomp.Schedule(op)
    templates.simt_gemm(s, "C", "A", "B", bm, bn, bk, tm, tn, fragments=fragments,
                        pipeline=pipeline, vector=vector, lanes=lanes, group=group, pad=pad)
    return op, s


def gemm_variant(variant: str) -> dict:
    """Schedule arguments of a GEMM variant name (bench/suite.py, tests):
    'frag' or 'shared' (fragments in registers or not), then any of '+pipe'
    (double buffering), '+scalar' (no 16-byte vectors, A tile m-major),
    '+bkN' (K tile depth N), '+warp' (4 x 8 lanes per warp), '+pad' (padded A
    tile rows), '+gN' (blocks rasterized N block rows at a time)."""
    first, *rest = variant.split("+")
    if first not in ("frag", "shared"):
        raise ValueError(f"GEMM variant '{variant}' must start with 'frag' or 'shared'")
    kw = {"fragments": first == "frag"}
    for t in rest:
        if t == "pipe":
            kw["pipeline"] = True
        elif t == "scalar":
            kw["vector"] = False
        elif t == "pad":
            kw["pad"] = True
        elif t == "warp":
            kw["lanes"] = (4, 8)
        elif t.startswith("g") and t[1:].isdigit():
            kw["group"] = int(t[1:])
        elif t.startswith("bk"):
            kw["bk"] = int(t[2:])
        else:
            raise ValueError(f"unknown GEMM variant part '{t}' in '{variant}'")
    return kw


SOFTMAX_RCP = """def softmax(float(N, D) X) -> (O) {
  mx(n) max=! X(n, d)
  sm(n) +=! exp(X(n, d) - mx(n))
  rs(n) = 1.0 / sm(n)
  O(n, d) = exp(X(n, d) - mx(n)) * rs(n)
}"""


def row_variant(variant: str) -> dict:
    """Schedule arguments of a row-op variant name (bench/suite.py, tests): ''
    or '+'-joined 'vecN' (passes over N-element vectors, fetch unrolled) and,
    for softmax, 'rcp' (multiply by the reciprocal of the sum)."""
    kw = {}
    for t in filter(None, variant.split("+")):
        if t.startswith("vec") and t[3:].isdigit():
            kw["vec"] = int(t[3:])
        elif t == "rcp":
            kw["rcp"] = True
        else:
            raise ValueError(f"unknown row-op variant part '{t}' in '{variant}'")
    return kw


def _row_stage_reduce(stage, threads, vec=1):
    """A per-row reduction over d spread over `threads` threads (cross-thread);
    with `vec`, each thread reduces `vec` consecutive elements at a time (an
    unrolled loop: reduction axes are not vectorized, but the consecutive
    aligned shared-memory reads are left for the CUDA compiler to merge)."""
    (d,) = stage.reduce_axes
    if vec > 1:
        d, dv = stage.split(d, vec)
    do, di = stage.split(d, threads)
    if vec > 1:
        stage.reorder(di, do, dv)
        stage.unroll(dv)
    else:
        stage.reorder(di, do)
    stage.bind(di, "threadIdx.x")


def _row_fetch(S, threads, vec=4, unroll=False):
    """Copy one row into shared memory with `vec`-wide vector accesses (the
    loop over the row's chunks unrolled: all loads in flight at once)."""
    a0, a1 = S.axes
    a1o, a1v = S.split(a1, vec)
    a1oo, a1oi = S.split(a1o, threads)
    S.bind(a1oi, "threadIdx.x")
    S.vectorize(a1v)
    if unroll:
        S.unroll(a1oo)


def _row_op(src, out, temps, threads, shared_row, local_temps, vec=1, extra=(), inline=()):
    """One block per row. The row's statistics (`temps`) are cross-thread
    reductions computed at the row loop, kept in registers (`local_temps`);
    the row is read once into shared memory (`shared_row`) or re-read through
    the L2 cache by each pass. With `vec` > 1 every pass over the row works
    on `vec`-element vectors (and the fetch is unrolled); `extra` are
    per-row scalars computed from the statistics (e.g. a reciprocal); `inline`
    temporaries substituted into their readers first (softmax's exponentials)."""
    op = tcomp.op(src)
    s = tcomp.Schedule(op)
    for t in inline:
        s[t].compute_inline()
    O = s[out]
    n, d = O.axes
    O.bind(n, "blockIdx.x")
    if vec > 1:
        d, dv = O.split(d, vec)
    do, di = O.split(d, threads)
    O.bind(di, "threadIdx.x")
    if vec > 1:
        O.vectorize(dv)
    if shared_row:
        XS = s.cache_read("X", "shared", [s[r] for r in templates.readers_for(
            s, "X", list(temps) + list(extra) + [out])])
        XS.compute_at(O, n)
        _row_fetch(XS, threads, unroll=vec > 1)
    for t in temps:
        s[t].compute_at(O, n)
        _row_stage_reduce(s[t], threads, vec if shared_row else 1)
        if local_temps:
            s[t].set_scope("local")
    for t in extra:
        s[t].compute_at(O, n)
        s[t].set_scope("local")
    return op, s


def softmax(sizes, threads=512, shared_row=True, local_temps=True, vec=1, rcp=False):
    """max and sum of exponentials per row, then the normalised row. With
    `rcp`, the program multiplies by the reciprocal of the sum (one division
    per row instead of one per element)."""
    if rcp:
        return _row_op(SOFTMAX_RCP, "O", ("mx", "sm"), threads, shared_row, local_temps, vec,
                       extra=("rs",))
    return _row_op(SOFTMAX, "O", ("mx", "sm"), threads, shared_row, local_temps, vec)


def layernorm(sizes, threads=512, shared_row=True, local_temps=True, vec=1):
    """mean and variance per row, then the normalised, scaled row."""
    return _row_op(LAYERNORM, "Y", ("mean", "var"), threads, shared_row, local_temps, vec)


def rowsum(sizes, threads=256, unroll=8):
    """One block per row, the row spread over threads (coalesced), a
    cross-thread sum at the end."""
    op = tcomp.op(ROWSUM)
    s = tcomp.Schedule(op)
    S = s["S"]
    (n,) = S.axes
    (d,) = S.reduce_axes
    do, di = S.split(d, threads)
    doo, doi = S.split(do, unroll)
    S.reorder(n, di, doo, doi)
    S.bind(n, "blockIdx.x")
    S.bind(di, "threadIdx.x")
    S.unroll(doi)
    return op, s


def transpose(sizes, tile=32, rows=8):
    """32x32 tiles through shared memory padded to a 33-float row stride (no
    bank conflicts); reads coalesced along A's rows, writes along O's."""
    op = tcomp.op(TRANSPOSE)
    s = tcomp.Schedule(op)
    O = s["O"]
    j, i = O.axes
    jo, io, ji, ii = O.tile(j, i, tile, tile)
    O.bind(jo, "blockIdx.y")
    O.bind(io, "blockIdx.x")
    jio, jii = O.split(ji, rows)
    O.reorder(jo, io, jio, jii, ii)
    O.bind(jii, "threadIdx.y")
    O.bind(ii, "threadIdx.x")
    AS = s.cache_read("A", "shared", [O])
    AS.compute_at(O, io)
    a0, a1 = AS.axes
    a0o, a0i = AS.split(a0, rows)
    AS.bind(a0i, "threadIdx.y")
    AS.bind(a1, "threadIdx.x")
    AS.storage_align(a0, tile, 1)
    return op, s


def gelu(sizes, threads=256, vec=4):
    op = tcomp.op(GELU)
    s = tcomp.Schedule(op)
    O = s["O"]
    (i,) = O.axes
    io, iv = O.split(i, vec)
    O.vectorize(iv)
    ioo, ioi = O.split(io, threads)
    O.bind(ioo, "blockIdx.x")
    O.bind(ioi, "threadIdx.x")
    return op, s


def fma(sizes=None, threads=256):
    """The launch-cost kernel (bench/launch_overhead.py): one element per thread."""
    op = tcomp.op(FMA)
    s = tcomp.Schedule(op)
    C = s["C"]
    (i,) = C.axes
    io, ii = C.split(i, threads)
    C.bind(io, "blockIdx.x")
    C.bind(ii, "threadIdx.x")
    return op, s


TC_GEMM = "def gemm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
# bfloat16 in, float32 out (accumulated in float32 and stored as is)
TC_GEMM_F32_OUT = ("def mm(bfloat16(M,K) A, bfloat16(K,N) B) -> (C) "
                   "{ C(m, n) +=! float(A(m, k)) * float(B(k, n)) }")


# the same product with B given as (N, K) ("NT"), A as (K, M) ("TN"), both ("TT"); and
# batched (torch.bmm): tc_gemm takes each as it is (Stage.tensorize: either operand in either
# major order, batch axes over blockIdx.z)
TC_LAYOUTS = {
    "NN": TC_GEMM,
    "NT": "def gemm_nt(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }",
    "TN": "def gemm_tn(bfloat16(K,M) A, bfloat16(K,N) B) -> (C) { C(m, n) +=! A(k, m) * B(k, n) }",
    "TT": "def gemm_tt(bfloat16(K,M) A, bfloat16(N,K) B) -> (C) { C(m, n) +=! A(k, m) * B(n, k) }",
}
TC_BMM = ("def bmm(bfloat16(NB,M,K) A, bfloat16(NB,K,N) B) -> (C) "
          "{ C(b, m, n) +=! A(b, m, k) * B(b, k, n) }")
# bench/tc_gemm.py's BEST_SWZ: swizzled tiles, a cp.async ring of 3, paired stores
TC_BEST = dict(bm=128, bn=128, wm=64, wn=64, bk=64, pipeline=3, swizzle=True, pair_stores=True)


TC_GEMM_GELU = """def gemm_bias_gelu(bfloat16(M,K) A, bfloat16(K,N) B, float(N) bias) -> (D) {
  C(m, n) +=! float(A(m, k)) * float(B(k, n))
  D(m, n) = bfloat16(0.5 * x * (1.0 + erf(x * 0.70710678118654752))) where x = C(m, n) + bias(n)
}"""


def tc_gemm(op=None, bm=128, bn=128, wm=64, wn=64, bk=32, lanes=32, vector=True, pad=None,
            pipeline=False, unroll_k=False, swizzle=False, pair_stores=False,
            fragment_pipeline=0, smem_epilogue=False):
    """Tensor-core GEMM (mma.sync m16n8k16) of `op` (TC_GEMM by default; any
    one-statement product tensorize takes: TC_LAYOUTS' transposed operands,
    TC_BMM's batch on blockIdx.z): blocks of bm x bn outputs, warps
    of wm x wn (threadIdx.y, 32 lanes along threadIdx.x), K tiles of bk in
    shared memory copied by all threads (16-byte pieces with `vector`), per
    k16 step A and B fragments loaded with ldmatrix, float32 accumulators in
    fragments, stored by their layout (rounded to the output type). With
    `pad` (the default unless `swizzle`), the shared tiles' rows are padded by
    8 elements (16 bytes): the 8 row addresses of each ldmatrix then fall in
    distinct banks. With `swizzle`, the tiles are XOR-swizzled instead
    (Stage.swizzle: the same conflict-free ldmatrix and cp.async stores, no
    padding; rows of the A and B tiles, bk and bn elements, must be 32 or 64
    bytes or a multiple of 128). With
    `pipeline=True` (or 2), the next K tile is loaded into registers while
    this one is computed (double-buffered shared tiles); with pipeline=N (3 to
    5), the tiles of the next N-1 steps are copied with cp.async into a ring
    of N shared buffers (`Stage.pipeline`). An `op` of two statements (a GEMM
    `C` then an elementwise output of it, e.g. TC_GEMM_GELU) gets the same
    schedule on its output, with C kept in fragments: the epilogue is computed
    from the accumulator registers (fused, no round trip through memory).
    With `unroll_k`, the k16 steps of each K tile are unrolled. With
    `pair_stores`, each lane stores its two adjacent output columns as one
    32-bit (bfloat16x2) or 64-bit (float2) store where N is even (else one
    by one). With `fragment_pipeline=2`, the A and B fragments of k16 step
    k+1 are loaded (ldmatrix) before the mma of step k, into a second set of
    fragment registers (`Stage.pipeline` on the k16 loop); it unrolls that
    loop, so it replaces `unroll_k`. With `smem_epilogue`, the block's output
    tile is staged in shared memory (in the output's type; a fused epilogue
    computed from the fragments on the way in) and copied to global memory
    by all threads in 16-byte vectors (templates.tc_tiles documents it; it
    costs bm * bn output elements of shared memory).'"""
    op = op or tcomp.op(TC_GEMM)
    s = tcomp.Schedule(op)
    if len(s.stages) == 1:  # any product tensorize takes: batched, either operand transposed
        C = s[op.outputs[0].name]
        CF = s.cache_write(C, "fragment")
    else:  # C(m, n) +=! ... then an elementwise D(m, n) of it: D's loops, C in fragments
        C, CF = s[op.outputs[0].name], s["C"]
        CF.set_scope("fragment")
    shape = matmul_shape(s.states[CF.name].definition)
    a, b = ("A", "B") if isinstance(shape, str) else (shape.a, shape.b)  # (tensorize says why)
    _tc_tiles(s, C, CF, lambda: s.cache_read(a, "shared", [CF]),
              lambda: s.cache_read(b, "shared", [CF]), bm, bn, wm, wn, bk, lanes, vector,
              not swizzle if pad is None else pad, pipeline, unroll_k, swizzle=swizzle,
              pair_stores=pair_stores, fragment_pipeline=fragment_pipeline,
              smem_epilogue=smem_epilogue)
    return op, s


TC_CONV2D = """def conv2d(float16(N, H, W, C) X, float16(R, K) Wt) -> (O) {
  Acol(p, r) = h >= 0 && h < H && w >= 0 && w < W ? X(n, h, w, r % C) : float16(0.0)
      where n = p / (H * W), h = p / W % H + r / (3 * C) - 1, w = p % W + r / C % 3 - 1,
            p in 0:N * H * W, r in 0:9 * C
  O(p, k) +=! Acol(p, r) * Wt(r, k)
}"""


def tc_conv2d(op=None, bm=128, bn=128, wm=64, wn=64, bk=32, lanes=32, vector=True, pad=None,
              pipeline=False, unroll_k=False, swizzle=False, pair_stores=False,
              fragment_pipeline=0, smem_epilogue=False):
    """Tensor-core 3x3 convolution, stride 1, padding 1, NHWC (TC_CONV2D) as
    a GEMM over an explicit im2col stage: O(p, k), the output pixels p = (n,
    h, w) by the filters k, sums Acol(p, r) Wt(r, k) over r = (kh, kw, c),
    where Acol gathers the input window of pixel p (0 in the padding) and Wt
    is the filter bank as a (3 * 3 * C) x K matrix (R = 9 C; filters (K, C,
    3, 3) are Wt = F.permute(2, 3, 1, 0).reshape(9 C, K)). Acol is never
    stored in global memory: it is computed in shared memory at the K-tile
    loop, in A's place in `tc_gemm` (same arguments, same schedule for the
    rest); with `vector`, in pieces of 8 consecutive channels, which become
    16-byte cp.async copies with zero-fill in the padding when pipelined
    (pipeline=3..5) and C is a multiple of 8. `pad`, `swizzle`,
    `pair_stores`, `fragment_pipeline` and `smem_epilogue` as in tc_gemm."""
    op = op or tcomp.op(TC_CONV2D)
    s = tcomp.Schedule(op)
    O = s["O"]
    OF = s.cache_write(O, "fragment")

    def gather():
        A = s["Acol"]
        A.set_scope("shared")
        return A
    _tc_tiles(s, O, OF, gather, lambda: s.cache_read("Wt", "shared", [OF]), bm, bn, wm, wn, bk,
              lanes, vector, not swizzle if pad is None else pad, pipeline, unroll_k,
              swizzle=swizzle, pair_stores=pair_stores, fragment_pipeline=fragment_pipeline,
              smem_epilogue=smem_epilogue)
    return op, s


_tc_tiles = templates.tc_tiles  # (the shared template: tcomp/schedule/templates.py)
