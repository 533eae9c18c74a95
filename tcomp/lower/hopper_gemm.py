"""The Hopper GEMM as Kernel IR, from a plan (hopper_plan.py reads it off a
schedule): `C(m, n) += A . B` in bfloat16 or float16 with float32
accumulation, A given as (M, K) or (K, M), B as (N, K) or (K, N).

Built from the IR's Hopper pieces, with nothing CUDA-specific here:

* the output tiles (bm x bn) in grouped order (`group_m` row tiles side by
  side, so that the blocks running at once share A and B tiles in L2),
  walked by a persistent grid of one block per multiprocessor (ir.SM_COUNT)
  or one block per tile;
* warpgroups in a `Specialize`: one producer (its registers given back,
  setmaxnreg) whose one thread issues TMA loads of A and B tiles (128-byte
  swizzle) into a ring of `stages` shared slots, and `consumers` warpgroups
  (registers taken) each computing a 64 x bn slice of the tile with wgmma
  m64n{bn}k16, its accumulators in registers;
* full/empty mbarriers per slot: the producer waits for a slot's empty
  barrier (every consumer arrived), announces the slot's bytes and issues
  its copies on the full barrier; a consumer waits for the full barrier,
  issues bk / 16 wgmma, waits for them and arrives on the empty barrier;
  phases are the parity of the ring's pass (the producer's first pass
  waits on the parity before the first phase, which has completed);
* an operand given K-major (A(M, K), B(N, K)) is one box of bm (bn) rows of
  64 K-values per slot; one given MN-major (A(K, M), B(K, N)) is bm / 64
  (bn / 64) boxes of 64 K-rows of 64 M- (N-) values, wgmma reading it
  transposed (trans_a / trans_b);
* an epilogue through shared memory: each consumer converts its
  accumulators to C's type in chunks of 128 bytes per row of a swizzled
  staging tile and stores each chunk with a TMA store (out-of-range rows
  and columns are not written, so any M and N work; K's tail is read as
  zeros; K = 0 stores zeros).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arch.fragments import wgmma_d
from ..arch.hierarchy import THREAD_INDEX
from ..lang import dtypes
from . import ir
from .barriers import init_barrier_objects
from .intrinsics_sm90 import wgmma_intrinsic
from .layout_exprs import IR as LAYOUT_IR
from .printer import expr as expr_text

F32, I32, U64 = dtypes.float32, dtypes.int32, dtypes.uint64
WARPGROUP = 128
MN_BLOCK = 64  # M or N values per 128-byte row of an MN-major tile


@dataclass(frozen=True)
class GemmPlan:
    name: str  # the kernel's name
    a: str
    b: str
    c: str
    dtype: dtypes.DType  # A's and B's
    out: dtypes.DType  # C's
    a_mn: bool  # A given as (K, M)
    b_mn: bool  # B given as (K, N)
    M: ir.Expr
    N: ir.Expr
    K: ir.Expr
    sizes: tuple[str, ...]  # the size parameters M, N, K use
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True
    # two consumers ping-ponging on whole tiles (one's epilogue under the other's
    # mainloop) instead of cooperating on one tile (bm / 64 slabs per consumer)
    pingpong: bool = False
    # a batch of products (C[z, m, n]): its count; which operands have the batch axis (3-D
    # tensors, 3-D TMA boxes of one matrix); the tiles of every matrix walked together
    Z: ir.Expr | None = None
    a_batched: bool = False
    b_batched: bool = False
    # a consumer keeps one slot's wgmma in flight while it issues the next slot's (wgmma_wait(1),
    # the previous slot handed back); False: it waits for each slot's wgmma (wgmma_wait(0))
    mma_overlap: bool = True
    # B's type where it differs from A's (fp8: e4m3 x e5m2; lower/hopper_fp8 in docs)
    b_dtype: dtypes.DType | None = None
    # an elementwise epilogue: epilogue(row, col, acc) -> the value stored at the global
    # (row, col) from the float32 accumulator `acc` (None: acc cast to `out`); `loads`: the
    # global buffers it reads (kernel parameters), read only where (row, col) is in range
    epilogue: object = None
    loads: tuple[str, ...] = ()
    # A is a convolution's im2col matrix (lower/im2col.py's Window): its tiles are im2col
    # copies of the input's windows (M: the output pixels, K: filter position by channel)
    window: object = None
    # the 0-d tensors of `loads` (per-tensor scales) with their types: loaded once per consumer
    # into the variable scalar_var(tensor), which `epilogue` reads
    scalars: tuple = ()

    @property
    def k_step(self) -> int:
        """K per wgmma: 32 bytes of the inputs (k16 for 16-bit, k32 for fp8)."""
        return 256 // self.dtype.bits

    @property
    def chunk(self) -> int:
        """Columns per TMA store of the epilogue: one 128-byte swizzled row."""
        return 128 // (self.out.bits // 8)


def scalar_var(tensor: str) -> str:
    """The variable holding a 0-d tensor the epilogue reads (GemmPlan.scalars)."""
    return f"{tensor}_value"


# ------------------------------------------------------------------ IR helpers
def c(v):
    return ir.const(v)


def v(name, dt=I32):
    return ir.Var(name, dt)


def b(op, x, y, dt=I32):
    return ir.Bin(op, x if isinstance(x, ir.Expr) else c(x), y if isinstance(y, ir.Expr) else c(y),
                  dt)


def call(fn, *args):
    return ir.Evaluate(ir.Call(fn, tuple(args), I32))


def ref(buf, *idx):
    return ir.Ref(buf, tuple(i if isinstance(i, ir.Expr) else c(i) for i in idx))


def let(name, value, body):
    return ir.Let(name, value, body)


def serial(var, extent, body, kind="serial"):
    return ir.For(var, c(0), extent if isinstance(extent, ir.Expr) else c(extent), kind, body)


def ceil_div(x, n):
    return b("/", b("+", x, n - 1), n)


TID = v(THREAD_INDEX)  # (its blocks are 1-D: warpgroups of 128 consecutive threads)


def one_thread(body):
    """`body` on the first thread of the warpgroup."""
    return ir.If(b("==", b("%", TID, WARPGROUP), 0, dtypes.bool_), body)


# ------------------------------------------------------------------ the kernel
def tile_coords(p: GemmPlan, body):
    """Lets m0, n0: the first row and column of tile `tile` in grouped order
    (and bz, its matrix of the batch: tiles of one matrix are consecutive)."""
    if p.Z is not None:
        per_matrix = b("*", v("m_tiles"), v("n_tiles"))
        return let("bz", b("/", v("tile"), per_matrix),
                   let("tile_z", b("%", v("tile"), per_matrix), _grouped(p, "tile_z", body)))
    return _grouped(p, "tile", body)


def _grouped(p: GemmPlan, tile: str, body):
    g = p.group_m
    per_group = b("*", v("n_tiles"), g)
    return let("group", b("/", v(tile), per_group),
           let("first_m", b("*", v("group"), g),
           let("group_rows", b("min", b("-", v("m_tiles"), v("first_m")), g),
           let("in_group", b("%", v(tile), per_group),
           let("m0", b("*", b("+", v("first_m"), b("%", v("in_group"), v("group_rows"))), p.bm),
           let("n0", b("*", b("/", v("in_group"), v("group_rows")), p.bn), body))))))


def tile_loop(p: GemmPlan, body, own: bool = False):
    """For each of this block's tiles (tile = blockIdx.x + t * gridDim.x);
    `own`: only consumer w's of them (t = w, w + 2, ...: ping-pong)."""
    sms = v(ir.SM_COUNT)
    count = (b("/", b("+", b("-", v("tiles"), v("blockIdx.x")), b("-", sms, 1)), sms)
             if p.persistent else c(1))
    first = v("blockIdx.x")
    per_tile = let("tile", b("+", first, b("*", v("t"), sms)) if p.persistent else first,
                   tile_coords(p, body))
    if not own:
        return serial("t", count, per_tile)
    mine = b("/", b("+", b("-", count, v("w")), 1), 2)
    return serial("u", mine, let("t", b("+", b("*", v("u"), 2), v("w")), per_tile))


