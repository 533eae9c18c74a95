"""CUDA for the multi-block scans (`scan_lookback_add`, `_mul`, `_max`, `_min`,
`_linear`: lower/intrinsics.py; the protocol and the sim's meaning:
target_sim/scan_lookback.py).

The block is `threads` threads along x, one tile of a row; each thread holds
the combine of its elements. Inside each warp an inclusive scan by
`__shfl_up_sync` (offsets 1 to 16), its exclusive form one more shuffle up;
each warp's last lane writes its warp's total to shared memory; after a
barrier warp 0 folds the totals into the tile's aggregate and does the
decoupled look-back, 32 predecessors at a time (CUB's warp-wide look-back):

    tile 0:  h = carry
    else:    lane 0: aggregate[slot] = agg;  st.release.gpu flags[slot] = 1
             for base = 0, 32, ...: lane l looks at tile j = base + 1 + l before its own
                 (lanes past the row's first tile: as if published, never the nearest)
                 spin on ld.acquire.gpu flags[slot - j] until non-zero;
                 its value: prefix[slot - j] (flag 2) or aggregate[slot - j] (flag 1)
                 n = the nearest lane with flag 2 (__ballot_sync, __ffs), else 31
                 lanes n .. 0 combined in order (the farthest first) into lane 0 by
                 __shfl_down_sync (lane l takes lane l + o's while l + o <= n),
                 in front of what the windows before gathered; stop if a lane had flag 2
    lane 0:  prefix[slot] = h followed by agg;  st.release.gpu flags[slot] = 2

The linear recurrence's values are pairs (a, b), a published prefix the
pair (0, h).

Memory order (PTX memory model, gpu scope): the release store of a flag
orders the thread's earlier stores of the aggregate or prefix before it; an
acquire load that reads the flag orders the loads after it (the aggregate or
prefix), so they see those stores. `asm volatile` with a "memory" clobber
keeps the compiler from moving loads and stores across them. A second
barrier hands h to every thread: its value becomes h followed by the warps
before its own and the lanes before it; its carry h followed by the whole
tile; a third barrier keeps a next call (a serial row loop) from overwriting
the shared totals while threads still read them.

Progress: a tile waits only for tiles of lower blockIdx.x (same row). It
relies on the GPU starting blocks in increasing block order (as CUB's
single-pass scan does with blockIdx.x): a block never waits for one that
cannot start. (A dynamic tile counter would not rely on it; not built.)
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import ir
from .ctypes_table import ctype
from .scan import combine_text

_OPS = {"scan_lookback_add": "+", "scan_lookback_mul": "*", "scan_lookback_max": "max",
        "scan_lookback_min": "min", "scan_lookback_linear": "linear",
        "scan_lookback_word_add": "+", "scan_lookback_word_mul": "*",
        "scan_lookback_word_max": "max", "scan_lookback_word_min": "min"}
# a 32-bit value's bits in a status word, and back
_BITS = {"float32": ("__float_as_uint({})", "__uint_as_float((unsigned){})"),
         "int32": ("(unsigned)({})", "(int)(unsigned){}"), "uint32": ("({})", "(unsigned){}")}


def emit_lookback(gen, s: ir.Evaluate, d: int) -> None:
    op = _OPS[s.call.fn]
    linear = op == "linear"
    args = s.call.args
    threads = args[-1]
    block = [int(b.value) if isinstance(b, ir.Imm) else None for b in gen.k.block]
    n = int(threads.value) if isinstance(threads, ir.Imm) else None
    if n is None or block != [n, 1, 1] or n % 32:
        raise CudaError(f"codegen: a multi-block scan needs a constant block of its threads "
                        f"along x, a multiple of 32 (got {n} threads, block {gen.k.block})")
    packed = "_word_" in s.call.fn
    flags = agg = prefix = acoef = coef = status = None
    if packed:
        value, carry, status, tile, _ = args
    elif linear:
        coef, value, carry, flags, acoef, agg, prefix, tile, _ = args
    else:
        value, carry, flags, agg, prefix, tile, _ = args
    dt = carry.dtype
    ct = ctype(dt)
    reg = {r: f"{gen.name(r.buffer)}[0]" for r in (value, carry, coef) if r is not None}
    ptr = {r: gen.expr(r) for r in (flags, agg, prefix, acoef, status) if r is not None}
    u = f"tc_lb{len(gen.lines)}"
    warps = n // 32

    def comb(a: str, b: str) -> str:
        return combine_text(op, dt, a, b)

    def e(line: str, depth: int = 1):
        gen.emit(line, d + depth)

    if packed:
        W = ptr[status]
        bits, unbits = _BITS[dt.name]
        F = G = P = None
    else:
        F, G, P = ptr[flags], ptr[agg], ptr[prefix]
    gen.emit("{", d)
    e(f"const int {u}_lane = threadIdx.x & 31, {u}_warp = threadIdx.x >> 5;")
    e(f"__shared__ {ct} {u}_h;")
    if linear:
        A = ptr[acoef]
        e(f"{ct} {u}_a = {reg[coef]}, {u}_b = {reg[value]};")
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{")
        e(f"{ct} {u}_pa = __shfl_up_sync(0xffffffffu, {u}_a, {u}_o);", 2)
        e(f"{ct} {u}_pb = __shfl_up_sync(0xffffffffu, {u}_b, {u}_o);", 2)
        e(f"if ({u}_lane >= {u}_o) {{ {u}_b = {u}_a * {u}_pb + {u}_b; "
          f"{u}_a = {u}_pa * {u}_a; }}", 2)
        e("}")
        e(f"const {ct} {u}_ea = __shfl_up_sync(0xffffffffu, {u}_a, 1), "
          f"{u}_eb = __shfl_up_sync(0xffffffffu, {u}_b, 1);")
        e(f"__shared__ {ct} {u}_sa[{warps}], {u}_sb[{warps}];")
        e(f"if ({u}_lane == 31) {{ {u}_sa[{u}_warp] = {u}_a; {u}_sb[{u}_warp] = {u}_b; }}")
        e("__syncthreads();")
        e(f"if ({u}_warp == 0) {{")
        e(f"{ct} {u}_A = {u}_sa[0], {u}_B = {u}_sb[0];", 2)
        e(f"for (int {u}_w = 1; {u}_w < {warps}; ++{u}_w) {{ {u}_B = {u}_sa[{u}_w] * {u}_B + "
          f"{u}_sb[{u}_w]; {u}_A = {u}_A * {u}_sa[{u}_w]; }}", 2)
        e(f"{ct} {u}_x = {reg[carry]};", 2)
        e(f"if ({gen.expr(tile)} > 0) {{", 2)
        e(f"if ({u}_lane == 0) {{ *{G} = {u}_B; *{A} = {u}_A;", 3)
        _release(e, F, 1, 4)
        e("}", 3)
        e(f"{ct} {u}_ca = 1, {u}_cb = 0; bool {u}_any = false;", 3)
        _window_head(e, u, F, gen.expr(tile), 3)
        e(f"{ct} {u}_va = {u}_A, {u}_vb = {u}_B;", 4)
        e(f"if ({u}_j <= {gen.expr(tile)}) {{", 4)
        _spin(e, u, F, 5)
        e(f"if ({u}_f == 2) {{ {u}_va = 0; {u}_vb = ({P})[-{u}_j]; }} "
          f"else {{ {u}_va = ({A})[-{u}_j]; {u}_vb = ({G})[-{u}_j]; }}", 5)
        e("}", 4)
        _window_mask(e, u, 4)
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{", 4)
        e(f"const {ct} {u}_pa = __shfl_down_sync(0xffffffffu, {u}_va, {u}_o), "
          f"{u}_pb = __shfl_down_sync(0xffffffffu, {u}_vb, {u}_o);", 5)
        e(f"if ({u}_lane + {u}_o <= {u}_n) {{ {u}_vb = {u}_va * {u}_pb + {u}_vb; "
          f"{u}_va = {u}_pa * {u}_va; }}", 5)
        e("}", 4)
        e(f"if ({u}_any) {{ {u}_cb = {u}_ca * {u}_vb + {u}_cb; {u}_ca = {u}_va * {u}_ca; }} "
          f"else {{ {u}_ca = {u}_va; {u}_cb = {u}_vb; }}", 4)
        e(f"{u}_any = true;", 4)
        e(f"if ({u}_m) {{ {u}_x = {u}_cb; break; }}", 4)
        e("}", 3)
        e("}", 2)
        e(f"if ({u}_lane == 0) {{ *{P} = {u}_A * {u}_x + {u}_B;", 2)
        _release(e, F, 2, 3)
        e(f"{u}_h = {u}_x; }}", 3)
        e("}")
        e("__syncthreads();")
        e(f"{ct} {u}_v = {u}_h;")
        e(f"for (int {u}_w = 0; {u}_w < {u}_warp; ++{u}_w) "
          f"{u}_v = {u}_sa[{u}_w] * {u}_v + {u}_sb[{u}_w];")
        e(f"if ({u}_lane > 0) {u}_v = {u}_ea * {u}_v + {u}_eb;")
        e(f"{ct} {u}_c = {u}_h;")
        e(f"for (int {u}_w = 0; {u}_w < {warps}; ++{u}_w) "
          f"{u}_c = {u}_sa[{u}_w] * {u}_c + {u}_sb[{u}_w];")
    else:
        e(f"{ct} {u}_s = {reg[value]};")
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{")
        e(f"{ct} {u}_p = __shfl_up_sync(0xffffffffu, {u}_s, {u}_o);", 2)
        e(f"if ({u}_lane >= {u}_o) {u}_s = {comb(f'{u}_p', f'{u}_s')};", 2)
        e("}")
        e(f"const {ct} {u}_e = __shfl_up_sync(0xffffffffu, {u}_s, 1);")
        e(f"__shared__ {ct} {u}_t[{warps}];")
        e(f"if ({u}_lane == 31) {u}_t[{u}_warp] = {u}_s;")
        e("__syncthreads();")
        e(f"if ({u}_warp == 0) {{")
        e(f"{ct} {u}_g = {u}_t[0];", 2)
        e(f"for (int {u}_w = 1; {u}_w < {warps}; ++{u}_w) "
          f"{u}_g = {comb(f'{u}_g', f'{u}_t[{u}_w]')};", 2)
        e(f"{ct} {u}_x = {reg[carry]};", 2)
        e(f"if ({gen.expr(tile)} > 0) {{", 2)
        if packed:
            e(f"if ({u}_lane == 0) tc_store_word({W}, (1ull << 32) | "
              f"{bits.format(f'{u}_g')});", 3)
        else:
            e(f"if ({u}_lane == 0) {{ *{G} = {u}_g;", 3)
            _release(e, F, 1, 4)
            e("}", 3)
        e(f"{ct} {u}_acc = {u}_g; bool {u}_any = false;", 3)
        _window_head(e, u, F, gen.expr(tile), 3)
        e(f"{ct} {u}_y = {u}_g;", 4)
        e(f"if ({u}_j <= {gen.expr(tile)}) {{", 4)
        if packed:  # the flag and the value in one load
            e(f"unsigned long long {u}_wd;", 5)
            e(f"do {u}_wd = tc_load_word(({W}) - {u}_j); while (({u}_wd >> 32) == 0);", 5)
            e(f"{u}_f = (int)({u}_wd >> 32); {u}_y = {unbits.format(f'{u}_wd')};", 5)
        else:
            _spin(e, u, F, 5)
            e(f"{u}_y = {u}_f == 2 ? ({P})[-{u}_j] : ({G})[-{u}_j];", 5)
        e("}", 4)
        _window_mask(e, u, 4)
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{", 4)
        e(f"const {ct} {u}_p = __shfl_down_sync(0xffffffffu, {u}_y, {u}_o);", 5)
        e(f"if ({u}_lane + {u}_o <= {u}_n) {u}_y = {comb(f'{u}_p', f'{u}_y')};", 5)
        e("}", 4)
        e(f"{u}_acc = {u}_any ? {comb(f'{u}_y', f'{u}_acc')} : {u}_y; {u}_any = true;", 4)
        e(f"if ({u}_m) {{ {u}_x = {u}_acc; break; }}", 4)
        e("}", 3)
        e("}", 2)
        if packed:
            e(f"if ({u}_lane == 0) {{ tc_store_word({W}, (2ull << 32) | "
              f"{bits.format(comb(f'{u}_x', f'{u}_g'))});", 2)
        else:
            e(f"if ({u}_lane == 0) {{ *{P} = {comb(f'{u}_x', f'{u}_g')};", 2)
            _release(e, F, 2, 3)
        e(f"{u}_h = {u}_x; }}", 3)
        e("}")
        e("__syncthreads();")
        e(f"{ct} {u}_v = {u}_h;")
        e(f"for (int {u}_w = 0; {u}_w < {u}_warp; ++{u}_w) "
          f"{u}_v = {comb(f'{u}_v', f'{u}_t[{u}_w]')};")
        e(f"if ({u}_lane > 0) {u}_v = {comb(f'{u}_v', f'{u}_e')};")
        e(f"{ct} {u}_c = {u}_h;")
        e(f"for (int {u}_w = 0; {u}_w < {warps}; ++{u}_w) "
          f"{u}_c = {comb(f'{u}_c', f'{u}_t[{u}_w]')};")
    e("__syncthreads();")
    e(f"{reg[value]} = {u}_v;")
    e(f"{reg[carry]} = {u}_c;")
    gen.emit("}", d)


# The flags' release store and acquire load (module docstring), once a program.
PRELUDE = r"""// tcomp: the flags of multi-block scans (release / acquire, gpu scope), and their
// packed status words (flag << 32 | value: single-copy atomic 64-bit accesses, relaxed)
__device__ __forceinline__ void tc_store_release(int* p, int v) {
  asm volatile("st.release.gpu.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int tc_load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void tc_store_word(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long tc_load_word(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}"""


def prelude(used: set) -> str | None:
    """PRELUDE when the program calls a multi-block scan (`used`: the intrinsics)."""
    return PRELUDE if used & set(_OPS) else None


def _release(e, flag: str, v: int, depth: int) -> None:
    e(f"tc_store_release({flag}, {v});", depth)


def _window_head(e, u: str, flag: str, tile: str, depth: int) -> None:
    """The loop over windows of 32 predecessors: lane l of warp 0 looks at the
    tile `j` = base + 1 + l before its own (lanes past the row's first tile
    read nothing and count as published: the first tile's lane is nearer)."""
    e(f"for (int {u}_base = 0;; {u}_base += 32) {{", depth)
    e(f"const int {u}_j = {u}_base + 1 + {u}_lane;", depth + 1)
    e(f"int {u}_f = 2;", depth + 1)


def _window_mask(e, u: str, depth: int) -> None:
    """The nearest lane whose tile published its prefix (flag 2), or 31: the
    window's lanes 0 .. n are combined (the farthest first) into lane 0."""
    e(f"const unsigned {u}_m = __ballot_sync(0xffffffffu, {u}_f == 2);", depth)
    e(f"const int {u}_n = {u}_m ? __ffs({u}_m) - 1 : 31;", depth)


def _spin(e, u: str, flag: str, depth: int) -> None:
    e(f"do {u}_f = tc_load_acquire(({flag}) - {u}_j); while ({u}_f == 0);", depth)
