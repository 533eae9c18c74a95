"""Fused split-KV decode attention as Kernel IR, from a plan (no tensor
cores: the kernel is memory-bound). For Z query matrices of S rows, K and V
of Z / g matrices (grouped-query attention: matrix z of Q reads z / g), T
keys, head sizes D = E:

    O(z, i, e) = sum_j softmax_j(scale Q(z, i, :) . K(z / g, j, :)) V(z / g, j, e)

Two launches.

1. `<name>_split`, grid (parts, Z / g): block (p, zk) takes the keys [p C,
   min(T, (p + 1) C)), C = ceil(T / parts), of K/V matrix zk for all R = g S
   query rows that read it (the g query heads share every K and V load). Its
   threads are `lanes` = D / vec threads per key row (threadIdx.x, each
   holding `vec` consecutive elements: one 16-byte vector load) times Y =
   threads / lanes row groups (threadIdx.y). Row group y takes keys lo + it Y
   U + u Y + y (u < U, the unroll): for each u the block's row groups read Y
   consecutive rows (Y 2 D bytes, coalesced). Per step a thread loads U
   vectors of K and U of V; with `prefetch` (the default) those of the next
   step, into a second set of registers (kn, vn, copied to kr, vr at the
   step's end), so that U 2 16 bytes a thread stay in flight through the
   step's arithmetic (without it the CUDA compiler interleaves the loads with
   the arithmetic that uses them: seen in the SASS); then for each key and
   query row the partial q . k over its vec elements, summed over the row's
   lanes (AllReduce: shuffles), the key masked to -inf past the part's end
   (the load's row is clamped to the part's last key, so every load is in
   bounds and no branch diverges); the online softmax per query row in base 2
   (q is pre-multiplied by scale log2 e): the step's max, the factor
   exp2(m_old - m_new) on the running sum and O (a row whose keys so far are
   all masked keeps shift 0: no NaN), then exp2(s - m_new) per key into the
   sum and into O += p v. The running state is registers only. Each row group
   writes its own partial: W (its O slice, unnormalised), m and l in float32
   to slot p Y + y of (Z, S, parts Y) buffers. (Why no block-level combine
   through shared memory: the partials are 4 E (parts Y) bytes a query row, 67
   MB at B32 H32 parts 16 Y 8 against 17.2 GB of K and V, 0.4 %, while a
   combine would cost a barrier and shared memory per block.)
2. `<name>_combine`, grid Z S, block E: exactly the comprehension's combine
   (kernels/attention_decode.decode_source), over the parts Y slots:
   m = max_q m_q; c_q = exp2(m_q - m), 0 for an empty slot (m_q = -inf);
   L = sum_q c_q l_q; O = sum_q c_q W_q / L, rounded to O's type. No keys at
   all (T = 0) gives 0 / 0 = NaN, as tcomp.evaluate of decode_source does.

The grid's y dimension (Z / g K/V matrices) is at most 65535.

Registers: q (R vec float32), O (R vec float32), m and l (R), the loaded K
and V (U vec 16-bit each), the scores (U R): the plan limits R = g S to 16.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..arch.hierarchy import THREAD_INDEX
from ..arch.threads import THREAD
from ..lang import dtypes
from . import ir
from .hopper_gemm import b, c, let, serial, v
from .rewriter import Rewriter, substitute

F32, I32, BOOL = dtypes.float32, dtypes.int32, dtypes.bool_
NEG_INF = ir.Imm(float("-inf"), F32)
MAX_ROWS = 16  # query rows (g S) a block keeps in registers


@dataclass(frozen=True)
class DecodePlan:
    name: str
    dtype: dtypes.DType  # Q's, K's, V's
    out: dtypes.DType  # O's
    Z: ir.Expr  # query matrices (batch x query heads)
    S: int  # query rows per matrix
    T: ir.Expr  # keys
    D: int  # head size (Q, K, V and O: D = E)
    sizes: tuple[str, ...]  # the symbolic sizes the kernels take
    scale: float
    parts: int  # blocks per K/V matrix along the keys
    kv_group: int = 1  # query matrices per K/V matrix
    unroll: int = 4  # keys per row group per step (U)
    prefetch: bool = True  # the next step's K and V rows load during this step's arithmetic
    threads: int = 128

    @property
    def vec(self) -> int:  # elements in a 16-byte vector
        return 16 // self.dtype.numpy.itemsize

    @property
    def lanes(self) -> int:  # threads per key row
        return self.D // self.vec

    @property
    def groups(self) -> int:  # row groups (Y)
        return self.threads // self.lanes

    @property
    def rows(self) -> int:  # query rows per block (R = g S)
        return self.kv_group * self.S

    @property
    def slots(self) -> int:  # partials per query row
        return self.parts * self.groups


def _f(x):
    return ir.Imm(float(x), F32)


def fb(op, x, y):
    return ir.Bin(op, x, y, F32)


def _loc(buf, i, dt=F32):
    return ir.Load(buf, (i if isinstance(i, ir.Expr) else c(i),), dt)


def _put(buf, i, value):
    return ir.Store(buf, (i if isinstance(i, ir.Expr) else c(i),), value)


def _unroll(var, n, body):
    return serial(var, n, body, kind="unroll")


def _vector(var, n, body):
    """A loop of n lanes whose one global load becomes one vector (annotated
    after flattening: _VectorLoads)."""
    return serial(var, n, body, kind="vectorize")


def _exp2(x):
    return ir.Call("exp2_approx", (x,), F32)


def _query(p: DecodePlan, r):
    """(query matrix, row) of the block's query row r."""
    return (b("+", b("*", v("zk"), p.kv_group), b("/", r, p.S)), b("%", r, p.S))


