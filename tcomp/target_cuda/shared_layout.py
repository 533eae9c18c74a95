"""Where a kernel's shared buffers live: the offsets and alignments of its
shared and barrier buffers in one shared-memory block (what the CUDA
emitter declares, static or dynamic).

Alignment: a buffer the async proxy addresses (an operand of an intrinsic
with the "async_proxy" effect: TMA copies, wgmma) is 1024-aligned when
swizzled (the TMA and wgmma swizzle patterns repeat every 8 rows of 128
bytes from an aligned base) and 128-aligned otherwise (TMA's minimum);
mbarriers 8; everything else 16. Buffers are placed in the order their
allocations appear in the kernel.
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import intrinsics, ir
from ..lower.rewriter import walk_stmts


def shared_layout(body, size_of):
    """(buffers, byte offsets, total bytes, the block's base alignment) of
    the shared and barrier buffers allocated in `body`; `size_of(buffer)`:
    its element count."""
    found = {}
    for x in walk_stmts(body):
        if isinstance(x, ir.Alloc) and x.buffer.scope in ("shared", "barrier"):
            # an unrolled loop allocates the same buffer once per copy, each copy's use
            # finished before the next's: one buffer (issue 22, defect 9)
            if found.setdefault(x.buffer.name, x.buffer) != x.buffer:
                raise CudaError(f"codegen: shared buffer '{x.buffer.name}' is allocated "
                                f"twice with different shapes or types")
    shared = list(found.values())
    total = 0
    offsets = []
    proxy = _async_proxy_buffers(body)
    for b in shared:
        a = _align(b, proxy)
        total = (total + a - 1) // a * a
        offsets.append(total)
        total += size_of(b) * b.dtype.numpy.itemsize
    return shared, offsets, total, max([16] + [_align(b, proxy) for b in shared])


def _align(b: ir.Buffer, async_proxy: set) -> int:
    """A shared buffer's alignment in bytes (module docstring)."""
    if b.scope == "barrier":
        return 8
    if b.name in async_proxy:
        return 1024 if b.layout is not None else 128
    return 16


def _async_proxy_buffers(body) -> set:
    """Buffers that an intrinsic with the "async_proxy" effect references."""
    out = set()
    for x in walk_stmts(body):
        entry = intrinsics.of(x)
        if entry is not None and "async_proxy" in entry.effects:
            out |= {a.buffer for _, a in intrinsics.operands(x) if isinstance(a, ir.Ref)}
    return out
