"""CUDA for `AllReduce`: a reduction over the threads of a block along
threadIdx.x, for any number of threads (1 to 1024, constant or known only at
launch), leaving the result in every one of those threads.

The threads of one group (equal threadIdx.y and .z) are consecutive in the
block's linear thread order, so a group is a run of `bx` lanes that may start
anywhere in a warp and span several warps. Three shapes:

- `bx` a constant power of two up to 32: groups are aligned inside warps; a
  butterfly of `__shfl_xor_sync` (offsets below `bx`) leaves the result in
  every lane. No shared memory, no barrier.
- `bx` a constant multiple of 32: each warp lies in one group; a butterfly
  over the warp, one value per warp through shared memory, then a butterfly
  over those values (lanes past the group's warps hold the identity).
- any other `bx` (3, 24, 100, or a runtime extent): a segmented tree of
  `__shfl_down_sync` leaves in the first lane of each group's piece of a
  warp that piece's value; pieces that continue a group from an earlier warp
  (they start at lane 0) pass theirs through shared memory, one slot per
  warp, to the group's first thread, which combines them and hands the total
  back the same way; the first lanes of a piece broadcast it to the piece.

Every shuffle names exactly the lanes that exist in its warp (the last warp
of a block whose size is not a multiple of 32 is partial); every thread of
the block reaches the reduction (the verifier checks it), so the masks and
barriers are met. Every thread of a group ends with the same bits.
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import ir
from ..lower.simplify import simplify_expr
from ..arch import threads

# Types a warp shuffle moves as they are; smaller integers and bool travel as int.
_SHUFFLE_NATIVE = {"int32", "uint32", "int64", "uint64", "float32", "float64"}


def emit_allreduce(gen, s: ir.AllReduce, d: int) -> None:
    """Emit `s` through `gen` (the kernel emitter: `emit`, `imm`, `k`) at depth d."""
    k = gen.k
    bx_e = k.block[0]
    if s.tag != threads.THREAD[0] or simplify_expr(s.extent) != bx_e:
        raise CudaError(f"codegen: cross-thread reductions are supported over threadIdx.x "
                        f"spanning the whole block x dimension (got {s.tag} over "
                        f"{_text(s.extent)} threads, block x dimension {_text(bx_e)}); bind the "
                        f"reduction axis to threadIdx.x")
    if s.dtype.is_low_precision:  # (the lowering accumulates these in float32)
        raise CudaError(f"codegen: cross-thread reduction of {s.dtype} is not supported")
    _Emitter(gen, s, d).run()


def _text(e: ir.Expr) -> str:
    from ..lower.printer import expr
    return expr(e)


class _Emitter:
    def __init__(self, gen, s: ir.AllReduce, d: int):
        self.gen, self.s, self.d = gen, s, d
        self.ct = _ctype(s.dtype)
        self.v = f"tc_red{len(gen.lines)}"
        block = gen.k.block
        self.dims = [int(b.value) if isinstance(b, ir.Imm) else None for b in block]
        self.have_tid = False

    # ------------------------------------------------------------- pieces
    def emit(self, line: str, depth: int = 1):
        self.gen.emit(line, self.d + depth)

    def dim(self, axis: int) -> str:
        n = self.dims[axis]
        return str(n) if n is not None else f"(int)blockDim.{'xyz'[axis]}"

    def comb(self, a: str, b: str) -> str:
        op, dt = self.s.op, self.s.dtype
        if dt.is_bool:  # max= is logical or, min= logical and (bool + and * are refused)
            return f"({a} {'||' if op in ('max', '+') else '&&'} {b})"
        if op in ("+", "*"):
            return f"{a} {op} {b}"
        if dt.is_float:
            f = ("fmax" if op == "max" else "fmin") + ("f" if dt.name == "float32" else "")
            return f"{f}({a}, {b})"
        return f"{op}({a}, {b})"

    def shfl(self, kind: str, mask: str, value: str, lane: str) -> str:
        """`__shfl<kind>_sync` (kind: '', '_xor', '_down') of `value`."""
        if self.s.dtype.name in _SHUFFLE_NATIVE:
            return f"__shfl{kind}_sync({mask}, {value}, {lane})"
        return f"(({self.ct})__shfl{kind}_sync({mask}, (int){value}, {lane}))"

    def total(self) -> int | None:
        if None in self.dims:
            return None
        return self.dims[0] * self.dims[1] * self.dims[2]

    def declare_mask(self) -> str:
        """The lanes that exist in this thread's warp."""
        t = self.total()
        if t is not None and t % 32 == 0:
            return "0xffffffffu"
        if t is not None and t < 32:
            return f"{(1 << t) - 1:#x}u"
        m = f"{self.v}_mask"
        threads = str(t) if t is not None else " * ".join(
            self.dim(a) for a in range(3) if self.dims[a] != 1)
        self.emit(f"const int {m}_lanes = {threads} - ({self.tid()} & ~31);")
        self.emit(f"const unsigned {m} = {m}_lanes >= 32 ? 0xffffffffu : "
                  f"((1u << {m}_lanes) - 1u);")
        return m

    def tid(self) -> str:
        """The block's linear thread index (threadIdx.x fastest), declared at first use."""
        if self.dims[1:] == [1, 1]:
            return "threadIdx.x"
        name = f"{self.v}_tid"
        if not self.have_tid:
            self.have_tid = True
            self.emit(f"const int {name} = threadIdx.x + {self.dim(0)} * (threadIdx.y + "
                      f"{self.dim(1)} * threadIdx.z);")
        return name

    def warps_per_block(self) -> int:
        t = self.total()
        return t // 32 if t is not None else 32

    def butterfly(self, mask: str, first: int):
        v = self.v
        self.emit(f"for (int tc_off = {first}; tc_off > 0; tc_off >>= 1) {{")
        self.emit(f"{v} = {self.comb(v, self.shfl('_xor', mask, v, 'tc_off'))};", 2)
        self.emit("}")

    # ------------------------------------------------------------- shapes
    def run(self):
        s, v, bx = self.s, self.v, self.dims[0]
        self.gen.emit("{", self.d)
        self.emit(f"{self.ct} {v} = {self.gen.name(s.buffer)}[0];")
        if bx is not None and bx <= 32 and 32 % bx == 0:
            if bx > 1:
                self.butterfly(self.declare_mask(), bx // 2)
        elif bx is not None and bx % 32 == 0:
            self.warps(bx // 32)
        else:
            self.segmented()
        self.emit(f"{self.gen.name(s.buffer)}[0] = {v};")
        self.gen.emit("}", self.d)

    def warps(self, per_group: int):
        """bx a multiple of 32: every warp is whole and inside one group."""
        v, full = self.v, "0xffffffffu"
        self.butterfly(full, 16)
        if per_group == 1:
            return
        part, tid = f"{v}_part", self.tid()
        self.emit(f"__shared__ {self.ct} {part}[{self.warps_per_block()}];")
        self.emit(f"if (({tid} & 31) == 0) {part}[{tid} >> 5] = {v};")
        self.emit("__syncthreads();")
        # the group's first warp
        first = "" if tid == "threadIdx.x" else f"(({tid} >> 5) - (threadIdx.x >> 5)) + "
        if per_group & (per_group - 1) == 0:
            # lane i takes the value of the group's warp i % per_group; a butterfly
            # over per_group lanes leaves the total in every lane
            self.emit(f"{v} = {part}[{first}(threadIdx.x & {per_group - 1})];")
            self.butterfly(full, per_group // 2)
        else:
            # lane i takes the group's i-th warp value (the identity past the
            # group's warps); a butterfly over the whole warp leaves the total
            ident = self.gen.imm(ir.identity(self.s.op, self.s.dtype))
            self.emit(f"{v} = (threadIdx.x & 31) < {per_group} ? {part}[{first}"
                      f"(threadIdx.x & 31)] : {ident};")
            self.butterfly(full, 16)
        self.emit("__syncthreads();")  # the slots are free again for the next reduction

    def segmented(self):
        """Any bx: groups may start mid-warp and span warps."""
        v, tid, bx = self.v, self.tid(), self.dim(0)
        mask = self.declare_mask()
        lane, x = f"{v}_lane", f"{v}_x"
        self.emit(f"const int {lane} = {tid} & 31;")
        self.emit(f"const int {x} = threadIdx.x;")
        # A piece of a group inside a warp has at most min(bx, 32) lanes: a tree of
        # shuffles down by 16, 8, ... (from half the next power of two) adds lane
        # l + b into lane l for every b below the piece's end, so the piece's first
        # lane gets the piece's value.
        n = self.dims[0]
        first = 16 if n is None or n >= 32 else 1 << max(0, (n - 1).bit_length() - 1)
        self.emit(f"for (int tc_off = {first}; tc_off > 0; tc_off >>= 1) {{")
        self.emit(f"const {self.ct} tc_other = {self.shfl('_down', mask, v, 'tc_off')};", 2)
        self.emit(f"if ({lane} + tc_off < 32 && {x} + tc_off < {bx}) {v} = "
                  f"{self.comb(v, 'tc_other')};", 2)
        self.emit("}")
        part, total = f"{v}_part", f"{v}_total"
        self.emit(f"__shared__ {self.ct} {part}[32];")
        self.emit(f"__shared__ {self.ct} {total}[32];")
        # a piece that continues a group from an earlier warp starts at lane 0
        self.emit(f"if ({lane} == 0 && {x} != 0) {part}[{tid} >> 5] = {v};")
        self.emit("__syncthreads();")
        self.emit(f"if ({x} == 0) {{")
        self.emit(f"const int tc_last = ({tid} + {bx} - 1) >> 5;", 2)
        self.emit(f"for (int tc_w = ({tid} >> 5) + 1; tc_w <= tc_last; ++tc_w) "
                  f"{v} = {self.comb(v, f'{part}[tc_w]')};", 2)
        self.emit(f"for (int tc_w = ({tid} >> 5) + 1; tc_w <= tc_last; ++tc_w) "
                  f"{total}[tc_w] = {v};", 2)
        self.emit("}")
        self.emit("__syncthreads();")
        # the lanes of a group's first piece take the total from its first lane;
        # the lanes of a continuing piece (lane < x) from shared memory
        self.emit(f"const {self.ct} tc_first = "
                  f"{self.shfl('', mask, v, f'{lane} < {x} ? 0 : {lane} - {x}')};")
        self.emit(f"{v} = {lane} < {x} ? {total}[{tid} >> 5] : tc_first;")
        # no barrier needed after: the next reduction writes `part` before a
        # barrier that every reader of `total` has passed, and `total` after it


def _ctype(dt) -> str:
    from .codegen import ctype
    return ctype(dt)
