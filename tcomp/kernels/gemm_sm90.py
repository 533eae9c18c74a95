"""A Hopper GEMM as Kernel IR: `C(m, n) +=! A(m, k) * B(n, k)` in bfloat16
with float32 accumulation (B given as N x K, both operands K-major: the
product of `torch.nn.functional.linear`, C = A . B^T).

Built from the IR's Hopper pieces, with nothing CUDA-specific here:

* a persistent grid of one block per multiprocessor (ir.SM_COUNT) walking
  the output tiles in grouped order (`group_m` row tiles side by side, so
  that the blocks running at once share A and B tiles in L2);
* three warpgroups in a `Specialize`: one producer (its registers given
  back, `regs=40`) whose one thread issues TMA loads of A and B tiles
  (128-byte swizzle) into a ring of `stages` shared slots, and `consumers`
  warpgroups (registers taken, `regs=232`) each computing a 64 x bn slice
  of the bm x bn tile with wgmma m64n{bn}k16, its accumulators in
  registers;
* full/empty mbarriers per slot: the producer waits for a slot's empty
  barrier (every consumer arrived), announces the slot's bytes and issues
  its copies on the full barrier; a consumer waits for the full barrier,
  issues bk / 16 wgmma, waits for them and arrives on the empty barrier;
  phases are the parity of the ring's pass (the producer's first pass
  waits on the parity before the first phase, which has completed);
* an epilogue through shared memory: each consumer converts its
  accumulators to bfloat16 in 64-column chunks of a swizzled staging tile
  and stores each chunk with a TMA store (out-of-range rows and columns
  are not written, so any M and N work; K's tail is read as zeros).

`gemm_sm90(M, N, K)` returns the built CUDA kernel; `gemm_sm90_program`
the IR Program (what `tcomp.lower` would return), for the sim, dumps and
tests. Requirements: K and N multiples of 8 (the TMA engine's 16-byte
rows); sizes may be fixed or symbolic.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from ..arch.fragments import wgmma_d
from ..errors import LoweringError
from ..lang import dtypes
from ..lower.layout_exprs import IR as LAYOUT_IR

ir = importlib.import_module("tcomp.lower.ir")

SOURCE = ("def gemm_bt(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) "
          "{ C(m, n) +=! A(m, k) * B(n, k) }")
BF16, F32, I32, U64 = dtypes.bfloat16, dtypes.float32, dtypes.int32, dtypes.uint64
WARPGROUP = 128
CHUNK = 64  # epilogue columns per TMA store (a 128-byte swizzled row of bfloat16)


@dataclass(frozen=True)
class GemmConfig:
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    producer_regs: int = 40
    consumer_regs: int = 232

    def check(self) -> None:
        def bad(msg):
            raise LoweringError(f"gemm_sm90: {msg}")
        if self.bk != 64:
            bad(f"bk must be 64 (one 128-byte swizzled row of bfloat16), got {self.bk}")
        if self.bn not in (64, 128, 256):
            bad(f"bn must be 64, 128 or 256 (a wgmma m64nNk16 shape), got {self.bn}")
        if self.bm != 64 * self.consumers:
            bad(f"bm must be 64 x consumers (each consumer warpgroup computes 64 rows), got "
                f"bm={self.bm} with {self.consumers} consumers")
        if not 2 <= self.stages <= 8:
            bad(f"stages must be 2..8, got {self.stages}")
        if self.consumer_regs % 8 or self.producer_regs % 8 or not (
                24 <= self.producer_regs <= 256 and 24 <= self.consumer_regs <= 256):
            bad("register counts must be multiples of 8 in 24..256")

    @property
    def smem_bytes(self) -> int:
        ring = self.stages * (self.bm + self.bn) * self.bk * 2
        return ring + self.consumers * 64 * CHUNK * 2 + 2 * self.stages * 8


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


TID = v("threadIdx.x")


def one_thread(body):
    """`body` on the first thread of the warpgroup."""
    return ir.If(b("==", b("%", TID, WARPGROUP), 0, dtypes.bool_), body)


# ------------------------------------------------------------------ the kernel
def tile_coords(cfg: GemmConfig, body):
    """Lets m0, n0: the first row and column of tile `tile` in grouped order."""
    g = cfg.group_m
    per_group = b("*", v("n_tiles"), g)
    return let("group", b("/", v("tile"), per_group),
           let("first_m", b("*", v("group"), g),
           let("group_rows", b("min", b("-", v("m_tiles"), v("first_m")), g),
           let("in_group", b("%", v("tile"), per_group),
           let("m0", b("*", b("+", v("first_m"), b("%", v("in_group"), v("group_rows"))), cfg.bm),
           let("n0", b("*", b("/", v("in_group"), v("group_rows")), cfg.bn), body))))))


def tile_loop(cfg: GemmConfig, body):
    """For each of this block's tiles (tile = blockIdx.x + t * gridDim.x)."""
    sms = v(ir.SM_COUNT)
    count = b("/", b("+", b("-", v("tiles"), v("blockIdx.x")), b("-", sms, 1)), sms)
    return serial("t", count, let("tile", b("+", v("blockIdx.x"), b("*", v("t"), sms)),
                                  tile_coords(cfg, body)))


