"""A Hopper GEMM from a schedule: `C(m, n) +=! A(m, k) * B(n, k)` in bfloat16
with float32 accumulation (B given as N x K, both operands K-major: the
product of `torch.nn.functional.linear`, C = A . B^T).

`hopper_schedule(op, config)` writes the schedule of the Hopper path
(docs/schedules.md, "Hopper") for any op of that form (A as (M, K) or
(K, M), B as (N, K) or (K, N), bfloat16 or float16; or fp8, both K-major:
kernels/gemm_fp8_sm90.py): block tiles of bm x bn, a `stages`-slot TMA ring
over k (slots of 128-byte rows: bk = 64 16-bit or 128 fp8 values), one
producer and `consumers` consumer warpgroups with their register counts, a
persistent grid in grouped order, wgmma m64n{bn}k16 (fp8: k32). Lowering builds the kernel from that
schedule (lower/hopper_plan.py reads it, lower/hopper_gemm.py builds it):

* a persistent grid of one block per multiprocessor (ir.SM_COUNT) walking
  the output tiles in grouped order;
* a producer warpgroup (`regs=40`) whose one thread issues TMA loads of A
  and B tiles (128-byte swizzle) into the ring on full/empty mbarriers, and
  consumer warpgroups (`regs=232`) each computing a 64 x bn slice of the
  tile with wgmma, its accumulators in registers;
* an epilogue through shared memory with TMA stores (any M and N; K's tail
  is read as zeros).

`gemm_sm90(sizes, config)` returns the built CUDA kernel; `gemm_sm90_program`
the IR Program (what `tcomp.lower` returns), for the sim, dumps and tests.
Requirements: K and N multiples of 8 (the TMA engine's 16-byte rows);
sizes may be fixed or symbolic.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError

SOURCE = ("def gemm_sm90(bfloat16(M,K) A, bfloat16(N,K) B) -> (C) "
          "{ C(m, n) +=! A(m, k) * B(n, k) }")


@dataclass(frozen=True)
class GemmConfig:
    bm: int = 128
    bn: int = 256
    # k per ring slot: one 128-byte swizzled row of the inputs, 64 for bfloat16/float16, 128
    # for fp8 (wgmma m64nNk32); None: chosen from the inputs' type by hopper_schedule
    bk: int | None = None
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True  # one block per SM walking the tiles; False: one block per tile
    # two consumers taking whole bm x bn tiles in turn (bm: 64 or 128, bm / 64 x bn / 2 <= 128
    # accumulators) instead of cooperating on one (bm = 64 x consumers)
    pingpong: bool = False

    def check(self) -> None:
        def bad(msg):
            raise LoweringError(f"gemm_sm90: {msg}")
        if self.bk not in (None, 64, 128):
            bad(f"bk must be 64 (one 128-byte swizzled row of bfloat16 or float16) or 128 (of "
                f"fp8), got {self.bk}")
        if self.bn not in (64, 128, 256):
            bad(f"bn must be 64, 128 or 256 (a wgmma m64nNk16 shape), got {self.bn}")
        if self.pingpong:
            if self.consumers != 2 or self.bm not in (64, 128) or self.bm // 64 * self.bn > 256:
                bad(f"ping-pong: two consumers, each a whole tile of bm = 64 or 128 rows with "
                    f"bm / 64 x bn / 2 <= 128 accumulators; got bm={self.bm}, bn={self.bn}, "
                    f"{self.consumers} consumers")
        elif self.consumers not in (1, 2) or self.bm != 64 * self.consumers:
            bad(f"bm must be 64 x consumers (each consumer warpgroup computes 64 rows; one or "
                f"two consumers), got bm={self.bm} with {self.consumers} consumers")
        if not 2 <= self.stages <= 5:
            bad(f"stages must be 2..5, got {self.stages}")
        if self.consumer_regs % 8 or self.producer_regs % 8 or not (
                24 <= self.producer_regs <= 256 and 24 <= self.consumer_regs <= 256):
            bad("register counts must be multiples of 8 in 24..256")

    @property
    def smem_bytes(self) -> int:
        ring = self.stages * (self.bm + self.bn) * 128  # bk values of 128 // bk bytes a row
        return ring + self.consumers * 64 * 64 * 2 + 2 * self.stages * 8


def hopper_schedule(op, config: GemmConfig = GemmConfig(), stage: str | None = None):
    """The Hopper schedule of `op`'s GEMM stage (`stage`: its name, default
    the op's one statement): a tcomp.Schedule ready to lower."""
    import tcomp
    config.check()
    s = op if isinstance(op, tcomp.Schedule) else tcomp.Schedule(op)
    C = s[stage if stage is not None else s.op.statements[0].tensor]
    *batch, m, n = C.axes
    (k,) = C.reduce_axes
    from ..schedule.primitives_hopper import contraction_roles
    roles = contraction_roles(s.states[C.name].definition)
    a, _, b, _ = roles if not isinstance(roles, str) else (None, None, None, None)
    # the k tile and wgmma's k: one 128-byte row and 32 bytes of the inputs' type
    item = s.tensors[a][0].bits // 8 if a is not None else 2
    bk = config.bk if config.bk is not None else 128 // item
    if bk * item != 128:
        raise LoweringError(f"gemm_sm90: bk must be {128 // item} for {s.tensors[a][0]} inputs "
                            f"(one 128-byte swizzled row), got {bk}")
    mo, no, mi, ni = C.tile(m, n, config.bm, config.bn)
    w, mw = C.split(mi, 64)
    ko, ki = C.split(k, bk)
    C.reorder(*batch, mo, no, w, ko, mw, ni, ki)
    inputs = {t.name for t in s.op.inputs}
    for t in dict.fromkeys((a, b)):
        if t in inputs:
            copy = s.cache_read(t, "shared", [C])
        else:  # a temporary operand: a convolution's im2col matrix (docs/hopper.md)
            copy = s[t]
            copy.set_scope("shared")
        copy.compute_at(C, ko)
        copy.tma()
    C.pipeline(ko, config.stages)
    C.warp_specialize(w, config.producer_regs, config.consumer_regs, pingpong=config.pingpong)
    if config.persistent:
        C.persistent(mo, no, group_m=config.group_m)
    else:
        C.bind(mo, "blockIdx.y")
        C.bind(no, "blockIdx.x")
    C.tensorize(mw, f"wgmma_m64n{config.bn}k{32 // item}")
    return s


def gemm_sm90_program(sizes: dict | None = None, config: GemmConfig = GemmConfig()):
    """The IR Program of the GEMM (as `tcomp.lower` returns it); `sizes` may
    fix M, N, K."""
    import tcomp
    sizes = dict(sizes or {})
    for name in ("K", "N"):
        if name in sizes and sizes[name] % 8:
            raise LoweringError(f"gemm_sm90: {name} = {sizes[name]} is not a multiple of 8 (the "
                                f"TMA engine moves rows of whole 16-byte units)")
    return tcomp.lower(hopper_schedule(tcomp.op(SOURCE), config), sizes=sizes)


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
