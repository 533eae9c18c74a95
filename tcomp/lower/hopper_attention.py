"""FlashAttention on Hopper as Kernel IR, from a plan: for each of Z
(batch x heads) matrices, O(i, e) = sum_j softmax_j(scale * Q(i, :) . K(j, :))
V(j, e), Q (Z, S, D), K (Z, T, D), V (Z, T, E), O (Z, S, E) in bfloat16 or
float16, float32 softmax and accumulation; optionally causal (key j masked
for query i where j > i).

The kernel is online softmax (schedule/online_softmax.py's rewrite, as
FlashAttention computes it) on the Hopper pieces of hopper_gemm.py:

* one block per (128-row query tile, matrix z): blockIdx.x the tile,
  blockIdx.y the matrix;
* a producer warpgroup (registers given back) whose one thread loads the
  query tile once (TMA, 128-byte swizzle, boxes of 64 columns), then each
  key block's K and V tiles (bn rows) into a ring of `stages` slots with
  their own full/empty mbarriers (V's load overlaps the consumers' Q.K^T);
* two consumer warpgroups, 64 query rows each. Per key block: S = Q.K^T by
  wgmma m64n{bn}k16 from shared memory (K-major both); the keys past T, and
  above the diagonal when causal, set to -inf (only in blocks that reach
  them); the running row max over the quad of threads that share a row
  (quad_max), the rescaling factor exp2((m_old - m_new) scale log2 e) applied
  to the running sum and to O's accumulators, P = exp2(S scale log2 e -
  m_new scale log2 e) in 16-bit registers; then O += P.V by wgmma with A in
  registers (wgmma_rs: the accumulator layout of a 16-column slice of S is
  the A-fragment layout, arch/fragments.py, so P is S's registers cast, no
  data movement) and V read MN-major;
* causal: the key blocks past the query tile's last row are not visited, and
  the tiles with the most key blocks are launched first;
* the epilogue: O divided by the row's sum (quad_sum of the threads' partial
  sums), converted to the output type in 128-byte chunks of a swizzled
  staging tile, stored by TMA (rows past S are not written). Without keys
  (T = 0) a row is 0, as tcomp.evaluate's empty sum gives (a causal mask
  leaves every row key 0); optionally each row's log-sum-exp.
* persistent (the default): a grid of one block per multiprocessor, each
  walking tiles blockIdx.x + t gridDim.x; the K/V ring runs on across
  tiles (its count in a register: causal tiles differ in length) and Q's
  slot has an empty barrier, so the next tile's Q and first K/V blocks load
  while the consumers finish the last P . V and the epilogue.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..arch.fragments import wgmma_d
from ..arch.limits import shared_per_block
from ..lang import dtypes
from . import ir
from .barriers import init_barrier_objects
from .hopper_gemm import (TID, WARPGROUP, b, c, call, ceil_div, chunk_stores, let, one_thread,
                          ref, serial, v)
from .layout_exprs import IR as LAYOUT_IR

F32, I32, U64 = dtypes.float32, dtypes.int32, dtypes.uint64
BOOL = dtypes.bool_
BOX = 64  # columns per TMA box (128 bytes of 16-bit values)
NEG_INF = ir.Imm(float("-inf"), F32)


@dataclass(frozen=True)
class AttentionPlan:
    name: str
    q: str
    k: str
    v: str
    o: str
    dtype: dtypes.DType  # Q's, K's, V's
    out: dtypes.DType  # O's
    Z: ir.Expr
    S: ir.Expr  # queries
    T: ir.Expr  # keys
    D: int  # Q's and K's head dimension
    E: int  # V's and O's
    sizes: tuple[str, ...]
    scale: float  # the scores' factor (1 / sqrt(D) in attention)
    causal: bool = False
    bm: int = 128  # query rows per block: 64 per consumer warpgroup
    bn: int = 128  # keys per block
    stages: int = 2
    producer_regs: int = 24
    consumer_regs: int = 240
    # the two consumers take turns issuing their wgmma (FlashAttention-3's ping-pong: one's
    # softmax under the other's products), through named barriers TURN and TURN + 1
    pingpong: bool = False
    kv_group: int = 1  # query matrices per K/V matrix (grouped-query attention: K/V's z / g)
    # a grid of one block per multiprocessor walking the tiles (the next tile's Q and first
    # K/V blocks load during the epilogue of the last), or one block per tile
    persistent: bool = True
    lse: str | None = None  # a float32 (Z, S) output of each row's log-sum-exp of the scores

    @property
    def consumers(self) -> int:
        return self.bm // 64

    @property
    def chunk(self) -> int:
        return 128 // (self.out.bits // 8)


# bytes of shared memory a block may have on sm_90 (227 KiB): the kernels' own checks
# (kernels/attention_sm90.py); a lowering reads its target's (hopper_attention_plan.py)
SMEM_LIMIT = shared_per_block("sm_90")


def smem_bytes(cfg, D: int, E: int, item: int = 2) -> int:
    """The kernel's shared memory for `cfg` (a plan or a configuration: its bm,
    bn and stages): Q's tile, the K and V rings, the output staging tiles
    (128-byte chunks of 64 rows per consumer), the barriers and the 1 KiB that
    aligns the 128-byte-swizzled tiles."""
    return (cfg.bm * D * item + cfg.stages * cfg.bn * (D + E) * item
            + cfg.bm // 64 * 64 * 128 + 8 * (2 + 4 * cfg.stages) + 1024)


def _f(x):
    return ir.Imm(float(x), F32)


def fb(op, x, y):
    return ir.Bin(op, x, y, F32)


def _loc(buf, i):
    return ir.Load(buf, (i if isinstance(i, ir.Expr) else c(i),), F32)


def _put(buf, i, value):
    return ir.Store(buf, (i if isinstance(i, ir.Expr) else c(i),), value)


def _row_of(i):
    """Which of the thread's two rows register i of an accumulator is on
    (wgmma_d: row g + 8 ((i / 2) % 2))."""
    return b("%", b("/", i, 2), 2)


def _base(p: AttentionPlan):
    """The key blocks this block's earlier tiles sent through the ring (a
    running count in a register: with a causal mask tiles differ in length)."""
    return ir.Load("kv_base", (c(0),), I32) if p.persistent else c(0)


def _slot(p: AttentionPlan, j):
    return b("%", b("+", _base(p), j) if p.persistent else j, p.stages)


def _parity(p: AttentionPlan, j):
    return b("%", b("/", b("+", _base(p), j) if p.persistent else j, p.stages), 2)


def _tiles(p: AttentionPlan, body):
    """`body` for each of the block's tiles: lets t (the block's tile count so
    far), z (the matrix), m0 (the first query row) and n_blocks; the ring
    count advances by each tile's n_blocks. Tiles are z-major (a matrix's
    tiles consecutive, so that the blocks running at once share K and V in
    L2); one per block, or (persistent) walked by blockIdx.x + t gridDim.x.
    Causal, a matrix's tiles alternate longest and shortest (mt = m - 1, 0,
    m - 2, 1, ...): one block per tile takes them longest first, and a
    persistent block walks consecutive pairs (blockIdx.x + k gridDim.x), each
    of about m + 1 key blocks, so that every block gets the same work."""
    q = b("%", v("tile"), v("m_tiles"))
    mt = q
    if p.causal and p.persistent:
        half = b("/", q, 2)
        mt = ir.Select(b("==", b("%", q, 2), 0, BOOL), b("-", b("-", v("m_tiles"), 1), half),
                       half, I32)
    elif p.causal:
        mt = b("-", b("-", v("m_tiles"), 1), q)
    per = let("z", b("/", v("tile"), v("m_tiles")), let("m0", b("*", mt, p.bm),
          let("n_blocks", _blocks(p), ir.seq(body, ir.Store(
              "kv_base", (c(0),), b("+", _base(p), v("n_blocks")))
              if p.persistent else None))))
    if not p.persistent:
        return let("t", c(0), let("tile", v("blockIdx.x"), per))
    sms = v(ir.SM_COUNT)
    if p.causal:
        pairs = b("/", b("+", v("tiles"), 1), 2)
        count = b("*", b("/", b("+", b("-", pairs, v("blockIdx.x")), b("-", sms, 1)), sms), 2)
        first = b("*", b("+", v("blockIdx.x"), b("*", b("/", v("t"), 2), sms)), 2)
        tile = b("+", first, b("%", v("t"), 2))
        # (the last pair of an odd number of tiles has one)
        per = ir.If(b("<", v("tile"), v("tiles"), BOOL), per)
    else:
        count = b("/", b("+", b("-", v("tiles"), v("blockIdx.x")), b("-", sms, 1)), sms)
        tile = b("+", v("blockIdx.x"), b("*", v("t"), sms))
    loop = serial("t", count, let("tile", tile, per))
    return ir.seq(ir.Store("kv_base", (c(0),), c(0)), loop)


def _blocks(p: AttentionPlan):
    """The key blocks the tile visits: all, or (causal) those up to its last row."""
    every = ceil_div(p.T, p.bn)
    if not p.causal:
        return every
    return b("min", every, b("+", b("/", b("+", v("m0"), p.bm - 1), p.bn), 1))


def _ring(p: AttentionPlan, body):
    return let("slot", _slot(p, v("jb")), let("parity", _parity(p, v("jb")), body))


def producer(p: AttentionPlan):
    item = p.dtype.bits // 8
    # the tile's Q once the consumers' last Q . K^T of the block's previous tile completed
    q = ir.seq(call("mbarrier_wait", ref("q_empty", 0), b("^", b("%", v("t"), 2), 1)),
               call("mbarrier_expect_tx", ref("q_full", 0), c(p.bm * p.D * item)),
               *[call("tma_load_3d", ref("Q_s", j, 0, 0), v("tmQ", U64), ref("q_full", 0),
                      v("z"), v("m0"), c(j * BOX)) for j in range(p.D // BOX)])

    zk = v("z") if p.kv_group == 1 else b("/", v("z"), p.kv_group)

    def tiles(buf, tmap, full, empty, width):
        return ir.seq(
            call("mbarrier_wait", ref(empty, v("slot")), b("^", v("parity"), 1)),
            call("mbarrier_expect_tx", ref(full, v("slot")), c(p.bn * width * item)),
            *[call("tma_load_3d", ref(buf, v("slot"), j, 0, 0), v(tmap, U64),
                   ref(full, v("slot")), zk, b("*", v("jb"), p.bn), c(j * BOX))
              for j in range(width // BOX)])
    kv = serial("jb", v("n_blocks"), _ring(p, ir.seq(
        tiles("K_s", "tmK", "k_full", "k_empty", p.D),
        tiles("V_s", "tmV", "v_full", "v_empty", p.E))))
    return ir.Role("p", "producer", 0, 1, p.producer_regs, one_thread(_tiles(p, ir.seq(q, kv))))


def _scores(p: AttentionPlan, sfx: str):
    """S = Q . K^T for the slot's key block (D / 16 k16 steps)."""
    mmas = [call(f"wgmma_m64n{p.bn}k16_{sfx}", ref("S_acc", 0),
                 ref("Q_s", kk // 4, b("*", v("w"), 64), (kk % 4) * 16),
                 ref("K_s", v("slot"), kk // 4, 0, (kk % 4) * 16),
                 c(int(kk > 0)), c(0), c(0)) for kk in range(p.D // 16)]
    return ir.seq(call("wgmma_fence"), *mmas, call("wgmma_commit"))


def _mask(p: AttentionPlan):
    """Keys past T (and above the diagonal, causal) to -inf, in the blocks that reach them."""
    row, col = wgmma_d(p.bn).coords(b("%", TID, WARPGROUP), v("i"), ops=LAYOUT_IR)
    gcol = b("+", b("*", v("jb"), p.bn), col)
    grow = b("+", b("+", v("m0"), b("*", v("w"), 64)), row)
    out = b(">=", gcol, p.T, BOOL)
    last = b("-", b("*", b("+", v("jb"), 1), p.bn), 1)  # the block's last key
    reach = b(">", b("+", last, 1), p.T, BOOL)
    if p.causal:
        out = b("||", out, b(">", gcol, grow, BOOL), BOOL)
        reach = b("||", reach, b(">", last, b("+", v("m0"), b("*", v("w"), 64)), BOOL), BOOL)
    body = _put("S_acc", v("i"), ir.Select(out, NEG_INF, _loc("S_acc", v("i")), F32))
    return ir.If(reach, serial("i", p.bn // 2, body, kind="unroll"))


def _softmax(p: AttentionPlan):
    """The online softmax of the block's scores: the new row maxima, the
    factors that rescale the running sums (and, later, O), the running sums
    updated and the probabilities in place of the scores (float32)."""
    sl2 = _f(p.scale * math.log2(math.e))
    i, h = v("i"), v("h")
    rmax = serial("i", p.bn // 2, _put("mx", _row_of(i), fb("max", _loc("mx", _row_of(i)),
                                                           _loc("S_acc", i))), kind="unroll")
    per_row = serial("h", 2, ir.seq(
        # a row with every key so far masked keeps shift 0: exp2(-inf - 0) = 0, no NaN
        _put("shift", h, ir.Select(b("==", _loc("mx", h), NEG_INF, BOOL), _f(0.0),
                                   fb("*", _loc("mx", h), sl2), F32)),
        _put("corr", h, ir.Call("exp2_approx", (fb("-", fb("*", _loc("m_run", h), sl2),
                                            _loc("shift", h)),), F32)),
        _put("m_run", h, _loc("mx", h)),
        _put("l_run", h, fb("*", _loc("l_run", h), _loc("corr", h)))), kind="unroll")
    pe = ir.Call("exp2_approx", (fb("-", fb("*", _loc("S_acc", i), sl2), _loc("shift", _row_of(i))),),
                 F32)
    probs = serial("i", p.bn // 2, let("pv", pe, ir.seq(
        _put("l_run", _row_of(i), fb("+", _loc("l_run", _row_of(i)), v("pv", F32))),
        _put("S_acc", i, v("pv", F32)))), kind="unroll")
    return ir.seq(
        serial("h", 2, _put("mx", h, _loc("m_run", h)), kind="unroll"),
        rmax,
        call("quad_max", ref("mx", 0)), call("quad_max", ref("mx", 1)),
        per_row, probs)


def _rescale(p: AttentionPlan):
    """O rescaled by the factors of the last softmax (before the P . V that
    adds that block: no wgmma writes O then)."""
    i = v("i")
    return serial("i", p.E // 2, _put("O_acc", i, fb("*", _loc("O_acc", i),
                                                     _loc("corr", _row_of(i)))), kind="unroll")


