"""Schedule templates: parametrised schedules of common stage shapes, written
once with the primitives and used by the benchmarks (bench/schedules.py) and
by the search's rules (tcomp/search/rules/), so a hand schedule and the
search's point with the same parameters are the same directives.
"""
from __future__ import annotations

from ..errors import ScheduleError
from .matmul_shape import matmul_shape


def simt_gemm(s, stage, a_name, b_name, bm, bn, bk, tm, tn, fragments=True, pipeline=False,
              vector=True, lanes=None, group=None, pad=False, out=None):
    """SIMT GEMM tiling of `stage` (C(m, n) += A(m, k) * B(k, n), inputs named
    `a_name`, `b_name`): blocks of bm x bn outputs; (bm/tm) x (bn/tn) threads,
    each a tm x tn register tile (cache_write local); A and B tiles of bk in
    shared memory fetched by all threads (A k-major with `vector`, its rows
    padded by 4 with `pad`); per-k fragments in registers with `fragments`;
    double buffering with `pipeline`; `lanes=(ln, lm)`: a warp as an ln x lm
    grid of threads; `group`: grid rasterization (bench/schedules.py `gemm`
    documents each choice).

    With `out`, an elementwise stage out(m, n) reading the product `stage`
    (a temporary: GEMM + bias + activation) is tiled instead, and `stage`
    itself becomes the register tile (set_scope local, in place of the
    cache_write): the epilogue is computed from the accumulators, in the
    same kernel, and only `out` is stored. Several products read by `out`
    (SwiGLU's two GEMMs of one input) take `simt_accumulate` each."""
    if out is None:
        C = s[stage]
        CL = s.cache_write(C, "local")
    else:
        C, CL = s[out], s[stage]
        CL.set_scope("local")
    at, tx, ty = simt_output_tiles(C, bm, bn, tm, tn, lanes, group)
    simt_accumulate(s, CL, C, at, tx, ty, a_name, b_name, bn, bk, tm, tn, fragments, pipeline,
                    vector, pad)


