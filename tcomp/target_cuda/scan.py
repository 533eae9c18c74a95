"""CUDA for the block scans (`scan_add`, `scan_mul`, `scan_max`, `scan_min`,
`scan_linear`: lower/intrinsics.py; the sim's meaning: target_sim/scan.py).

The block is `threads` threads along x (a constant multiple of 32, no y or z),
each holding one element in a local register, the running carry in another.
Inside each warp an inclusive Hillis-Steele scan by `__shfl_up_sync` (offsets
1, 2, 4, 8, 16: five steps); each warp's last lane writes its warp's total to
shared memory; after a barrier every thread combines, in order, the carry, the
totals of the warps before its own and its warp-inclusive element (its value),
and the carry with all the warps' totals (the carry of the next tile); a second
barrier keeps the next tile's totals from overwriting these before every
thread has read them. For the linear recurrence an element is the pair
(a, b), and (a1, b1) then (a2, b2) is (a1 a2, a2 b1 + b2); a carry h becomes
a h + b.
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import ir

_OPS = {"scan_add": "+", "scan_mul": "*", "scan_max": "max", "scan_min": "min",
        "scan_linear": "linear"}


def emit_scan(gen, s: ir.Evaluate, d: int) -> None:
    op = _OPS[s.call.fn]
    *refs, threads = s.call.args
    block = [int(b.value) if isinstance(b, ir.Imm) else None for b in gen.k.block]
    n = int(threads.value) if isinstance(threads, ir.Imm) else None
    if n is None or block != [n, 1, 1] or n % 32:
        raise CudaError(f"codegen: a block scan needs a constant block of its threads along x, "
                        f"a multiple of 32 (got {n} threads, block {gen.k.block})")
    dt = refs[-1].dtype
    from .codegen import ctype
    ct = ctype(dt)
    names = [f"{gen.name(r.buffer)}[0]" for r in refs]
    u = f"tc_scan{len(gen.lines)}"
    warps = n // 32

    def comb(a: str, b: str) -> str:
        return combine_text(op, dt, a, b)

    def e(line: str, depth: int = 1):
        gen.emit(line, d + depth)

    gen.emit("{", d)
    e(f"const int {u}_lane = threadIdx.x & 31, {u}_warp = threadIdx.x >> 5;")
    if op == "linear":
        a, b, carry = names
        e(f"{ct} {u}_a = {a}, {u}_b = {b};")
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{")
        e(f"{ct} {u}_pa = __shfl_up_sync(0xffffffffu, {u}_a, {u}_o);", 2)
        e(f"{ct} {u}_pb = __shfl_up_sync(0xffffffffu, {u}_b, {u}_o);", 2)
        e(f"if ({u}_lane >= {u}_o) {{ {u}_b = {u}_a * {u}_pb + {u}_b; "
          f"{u}_a = {u}_pa * {u}_a; }}", 2)
        e("}")
        e(f"__shared__ {ct} {u}_sa[{warps}], {u}_sb[{warps}];")
        e(f"if ({u}_lane == 31) {{ {u}_sa[{u}_warp] = {u}_a; {u}_sb[{u}_warp] = {u}_b; }}")
        e("__syncthreads();")
        e(f"{ct} {u}_h = {carry};")
        e(f"for (int {u}_w = 0; {u}_w < {u}_warp; ++{u}_w) "
          f"{u}_h = {u}_sa[{u}_w] * {u}_h + {u}_sb[{u}_w];")
        e(f"{b} = {u}_a * {u}_h + {u}_b;")
        e(f"{ct} {u}_c = {carry};")
        e(f"for (int {u}_w = 0; {u}_w < {warps}; ++{u}_w) "
          f"{u}_c = {u}_sa[{u}_w] * {u}_c + {u}_sb[{u}_w];")
    else:
        value, carry = names
        e(f"{ct} {u}_v = {value};")
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{")
        e(f"{ct} {u}_p = __shfl_up_sync(0xffffffffu, {u}_v, {u}_o);", 2)
        e(f"if ({u}_lane >= {u}_o) {u}_v = {comb(f'{u}_p', f'{u}_v')};", 2)
        e("}")
        e(f"__shared__ {ct} {u}_s[{warps}];")
        e(f"if ({u}_lane == 31) {u}_s[{u}_warp] = {u}_v;")
        e("__syncthreads();")
        e(f"{ct} {u}_h = {carry};")
        e(f"for (int {u}_w = 0; {u}_w < {u}_warp; ++{u}_w) "
          f"{u}_h = {comb(f'{u}_h', f'{u}_s[{u}_w]')};")
        e(f"{value} = {comb(f'{u}_h', f'{u}_v')};")
        e(f"{ct} {u}_c = {carry};")
        e(f"for (int {u}_w = 0; {u}_w < {warps}; ++{u}_w) "
          f"{u}_c = {comb(f'{u}_c', f'{u}_s[{u}_w]')};")
    e("__syncthreads();")
    e(f"{carry} = {u}_c;")
    gen.emit("}", d)


def combine_text(op: str, dt, a: str, b: str) -> str:
    """The CUDA of `a op b` for a scan's combine ('+', '*', 'max', 'min') on
    values of type `dt` (fmaxf/fminf for floats, max/min for integers)."""
    if op in ("+", "*"):
        return f"{a} {op} {b}"
    if dt.is_float:
        return f"{'fmax' if op == 'max' else 'fmin'}{'f' if dt.name == 'float32' else ''}({a}, {b})"
    return f"{op}({a}, {b})"