def split_kernel(p: DecodePlan, W: str, M: str, L: str) -> ir.Kernel:
    vec, U, R, Y = p.vec, p.unroll, p.rows, p.groups
    x, y = v(THREAD[0].name), v(THREAD[1].name)  # (a key row's lanes, the row groups)
    lane0 = b("*", x, vec)
    r, u, e = v("r"), v("u"), v("e")
    sl2 = _f(p.scale * math.log2(math.e))
    qz, qi = _query(p, r)
    load_q = _unroll("r", R, _vector("e", vec, _put(
        "qr", b("+", b("*", r, vec), e),
        fb("*", ir.Cast(F32, ir.Load("Q", (qz, qi, b("+", lane0, e)), p.dtype)), sl2))))
    init = ir.seq(load_q, _unroll("r", R, ir.seq(
        _put("m_run", r, NEG_INF), _put("l_run", r, _f(0.0)),
        _unroll("e", vec, _put("o_acc", b("+", b("*", r, vec), e), _f(0.0))))))
    key = b("+", v("base"), b("*", u, Y))  # this row group's key u of the step

    def kv_load(buf, src, base):
        row = b("min", b("+", base, b("*", u, Y)), b("-", v("hi"), 1))  # clamped: in the part
        return _unroll("u", U, _vector("e", vec, _put(
            buf, b("+", b("*", u, vec), e),
            ir.Load(src, (v("zk"), row, b("+", lane0, e)), p.dtype))))
    dot = None
    for i in range(vec):
        term = fb("*", _loc("qr", b("+", b("*", r, vec), i)),
                  ir.Cast(F32, _loc("kr", b("+", b("*", u, vec), i), p.dtype)))
        dot = term if dot is None else fb("+", dot, term)
    scores = _unroll("u", U, _unroll("r", R, ir.seq(
        _put("red", 0, dot),
        ir.AllReduce("+", "red", F32, THREAD[0], c(p.lanes)),
        _put("s", b("+", b("*", u, R), r), ir.Select(
            b("<", key, v("hi"), BOOL), _loc("red", 0), NEG_INF, F32)))))
    smax = _loc("m_run", r)
    for i in range(U):
        smax = fb("max", smax, _loc("s", b("+", c(i * R), r)))
    oi = b("+", b("*", r, vec), e)
    f32 = lambda name: v(name, F32)  # noqa: E731
    pv = _unroll("e", vec, _put("o_acc", oi, fb("+", _loc("o_acc", oi), fb(
        "*", f32("pr"), ir.Cast(F32, _loc("vr", b("+", b("*", u, vec), e), p.dtype))))))
    per_key = _unroll("u", U, let("pr", _exp2(fb("-", _loc("s", b("+", b("*", u, R), r)),
                                                   f32("shift"))), ir.seq(
        _put("l_run", r, fb("+", _loc("l_run", r), f32("pr"))), pv)))
    rescale = ir.seq(
        _put("m_run", r, f32("m_new")),
        _put("l_run", r, fb("*", _loc("l_run", r), f32("corr"))),
        _unroll("e", vec, _put("o_acc", oi, fb("*", _loc("o_acc", oi), f32("corr")))))
    # every key so far masked: shift 0, so that exp2(-inf - 0) = 0 rather than NaN
    shift = ir.Select(b("==", f32("m_new"), NEG_INF, BOOL), _f(0.0), f32("m_new"), F32)
    softmax = _unroll("r", R, let("m_new", smax, let("shift", shift, let(
        "corr", _exp2(fb("-", _loc("m_run", r), f32("shift"))), ir.seq(rescale, per_key)))))
    first = b("+", v("lo"), y)
    if p.prefetch:
        # the next step's rows load into kn, vn while this step computes on kr, vr (a
        # register double buffer: 2 U 16 bytes in flight per thread through the arithmetic)
        nxt = b("+", v("base"), Y * U)
        ev = v("e")
        step = let("base", b("+", first, b("*", v("it"), Y * U)), ir.seq(
            kv_load("kn", "K", nxt), kv_load("vn", "V", nxt), scores, softmax,
            _unroll("e", U * vec, ir.seq(_put("kr", ev, _loc("kn", ev, p.dtype)),
                                         _put("vr", ev, _loc("vn", ev, p.dtype))))))
        prologue = ir.If(b(">", v("hi"), v("lo"), BOOL), ir.seq(
            kv_load("kr", "K", first), kv_load("vr", "V", first)))
    else:
        step = let("base", b("+", first, b("*", v("it"), Y * U)), ir.seq(
            kv_load("kr", "K", v("base")), kv_load("vr", "V", v("base")), scores, softmax))
        prologue = None
    slot = b("+", b("*", v("blockIdx.x"), Y), y)
    write = _unroll("r", R, ir.seq(
        ir.If(b("==", x, 0, BOOL), ir.seq(
            ir.Store(M, (qz, qi, slot), _loc("m_run", r)),
            ir.Store(L, (qz, qi, slot), _loc("l_run", r)))),
        _unroll("e", vec, ir.Store(W, (qz, qi, slot, b("+", lane0, e)), _loc("o_acc", oi)))))
    n = b("max", b("-", v("hi"), v("lo")), 0)
    body = let("zk", v("blockIdx.y"), let("chunk", b("/", b("+", p.T, p.parts - 1), p.parts),
               let("lo", b("*", v("blockIdx.x"), v("chunk")),
               let("hi", b("min", b("+", v("lo"), v("chunk")), p.T),
               ir.seq(init, prologue, serial("it", b("/", b("+", n, Y * U - 1), Y * U), step),
                      write)))))
    allocs = [ir.Buffer("qr", F32, (c(R * vec),), "local"),
              ir.Buffer("o_acc", F32, (c(R * vec),), "local"),
              ir.Buffer("m_run", F32, (c(R),), "local"),
              ir.Buffer("l_run", F32, (c(R),), "local"),
              ir.Buffer("kr", p.dtype, (c(U * vec),), "local"),
              ir.Buffer("vr", p.dtype, (c(U * vec),), "local"),
              *([ir.Buffer(n_, p.dtype, (c(U * vec),), "local") for n_ in ("kn", "vn")]
                if p.prefetch else []),
              ir.Buffer("s", F32, (c(U * R),), "local"),
              ir.Buffer("red", F32, (c(1),), "local")]
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    grid = (c(p.parts), b("/", p.Z, p.kv_group), c(1))
    return ir.Kernel(f"{p.name}_split", ("Q", "K", "V", W, M, L), p.sizes, grid,
                     (c(p.lanes), c(Y), c(1)), body, plan=describe(p))