def simt_output_tiles(C, bm, bn, tm, tn, lanes=None, group=None):
    """simt_gemm's tiling of the output stage C(m, n): bm x bn blocks (or
    rasterized by `group`), (bm/tm) x (bn/tn) threads (`lanes` as in
    bind_thread_tiles), each thread's tm x tn outputs unrolled, 4-wide
    vectors along n (2-wide where tn is not a multiple of 4, none for odd tn). Returns (the thread loop, tx, ty)."""
    m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, bm, bn)
    mio, mii = C.split(mi, tm)
    nio, nii = C.split(ni, tn)
    C.reorder(mo, no, mio, nio, mii, nii)
    if group:
        C.rasterize(mo, no, group)
    else:
        C.bind(mo, "blockIdx.y")
        C.bind(no, "blockIdx.x")
    at, tx, ty = bind_thread_tiles(C, mio, nio, bm // tm, bn // tn, lanes)
    C.unroll(mii)
    # vectors of 4 (or 2) that divide the thread's tn columns: a wider split's tail
    # would reach the next thread's columns, and the next block's at the tile's edge
    # (an in-place epilogue's copy wrote them there: refused by lowering now)
    width = 4 if tn % 4 == 0 else 2 if tn % 2 == 0 else 1
    if width == 1:
        C.unroll(nii)
        return at, tx, ty
    niio, niiv = C.split(nii, width)
    C.unroll(niio)
    C.vectorize(niiv)
    return at, tx, ty


def simt_accumulate(s, CL, C, at, tx, ty, a_name, b_name, bn, bk, tm, tn, fragments=True,
                    pipeline=False, vector=True, pad=False):
    """simt_gemm's register tile: the product stage CL (CL(m, n) += A(m, k) *
    B(k, n), inputs `a_name`, `b_name`) computed at C's thread loop `at` of a
    tx x ty block of bn-wide tiles, k split by bk, A and B tiles in shared memory, fragments,
    pipelining, vectors and padding as simt_gemm says."""
    CL.compute_at(C, at)
    lm, ln = CL.axes
    (lk,) = CL.reduce_axes
    ko, ki = CL.split(lk, bk)
    CL.reorder(ko, ki, lm, ln)
    if pipeline:
        CL.pipeline(ko)
    CL.unroll(ki)
    CL.unroll(lm)
    CL.unroll(ln)
    shared = {}
    for name in (a_name, b_name):
        S = s.cache_read(name, "shared", [CL])
        shared[name] = S.tensor
        S.compute_at(CL, ko)
        a0, a1 = S.axes
        if vector and name == a_name:
            S.storage_order(a1, a0)  # the A tile k-major: a thread's tm values contiguous
            if pad:
                S.storage_align(a1, 32, 4)
        f = S.fuse(a0, a1)
        spread_over_threads(S, f, tx, ty, 4 if vector and (bk if name == a_name else bn) % 4 == 0
                            else None)
    if fragments:
        for name in (a_name, b_name):
            L = s.cache_read(shared[name], "local", [CL])
            L.compute_at(CL, ki)
            a0, a1 = L.axes
            if vector and (tm if name == a_name else tn) % 4 == 0:
                c, o = (a0, a1) if name == a_name else (a1, a0)
                co, cv = L.split(c, 4)
                L.reorder(o, co, cv)
                L.unroll(o)
                L.unroll(co)
                L.vectorize(cv)
            else:
                for ax in L.axes:
                    L.unroll(ax)


def bind_thread_tiles(C, mio, nio, ty, tx, lanes):
    """Bind the thread loops of a register-tiled stage: mio (ty threads down)
    and nio (tx across) to threadIdx.y / threadIdx.x, or with `lanes=(ln, lm)`
    all threads to one threadIdx.x whose warps are ln x lm grids (mio split by
    lm, nio by ln). Returns (the loop the threads are bound at, tx, ty) with
    tx, ty the block's threadIdx.x / .y extents."""
    if lanes:
        ln, lm = lanes
        mw, ml = C.split(mio, lm)
        nw, nl = C.split(nio, ln)
        C.reorder(mw, nw, ml, nl)
        at = C.fuse(C.fuse(C.fuse(mw, nw), ml), nl)
        C.bind(at, "threadIdx.x")
        return at, tx * ty, 1
    C.bind(mio, "threadIdx.y")
    C.bind(nio, "threadIdx.x")
    return nio, tx, ty


def spread_over_threads(S, f, tx, ty, vec=None):
    """Spread the fused copy loop `f` of stage S over a tx x ty block: `vec`
    lanes innermost, vectorized (when given), then tx threads along
    threadIdx.x, then ty along threadIdx.y (when ty > 1)."""
    if vec:
        f, fv = S.split(f, vec)
        S.vectorize(fv)
    fo, fi = S.split(f, tx)
    S.bind(fi, "threadIdx.x")
    if ty > 1:
        _, foi = S.split(fo, ty)
        S.bind(foi, "threadIdx.y")


def tc_tiles(s, C, CF, a_shared, b_shared, bm, bn, wm, wn, bk, lanes, vector, pad, pipeline,
              unroll_k, swizzle=False, pair_stores=False, fragment_pipeline=0,
              smem_epilogue=False):
    """The tensor-core schedule of tc_gemm on the output stage `C` and its
    fragment accumulator `CF` (C(m, n) += A(m, k) * B(k, n), or any product
    `tensorize` takes: C(b.., m, n) batched, its batch axes fused onto
    blockIdx.z; A given as (k, m) and B as (n, k), each shared tile then
    padded by its own row length). `a_shared` and
    `b_shared` make the shared-memory stages of A and B (a cache_read of an
    input, or a temporary's own stage moved to shared memory), which are
    computed at the K-tile loop and read through fragments. Their ldmatrix
    reads are kept free of bank conflicts by `swizzle` (Stage.swizzle: XOR of
    16-byte chunks, no extra memory) or `pad` (rows padded by 16 bytes with
    storage_align); not both. With `pair_stores`, the output's columns are
    split by 2 and the inner loop vectorized: each lane's two adjacent
    accumulator columns are written as one 32-bit (bfloat16x2) or 64-bit
    (float2) store where the output's rows keep pairs aligned (N even and
    known at compile time), else element by element. With
    `fragment_pipeline=n` (2 to 5), the A and B fragments are loaded n-1 k16
    steps ahead of their mma into a ring of n register sets (`pipeline` on
    the k16 loop; the loop is then unrolled, so `unroll_k` adds nothing).

    With `smem_epilogue`, the output goes out through shared memory (the
    CUTLASS epilogue): `cache_write(C, "shared")` puts a stage between the
    fragments and C, which holds the block's bm x bn output tile in shared
    memory in C's type. Each warp stores its accumulators into that tile by
    their (lane, register) layout (a fused elementwise output, e.g. GELU, is
    computed from the fragments on the way; pairs with `pair_stores`), a
    barrier follows, and then C is an ordinary copy spread over all threads
    in 16-byte vectors (8 bfloat16 per access: a warp writes whole 128-byte
    lines of global memory, where the fragment layout writes scattered
    4-byte pieces). The staging tile is swizzled with `swizzle`, padded by
    16 bytes a row with `pad`, so the fragment stores and the vector reads
    are free of bank conflicts. It is extra shared memory (bm * bn elements
    of C's type, plus the padding) on top of the A/B tiles: the IR does not
    alias the pipeline ring's buffers with it. Returns the staging stage
    (or None)."""
    if pad and swizzle:
        raise ValueError("tc_tiles: pad and swizzle are two ways to the same end; pick one")
    CS = s.cache_write(C, "shared") if smem_epilogue else None  # (before C's loops change)
    *batch, m, n = C.axes
    mo, no, mi, ni = C.tile(m, n, bm, bn)
    C.bind(mo, "blockIdx.y")
    C.bind(no, "blockIdx.x")
    if batch:  # batched products: the batch axes (fused) over blockIdx.z
        b = batch[0]
        for x in batch[1:]:
            b = C.fuse(b, x)
        C.bind(b, "blockIdx.z")
    warps = (bm // wm) * (bn // wn)
    if CS is None:
        W, wmi, wni = C, mi, ni  # the warps store their fragments straight to C
    else:
        CS.compute_at(C, no)
        W = CS
        *_, wmi, wni = CS.axes
        if swizzle:
            CS.swizzle()
        elif pad:
            CS.storage_align(wmi, 2 * bn, bn + 16 // _itemsize(s, CS.tensor))
        vec = 16 // _itemsize(s, C.tensor)  # 16-byte pieces of the output's rows
        spread_block_copy(C, C.fuse(mi, ni), vec, lanes, warps, vector=bm * bn % vec == 0)
    mw, mf = W.split(wmi, wm)
    nw, nf = W.split(wni, wn)
    W.reorder(mw, nw, mf, nf)
    w = W.fuse(mw, nw)
    W.bind(w, "threadIdx.y")
    CF.compute_at(W, w)
    if pair_stores:  # the accumulator's layout gives each lane pairs of adjacent columns
        _, nv = W.split(nf, 2)
        W.vectorize(nv)
    *_, fm, fn = CF.axes
    (fk,) = CF.reduce_axes
    ko, ki = CF.split(fk, bk)
    kio, kii = CF.split(ki, 16)
    fmo, fmi = CF.split(fm, 16)
    fno, fni = CF.split(fn, 8)
    CF.reorder(ko, kio, fmo, fno, fmi, fni, kii)
    CF.tensorize(fmi, "mma_m16n8k16")
    AS = a_shared()
    AS.compute_at(CF, ko)
    BS = b_shared()
    BS.compute_at(CF, ko)
    AF = s.cache_read(AS, "fragment", [CF])
    AF.compute_at(CF, kio)
    BF = s.cache_read(BS, "fragment", [CF])
    BF.compute_at(CF, kio)
    shape = matmul_shape(s.states[CF.name].definition)
    if isinstance(shape, str):  # (tensorize above refused it already)
        raise ScheduleError(f"tc_tiles: stage '{CF.name}': {shape}")
    # the rows of each shared tile: A[m, k] rows of bk, A[k, m] of bm; B[k, n] of bn, B[n, k]
    # of bk
    for S, width in ((AS, bm if shape.a_trans else bk), (BS, bk if shape.b_trans else bn)):
        *_, a0, a1 = S.axes
        if swizzle:
            S.swizzle()
        elif pad:
            S.storage_align(a0, 2 * width, width + 8)
        spread_block_copy(S, S.fuse(a0, a1), 8, lanes, warps, vector)
    if pipeline:
        CF.pipeline(ko, stages=2 if pipeline is True else pipeline)
    if fragment_pipeline:  # A/B fragments of k16 step k+1 loaded during the mma of step k
        CF.pipeline(kio, stages=fragment_pipeline)
    if unroll_k:  # the k16 steps of a K tile unrolled: fragment loads overlap earlier mma
        CF.unroll(kio)
    return CS


def spread_block_copy(S, f, vec, lanes, warps, vector=True):
    """Spread the fused copy loop `f` of stage S over a block of `lanes` x
    `warps` threads (threadIdx.x, threadIdx.y): pieces of `vec` consecutive
    elements (vectorized with `vector`), consecutive pieces to consecutive
    lanes, then warps, then an outer serial loop."""
    fo, fv = S.split(f, vec)
    fo2, tx = S.split(fo, lanes)
    _, ty = S.split(fo2, warps)
    S.bind(tx, "threadIdx.x")
    S.bind(ty, "threadIdx.y")
    if vector:
        S.vectorize(fv)


def _itemsize(s, tensor):
    return s.tensors[tensor][0].bits // 8


def _row_axes(O, who):
    """(the row loop: O's leading axes fused, the row's element axis, O's rank)."""
    if len(O.axes) < 2:
        raise ScheduleError(f"{who}: stage '{O.name}' needs two or more axes (out(n, d):"
                            f" the rows, then a row's elements); it has {len(O.axes)}")
    *lead, d = O.axes
    n = lead[0]
    for a in lead[1:]:
        n = O.fuse(n, a)
    return n, d, len(lead) + 1


def row_streamed(s, out, threads, vec, unroll, stats, scalars=(), cache=None):
    """One block per row n of `out(n, d)` (leading axes fused), the row
    *streamed*: each reduction in `stats` (a row statistic over d) is its own
    pass over the row, reading the row-shaped inputs it reads directly
    (`cache[stat]`; default: every input of the row's rank it reads) in
    `vec`-element pieces through a per-piece register cache (a cache_read at
    the piece loop, vectorized: 16-byte loads), `out` is a last pass with
    vectorized accesses, and `scalars` (per-row values computed from the
    statistics: layernorm's mu and rstd) are computed once per thread at the
    row loop in registers. The piece loops are unrolled by `unroll` only
    (`unroll(ax, factor=unroll)`): unrolled fully, the CUDA compiler issues
    every pass's loads at once and holds the row in registers. The row is
    read from DRAM by the first pass and from L2 by the others; each thread
    holds one piece per input at a time, so a block needs few registers and
    several blocks (rows) share an SM. Returns the stage `out`."""
    O = s[out]
    n, d, rank = _row_axes(O, "row_streamed")
    O.bind(n, "blockIdx.x")
    dd, dv = O.split(d, vec)
    do, di = O.split(dd, threads)
    O.bind(di, "threadIdx.x")
    O.vectorize(dv)
    O.unroll(do, factor=unroll)
    for name in stats:
        st = s[name]
        st.compute_at(O, n)
        (r,) = st.reduce_axes
        rr, rv = st.split(r, vec)
        ro, ri = st.split(rr, threads)
        st.reorder(ri, ro, rv)
        st.bind(ri, "threadIdx.x")
        st.unroll(rv)
        st.unroll(ro, factor=unroll)
        st.set_scope("local")
        reads = s.states[name].definition.reads()
        inputs = cache.get(name, ()) if cache is not None else [
            t.name for t in s.op.inputs if len(t.shape) == rank and t.name in reads]
        for tensor in inputs:
            C = s.cache_read(tensor, "local", [st])
            C.compute_at(st, ro)
            _, cv = C.split(C.axes[-1], vec)
            C.vectorize(cv)
    for name in scalars:
        s[name].compute_at(O, n)
        s[name].set_scope("local")
    return O


def row_pipelined(s, out, rows, threads, vec, stats, scalars=(), cache=None, stages=3,
                  local=(), outputs=()):
    """Persistent blocks, each over `rows` consecutive rows n of `out(n, d)`
    (leading axes fused), the rows *prefetched*: each input row is copied
    into a ring of `stages` shared-memory rows (`cache`: the inputs of the
    row's rank that `out`, the `stats`, the `local` temporaries and the
    inlined stages read; default: all of them), with 16-byte `cp.async`
    copies issued `stages` - 1 rows ahead of the row being computed
    (`pipeline(r, stages)`; stages=2: through registers), so the next rows'
    DRAM reads are in flight while a block reduces and writes the current
    one. Every stage is spread over the row as `row_slices` spreads it
    (`threads` threads, `vec`-element pieces): each reduction in `stats` is a
    pass over the shared row (cross-thread, in registers), `local` are
    row-shaped temporaries computed once per row into registers (softmax's
    exponentials, read by the sum and the output), `scalars` are per-row
    values computed once per thread, and `out` (and the other row-shaped
    `outputs`, stored from the same registers: a fused kernel's second output)
    is written with `vec`-element vector stores. Costs `stages` rows of shared
    memory per block: a 64 KiB
    bfloat16 row of 32768 takes 192 KiB at stages=3, one block per SM, so a
    grid of about one block per SM (`rows` = rows / SMs, rounded up) keeps
    every SM's DRAM reads in flight. Returns the stage `out`."""
    O = s[out]
    n, d, rank = _row_axes(O, "row_pipelined")
    b, r = O.split(n, rows)
    O.bind(b, "blockIdx.x")
    row_slices(O, d, threads, vec)
    readers = list(stats) + list(local) + list(outputs) + list(scalars) + [out]
    if cache is None:
        reads = set()
        for name in readers:
            reads |= s.states[name].definition.reads()
        for st in s.states.values():
            if st.attach == ("inline",):
                reads |= st.definition.reads()
        cache = [t.name for t in s.op.inputs if len(t.shape) == rank and t.name in reads]
    for tensor in cache:
        C = s.cache_read(tensor, "shared", [s[x] for x in readers_for(s, tensor, readers)])
        C.compute_at(O, r)
        row_slices(C, C.axes[-1], threads, vec)
    for name in list(stats) + list(local) + list(outputs):
        st = s[name]
        st.compute_at(O, r)
        if name not in outputs:
            st.set_scope("local")
        row_slices(st, st.reduce_axes[-1] if name in stats else st.axes[-1], threads, vec)
    for name in scalars:
        s[name].compute_at(O, r)
        s[name].set_scope("local")
    O.pipeline(r, stages=stages)
    return O


def row_slices(stage, axis, threads, vec, tag="threadIdx.x"):
    """Spread `axis` (a row of a tensor, or a reduction over one) over
    `threads` threads in pieces of `vec` consecutive elements: element
    d = (k * threads + t) * vec + v goes to thread t (bound to `tag`), piece k
    (unrolled), lane v (vectorized on a spatial axis; unrolled on a reduction
    axis, whose thread loop is moved outermost for the cross-thread
    reduction). Consecutive threads take consecutive pieces (coalesced: a
    warp moves 32 x 16 bytes per access with vec * element size = 16), and
    every stage given the same (threads, vec) touches the same elements in
    each thread, so a local buffer written by one is read by the others from
    the thread's own registers (the `registers` pass). Returns (k, t, v)."""
    ax, v = stage.split(axis, vec)
    k, t = stage.split(ax, threads)
    stage.bind(t, tag)
    stage.unroll(k)
    if axis in stage.reduce_axes:
        stage.reorder(t, k, v)
        stage.unroll(v)
    else:
        stage.vectorize(v)
    return k, t, v


def readers_for(s, tensor, stages) -> list[str]:
    """The stages that read `tensor` on behalf of `stages` (names): those of
    `stages` that read it, and inlined stages that read it and are
    substituted only into `stages` (directly or through other inlined
    stages; softmax's inlined e(n, d) = exp(X(n, d) - mx(n)) reads X for sm
    and O). A cache of `tensor` for `stages` must be read by all of them."""
    stages = set(stages)

    def serves(name):
        if name in stages:
            return True
        st = s.states[name]
        users = [r for r in s.readers(st.tensor) if r != name]
        return st.attach == ("inline",) and bool(users) and all(serves(r) for r in users)
    return [r for r in s.readers(tensor) if serves(r)]


def row_in_registers(s, out, threads, vec, cache=(), local=(), outputs=(), shared=()):
    """One block per row n of `out(n, d)`, the row held in registers across
    the block: each thread owns the elements `row_slices` gives it. An `out`
    of more than two dimensions has its leading axes fused into the row loop
    (`out(b, n, d)`: one block per (b, n)).

    cache: input tensors read once into registers (local caches computed at
    the row loop, 16-byte loads), for the stages below and the inlined stages
    substituted into them (`readers_for`); local: the op's temporaries, computed at the
    row loop in registers — row-shaped ones (n, d) sliced like the row,
    reductions over d (row statistics) as cross-thread reductions (warp
    shuffles and one shared-memory step), per-row scalars once per thread;
    outputs: other row-shaped outputs computed at the row loop and stored from
    the same registers (a second output of a fused kernel). All stages share
    `threads` and `vec`, so no element moves between threads.

    shared: inputs of shape (D,) that only `out` reads (layernorm's gamma
    and beta, RMSNorm's weight) staged in shared memory before the row's
    work: the row loop is split by 1 and their copies are computed at the
    outer (block) loop, so their loads are issued with the row's loads and
    are stored into shared memory before the first barrier, instead of
    being loaded from L2 after the row's reductions (where the load latency
    is exposed, and where the compiler sinks register-cached loads to save
    registers). Costs D elements of shared memory per tensor (64 KiB for a
    32768-long bfloat16 row). Returns the stage `out`."""
    O = s[out]
    n, d, rank = _row_axes(O, "row_in_registers")
    row = n
    if shared:
        n, row = O.split(n, 1)
    O.bind(n, "blockIdx.x")
    row_slices(O, d, threads, vec)
    names = list(local) + list(outputs)
    for name in cache:
        readers = [s[r] for r in readers_for(s, name, names + [out])]
        C = s.cache_read(name, "local", readers)
        C.compute_at(O, row)
        row_slices(C, C.axes[-1], threads, vec)
    for name in shared:
        W = s.cache_read(name, "shared", [O])
        W.compute_at(O, n)
        row_slices(W, W.axes[-1], threads, vec)
    for name in names:
        st = s[name]
        st.compute_at(O, row)
        if name in local:
            st.set_scope("local")
        if st.reduce_axes:
            row_slices(st, st.reduce_axes[-1], threads, vec)
        elif len(st.axes) == rank:  # row-shaped (n, d), not a per-row scalar
            row_slices(st, st.axes[-1], threads, vec)
    return O