def _pack(p: AttentionPlan):
    """The probabilities converted to the 16-bit A operand of P . V: register
    i of S's accumulator layout is register i of the A fragments (WGMMA_A_K16
    is a 16-column slice of wgmma_d), so the conversion is a cast in place."""
    i = v("i")
    return serial("i", p.bn // 2, ir.Store("P", (i,), ir.Cast(p.dtype, _loc("S_acc", i))),
                  kind="unroll")


def _pv(p: AttentionPlan, sfx: str, slot):
    """O += P . V for the key block in ring slot `slot` (issued, committed)."""
    mmas = [call(f"wgmma_rs_m64n{p.E}k16_{sfx}", ref("O_acc", 0), ref("P", kk * 8),
                 ref("V_s", slot, 0, kk * 16, 0), c(1), c(1)) for kk in range(p.bn // 16)]
    return ir.seq(call("wgmma_fence"), *mmas, call("wgmma_commit"))


def _epilogue(p: AttentionPlan):
    chunk = p.chunk
    row, col = wgmma_d(p.E).coords(b("%", TID, WARPGROUP), v("i"), ops=LAYOUT_IR)
    i = b("+", b("*", v("j"), chunk // 2), v("i"))
    # a row without keys (T = 0) has the sum 0 and O 0 (evaluate's empty sum), not 0 / 0
    lrow = _loc("l_run", _row_of(v("i")))
    put = ir.Store("O_s", (v("w"), row, col), ir.Cast(p.out, ir.Select(
        b("==", lrow, _f(0.0), BOOL), _f(0.0), fb("/", _loc("O_acc", i), lrow), F32)))
    r0 = b("+", v("m0"), b("*", v("w"), 64))
    return ir.seq(
        call("quad_sum", ref("l_run", 0)), call("quad_sum", ref("l_run", 1)),
        _lse(p),
        chunk_stores(p.E, chunk, put, call("tma_store_3d", v("tmO", U64), ref("O_s", v("w"), 0, 0),
                                           v("z"), r0, b("*", v("j"), chunk))))


def _lse(p: AttentionPlan):
    """The rows' log-sum-exp of the scaled scores, m scale + log(l), written by
    the first thread of each quad (which holds the quad's sums after
    quad_sum) for its two rows; -inf for a row without keys (T = 0: the max
    and the log of the empty sum, as tcomp.evaluate gives)."""
    if p.lse is None:
        return None
    lane = b("%", TID, WARPGROUP)
    puts = []
    for h in range(2):
        row, _ = wgmma_d(p.E).coords(lane, c(2 * h), ops=LAYOUT_IR)
        grow = b("+", b("+", v("m0"), b("*", v("w"), 64)), row)
        m = _loc("m_run", h)
        val = fb("+", fb("*", m, _f(p.scale)), ir.Call("log", (_loc("l_run", h),), F32))
        puts.append(ir.If(b("<", grow, p.S, BOOL), ir.Store(p.lse, (v("z"), grow), val)))
    return ir.If(b("==", b("%", lane, 4), 0, BOOL), ir.seq(*puts))


TURN = 4  # named barriers TURN + w: consumer w's turn to issue (ids 1..3: the epilogue's)


def _turn(p: AttentionPlan, issue, last: bool = False):
    """`issue` in consumer w's turn: wait for it, then hand the turn to the
    other consumer (consumer 1 hands back none after its last issue, so that
    every arrival is waited for)."""
    if not p.pingpong:
        return issue
    other = b("-", 1, v("w"))
    give = call("named_barrier_arrive", b("+", other, TURN), c(2 * WARPGROUP))
    if last:
        give = ir.If(b("==", v("w"), 0, BOOL), give)
    return ir.seq(call("named_barrier", b("+", v("w"), TURN), c(2 * WARPGROUP)), issue, give)


def consumer(p: AttentionPlan):
    """Each key block's Q . K^T is issued with the previous block's P . V,
    and the block's softmax runs while that P . V is in flight (FlashAttention
    3's overlap within a warpgroup)."""
    sfx = "bf16" if p.dtype == dtypes.bfloat16 else "f16"
    h = v("h")
    init = ir.seq(
        serial("i", p.E // 2, _put("O_acc", v("i"), _f(0.0)), kind="unroll"),
        serial("h", 2, ir.seq(_put("m_run", h, NEG_INF), _put("l_run", h, _f(0.0))),
               kind="unroll"),
        call("mbarrier_wait", ref("q_full", 0), b("%", v("t"), 2)))
    release_k = one_thread(call("mbarrier_arrive", ref("k_empty", v("slot"))))
    pslot = _slot(p, v("pj"))
    ppar = _parity(p, v("pj"))
    # Q_s is free for the next tile once the tile's last Q . K^T completed
    release_q = one_thread(call("mbarrier_arrive", ref("q_empty", 0)))
    release_v = one_thread(call("mbarrier_arrive", ref("v_empty", pslot)))
    # block 0's scores and softmax
    first = let("jb", c(0), _ring(p, ir.seq(
        call("mbarrier_wait", ref("k_full", v("slot")), v("parity")),
        _turn(p, _scores(p, sfx)), call("wgmma_wait", c(0)), release_k,
        _mask(p), _softmax(p))))
    # block jb: the P . V of block jb - 2 completes (the wait at the top of the loop body,
    # which the CUDA compiler cannot hoist into the softmax of the iteration before), block
    # jb - 1's probabilities become P and O is rescaled by its factors, then block jb's Q . K^T
    # and block jb - 1's P . V are issued, and block jb's softmax runs while that P . V is in
    # flight (wgmma_wait(1): the scores, the older group, are complete)
    step = _ring(p, let("pj", b("-", v("jb"), 1), ir.seq(
        call("wgmma_wait", c(0)),
        ir.If(b(">=", v("jb"), 2, BOOL),
              let("pj", b("-", v("jb"), 2), release_v)),
        _pack(p), _rescale(p),
        call("mbarrier_wait", ref("k_full", v("slot")), v("parity")),
        call("mbarrier_wait", ref("v_full", pslot), ppar),
        _turn(p, ir.seq(_scores(p, sfx), _pv(p, sfx, pslot))),
        call("wgmma_wait", c(1)),
        release_k,
        _mask(p), _softmax(p))))
    last = let("pj", b("-", v("n_blocks"), 1), ir.seq(
        call("wgmma_wait", c(0)), release_q,
        ir.If(b(">=", v("n_blocks"), 2, BOOL),
              let("pj", b("-", v("n_blocks"), 2), release_v)),
        _pack(p), _rescale(p),
        call("mbarrier_wait", ref("v_full", pslot), ppar),
        _turn(p, _pv(p, sfx, pslot), last=True), call("wgmma_wait", c(0)), release_v))
    start = None
    if p.pingpong:  # consumer 0 issues first
        start = ir.If(b("==", v("w"), 1, BOOL),
                      call("named_barrier_arrive", c(TURN), c(2 * WARPGROUP)))
    loop = ir.If(b(">", v("n_blocks"), 0, BOOL), ir.seq(
        start, first, ir.For("jb", c(1), b("-", v("n_blocks"), 1), "serial", step), last),
        release_q)
    body = ir.seq(_tiles(p, ir.seq(init, loop, _epilogue(p))),
                  one_thread(call("tma_store_wait", c(0))))
    return ir.Role("w", "consumer", 1, p.consumers, p.consumer_regs, body)


def kernel(p: AttentionPlan) -> ir.Kernel:
    S = p.stages
    inits = [call("mbarrier_init", ref("q_full", 0), c(1)),
             call("mbarrier_init", ref("q_empty", 0), c(p.consumers))]
    for s in range(S):
        for bar, count in (("k_full", 1), ("k_empty", p.consumers), ("v_full", 1),
                           ("v_empty", p.consumers)):
            inits.append(call("mbarrier_init", ref(bar, s), c(count)))
    body = ir.seq(init_barrier_objects(inits, TID), ir.Specialize((producer(p), consumer(p))))
    body = let("m_tiles", ceil_div(p.S, p.bm), let("tiles", b("*", v("m_tiles"), p.Z), body))
    sw = ir.Swizzle(128)
    allocs = [
        ir.Buffer("Q_s", p.dtype, (c(p.D // BOX), c(p.bm), c(BOX)), "shared", layout=sw),
        ir.Buffer("K_s", p.dtype, (c(S), c(p.D // BOX), c(p.bn), c(BOX)), "shared", layout=sw),
        ir.Buffer("V_s", p.dtype, (c(S), c(p.E // BOX), c(p.bn), c(BOX)), "shared", layout=sw),
        ir.Buffer("O_s", p.out, (c(p.consumers), c(64), c(p.chunk)), "shared", layout=sw),
        ir.Buffer("q_full", U64, (c(1),), "barrier"),
        ir.Buffer("q_empty", U64, (c(1),), "barrier"),
        *[ir.Buffer(n, U64, (c(S),), "barrier") for n in ("k_full", "k_empty", "v_full",
                                                           "v_empty")],
        ir.Buffer("S_acc", F32, (c(p.bn // 2),), "local"),
        ir.Buffer("O_acc", F32, (c(p.E // 2),), "local"),
        ir.Buffer("P", p.dtype, (c(p.bn // 2),), "local"),
        *[ir.Buffer(n, F32, (c(2),), "local") for n in ("m_run", "l_run", "mx", "shift",
                                                        "corr")],
        *([ir.Buffer("kv_base", I32, (c(1),), "local")] if p.persistent else []),
    ]
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    maps = (ir.TensorMap("tmQ", p.q, (1, p.bm, BOX), 128),
            ir.TensorMap("tmK", p.k, (1, p.bn, BOX), 128),
            ir.TensorMap("tmV", p.v, (1, p.bn, BOX), 128),
            ir.TensorMap("tmO", p.o, (1, 64, p.chunk), 128))
    grid = (v(ir.SM_COUNT) if p.persistent else b("*", ceil_div(p.S, p.bm), p.Z), c(1), c(1))
    sizes = p.sizes + ((ir.SM_COUNT,) if p.persistent else ())
    threads = WARPGROUP * (1 + p.consumers)
    return ir.Kernel(p.name, (p.lse,) if p.lse else (), sizes, grid, (c(threads), c(1), c(1)), body,
                     tensor_maps=maps, min_blocks=1, plan=describe(p))


def describe(p: AttentionPlan) -> str:
    return (f"hopper_attention: {p.bm} queries x {p.bn} keys per step, D={p.D}, E={p.E}, "
            f"{p.stages}-slot TMA ring of K and V, 1 producer ({p.producer_regs} regs) + "
            f"{p.consumers} consumer warpgroups ({p.consumer_regs} regs), wgmma m64n{p.bn}k16 "
            f"(Q.K^T, shared) and m64n{p.E}k16 (P.V, P in registers), online softmax in "
            f"float32 (scale {p.scale:.6g})" + (", causal (blocks past the diagonal skipped)"
                                                if p.causal else "")
            + (", the consumers taking turns to issue their wgmma" if p.pingpong else "")
            + (f", K and V shared by {p.kv_group} query matrices" if p.kv_group > 1 else "")
            + (", persistent over the SMs" if p.persistent else ", one block per tile")
            + f", TMA-store epilogue ({p.out.name}" + (f", log-sum-exp to {p.lse}" if p.lse
                                                       else "") + ")")
