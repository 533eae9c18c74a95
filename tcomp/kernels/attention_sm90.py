"""FlashAttention's forward pass on Hopper, built as Kernel IR from a plan
(lower/hopper_attention.py): O = softmax(scale Q K^T) V per matrix z of a
batch (batch x heads flattened into Z), optionally causal.

    k = attention_sm90(AttentionConfig(causal=True), sizes={"D": 128, "E": 128})
    O = k(Q, K, V)        # Q (Z, S, D), K (Z, T, D), V (Z, T, E) bfloat16 -> O (Z, S, E)

`attention_program` gives the IR Program (for the sim, dumps and tests);
`SOURCE` the comprehension it computes (what tcomp.evaluate checks it
against). D and E are 64 or 128 and must be given in `sizes`; Z, S and T may
be fixed or symbolic (S and T any value: the TMA engine clips the tiles).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import LoweringError


def source(dtype: str = "bfloat16", scale: float | None = None, causal: bool = False,
           d: int = 128, kv_group: int = 1) -> str:
    """The attention comprehension the kernel computes (scale defaults to 1 /
    sqrt(D)); with kv_group g > 1, grouped-query attention: matrix z of Q
    reads matrix z / g of K and V (heads h of a batch b at z = b H + h, the
    KV heads at b (H / g) + h / g)."""
    s = 1 / math.sqrt(d) if scale is None else scale
    mask = "    Sm(z, i, j) = j > i ? -inf : Ss(z, i, j)\n" if causal else ""
    sm = "Sm" if causal else "Ss"
    zk, kz = ("Z", "z") if kv_group == 1 else ("ZK", f"z / {kv_group}")
    return (f"def attention({dtype}(Z, S, D) Q, {dtype}({zk}, T, D) K, {dtype}({zk}, T, E) V) -> "
            f"({dtype}(Z, S, E) O) {{\n"
            f"    Sc(z, i, j) +=! Q(z, i, d) * K({kz}, j, d)\n"
            f"    Ss(z, i, j) = Sc(z, i, j) * {s!r}\n{mask}"
            f"    mx(z, i) max=! {sm}(z, i, j)\n"
            f"    P(z, i, j) = exp({sm}(z, i, j) - mx(z, i))\n"
            f"    l(z, i) +=! P(z, i, j)\n"
            f"    O(z, i, e) +=! P(z, i, j) * V({kz}, j, e) / l(z, i)\n}}")


@dataclass(frozen=True)
class AttentionConfig:
    causal: bool = False
    scale: float | None = None  # None: 1 / sqrt(D)
    dtype: str = "bfloat16"  # or "float16"
    bn: int = 128  # keys per step
    bm: int = 128  # queries per block: 64 per consumer warpgroup (128: two, 192: three)
    stages: int = 2
    producer_regs: int = 24
    consumer_regs: int | None = None  # None: 240 with two consumers, 160 with three
    pingpong: bool = False  # the consumers take turns issuing their wgmma (measured: no gain)
    kv_group: int = 1  # query matrices per K/V matrix (grouped-query attention)


def attention_program(config: AttentionConfig = AttentionConfig(), sizes: dict | None = None):
    """The IR Program (flattened, as `tcomp.lower` returns it): the op's
    interface from lowering its plain schedule (temporaries dropped), its one
    kernel built from the plan."""
    import tcomp
    from ..lang import dtypes
    from ..lower import flatten, ir
    from ..lower.hopper_attention import AttentionPlan, kernel
    from ..lower.rewriter import substitute
    from ..lower.verify import verify
    sizes = dict(sizes or {})
    for name in ("D", "E"):
        if sizes.get(name) not in (64, 128):
            raise LoweringError(f"attention_sm90: {name} must be given in sizes as 64 or 128 "
                                f"(got {sizes.get(name)})")
    if config.bn not in (64, 128):
        raise LoweringError(f"attention_sm90: bn = {config.bn}; 64 or 128 keys per step")
    if config.stages < 1:
        raise LoweringError("attention_sm90: stages must be at least 1")
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
    scale = 1 / math.sqrt(sizes["D"]) if config.scale is None else config.scale
    if config.kv_group < 1:
        raise LoweringError("attention_sm90: kv_group must be at least 1")
    op = tcomp.op(source(config.dtype, scale, config.causal, sizes["D"], config.kv_group))
    base = tcomp.lower(tcomp.Schedule(op), sizes=sizes)
    if config.dtype not in ("bfloat16", "float16"):
        raise LoweringError(f"attention_sm90: dtype {config.dtype!r}; bfloat16 or float16")
    dt = getattr(dtypes, config.dtype)
    sym = lambda n: ir.const(sizes[n]) if n in sizes else ir.Var(n, dtypes.int32)  # noqa: E731
    plan = AttentionPlan(
        name="attention_sm90", q="Q", k="K", v="V", o="O", dtype=dt, out=dt,
        Z=sym("Z"), S=sym("S"), T=sym("T"), D=sizes["D"], E=sizes["E"],
        sizes=tuple(n for n in ("Z", "S", "T") if n not in sizes), scale=scale,
        causal=config.causal, bn=config.bn, bm=config.bm, stages=config.stages,
        producer_regs=config.producer_regs, consumer_regs=cregs,
        pingpong=config.pingpong, kv_group=config.kv_group)
    k = kernel(plan)
    if sizes:
        k = dataclasses.replace(k, body=substitute(k.body, {n: ir.const(val)
                                                            for n, val in sizes.items()}))
    bufs = tuple(b_ for b_ in base.buffers if b_.role != "temp")
    prog = dataclasses.replace(base, buffers=bufs, kernels=(k,), zero_fill=frozenset())
    verify(k, prog)
    k = flatten.run(k, prog)
    verify(k, prog, flat=True)
    return dataclasses.replace(prog, kernels=(k,))


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
