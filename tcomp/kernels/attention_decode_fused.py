"""Fused split-KV decode attention (lower/decode_attention.py): one kernel
reads K and V once in 16-byte vectors, keeps the online softmax in
registers and shares each load among the g query heads of a K/V head; a
second, small kernel combines the parts. Reached as
`attention_decode(..., fused=True)`; `decode_program(...)` gives the IR
Program (for the sim, dumps and tests).

    k = attention_decode({"D": 128, "E": 128, "S": 1}, parts=16, kv_group=4, fused=True)
    O = k(Q, K, V)      # Q (Z, S, D), K (Z / g, T, D), V (Z / g, T, E) -> O (Z, S, E)

It computes attention_sm90.source(...)'s comprehension (the interface is
that program's). D = E, a multiple of the 16-byte vector whose lane count
(D / vec) divides 32 (bf16/fp16: D 8 to 256; float32: 4 to 128); S given in
`sizes` (g S <= 16 query rows a block); Z and T fixed or symbolic, T any
value (tails masked, parts may be empty); Z must be a multiple of g.
"""
from __future__ import annotations

import dataclasses
import math

from ..errors import LoweringError

DTYPES = ("bfloat16", "float16", "float32")


def decode_program(sizes: dict, parts: int = 16, dtype: str = "bfloat16",
                   scale: float | None = None, kv_group: int = 1, unroll: int = 4,
                   threads: int = 128, prefetch: bool = True):
    """The flattened IR Program of the fused decode kernels."""
    import tcomp
    from ..lang import dtypes
    from ..lower import flatten, ir
    from ..lower.decode_attention import (MAX_ROWS, DecodePlan, annotate_vectors,
                                          combine_kernel, partial_buffers, split_kernel)
    from ..lower.rewriter import substitute
    from ..lower.verify import verify
    from .attention_sm90 import source
    sizes = dict(sizes)
    name = "attention_decode(fused=True)"
    if "D" not in sizes or "E" not in sizes:
        raise LoweringError(f"{name}: give the head sizes D and E in sizes")
    if sizes["D"] != sizes["E"]:
        raise LoweringError(f"{name}: D = {sizes['D']}, E = {sizes['E']}; the lanes that hold a "
                            f"K row hold the V row: D must equal E")
    if "S" not in sizes:
        raise LoweringError(f"{name}: give S (query rows per matrix) in sizes: the rows are "
                            f"kept in registers")
    if dtype not in DTYPES:
        raise LoweringError(f"{name}: dtype {dtype!r}; one of {', '.join(DTYPES)}")
    dt = getattr(dtypes, dtype)
    vec = 16 // dt.numpy.itemsize
    D, S = sizes["D"], sizes["S"]
    if D % vec or 32 % (D // vec):
        raise LoweringError(f"{name}: D = {D} in 16-byte vectors of {vec} {dtype}: D must be a "
                            f"multiple of {vec} and D / {vec} threads per row must divide 32")
    lanes = D // vec
    if parts < 1:
        raise LoweringError(f"{name}: parts = {parts}; at least 1")
    if kv_group < 1:
        raise LoweringError(f"{name}: kv_group = {kv_group}; at least 1")
    if unroll < 1:
        raise LoweringError(f"{name}: unroll = {unroll}; at least 1")
    if S < 1 or kv_group * S > MAX_ROWS:
        raise LoweringError(f"{name}: kv_group x S = {kv_group} x {S} query rows per block; "
                            f"1 to {MAX_ROWS} (their state lives in registers)")
    if threads % lanes or not lanes <= threads <= 1024:
        raise LoweringError(f"{name}: threads = {threads}; a multiple of the {lanes} threads "
                            f"of a key row, at most 1024")
    if "Z" in sizes and sizes["Z"] % kv_group:
        raise LoweringError(f"{name}: Z = {sizes['Z']} query matrices is not a multiple of "
                            f"kv_group = {kv_group}")
    if "Z" in sizes and sizes["Z"] // kv_group > 65535:
        raise LoweringError(f"{name}: Z / kv_group = {sizes['Z'] // kv_group} K/V matrices; the "
                            f"grid's y dimension takes at most 65535")
    s = 1 / math.sqrt(D) if scale is None else scale
    op = tcomp.op(source(dtype, s, False, D, kv_group))
    base = tcomp.lower(tcomp.Schedule(op), sizes=sizes)
    sym = lambda n: ir.const(sizes[n]) if n in sizes else ir.Var(n, dtypes.int32)  # noqa: E731
    plan = DecodePlan(name="attention_decode", dtype=dt, out=dt, Z=sym("Z"), S=S, T=sym("T"),
                      D=D, sizes=tuple(n for n in ("Z", "T") if n not in sizes), scale=s,
                      parts=parts, kv_group=kv_group, unroll=unroll, threads=threads,
                      prefetch=prefetch)
    W, M, L = "Wp", "mp", "lp"
    kernels = (split_kernel(plan, W, M, L), combine_kernel(plan, W, M, L, "O"))
    if sizes:
        kernels = tuple(dataclasses.replace(k, body=substitute(
            k.body, {n: ir.const(val) for n, val in sizes.items()})) for k in kernels)
    bufs = tuple(b_ for b_ in base.buffers if b_.role != "temp") + partial_buffers(plan, W, M, L)
    prog = dataclasses.replace(base, buffers=bufs, kernels=kernels, zero_fill=frozenset())
    out = []
    for k in kernels:
        verify(k, prog)
        k = annotate_vectors(flatten.run(k, prog))
        verify(k, prog, flat=True)
        out.append(k)
    return dataclasses.replace(prog, kernels=tuple(out))


def attention_decode_fused(sizes: dict, parts: int = 16, dtype: str = "bfloat16",
                           scale: float | None = None, kv_group: int = 1, unroll: int = 4,
                           threads: int = 128, target: str = "cuda", prefetch: bool = True):
    """The fused decode kernels: a CudaKernel called as `O = k(Q, K, V)`, or
    with `target="sim"` a SimKernel running the same IR on the CPU."""
    prog = decode_program(sizes, parts, dtype, scale, kv_group, unroll, threads, prefetch)
    if target == "sim":
        from ..build import SimKernel
        return SimKernel.from_program(prog)
    if target != "cuda":
        raise LoweringError(f"attention_decode(fused=True): target {target!r}; 'cuda' or 'sim'")
    from ..target_cuda.kernel import CudaKernel
    return CudaKernel.from_program(prog, target="cuda")
