"""CUDA C++ from Kernel IR (after storage flattening).

One translation unit per program: a small prelude (floor division helpers,
half/bfloat16 headers when used), then one `extern "C" __global__` function
per kernel, with `__launch_bounds__` (when the block size is a constant),
`__restrict__` pointers named after the comprehension's tensors, and loops
named after its indices.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import CudaError
from ..lang import dtypes
from ..arch import threads
from ..lower import intrinsics, ir
from ..lower.accesses import accesses
# C precedence levels (higher binds tighter) for the operators printed infix: the
# IR printer's table, which is C's (`a & b == c` is `a & (b == c)`).
from ..lower.printer import ATOM, BITWISE, PREC, UNARY
from ..lower.rewriter import walk_stmts
from ..lower.simplify import kernel_simplifier
from .index_width import widen
from . import atomics, casts, scan_lookback, sm90_ops, warp_ops
from .names import cuda_name
from .shared_layout import shared_layout
from .ctypes_table import (COPYSIGN, CTYPE, EXP2_APPROX, F32, PRELUDE, STATIC_SMEM_LIMIT,  # noqa: F401
                           call_text, ctype)
from .intrinsics import EMIT
from .literals import literal


@dataclass(frozen=True)
class CodegenOptions:
    """Choices that change the generated source (so the compile cache, keyed
    by the source, tells the variants apart). index_bits: 32, or 64 for
    tensors of 2^31 elements or more (index_width.py)."""
    index_bits: int = 32

    def __post_init__(self):
        if self.index_bits not in (32, 64):
            raise CudaError(f"codegen: index_bits must be 32 or 64, got {self.index_bits!r}")

    @property
    def index_dtype(self):
        return dtypes.int64 if self.index_bits == 64 else dtypes.int32


class _Kernel:
    def __init__(self, k: ir.Kernel, prog: ir.Program, options: CodegenOptions = CodegenOptions()):
        self.k, self.prog, self.options = k, prog, options
        self.index_ctype = ctype(options.index_dtype)  # loop variables and size parameters
        self.simp = kernel_simplifier(k, options.index_dtype)
        self.lines: list[str] = []
        self.scopes: list[set[str]] = [set()]
        self.vector_buffers: set[str] = set()  # buffers accessed with 4/8/16-byte vectors
        # 16-bit fragments: pairs in 32-bit registers, touched only by intrinsics
        self.packed = {x.buffer.name for x in walk_stmts(k.body) if isinstance(x, ir.Alloc)
                       and x.buffer.scope == "fragment" and x.buffer.dtype.bits == 16}
        self.own: set[str] = set()  # the emitter's own names (tc_vec...), printed as they are

    def name(self, name: str) -> str:
        """How an IR name (tensor, size, loop, let, buffer) is spelled (names.py)."""
        return name if name in self.own else cuda_name(name)

    # ----------------------------------------------------------- expressions
    def imm(self, e: ir.Imm) -> str:
        return literal(e)

    def expr(self, e: ir.Expr, min_prec: int = 0) -> str:
        if isinstance(e, ir.Imm):
            text, p = self.imm(e), ATOM
            if text.startswith("-"):
                p = UNARY
        elif isinstance(e, ir.Var):
            text, p = self.name(e.name), ATOM
            if e.name in _BUILTIN_VARS and e.dtype != dtypes.int32:  # widened indices
                text = f"(({ctype(e.dtype)}){text})"
        elif isinstance(e, ir.Load):
            if e.buffer in self.packed:
                raise CudaError(f"codegen: element {e.buffer}[...] of a 16-bit fragment is read "
                                f"outside a tensor-core intrinsic")
            text, p = f"{self.name(e.buffer)}[{self.expr(e.indices[0])}]", ATOM
        elif isinstance(e, ir.Ref):
            text, p = f"(&{self.name(e.buffer)}[{self.expr(e.indices[0])}])", ATOM
        elif isinstance(e, ir.Bin):
            text, p = self.binary(e)
        elif isinstance(e, ir.Un):
            if e.op == "!":
                text, p = f"!{self.expr(e.x, ATOM)}", UNARY
            else:
                text, p = f"-{self.expr(e.x, ATOM)}", UNARY
        elif isinstance(e, ir.Select):
            text, p = (f"{self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)}", 0)
        elif isinstance(e, ir.Cast):
            text, p = self.cast(e), ATOM
        elif isinstance(e, ir.Call):
            text, p = self.call(e), ATOM
        else:
            raise CudaError(f"codegen: cannot emit {type(e).__name__}")
        return f"({text})" if p < min_prec else text

    def binary(self, e: ir.Bin):
        a, b, op, dt = e.a, e.b, e.op, e.dtype
        if op in ("min", "max"):
            if dt.is_float:
                f = ("fmin" if op == "min" else "fmax") + ("f" if dt.name == "float32" else "")
                return f"{f}({self.expr(a)}, {self.expr(b)})", ATOM
            return f"{op}({self.expr(a)}, {self.expr(b)})", ATOM
        if op in ("/", "%") and not dt.is_float:
            if dt.kind == "u" or (self.simp.nonnegative(a) and self.simp.nonnegative(b)):
                p = PREC[op]
                return f"{self.expr(a, p)} {op} {self.expr(b, p + 1)}", p
            f = "tc_floordiv" if op == "/" else "tc_floormod"
            return f"{f}<{ctype(dt)}>({self.expr(a)}, {self.expr(b)})", ATOM
        if op == "%" and dt.is_float:
            f = "fmodf" if dt.name == "float32" else "fmod"
            return f"{f}({self.expr(a)}, {self.expr(b)})", ATOM
        p = PREC[op]
        if op in BITWISE:  # operands bracketed unless atoms, as the IR printer does
            return f"{self.expr(a, ATOM)} {op} {self.expr(b, ATOM)}", p
        return f"{self.expr(a, p)} {op} {self.expr(b, p + 1)}", p

    def cast(self, e: ir.Cast) -> str:
        src, dst = e.x.dtype, e.dtype
        x = self.expr(e.x)
        if dst.is_bool:
            return f"({x} != 0)"
        if src.name == "float16":
            x = f"__half2float({x})"
            src = dtypes.float32
        elif src.name == "bfloat16":
            x = f"__bfloat162float({x})"
            src = dtypes.float32
        elif src.is_fp8:  # (exact)
            x = f"static_cast<float>({x})"
            src = dtypes.float32
        if dst.is_fp8:
            # cuda_fp8.h's constructors: __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8 with
            # __NV_SATFINITE (PTX cvt.rn.satfinite from float), rounded once, as `evaluate`
            # (npfuncs.to_fp8); integers through float (exact up to 2^24, saturated beyond)
            wide = src.name == "float64"
            return f"{ctype(dst)}((double)({x}))" if wide else f"{ctype(dst)}((float)({x}))"
        if dst.is_low_precision:
            # One rounding, as `evaluate` (npfuncs.convert): a double, or an
            # integer float cannot hold exactly, is converted from double
            # (64-bit integers beyond 2^53 round twice: at most 1 ulp apart).
            wide = src.name == "float64" or (src.kind in "iu" and src.bits >= 32)
            if dst.name == "float16":
                return f"__double2half((double)({x}))" if wide else \
                    f"__float2half_rn((float)({x}))"
            return f"__double2bfloat16((double)({x}))" if wide else \
                f"__float2bfloat16_rn((float)({x}))"
        if src.is_float and dst.is_int:  # saturating, NaN -> 0: a C cast is not (casts.py)
            return casts.saturating(dst, ctype(src), x)
        return f"(({ctype(dst)})({x}))"

    def call(self, e: ir.Call) -> str:
        return call_text(e.fn, [self.expr(a) for a in e.args], e.dtype)

    # ----------------------------------------------------------- statements
    def emit(self, line: str, depth: int):
        self.lines.append("  " * depth + line)

    def stmt(self, s: ir.Stmt, d: int):
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, ir.Store):
            if s.buffer in self.packed:
                raise CudaError(f"codegen: element {s.buffer}[...] of a 16-bit fragment is "
                                f"written outside a tensor-core intrinsic")
            if s.atomic is not None:
                atomics.emit_store(self, s, d)
                return
            self.emit(f"{self.name(s.buffer)}[{self.expr(s.indices[0])}] = "
                      f"{self.expr(s.value)};", d)
        elif isinstance(s, ir.For):
            if s.vector is not None:
                self.vector_loop(s, d)
                return
            v = self.name(s.var)
            lo = self.expr(s.lo)
            zero = isinstance(s.lo, ir.Imm) and s.lo.value == 0
            # the bound is the right operand of `<`: bracketed unless it binds tighter (a
            # ternary extent, a ragged loop's `guard ? Off[b + 1] - Off[b] : 0`, would
            # otherwise read `(v < guard) ? ...`)
            bound = PREC["<"] + 1
            end = self.expr(s.extent, bound) if zero else self.expr(
                ir.Bin("+", s.lo, s.extent, s.lo.dtype), bound)
            if s.kind in ("unroll", "vectorize"):
                self.emit("#pragma unroll", d)
            elif s.unroll_by:
                self.emit(f"#pragma unroll {s.unroll_by}", d)
            saved = self.simp.enter_loop(s.var, s.lo, s.extent)
            self.emit(f"for ({self.index_ctype} {v} = {lo}; {v} < {end}; ++{v}) {{", d)
            self.scopes.append({v})
            self.stmt(s.body, d + 1)
            self.scopes.pop()
            self.simp.restore(s.var, saved)
            self.emit("}", d)
        elif isinstance(s, ir.If):
            self.emit(f"if ({self.expr(s.cond)}) {{", d)
            self.scopes.append(set())
            self.stmt(s.then, d + 1)
            self.scopes.pop()
            if s.else_ is not None:
                self.emit("} else {", d)
                self.scopes.append(set())
                self.stmt(s.else_, d + 1)
                self.scopes.pop()
            self.emit("}", d)
        elif isinstance(s, ir.Let):
            v = self.name(s.var)
            value = self.expr(s.value)
            saved = self.simp.enter_let(s.var, s.value)
            if any(v in sc for sc in self.scopes):
                self.emit("{", d)
                self.scopes.append({v})
                self.emit(f"const {ctype(s.value.dtype)} {v} = {value};", d + 1)
                self.stmt(s.body, d + 1)
                self.scopes.pop()
                self.emit("}", d)
            else:
                self.scopes[-1].add(v)
                self.emit(f"const {ctype(s.value.dtype)} {v} = {value};", d)
                self.stmt(s.body, d)
            self.simp.restore(s.var, saved)
        elif isinstance(s, ir.Alloc):
            self.stmt(s.body, d)  # declared at the top of the kernel (see source())
        elif isinstance(s, ir.Specialize):
            sm90_ops.emit_specialize(self, s, d)
        elif isinstance(s, ir.IndexCheck):
            atomics.emit_check(self, s, d)
        else:  # an intrinsic statement: its emitter in target_cuda/intrinsics.py
            entry = intrinsics.of(s)
            if entry is None or entry.name not in EMIT:
                what = s.call.fn if isinstance(s, ir.Evaluate) else type(s).__name__
                raise CudaError(f"codegen: cannot emit {what}")
            EMIT[entry.name](self, s, d)

    # ----------------------------------------------------------- vectors
    def vector_loop(self, s: ir.For, d: int) -> None:
        """Emit a vectorized loop with the 4/8/16-byte loads and store its
        `vector` annotation names (the vectorize pass decided them): each
        vector load into a register array, then the lanes computed from those,
        stored as one vector or (no vector store) one scalar store per lane."""
        vec = s.vector
        n = int(s.extent.value)
        st = s.body
        dt = self.buffer_dtype(st.buffer)
        v = self.name(s.var)
        ct = ctype(dt)
        self.emit("{", d)
        names = {}
        for i, (ld, base) in enumerate(zip(vec.loads, vec.load_bases)):
            name = f"tc_vec{len(self.lines)}_{i}"
            names[ld] = name
            self.own.add(name)
            self.emit(f"{ctype(ld.dtype)} {name}[{n}];", d + 1)  # (the load's type: it may
            # be narrower than a per-lane store's, e.g. bfloat16 into float32 registers)
            vtype = _VECTOR_TYPE[n * self.buffer_dtype(ld.buffer).numpy.itemsize]
            self.emit(f"*reinterpret_cast<{vtype}*>({name}) = *reinterpret_cast<const {vtype}*>"
                      f"(&{self.name(ld.buffer)}[{self.expr(base)}]);", d + 1)
            self.vector_buffers.add(ld.buffer)
        value = _ReplaceLoads(names, s.var).expr(st.value)  # (the IR name: printed once)
        saved = self.simp.enter_loop(s.var, s.lo, s.extent)
        self.scopes.append({v})
        if vec.store_base is None:
            self.emit("#pragma unroll", d + 1)
            self.emit(f"for ({self.index_ctype} {v} = 0; {v} < {n}; ++{v}) {{", d + 1)
            self.emit(f"{self.name(st.buffer)}[{self.expr(st.indices[0])}] = "
                      f"{self.expr(value)};", d + 2)
            self.emit("}", d + 1)
        else:
            out = f"tc_out{len(self.lines)}"
            self.emit(f"{ct} {out}[{n}];", d + 1)
            self.emit("#pragma unroll", d + 1)
            self.emit(f"for ({self.index_ctype} {v} = 0; {v} < {n}; ++{v}) {{", d + 1)
            self.emit(f"{out}[{v}] = {self.expr(value)};", d + 2)
            self.emit("}", d + 1)
            vtype = _VECTOR_TYPE[n * dt.numpy.itemsize]
            self.emit(f"*reinterpret_cast<{vtype}*>(&{self.name(st.buffer)}"
                      f"[{self.expr(vec.store_base)}]) = "
                      f"*reinterpret_cast<const {vtype}*>({out});", d + 1)
            self.vector_buffers.add(st.buffer)
        self.scopes.pop()
        self.simp.restore(s.var, saved)
        self.emit("}", d)

    def buffer_dtype(self, name: str):
        """The element type of the buffer of IR name `name`, or of C++ name
        `name` (an intrinsic emitter sees the printed names: intrinsics.py)."""
        return self.buffer(name).dtype

    def buffer(self, name: str) -> ir.Buffer:
        """The buffer (global, or allocated in the kernel) of IR or C++ name `name`."""
        for b in self.prog.buffers:
            if name in (b.name, self.name(b.name)):
                return b
        for x in walk_stmts(self.k.body):
            if isinstance(x, ir.Alloc) and name in (x.buffer.name, self.name(x.buffer.name)):
                return x.buffer
        raise CudaError(f"codegen: unknown buffer '{name}'")

    # ----------------------------------------------------------- kernel
    def source(self) -> tuple[str, int]:
        k = self.k
        bufs = {b.name: b for b in self.prog.buffers}
        written = accesses(k.body).writes
        params = []
        for name in k.buffers:
            b = bufs[name]
            # Read-only inputs are `const __restrict__` (the read-only cache path);
            # buffers written here may be read back by other threads after a barrier,
            # which the non-coherent read-only path would not see.
            if name in written:
                params.append(f"{ctype(b.dtype)}* {self.name(name)}")
            else:
                params.append(f"const {ctype(b.dtype)}* __restrict__ {self.name(name)}")
        params += [f"{self.index_ctype} {self.name(n)}" for n in k.sizes]
        # tensor maps keep the names the kernel's builder gave them (target_cuda/sm90_ops.py)
        params += [f"const __grid_constant__ tc_tensor_map {m.name}" for m in k.tensor_maps]
        self.tensor_maps = {m.name for m in k.tensor_maps}
        # each shared buffer declared once, at the top (an unrolled loop allocates the same
        # buffer once per copy: issue 22, defect 9), placed by shared_layout.py
        shared, offsets, total, base_align = shared_layout(k.body, _size)
        dynamic = total > STATIC_SMEM_LIMIT or base_align > 16
        # Launch bounds only for a block known now: with a runtime block the
        # compiler must allow any size (the launch checks the kernel's own limit).
        const = k.const_block()
        blocks = f", {k.min_blocks}" if k.min_blocks else ""
        bounds = (f"__launch_bounds__({const[0] * const[1] * const[2]}{blocks}) " if const
                  else "")
        head = f'extern "C" __global__ void {bounds}{self.name(k.name)}({", ".join(params)}) {{'

        self.lines = [head]
        if dynamic:
            if base_align > 16:  # the runtime base rounded up (the launch asks for the slack)
                self.emit("extern __shared__ __align__(16) unsigned char tc_smem_raw[];", 1)
                self.emit(f"unsigned char* tc_smem = tc_smem_raw + "
                          f"((-(int)tc_smem_addr(tc_smem_raw)) & {base_align - 1});", 1)
                total += base_align
            else:
                self.emit("extern __shared__ __align__(16) unsigned char tc_smem[];", 1)
            for b, off in zip(shared, offsets):
                self.emit(f"{ctype(b.dtype)}* {self.name(b.name)} = "
                          f"reinterpret_cast<{ctype(b.dtype)}*>(tc_smem + {off});", 1)
        else:
            for b in shared:
                self.emit(f"__shared__ __align__(16) {ctype(b.dtype)} "
                          f"{self.name(b.name)}[{_declared(b)}];", 1)
        # Local arrays are declared once at the top (unrolled loops may allocate the same
        # buffer several times); with constant indices they live in registers.
        seen = set()
        for x in walk_stmts(k.body):
            if isinstance(x, ir.Alloc) and x.buffer.scope == "local" and x.buffer.name not in seen:
                seen.add(x.buffer.name)
                self.emit(f"{ctype(x.buffer.dtype)} {self.name(x.buffer.name)}"
                          f"[{_declared(x.buffer)}];", 1)
            elif (isinstance(x, ir.Alloc) and x.buffer.scope == "fragment"
                  and x.buffer.name not in seen):
                seen.add(x.buffer.name)
                printed = dataclasses.replace(x.buffer, name=self.name(x.buffer.name))
                self.emit(warp_ops.declaration(printed, _size(x.buffer)), 1)
        self.stmt(k.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines), (total if dynamic else 0)


class _ReplaceLoads:
    """Replace vector-loaded Loads by reads of their register copies."""

    def __init__(self, names, var):
        self.names, self.var = names, var

    def expr(self, e):
        from ..lower.rewriter import Rewriter
        names, var = self.names, self.var

        class R(Rewriter):
            def expr_Load(self, x):
                if x in names:
                    return ir.Load(names[x], (ir.Var(var),), x.dtype)
                return self.generic_expr(x)
        return R().expr(e)


# the type that moves a vector of this many bytes (the bits are copied, never converted)
_VECTOR_TYPE = {4: "unsigned", 8: "float2", 16: "float4"}

_BUILTIN_VARS = threads.INDEX_VARS  # CUDA's own names of the thread and block indices


def _size(b: ir.Buffer) -> int:
    n = 1
    for d in b.shape:
        if not isinstance(d, ir.Imm):
            raise CudaError(f"codegen: {b.scope} buffer '{b.name}' has non-constant shape")
        n *= int(d.value)
    return n


def _declared(b: ir.Buffer) -> int:
    """The elements a static shared or local array is declared with: C++ has no
    array of zero elements (NVRTC: "the size of an array must be greater than
    zero"), and a buffer for an empty region (a range `k in 1:K` at K = 1) is
    never accessed (the sim reports any access out of its bounds): one element
    (issue 22's long fuzz run, seed 6 pair 25243)."""
    return max(1, _size(b))


def program_source(prog: ir.Program, options: CodegenOptions = CodegenOptions()
                   ) -> tuple[str, dict[str, dict]]:
    """CUDA source of a flattened program, and per kernel its dynamic shared
    memory bytes and the buffers it accesses with 16-byte vectors (whose
    pointers must be 16-byte aligned). With `options.index_bits == 64` the
    kernels' index arithmetic is widened first (index_width.py)."""
    uses = {b.dtype.name for b in prog.buffers}
    for k in prog.kernels:
        for x in walk_stmts(k.body):
            if isinstance(x, ir.Alloc):
                uses.add(x.buffer.dtype.name)
    parts = []
    if "float16" in uses or _mentions(prog, "float16"):
        parts.append("#include <cuda_fp16.h>")
    if "bfloat16" in uses or _mentions(prog, "bfloat16"):
        parts.append("#include <cuda_bf16.h>")
    if any(n in uses or _mentions(prog, n) for n in ("float8_e4m3fn", "float8_e5m2")):
        parts.append("#include <cuda_fp8.h>")
    parts.append(PRELUDE)
    fns = {y.fn for k in prog.kernels for y in ir.walk(k.body) if isinstance(y, ir.Call)}
    if "exp2_approx" in fns:
        parts.append(EXP2_APPROX)  # (its one call: attention's softmax)
    if "copysign" in fns:
        parts.append(COPYSIGN)
    helpers = atomics.prelude(prog)
    if helpers:
        parts.append(helpers)
    calls = [x.call for k in prog.kernels for x in walk_stmts(k.body) if isinstance(x, ir.Evaluate)]
    used = {c.fn for c in calls}
    if (flags := scan_lookback.prelude(used)) is not None:
        parts.append(flags)
    if sm90_ops.uses_sm90(used) or any(k.tensor_maps for k in prog.kernels):
        parts.append(sm90_ops.prelude(used, calls))
    smem = {}
    for k in prog.kernels:
        if options.index_bits == 64:
            k = widen(k)
        gen = _Kernel(k, prog, options)
        text, dyn = gen.source()
        parts.append(text)
        smem[k.name] = {"dynamic_smem": dyn,
                        "aligned": sorted(gen.vector_buffers & set(k.buffers))}
    return "\n".join(parts) + "\n", smem


def _mentions(prog, name) -> bool:
    """Whether an expression of a kernel has type `name` (a conversion to
    half precision needs its header even when no buffer has that type)."""
    return any(getattr(y, "dtype", None) is not None and y.dtype.name == name
               for k in prog.kernels for y in ir.walk(k.body))