def combine_kernel(p: DecodePlan, W: str, M: str, L: str, O: str) -> ir.Kernel:
    zq, i = b("/", v("blockIdx.x"), p.S), b("%", v("blockIdx.x"), p.S)
    e, q = v(THREAD_INDEX), v("q")
    mq = ir.Load(M, (zq, i, q), F32)
    empty = b("==", v("mq", F32), NEG_INF, BOOL)
    cq = ir.Select(empty, _f(0.0), _exp2(fb("-", v("mq", F32), _loc("acc", 0))), F32)
    body = ir.seq(
        _put("acc", 0, NEG_INF),
        serial("q", p.slots, _put("acc", 0, fb("max", _loc("acc", 0), mq))),
        _put("acc", 1, _f(0.0)), _put("acc", 2, _f(0.0)),
        serial("q", p.slots, let("mq", mq, let("cq", cq, ir.seq(
            _put("acc", 1, fb("+", _loc("acc", 1), fb("*", ir.Load(L, (zq, i, q), F32),
                                                     v("cq", F32)))),
            _put("acc", 2, fb("+", _loc("acc", 2), ir.Select(
                empty, _f(0.0), fb("*", ir.Load(W, (zq, i, q, e), F32), v("cq", F32)), F32))))))),
        ir.Store(O, (zq, i, e), ir.Cast(p.out, fb("/", _loc("acc", 2), _loc("acc", 1)))))
    body = ir.Alloc(ir.Buffer("acc", F32, (c(3),), "local"), body)
    return ir.Kernel(f"{p.name}_combine", (W, M, L, O), p.sizes,
                     (b("*", p.Z, p.S), c(1), c(1)), (c(p.D), c(1), c(1)), body,
                     plan=describe_combine(p))