def ring_slot(p: GemmPlan, body):
    """Lets it (the ring's running iteration), slot and phase parity."""
    return let("it", b("+", b("*", v("t"), v("k_tiles")), v("kb")),
           let("slot", b("%", v("it"), p.stages),
           let("parity", b("%", b("/", v("it"), p.stages), 2), body)))


def _loads(p: GemmPlan, buf, tmap, rows, first, mn, batched):
    """The TMA loads of one operand's tile into slot `slot`: one box
    (rows x bk) K-major, or rows / 64 boxes (bk x 64) MN-major; of matrix bz
    of a batched operand (3-D copies)."""
    k0 = b("*", v("kb"), p.bk)
    bar = ref("full", v("slot"))
    fn, z = ("tma_load_3d", (v("bz"),)) if batched else ("tma_load_2d", ())
    if not mn:
        return [call(fn, ref(buf, v("slot"), 0, 0), v(tmap, U64), bar, *z, first, k0)]
    return [call(fn, ref(buf, v("slot"), j, 0, 0), v(tmap, U64), bar, *z, k0,
                 b("+", first, j * MN_BLOCK) if j else first) for j in range(rows // MN_BLOCK)]


def _window_loads(p: GemmPlan):
    """The im2col copy of A's tile (bm pixels from m0, the 64 channels of K
    tile kb): filter position kb * 64 / C, its first channel kb * 64 % C;
    the window start of pixel m0 (n, ho - pad_h, wo - pad_w), the position's
    offsets (kh, kw)."""
    w = p.window
    k0 = b("*", v("kb"), p.bk)
    tap = b("/", k0, w.C)
    pix = b("*", w.Ho, w.Wo)
    rest = b("%", v("m0"), pix)
    return [call("tma_load_im2col_4d", ref("A_s", v("slot"), 0, 0), v("tmA", U64),
                 ref("full", v("slot")), b("/", v("m0"), pix),
                 b("-", b("/", rest, w.Wo), w.pad_h), b("-", b("%", rest, w.Wo), w.pad_w),
                 b("%", k0, w.C), b("/", tap, w.S), b("%", tap, w.S))]


def producer(p: GemmPlan):
    tx = (p.bm + p.bn) * p.bk * p.dtype.bits // 8
    issue = ir.seq(
        call("mbarrier_wait", ref("empty", v("slot")), b("^", v("parity"), 1)),
        call("mbarrier_expect_tx", ref("full", v("slot")), c(tx)),
        *(_window_loads(p) if p.window is not None else
          _loads(p, "A_s", "tmA", p.bm, v("m0"), p.a_mn, p.a_batched)),
        *_loads(p, "B_s", "tmB", p.bn, v("n0"), p.b_mn, p.b_batched))
    loop = tile_loop(p, serial("kb", v("k_tiles"), ring_slot(p, issue)))
    return ir.Role("p", "producer", 0, 1, p.producer_regs, one_thread(loop))


def _slabs(p: GemmPlan) -> int:
    """64-row slabs one consumer computes per tile: its 64 rows of the tile
    (cooperative), or the whole tile (ping-pong)."""
    return p.bm // 64 if p.pingpong else 1


def _slab_row(p: GemmPlan, s: int):
    """The first row in the tile of consumer w's slab s."""
    return c(s * 64) if p.pingpong else b("*", v("w"), 64)


def _plus(x, y):
    return x if isinstance(y, ir.Imm) and y.value == 0 else b("+", x, y)


def _operand_refs(p: GemmPlan, s: int):
    """The wgmma operands of slab s in k16 step kk of slot `slot`."""
    kk16 = b("*", v("kk"), p.k_step)
    row = _slab_row(p, s)
    a = (ref("A_s", v("slot"), c(s) if p.pingpong else v("w"), kk16, 0) if p.a_mn else
         ref("A_s", v("slot"), row, kk16))
    bb = ref("B_s", v("slot"), 0, kk16, 0) if p.b_mn else ref("B_s", v("slot"), 0, kk16)
    return a, bb


def chunk_stores(columns: int, chunk: int, put, store):
    """Consumer w's epilogue through its staging tile, one chunk j of `chunk`
    columns at a time: the previous chunk's TMA store has read the tile, the
    warpgroup's threads write it (`put`, for each i of their chunk / 2
    registers of the chunk), fence it for the async proxy, and one thread
    issues `store` (named barrier w + 1 between the steps)."""
    bar_id = b("+", v("w"), 1)
    return serial("j", columns // chunk, ir.seq(
        one_thread(call("tma_store_wait", c(0))),
        call("named_barrier", bar_id, c(WARPGROUP)),
        serial("i", chunk // 2, put, kind="unroll"),
        call("fence_proxy_async"),
        call("named_barrier", bar_id, c(WARPGROUP)),
        one_thread(ir.seq(store, call("tma_store_commit")))), kind="unroll")


def consumer(p: GemmPlan):
    n, chunk, slabs = p.bn, p.chunk, _slabs(p)
    regs = n // 2  # accumulators per thread per slab
    first = b("!=", b("+", v("kb"), v("kk")), 0, dtypes.bool_)
    mmas = []
    wgmma = wgmma_intrinsic(n, p.dtype, p.b_dtype or p.dtype)
    for sl in range(slabs):
        a_ref, b_ref = _operand_refs(p, sl)
        mmas.append(call(wgmma, ref("acc", sl * regs), a_ref, b_ref,
                         ir.Select(first, c(1), c(0), I32), c(int(p.a_mn)), c(int(p.b_mn))))
    if p.mma_overlap:
        # the slot's wgmma stay in flight while the next slot's are issued: wait for all but
        # the newest group, then hand back the slot of the group that completed (the
        # previous one); the tile's last slot after the loop
        prev = ref("empty", b("%", b("-", v("it"), 1), p.stages))
        release = ir.seq(call("wgmma_wait", c(1)),
                         ir.If(b(">", v("kb"), 0, dtypes.bool_),
                               one_thread(call("mbarrier_arrive", prev))))
    else:
        release = ir.seq(call("wgmma_wait", c(0)),
                         one_thread(call("mbarrier_arrive", ref("empty", v("slot")))))
    step = ring_slot(p, ir.seq(
        call("mbarrier_wait", ref("full", v("slot")), v("parity")),
        call("wgmma_fence"),
        serial("kk", p.bk // p.k_step, ir.seq(*mmas), kind="unroll"),
        call("wgmma_commit"),
        release))
    # the accumulator layout of wgmma m64nNk16 (arch/fragments.py, from the PTX ISA's
    # "Matrix fragments for wgmma"): register i of the warpgroup's thread t at (row, col)
    # of the 64 x bn slab; the chunk j's registers are j * chunk / 2 .. (j + 1) * chunk / 2 - 1
    # (columns chunk j .. chunk (j + 1) - 1), so the chunk's column is the slab's minus chunk j
    row, col = wgmma_d(n).coords(b("%", TID, WARPGROUP), v("i"), ops=LAYOUT_IR)
    stores = []
    for sl in range(slabs):
        i = b("+", b("*", v("j"), chunk // 2), v("i"))
        i = b("+", i, sl * regs) if sl else i
        r0 = _plus(v("m0"), _slab_row(p, sl))
        put = ir.Store("C_s", (v("w"), row, col), ir.Cast(p.out, ir.Load("acc", (i,), F32)))
        if p.epilogue is not None:
            grow = b("+", r0, row)
            gcol = b("+", b("+", v("n0"), b("*", v("j"), chunk)), col)
            put = ir.Store("C_s", (v("w"), row, col),
                           p.epilogue(grow, gcol, ir.Load("acc", (i,), F32)))
            if len(p.loads) > len(p.scalars):  # loads stay inside the tensors: out of range,
                # the staging tile gets zeros
                inside = b("&&", b("<", grow, p.M, dtypes.bool_), b("<", gcol, p.N, dtypes.bool_),
                           dtypes.bool_)
                put = ir.If(inside, put,
                            ir.Store("C_s", (v("w"), row, col), ir.Cast(p.out, ir.ZERO)))
        stores.append(chunk_stores(n, chunk, put, call(
            "tma_store_3d" if p.Z is not None else "tma_store_2d", v("tmC", U64),
            ref("C_s", v("w"), 0, 0), *((v("bz"),) if p.Z is not None else ()), r0,
            b("+", v("n0"), b("*", v("j"), chunk)))))
    # K = 0: no wgmma writes the accumulators; the tile is zeros
    zeros = ir.If(b("==", v("k_tiles"), 0, dtypes.bool_),
                  serial("i", slabs * regs, ir.Store("acc", (v("i"),), ir.Imm(0.0, F32)),
                         kind="unroll"))
    if isinstance(p.K, ir.Imm) and p.K.value > 0:
        zeros = None
    mainloop = serial("kb", v("k_tiles"), step)
    if p.mma_overlap:
        last = ref("empty", b("%", b("+", b("*", v("t"), v("k_tiles")), b("-", v("k_tiles"), 1)),
                              p.stages))
        mainloop = ir.seq(mainloop, call("wgmma_wait", c(0)),
                          ir.If(b(">", v("k_tiles"), 0, dtypes.bool_),
                                one_thread(call("mbarrier_arrive", last))))
    if p.pingpong:
        # the consumers' mainloops in tile order: consumer w's u-th tile (tile 2u + w)
        # starts when the other's mainloop of tile 2u + w - 1 is done (the `turn` barrier
        # of consumer c completes a phase per mainloop of c). Without it a consumer would
        # wait on ring phases a whole tile ahead, where a parity names two phases.
        wait = ir.If(b("==", v("w"), 1, dtypes.bool_),
                     call("mbarrier_wait", ref("turn", 0), b("%", v("u"), 2)),
                     ir.If(b(">=", v("u"), 1, dtypes.bool_),
                           call("mbarrier_wait", ref("turn", 1),
                                b("%", b("-", v("u"), 1), 2))))
        mainloop = ir.seq(wait, mainloop,
                          one_thread(call("mbarrier_arrive", ref("turn", v("w")))))
    body = tile_loop(p, ir.seq(zeros, mainloop, *stores), own=p.pingpong)
    body = ir.seq(body, one_thread(call("tma_store_wait", c(0))))
    for t, dt in reversed(p.scalars):
        body = let(scalar_var(t), ir.Load(t, (), dt), body)
    return ir.Role("w", "consumer", 1, p.consumers, p.consumer_regs, body)


def _operand_buffer(name, p: GemmPlan, rows, mn):
    shape = ((c(p.stages), c(rows // MN_BLOCK), c(p.bk), c(MN_BLOCK)) if mn else
             (c(p.stages), c(rows), c(p.bk)))
    dt = p.b_dtype if name == "B_s" and p.b_dtype is not None else p.dtype
    return ir.Buffer(name, dt, shape, "shared", layout=ir.Swizzle(128))


def _operand_map(name, tensor, p: GemmPlan, rows, mn, batched):
    box = (p.bk, MN_BLOCK) if mn else (rows, p.bk)
    return ir.TensorMap(name, tensor, ((1,) if batched else ()) + box, 128)


def _window_map(p: GemmPlan):
    """A's im2col map: bm pixels of 64 channels, over the input's windows."""
    w = p.window
    return ir.TensorMap("tmA", w.tensor, (p.bm, p.bk), 128, im2col=ir.Im2col(w.lower, w.upper))


def kernel(p: GemmPlan) -> ir.Kernel:
    S = p.stages
    turns = [call("mbarrier_init", ref("turn", w), c(1)) for w in range(2)] if p.pingpong else []
    inits = [*turns, *[ir.seq(call("mbarrier_init", ref("full", s), c(1)),
                              call("mbarrier_init", ref("empty", s),
                                   c(1 if p.pingpong else p.consumers)))
                       for s in range(S)]]
    body = ir.seq(init_barrier_objects(inits, TID), ir.Specialize((producer(p), consumer(p))))
    tiles = b("*", ceil_div(p.M, p.bm), ceil_div(p.N, p.bn))
    all_tiles = b("*", v("m_tiles"), v("n_tiles"))
    if p.Z is not None:
        tiles, all_tiles = b("*", tiles, p.Z), b("*", all_tiles, p.Z)
    body = let("m_tiles", ceil_div(p.M, p.bm), let("n_tiles", ceil_div(p.N, p.bn),
           let("k_tiles", ceil_div(p.K, p.bk),
           let("tiles", all_tiles, body))))
    allocs = [
        _operand_buffer("A_s", p, p.bm, p.a_mn),
        _operand_buffer("B_s", p, p.bn, p.b_mn),
        ir.Buffer("C_s", p.out, (c(p.consumers), c(64), c(p.chunk)), "shared",
                  layout=ir.Swizzle(128)),
        ir.Buffer("full", U64, (c(S),), "barrier"),
        ir.Buffer("empty", U64, (c(S),), "barrier"),
        *([ir.Buffer("turn", U64, (c(2),), "barrier")] if p.pingpong else []),
        ir.Buffer("acc", F32, (c(_slabs(p) * p.bn // 2),), "local"),
    ]
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    maps = (_window_map(p) if p.window is not None else
            _operand_map("tmA", p.a, p, p.bm, p.a_mn, p.a_batched),
            _operand_map("tmB", p.b, p, p.bn, p.b_mn, p.b_batched),
            ir.TensorMap("tmC", p.c, ((1,) if p.Z is not None else ()) + (64, p.chunk), 128))
    threads = WARPGROUP * (1 + p.consumers)
    grid = v(ir.SM_COUNT) if p.persistent else tiles
    sizes = p.sizes + ((ir.SM_COUNT,) if p.persistent else ())
    return ir.Kernel(p.name, p.loads, sizes, (grid, c(1), c(1)), (c(threads), c(1), c(1)), body,
                     tensor_maps=maps, min_blocks=1, plan=describe(p))


def describe(p: GemmPlan) -> str:
    """The plan in one line (the kernel's `# plan:` in dumps)."""
    order = lambda mn: "MN-major" if mn else "K-major"  # noqa: E731
    grid = (f"persistent over the SMs, group_m={p.group_m}" if p.persistent else
            f"one block per tile, group_m={p.group_m}")
    mode = " ping-ponging on tiles" if p.pingpong else ""
    return (f"hopper_gemm: tile {p.bm}x{p.bn}x{p.bk}, {p.stages}-slot TMA ring, 1 producer "
            f"({p.producer_regs} regs) + {p.consumers} consumer warpgroups ({p.consumer_regs} "
            f"regs){mode}, wgmma m64n{p.bn}k{p.k_step} {_types(p)}, A {_a_text(p)}, "
            f"B {order(p.b_mn)}, "
            f"{grid}, " + _batch_text(p) + f"TMA-store epilogue ({p.out.name}"
            + (f", computed from the accumulators{' and ' + ', '.join(p.loads) if p.loads else ''}"
               if p.epilogue is not None else "") + ")")


def _a_text(p: GemmPlan) -> str:
    if p.window is None:
        return "MN-major" if p.a_mn else "K-major"
    w = p.window
    return (f"im2col windows of {w.tensor} ({w.R}x{w.S} filter, padding {w.pad_h},{w.pad_w}, "
            f"{expr_text(w.C)} channels)")


def _types(p: GemmPlan) -> str:
    b_dt = p.b_dtype or p.dtype
    return p.dtype.name if b_dt == p.dtype else f"{p.dtype.name} x {b_dt.name}"


def _batch_text(p: GemmPlan) -> str:
    if p.Z is None:
        return ""
    role = lambda x: "batched" if x else "shared"  # noqa: E731
    return (f"a batch of {expr_text(p.Z)} products (A {role(p.a_batched)}, "
            f"B {role(p.b_batched)}), ")
