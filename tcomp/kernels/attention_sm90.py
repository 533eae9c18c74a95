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
           d: int = 128) -> str:
    """The attention comprehension the kernel computes (scale defaults to 1 / sqrt(D))."""
    s = 1 / math.sqrt(d) if scale is None else scale
    mask = "    Sm(z, i, j) = j > i ? -inf : Ss(z, i, j)\n" if causal else ""
    sm = "Sm" if causal else "Ss"
    return (f"def attention({dtype}(Z, S, D) Q, {dtype}(Z, T, D) K, {dtype}(Z, T, E) V) -> "
            f"({dtype}(Z, S, E) O) {{\n"
            f"    Sc(z, i, j) +=! Q(z, i, d) * K(z, j, d)\n"
            f"    Ss(z, i, j) = Sc(z, i, j) * {s!r}\n{mask}"
            f"    mx(z, i) max=! {sm}(z, i, j)\n"
            f"    P(z, i, j) = exp({sm}(z, i, j) - mx(z, i))\n"
            f"    l(z, i) +=! P(z, i, j)\n"
            f"    O(z, i, e) +=! P(z, i, j) * V(z, j, e) / l(z, i)\n}}")


@dataclass(frozen=True)
class AttentionConfig:
    causal: bool = False
    scale: float | None = None  # None: 1 / sqrt(D)
    dtype: str = "bfloat16"  # or "float16"
    bn: int = 128  # keys per step
    stages: int = 2
    producer_regs: int = 24
    consumer_regs: int = 240
    pingpong: bool = False  # the consumers take turns issuing their wgmma (measured: no gain)


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
    scale = 1 / math.sqrt(sizes["D"]) if config.scale is None else config.scale
    op = tcomp.op(source(config.dtype, scale, config.causal, sizes["D"]))
    base = tcomp.lower(tcomp.Schedule(op), sizes=sizes)
    if config.dtype not in ("bfloat16", "float16"):
        raise LoweringError(f"attention_sm90: dtype {config.dtype!r}; bfloat16 or float16")
    dt = getattr(dtypes, config.dtype)
    sym = lambda n: ir.const(sizes[n]) if n in sizes else ir.Var(n, dtypes.int32)  # noqa: E731
    plan = AttentionPlan(
        name="attention_sm90", q="Q", k="K", v="V", o="O", dtype=dt, out=dt,
        Z=sym("Z"), S=sym("S"), T=sym("T"), D=sizes["D"], E=sizes["E"],
        sizes=tuple(n for n in ("Z", "S", "T") if n not in sizes), scale=scale,
        causal=config.causal, bn=config.bn, stages=config.stages,
        producer_regs=config.producer_regs, consumer_regs=config.consumer_regs,
        pingpong=config.pingpong)
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