def partial_buffers(p: DecodePlan, W: str, M: str, L: str) -> tuple[ir.Buffer, ...]:
    """The float32 partials (temporaries in global memory): per query row and
    slot p Y + y, the unnormalised O slice W, the max m (base 2, scaled) and
    the sum l."""
    rows = (p.Z, c(p.S), c(p.slots))
    return (ir.Buffer(W, F32, rows + (c(p.D),), "global", role="temp"),
            ir.Buffer(M, F32, rows, "global", role="temp"),
            ir.Buffer(L, F32, rows, "global", role="temp"))


class _VectorLoads(Rewriter):
    """After flattening: each `vectorize` loop of the plan (one store of one
    global load's lanes into registers) carries its vector access, the load's
    lane-0 offset its flat index at lane 0 (a multiple of vec: D is)."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes

    def stmt_For(self, s: ir.For) -> ir.Stmt:
        if s.kind != "vectorize":
            return self.generic_stmt(s)
        loads = [x for x in ir.walk_expr(s.body.value) if isinstance(x, ir.Load)
                 and x.buffer in ("Q", "K", "V")]
        assert len(loads) == 1, loads
        (ld,) = loads
        base = substitute(ld.indices[0], {s.var: c(0)})
        return ir.For(s.var, s.lo, s.extent, s.kind, s.body,
                      vector=ir.VectorAccess(self.nbytes, (ld,), (base,), None))


def annotate_vectors(k: ir.Kernel) -> ir.Kernel:
    import dataclasses
    return dataclasses.replace(k, body=_VectorLoads(16).stmt(k.body))


def bytes_in_flight(p: DecodePlan) -> int:
    """K and V bytes a block has requested before its first use of them in a step
    (with prefetch, the next step's: they stay in flight through the step's arithmetic)."""
    return p.threads * p.unroll * 2 * 16


def describe(p: DecodePlan) -> str:
    return (f"decode_attention: {p.parts} parts of the keys x Z/{p.kv_group} K/V matrices, "
            f"{p.groups} key rows x {p.lanes} lanes of {p.vec} ({p.dtype.name}, 16-byte loads), "
            f"unroll {p.unroll}" + (", next step prefetched into registers" if p.prefetch else "")
            + f": {bytes_in_flight(p)} bytes of K and V in flight per block, "
            f"{p.rows} query rows sharing each load (g={p.kv_group}, S={p.S}), online softmax "
            f"in float32 registers (scale {p.scale:.6g}), {p.slots} float32 partials per row")


def describe_combine(p: DecodePlan) -> str:
    return (f"decode_attention combine: a block per query row, a thread per element of O, "
            f"{p.slots} partials (m = max m_q, L = sum c_q l_q, O = sum c_q W_q / L) to "
            f"{p.out.name}")
