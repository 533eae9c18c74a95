"""CUDA for the warp-collective tensor-core intrinsics (`ldmatrix`, `mma.sync`)
and the fragment buffers they work on (target_sim/warp_ops.py is their
meaning; lower/warp_layouts.py the layouts).

A fragment buffer of a 16-bit type is declared as 32-bit registers, two
elements each (`unsigned F[n / 2]`), which is what the instructions take; only
intrinsics may touch its elements. A float32 fragment is a plain `float F[n]`.
Register offsets are constants after unrolling, so the arrays stay in registers.
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import ir

_MMA_TYPES = {"bfloat16": "bf16", "float16": "f16"}


def declaration(b: ir.Buffer, size: int) -> str:
    """The declaration of fragment buffer `b` of `size` elements."""
    if b.dtype.bits == 16:
        if size % 2:
            raise CudaError(f"codegen: 16-bit fragment '{b.name}' has an odd size {size}")
        return f"unsigned {b.name}[{size // 2}];"
    if b.dtype.name != "float32":
        raise CudaError(f"codegen: fragment '{b.name}' of {b.dtype} (fragments hold float32 or "
                        f"16-bit elements)")
    return f"float {b.name}[{size}];"


def emit(gen, call: ir.Call) -> str | None:
    """The CUDA statement for a warp intrinsic call, or None for another call.
    `gen` is codegen's kernel printer (its expr, buffer_dtype)."""
    if call.fn.startswith("ldmatrix_"):
        return _ldmatrix(gen, call)
    if call.fn == "mma_m16n8k16":
        return _mma(gen, call)
    if call.fn == "cp_async":
        return _cp_async(gen, call)
    if call.fn == "cp_async_commit":
        return 'asm volatile("cp.async.commit_group;\\n" ::);'
    if call.fn == "cp_async_wait":
        (n,) = call.args
        return f'asm volatile("cp.async.wait_group {int(n.value)};\\n" ::: "memory");'
    return None


def _cp_async(gen, call: ir.Call) -> str:
    """16 bytes bypass L1 (.cg); 4 and 8 bytes go through it (.ca, the only form)."""
    dst, src, nbytes, src_bytes = call.args
    nb = int(nbytes.value)
    if nb not in (4, 8, 16):
        raise CudaError(f"codegen: cp_async of {nb} bytes (4, 8 or 16)")
    cache = "cg" if nb == 16 else "ca"
    # the source's base pointer must be aligned too: checked at launch with the
    # vector-accessed buffers (16 bytes, which covers 4 and 8)
    gen.vector_buffers.add(src.buffer)
    daddr = (f"static_cast<unsigned>(__cvta_generic_to_shared(&{dst.buffer}"
             f"[{gen.expr(dst.indices[0])}]))")
    saddr = f"&{src.buffer}[{gen.expr(src.indices[0])}]"
    return (f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nb}, %2;\\n" :: '
            f'"r"({daddr}), "l"({saddr}), "r"((int)({gen.expr(src_bytes)})) : "memory");')


def _reg(gen, ref: ir.Ref, i: int, pair: bool) -> str:
    """Register i of a fragment operand: 32-bit register i from the element
    offset of `ref` (pairs of 16-bit elements when `pair`)."""
    if not isinstance(ref, ir.Ref) or len(ref.indices) != 1:
        raise CudaError(f"codegen: intrinsic operand must be a flat buffer reference, got {ref}")
    off = ref.indices[0]
    if isinstance(off, ir.Imm):
        o = int(off.value)
        if pair and o % 2:
            raise CudaError(f"codegen: 16-bit fragment '{ref.buffer}' at odd element offset {o}")
        return f"{ref.buffer}[{(o // 2 if pair else o) + i}]"
    base = gen.expr(off)
    return f"{ref.buffer}[({base}) / 2 + {i}]" if pair else f"{ref.buffer}[{base} + {i}]"


def _ldmatrix(gen, call: ir.Call) -> str:
    parts = call.fn.split("_")
    count = int(parts[1][1:])
    trans = ".trans" if parts[-1] == "trans" else ""
    dst, src = call.args
    outs = ", ".join(f'"=r"({_reg(gen, dst, i, True)})' for i in range(count))
    regs = ",".join(f"%{i}" for i in range(count))
    addr = (f"static_cast<unsigned>(__cvta_generic_to_shared(&{src.buffer}"
            f"[{gen.expr(src.indices[0])}]))")
    return (f'asm volatile("ldmatrix.sync.aligned.m8n8.x{count}{trans}.shared.b16 {{{regs}}}, '
            f'[%{count}];\\n" : {outs} : "r"({addr}));')


def _mma(gen, call: ir.Call) -> str:
    d, a, b, c = call.args
    ty = _MMA_TYPES.get(gen.buffer_dtype(a.buffer).name)
    if ty is None:
        raise CudaError(f"codegen: mma_m16n8k16 on {gen.buffer_dtype(a.buffer)} operands")
    same = d.buffer == c.buffer and d.indices == c.indices
    dregs = [_reg(gen, d, i, False) for i in range(4)]
    outs = ", ".join(f'"{"+" if same else "="}f"({r})' for r in dregs)
    ins = [f'"r"({_reg(gen, a, i, True)})' for i in range(4)]
    ins += [f'"r"({_reg(gen, b, i, True)})' for i in range(2)]
    cregs = "%0,%1,%2,%3" if same else "%10,%11,%12,%13"
    if not same:
        ins += [f'"f"({_reg(gen, c, i, False)})' for i in range(4)]
    return (f'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 '
            f'{{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{{cregs}}};\\n" : {outs} : '
            f'{", ".join(ins)});')
