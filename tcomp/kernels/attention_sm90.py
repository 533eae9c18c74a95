"""FlashAttention's forward pass on Hopper, from a comprehension and a
schedule: O = softmax(scale Q K^T) V per matrix z of a batch (batch x heads
flattened into Z), optionally causal.

    k = attention_sm90(AttentionConfig(causal=True), sizes={"D": 128, "E": 128})
    O = k(Q, K, V)        # Q (Z, S, D), K (Z, T, D), V (Z, T, E) bfloat16 -> O (Z, S, E)
    O, L = attention_sm90(AttentionConfig(lse=True), sizes=...)(Q, K, V)  # L: log-sum-exp

`source()` is the comprehension (plain attention: scores, a row max,
exponentials, a row sum, a weighted sum; what tcomp.evaluate checks);
`attention_schedule()` the schedule that turns it into the kernel:
`online_softmax` rewrites the chain into one pass, and the Hopper primitives
(TMA copies, a pipelined key loop, warp specialisation, wgmma for the scores
and the register-A wgmma for P . V, the division as the epilogue) say how it
runs; lowering reads the kernel's plan off that schedule
(lower/hopper_attention_plan.py) and builds it (lower/hopper_attention.py).
`attention_program` gives the lowered IR Program (for the sim, dumps and
tests). D and E are 64 or 128 and must be given in `sizes`; Z, S and T may
be fixed or symbolic (S and T any value: the TMA engine clips the tiles).
With lse=True the comprehension has a second output L = mx + log(l), each
row's log-sum-exp, and the schedule makes it an epilogue over O.online's
running max and sum (`on.epilogue(s["L"])`: schedule/statistics_epilogue.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import LoweringError
from ..lower.hopper_attention import SMEM_LIMIT, smem_bytes  # noqa: F401 (bench/attention.py)
from ..schedule.primitives_hopper import ATTENTION_BN


def source(dtype: str = "bfloat16", scale: float | None = None, causal: bool = False,
           d: int = 128, kv_group: int = 1, lse: bool = False) -> str:
    """The attention comprehension the kernel computes (scale defaults to 1 /
    sqrt(D)); with kv_group g > 1, grouped-query attention: matrix z of Q
    reads matrix z / g of K and V (heads h of a batch b at z = b H + h, the
    KV heads at b (H / g) + h / g); with lse, a second output L, each row's
    log-sum-exp of the scaled (masked) scores. The scores and the softmax are
    float32 (the float casts in Sc), as the kernel computes them."""
    s = 1 / math.sqrt(d) if scale is None else scale
    mask = "    Sm(z, i, j) = j > i ? -inf : Ss(z, i, j)\n" if causal else ""
    sm = "Sm" if causal else "Ss"
    zk, kz = ("Z", "z") if kv_group == 1 else ("ZK", f"z / {kv_group}")
    outs = f"{dtype}(Z, S, E) O" + (", float32(Z, S) L" if lse else "")
    return (f"def attention({dtype}(Z, S, D) Q, {dtype}({zk}, T, D) K, {dtype}({zk}, T, E) V) -> "
            f"({outs}) {{\n"
            f"    Sc(z, i, j) +=! float(Q(z, i, d)) * float(K({kz}, j, d))\n"
            f"    Ss(z, i, j) = Sc(z, i, j) * {s!r}\n{mask}"
            f"    mx(z, i) max=! {sm}(z, i, j)\n"
            f"    P(z, i, j) = exp({sm}(z, i, j) - mx(z, i))\n"
            f"    l(z, i) +=! P(z, i, j)\n"
            f"    O(z, i, e) +=! P(z, i, j) * V({kz}, j, e) / l(z, i)\n"
            + ("    L(z, i) = mx(z, i) + log(l(z, i))\n" if lse else "") + "}")


BN = ATTENTION_BN  # keys per step (176: FlashAttention-3's choice at D = 128, non-causal)


@dataclass(frozen=True)
class AttentionConfig:
    """How the kernel runs; None picks what measured best on the H200
    (bench/attention.py; BENCHMARKS.md), shown in the plan line of the dump."""
    causal: bool = False
    scale: float | None = None  # None: 1 / sqrt(D)
    dtype: str = "bfloat16"  # or "float16"
    bn: int | None = None  # keys per step; None: 176 at D = E = 128, else 128
    # queries per block: 64 per consumer warpgroup (128: two, 192: three); None: 192 at
    # D = E = 64 (without pingpong), else 128
    bm: int | None = None
    stages: int = 2
    producer_regs: int = 24
    consumer_regs: int | None = None  # None: 240 with two consumers, 160 with three
    pingpong: bool = False  # the consumers take turns issuing their wgmma (measured: no gain)
    kv_group: int = 1  # query matrices per K/V matrix (grouped-query attention)
    # one block per multiprocessor walking the tiles (the next tile's loads under the last
    # one's epilogue), or one block per tile; None: persistent unless causal (the tiles'
    # lengths differ and a static walk balances them worse than the hardware's block
    # scheduler) or bm = 192 (its 160 registers spill the persistent loop's state)
    persistent: bool | None = None
    lse: bool = False  # also return each row's log-sum-exp L (float32, Z x S)

    def resolved(self, D: int, E: int) -> "AttentionConfig":
        """The configuration with every None chosen for head sizes D and E."""
        bm = self.bm if self.bm is not None else (192 if D == E == 64 and not self.pingpong
                                                  else 128)
        bn = self.bn if self.bn is not None else (176 if D == E == 128 else 128)
        persistent = (self.persistent if self.persistent is not None else
                      not self.causal and bm != 192)
        return dataclasses.replace(self, bm=bm, bn=bn, persistent=persistent)


def _checked(config: AttentionConfig, sizes: dict) -> tuple[AttentionConfig, int, float]:
    """The configuration resolved for sizes' D and E, the consumers' registers
    and the scale, or the LoweringError that says what is wrong with them."""
    for name in ("D", "E"):
        if sizes.get(name) not in (64, 128):
            raise LoweringError(f"attention_sm90: {name} must be given in sizes as 64 or 128 "
                                f"(got {sizes.get(name)})")
    config = config.resolved(sizes["D"], sizes["E"])
    if config.bn not in BN:
        raise LoweringError(f"attention_sm90: bn = {config.bn}; {', '.join(map(str, BN))} keys "
                            f"per step")
    if config.stages < 1:
        raise LoweringError("attention_sm90: stages must be at least 1")
    need = smem_bytes(config, sizes["D"], sizes["E"])
    if need > SMEM_LIMIT:
        raise LoweringError(f"attention_sm90: bm={config.bm}, bn={config.bn}, "
                            f"{config.stages} stages at D={sizes['D']}, E={sizes['E']} need "
                            f"{need} bytes of shared memory; a block may have {SMEM_LIMIT} "
                            f"(fewer stages or a smaller bn)")
    if config.bm not in (128, 192):
        raise LoweringError(f"attention_sm90: bm = {config.bm}; 128 or 192 queries per block "
                            f"(two or three consumer warpgroups of 64)")
    consumers = config.bm // 64
    if config.pingpong and consumers != 2:
        raise LoweringError("attention_sm90: pingpong takes turns between two consumer "
                            "warpgroups (bm = 128)")
    cregs = config.consumer_regs or (240 if consumers == 2 else 160)
    if 128 * (config.producer_regs + consumers * cregs) > 65536:
        raise LoweringError(f"attention_sm90: {config.producer_regs} + {consumers} x {cregs} "
                            f"registers per thread of 128-thread warpgroups need "
                            f"{128 * (config.producer_regs + consumers * cregs)}; a "
                            f"multiprocessor has 65536 (lower consumer_regs)")
    if config.kv_group < 1:
        raise LoweringError("attention_sm90: kv_group must be at least 1")
    if config.dtype not in ("bfloat16", "float16"):
        raise LoweringError(f"attention_sm90: dtype {config.dtype!r}; bfloat16 or float16")
    scale = 1 / math.sqrt(sizes["D"]) if config.scale is None else config.scale
    return config, cregs, scale


def attention_schedule(config: AttentionConfig = AttentionConfig(), sizes: dict | None = None):
    """The schedule of `source()` that lowers to the Hopper kernel: the
    comprehension's softmax chain rewritten into one pass, then what runs
    where (docs/hopper.md, "Attention from a schedule", says what each line
    decides). `config` picks the numbers (AttentionConfig.resolved)."""
    import tcomp
    sizes = dict(sizes or {})
    cfg, cregs, scale = _checked(config, sizes)
    s = tcomp.Schedule(tcomp.op(source(cfg.dtype, scale, cfg.causal, sizes["D"], cfg.kv_group,
                                       cfg.lse)))
    s.online_softmax("mx", "l", ["O"])      # one pass: running max, sum, rescaled O
    on, sc = s["O.online"], s["Sc"]
    z, i, e = on.axes
    (j,) = on.reduce_axes
    io, ii = on.split(i, cfg.bm)            # queries per block
    w, iw = on.split(ii, 64)                # 64 per consumer warpgroup
    jo, ji = on.split(j, cfg.bn)            # keys per step
    on.reorder(z, io, w, jo, iw, e, ji)
    for t, reader, at in (("Q", sc, io), ("K", sc, jo), ("V", on, jo)):
        copy = s.cache_read(t, "shared", [reader])  # Q's tile stays; K and V through a ring
        copy.compute_at(on, at)
        copy.tma()
    if cfg.lse:
        on.epilogue(s["L"])                 # L = mx + log(l) from the running max and sum
    sc.compute_at(on, jo)                   # one key block's scores, in registers
    sc.tensorize(sc.axes[1], f"wgmma_m64n{cfg.bn}k16")
    on.pipeline(jo, stages=cfg.stages)
    on.warp_specialize(w, producer_regs=cfg.producer_regs, consumer_regs=cregs,
                       pingpong=cfg.pingpong)
    if cfg.persistent:
        on.persistent(z, io, group_m=1)     # one block per SM walking the tiles
    else:
        on.bind(io, "blockIdx.x")
        on.bind(z, "blockIdx.y")
    on.epilogue(s["O"])                     # O = acc / sum from the registers, TMA store
    on.tensorize(iw, f"wgmma_rs_m64n{sizes['E']}k16")  # P . V with P in registers
    return s


def attention_program(config: AttentionConfig = AttentionConfig(), sizes: dict | None = None):
    """The IR Program (flattened, as `tcomp.lower` returns it): the lowered
    `attention_schedule`."""
    import tcomp
    sizes = dict(sizes or {})
    return tcomp.lower(attention_schedule(config, sizes), sizes=sizes)


def attention_sm90(config: AttentionConfig = AttentionConfig(), sizes: dict | None = None,
                   target: str = "cuda"):
    """The attention kernel: a CudaKernel called as `O = k(Q, K, V)`, or with
    `target="sim"` a SimKernel running the same IR on the CPU."""
    prog = attention_program(config, sizes)
    if target == "sim":
        from ..build import SimKernel
        return SimKernel.from_program(prog)
    from ..target_cuda.kernel import CudaKernel
    return CudaKernel.from_program(prog, target="cuda")