def ring_slot(cfg: GemmConfig, body):
    """Lets it (the ring's running iteration), slot and phase parity."""
    return let("it", b("+", b("*", v("t"), v("k_tiles")), v("kb")),
           let("slot", b("%", v("it"), cfg.stages),
           let("parity", b("%", b("/", v("it"), cfg.stages), 2), body)))


def producer(cfg: GemmConfig):
    tx = (cfg.bm + cfg.bn) * cfg.bk * 2
    issue = ir.seq(
        call("mbarrier_wait", ref("empty", v("slot")), b("^", v("parity"), 1)),
        call("mbarrier_expect_tx", ref("full", v("slot")), c(tx)),
        call("tma_load_2d", ref("A_s", v("slot"), 0, 0), v("tmA", U64), ref("full", v("slot")),
             v("m0"), b("*", v("kb"), cfg.bk)),
        call("tma_load_2d", ref("B_s", v("slot"), 0, 0), v("tmB", U64), ref("full", v("slot")),
             v("n0"), b("*", v("kb"), cfg.bk)))
    loop = tile_loop(cfg, serial("kb", v("k_tiles"), ring_slot(cfg, issue)))
    return ir.Role("p", "producer", 0, 1, cfg.producer_regs, one_thread(loop))


def consumer(cfg: GemmConfig):
    n = cfg.bn
    first = b("!=", b("+", v("kb"), v("kk")), 0, dtypes.bool_)
    mma = call(f"wgmma_m64n{n}k16_bf16", ref("acc", 0),
               ref("A_s", v("slot"), b("*", v("w"), 64), b("*", v("kk"), 16)),
               ref("B_s", v("slot"), 0, b("*", v("kk"), 16)),
               ir.Select(first, c(1), c(0), I32))
    step = ring_slot(cfg, ir.seq(
        call("mbarrier_wait", ref("full", v("slot")), v("parity")),
        call("wgmma_fence"),
        serial("kk", cfg.bk // 16, mma, kind="unroll"),
        call("wgmma_commit"),
        call("wgmma_wait", c(0)),
        one_thread(call("mbarrier_arrive", ref("empty", v("slot"))))))
    # the accumulator layout of wgmma m64nNk16 (arch/fragments.py, from the PTX ISA's
    # "Matrix fragments for wgmma"): register i of the warpgroup's thread t at (row, col)
    # of the 64 x bn tile; the chunk j's registers are j * 32 .. j * 32 + 31 (columns
    # 64 j .. 64 j + 63), so the chunk's column is the tile's minus 64 j
    i = b("+", b("*", v("j"), CHUNK // 2), v("i"))
    row, col = wgmma_d(n).coords(b("%", TID, WARPGROUP), v("i"), ops=LAYOUT_IR)
    bar_id = b("+", v("w"), 1)
    chunk = ir.seq(
        one_thread(call("tma_store_wait", c(0))),
        call("named_barrier", bar_id, c(WARPGROUP)),
        serial("i", CHUNK // 2, ir.Store("C_s", (v("w"), row, col),
                                         ir.Cast(BF16, ir.Load("acc", (i,), F32))), kind="unroll"),
        call("fence_proxy_async"),
        call("named_barrier", bar_id, c(WARPGROUP)),
        one_thread(ir.seq(
            call("tma_store_2d", v("tmC", U64), ref("C_s", v("w"), 0, 0),
                 b("+", v("m0"), b("*", v("w"), 64)), b("+", v("n0"), b("*", v("j"), CHUNK))),
            call("tma_store_commit"))))
    body = tile_loop(cfg, ir.seq(serial("kb", v("k_tiles"), step),
                                 serial("j", n // CHUNK, chunk, kind="unroll")))
    body = ir.seq(body, one_thread(call("tma_store_wait", c(0))))
    return ir.Role("w", "consumer", 1, cfg.consumers, cfg.consumer_regs, body)


def kernel(cfg: GemmConfig, name: str = "gemm_sm90") -> ir.Kernel:
    cfg.check()
    S = cfg.stages
    init = one_thread(ir.seq(*[ir.seq(call("mbarrier_init", ref("full", s), c(1)),
                                      call("mbarrier_init", ref("empty", s), c(cfg.consumers)))
                               for s in range(S)], call("fence_mbarrier_init")))
    body = ir.seq(
        ir.If(b("==", TID, 0, dtypes.bool_), init.then),
        ir.Barrier(),
        ir.Specialize((producer(cfg), consumer(cfg))))
    body = let("m_tiles", ceil_div(v("M"), cfg.bm), let("n_tiles", ceil_div(v("N"), cfg.bn),
           let("k_tiles", ceil_div(v("K"), cfg.bk),
           let("tiles", b("*", v("m_tiles"), v("n_tiles")), body))))
    sw = ir.Swizzle(128)
    allocs = [
        ir.Buffer("A_s", BF16, (c(S), c(cfg.bm), c(cfg.bk)), "shared", layout=sw),
        ir.Buffer("B_s", BF16, (c(S), c(cfg.bn), c(cfg.bk)), "shared", layout=sw),
        ir.Buffer("C_s", BF16, (c(cfg.consumers), c(64), c(CHUNK)), "shared", layout=sw),
        ir.Buffer("full", U64, (c(S),), "barrier"),
        ir.Buffer("empty", U64, (c(S),), "barrier"),
        ir.Buffer("acc", F32, (c(cfg.bn // 2),), "local"),
    ]
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    maps = (ir.TensorMap("tmA", "A", (cfg.bm, cfg.bk), 128),
            ir.TensorMap("tmB", "B", (cfg.bn, cfg.bk), 128),
            ir.TensorMap("tmC", "C", (64, CHUNK), 128))
    threads = WARPGROUP * (1 + cfg.consumers)
    return ir.Kernel(name, (), ("M", "N", "K", ir.SM_COUNT), (v(ir.SM_COUNT), c(1), c(1)),
                     (c(threads), c(1), c(1)), body, tensor_maps=maps, min_blocks=1)


def gemm_sm90_program(sizes: dict | None = None, config: GemmConfig = GemmConfig()):
    """The IR Program of the GEMM (flattened, as `tcomp.lower` returns it):
    the op's interface (buffers, signature, size sources) from lowering its
    plain schedule, its one kernel built here. `sizes` may fix M, N, K."""
    import tcomp
    from ..lower import flatten
    from ..lower.rewriter import substitute
    from ..lower.verify import verify
    sizes = dict(sizes or {})
    for name in ("K", "N"):
        if name in sizes and sizes[name] % 8:
            raise LoweringError(f"gemm_sm90: {name} = {sizes[name]} is not a multiple of 8 (the "
                                f"TMA engine moves rows of whole 16-byte units)")
    op = tcomp.op(SOURCE)
    base = tcomp.lower(tcomp.Schedule(op), sizes=sizes)
    k = kernel(config)
    if sizes:
        k = dataclasses.replace(
            k, body=substitute(k.body, {n: c(val) for n, val in sizes.items()}),
            sizes=tuple(s for s in k.sizes if s not in sizes))
    prog = dataclasses.replace(base, kernels=(k,), zero_fill=frozenset())
    verify(k, prog)
    k = flatten.run(k, prog)
    verify(k, prog, flat=True)
    return dataclasses.replace(prog, kernels=(k,))


def gemm_sm90(sizes: dict | None = None, config: GemmConfig = GemmConfig(), arch: str = "sm_90a",
              target: str = "cuda"):
    """The GEMM built for the GPU: a CudaKernel called as `C = k(A, B)`;
    `target="sim"`: a SimKernel running the same IR on the CPU (ir.SM_COUNT is
    target_sim.executor.SIM_SM_COUNT there)."""
    if target == "sim":
        from ..build import SimKernel
        return SimKernel.from_program(gemm_sm90_program(sizes, config))
    from ..target_cuda.kernel import CudaKernel
    return CudaKernel.from_program(gemm_sm90_program(sizes, config), target="cuda")
