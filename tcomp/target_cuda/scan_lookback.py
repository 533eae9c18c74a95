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
    else:    lane 0: publish (1, agg) in the slot's status words
             for base = 0, 32, ...: lane l looks at tile j = base + 1 + l before its own
                 (lanes past the row's first tile: as if published, never the nearest)
                 spin on its words until they carry one non-zero flag;
                 its value: the prefix (flag 2) or the aggregate (flag 1)
                 n = the nearest lane with flag 2 (__ballot_sync, __ffs), else 31
                 lanes n .. 0 combined in order (the farthest first) into lane 0 by
                 __shfl_down_sync (lane l takes lane l + o's while l + o <= n),
                 in front of what the windows before gathered; stop if a lane had flag 2
    lane 0:  publish (2, h followed by agg)

The linear recurrence's values are pairs (a, b), a published prefix the
pair (0, h).

Memory order (PTX memory model, gpu scope): a slot's status is one to four
uint64 words (schedule/scan.Lookback), each flag << 32 | a 32-bit piece of the
value, stored and loaded whole with st.relaxed.gpu.b64 / ld.relaxed.gpu.b64 (an
aligned 64-bit access is single-copy atomic); every word of a publication
carries its flag and each flag value is written once a word, so words that
carry one flag are one publication's (tc_load_words spins until they do), and
no load has to wait for another. `asm volatile` with a "memory" clobber
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
        "scan_lookback_min": "min", "scan_lookback_linear": "linear"}
# a value as unsigned bits (32 or 64), and back (schedule/scan.Lookback's pieces)
_BITS = {"float32": ("__float_as_uint({})", "__uint_as_float({})"),
         "int32": ("(unsigned)({})", "(int){}"), "uint32": ("({})", "{}"),
         "float64": ("(unsigned long long)__double_as_longlong({})",
                     "__longlong_as_double((long long){})"),
         "int64": ("(unsigned long long)({})", "(long long){}"),
         "uint64": ("({})", "{}")}


class _Status:
    """The CUDA of one tile's status words: `publish` stores a flag with the
    values' pieces in every word, `read` spins on a predecessor's words until all
    carry one non-zero flag, then decodes its values."""

    def __init__(self, u: str, dt, ptr: str, nvals: int):
        self.u, self.dt, self.ptr = u, dt, ptr
        self.n = dt.bits // 32  # pieces a value
        self.words = self.n * nvals
        self.bits, self.unbits = _BITS[dt.name]

    def pieces(self, value: str) -> list[str]:
        b = self.bits.format(value)
        if self.n == 1:
            return [b]
        return [f"(unsigned)({b})", f"(unsigned)(({b}) >> 32)"]

    def publish(self, flag: int, values: list[str]) -> str:
        pc = ", ".join(p for v in values for p in self.pieces(v))
        return (f"{{ const unsigned {self.u}_pc[{self.words}] = {{{pc}}}; "
                f"tc_store_words<{self.words}>({self.ptr}, {flag}u, {self.u}_pc); }}")

    def read(self, j: str) -> tuple[str, list[str]]:
        """(the statement that reads tile j before this one into `f` and the pieces
        array, the values' expressions)"""
        u = self.u
        stmt = (f"unsigned {u}_rd[{self.words}]; "
                f"{u}_f = (int)tc_load_words<{self.words}>(({self.ptr}) - {j} * {self.words}, "
                f"{u}_rd);")
        vals = []
        for k in range(self.words // self.n):
            if self.n == 1:
                vals.append(self.unbits.format(f"{u}_rd[{k}]"))
            else:
                lo, hi = f"{u}_rd[{2 * k}]", f"{u}_rd[{2 * k + 1}]"
                vals.append(self.unbits.format(
                    f"((unsigned long long){hi} << 32 | (unsigned long long){lo})"))
        return stmt, vals


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
    coef = None
    if linear:
        coef, value, carry, status, tile, _ = args
    else:
        value, carry, status, tile, _ = args
    dt = carry.dtype
    ct = ctype(dt)
    reg = {r: f"{gen.name(r.buffer)}[0]" for r in (value, carry, coef) if r is not None}
    u = f"tc_lb{len(gen.lines)}"
    warps = n // 32
    st = _Status(u, dt, gen.expr(status), 2 if linear else 1)
    T = gen.expr(tile)

    def comb(a: str, b: str) -> str:
        return combine_text(op, dt, a, b)

    def e(line: str, depth: int = 1):
        gen.emit(line, d + depth)

    gen.emit("{", d)
    e(f"const int {u}_lane = threadIdx.x & 31, {u}_warp = threadIdx.x >> 5;")
    e(_shared(ct, f"{u}_h"))
    if linear:
        e(f"{ct} {u}_a = {reg[coef]}, {u}_b = {reg[value]};")
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{")
        e(f"{ct} {u}_pa = __shfl_up_sync(0xffffffffu, {u}_a, {u}_o);", 2)
        e(f"{ct} {u}_pb = __shfl_up_sync(0xffffffffu, {u}_b, {u}_o);", 2)
        e(f"if ({u}_lane >= {u}_o) {{ {u}_b = {u}_a * {u}_pb + {u}_b; "
          f"{u}_a = {u}_pa * {u}_a; }}", 2)
        e("}")
        e(f"const {ct} {u}_ea = __shfl_up_sync(0xffffffffu, {u}_a, 1), "
          f"{u}_eb = __shfl_up_sync(0xffffffffu, {u}_b, 1);")
        e(_shared(ct, f"{u}_sa", warps) + " " + _shared(ct, f"{u}_sb", warps))
        e(f"if ({u}_lane == 31) {{ {u}_sa[{u}_warp] = {u}_a; {u}_sb[{u}_warp] = {u}_b; }}")
        e("__syncthreads();")
        e(f"if ({u}_warp == 0) {{")
        e(f"{ct} {u}_A = {u}_sa[0], {u}_B = {u}_sb[0];", 2)
        e(f"for (int {u}_w = 1; {u}_w < {warps}; ++{u}_w) {{ {u}_B = {u}_sa[{u}_w] * {u}_B + "
          f"{u}_sb[{u}_w]; {u}_A = {u}_A * {u}_sa[{u}_w]; }}", 2)
        e(f"{ct} {u}_x = {reg[carry]};", 2)
        e(f"if ({T} > 0) {{", 2)
        e(f"if ({u}_lane == 0) {st.publish(1, [f'{u}_A', f'{u}_B'])}", 3)
        e(f"{ct} {u}_ca = 1, {u}_cb = 0; bool {u}_any = false;", 3)
        _window_head(e, u, 3)
        e(f"{ct} {u}_va = {u}_A, {u}_vb = {u}_B;", 4)
        rd, (ra, rb) = st.read(f"{u}_j")
        e(f"if ({u}_j <= {T}) {{ {rd}", 4)
        e(f"if ({u}_f == 2) {{ {u}_va = 0; {u}_vb = {rb}; }} "
          f"else {{ {u}_va = {ra}; {u}_vb = {rb}; }} }}", 5)
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
        e(f"if ({u}_lane == 0) {{ {st.publish(2, ['0', f'{u}_A * {u}_x + {u}_B'])}", 2)
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
        e(_shared(ct, f"{u}_t", warps))
        e(f"if ({u}_lane == 31) {u}_t[{u}_warp] = {u}_s;")
        e("__syncthreads();")
        e(f"if ({u}_warp == 0) {{")
        e(f"{ct} {u}_g = {u}_t[0];", 2)
        e(f"for (int {u}_w = 1; {u}_w < {warps}; ++{u}_w) "
          f"{u}_g = {comb(f'{u}_g', f'{u}_t[{u}_w]')};", 2)
        e(f"{ct} {u}_x = {reg[carry]};", 2)
        e(f"if ({T} > 0) {{", 2)
        e(f"if ({u}_lane == 0) {st.publish(1, [f'{u}_g'])}", 3)
        e(f"{ct} {u}_acc = {u}_g; bool {u}_any = false;", 3)
        _window_head(e, u, 3)
        e(f"{ct} {u}_y = {u}_g;", 4)
        rd, (ry,) = st.read(f"{u}_j")
        e(f"if ({u}_j <= {T}) {{ {rd} {u}_y = {ry}; }}", 4)
        _window_mask(e, u, 4)
        e(f"for (int {u}_o = 1; {u}_o < 32; {u}_o <<= 1) {{", 4)
        e(f"const {ct} {u}_p = __shfl_down_sync(0xffffffffu, {u}_y, {u}_o);", 5)
        e(f"if ({u}_lane + {u}_o <= {u}_n) {u}_y = {comb(f'{u}_p', f'{u}_y')};", 5)
        e("}", 4)
        e(f"{u}_acc = {u}_any ? {comb(f'{u}_y', f'{u}_acc')} : {u}_y; {u}_any = true;", 4)
        e(f"if ({u}_m) {{ {u}_x = {u}_acc; break; }}", 4)
        e("}", 3)
        e("}", 2)
        e(f"if ({u}_lane == 0) {{ {st.publish(2, [comb(f'{u}_x', f'{u}_g')])}", 2)
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


# The status words' stores and loads (module docstring), once a program.
PRELUDE = r"""// tcomp: the status words of multi-block scans (flag << 32 | a 32-bit piece; relaxed,
// gpu scope: an aligned 64-bit access is single-copy atomic, each word carries its flag)
template <int N> __device__ __forceinline__ void tc_store_words(unsigned long long* p,
                                                                unsigned flag, const unsigned* v) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    asm volatile("st.relaxed.gpu.b64 [%0], %1;" :: "l"(p + k),
                 "l"((unsigned long long)flag << 32 | v[k]) : "memory");
}
template <int N> __device__ __forceinline__ unsigned tc_load_words(const unsigned long long* p,
                                                                   unsigned* v) {
  for (;;) {
    unsigned long long w[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      asm volatile("ld.relaxed.gpu.b64 %0, [%1];" : "=l"(w[k]) : "l"(p + k) : "memory");
    const unsigned f = (unsigned)(w[0] >> 32);
    bool one = f != 0;
#pragma unroll
    for (int k = 1; k < N; ++k) one = one && (unsigned)(w[k] >> 32) == f;
    if (one) {
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = (unsigned)w[k];
      return f;
    }
  }
}"""


def prelude(used: set) -> str | None:
    """PRELUDE when the program calls a multi-block scan (`used`: the intrinsics)."""
    return PRELUDE if used & set(_OPS) else None


def _shared(ct: str, name: str, count: int | None = None) -> str:
    """A block-shared scalar or per-warp array on its own 16-byte line(s): an
    array padded to a multiple of four elements, so no vector load the compiler
    merges from an array's reads also reads its neighbour (the broadcast `_h`,
    written by lane 0 while warp 0's other lanes read the partials; racecheck
    reports that merged load as an intra-warp hazard)."""
    if count is None:
        return f"__shared__ __align__(16) {ct} {name};"
    return f"__shared__ __align__(16) {ct} {name}[{-(-count // 4) * 4}];"


def _window_head(e, u: str, depth: int) -> None:
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
