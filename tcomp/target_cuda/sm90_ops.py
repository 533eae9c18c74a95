"""CUDA of the Hopper intrinsics (lower/intrinsics_sm90.py) and of warp
specialisation (ir.Specialize): inline PTX in small device functions of a
prelude that a kernel using them gets (`PRELUDE`), and one emitter per
registry entry (`EMIT`).

Addresses: a reference into shared memory is converted to its 32-bit
shared-window address (`__cvta_generic_to_shared`); a tensor map parameter
is passed by its generic address (`&map`, a `__grid_constant__`).
wgmma descriptors (PTX ISA, "Matrix Descriptor Format"): start address / 16
in bits 0-13, leading-dimension byte offset / 16 in 16-29 (unused by
swizzled K-major tiles: 1), stride byte offset / 16 in 32-45 (from one
8-row group to the next: 8 rows x 128 bytes = 1024), the swizzle mode in
62-63 (1: 128-byte). A tile's base is 1024-byte aligned (the shared
allocation aligns swizzled buffers so), and stepping K by 16 elements adds
32 bytes to the start address, as CUTLASS does.
"""
from __future__ import annotations

from ..errors import CudaError
from ..lower import ir
from ..lower.intrinsics import REGISTRY
from ..lower.intrinsics_sm90 import WGMMA_N, wgmma_types

PRELUDE = r"""// Hopper: mbarriers, TMA, wgmma (inline PTX)
struct __align__(64) tc_tensor_map { unsigned long long opaque[16]; };
__device__ __forceinline__ unsigned tc_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void tc_mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tc_smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void tc_mbar_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(tc_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tc_mbar_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(tc_smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tc_mbar_wait(void* bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred P1;\n\tTC_WAIT:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
               "@P1 bra TC_DONE;\n\tbra TC_WAIT;\n\tTC_DONE:\n\t}"
               :: "r"(tc_smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void tc_tma_load_2d(void* dst, const tc_tensor_map* map, void* bar,
                                               int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];"
               :: "r"(tc_smem_addr(dst)), "l"(map), "r"(tc_smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tc_tma_store_2d(const tc_tensor_map* map, const void* src,
                                                int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(map), "r"(tc_smem_addr(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tc_tma_load_3d(void* dst, const tc_tensor_map* map, void* bar,
                                               int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5}], [%2];"
               :: "r"(tc_smem_addr(dst)), "l"(map), "r"(tc_smem_addr(bar)), "r"(c0), "r"(c1),
                  "r"(c2) : "memory");
}
__device__ __forceinline__ void tc_tma_store_3d(const tc_tensor_map* map, const void* src,
                                                int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"(map), "r"(tc_smem_addr(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ unsigned long long tc_wgmma_desc(const void* p) {
  unsigned long long a = tc_smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32)
         | (1ull << 62);
}
"""

_WGMMA = r"""__device__ __forceinline__ void tc_{fn}(float* d, const void* a,
                                                          const void* b, int scale_d) {{
  unsigned long long da = {desc_a}, db = {desc_b};
  asm volatile("{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{s}, 0;\n\t"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "
               "{{{regs}}}, %{da}, %{db}, p, 1, 1, {ta}, {tb};\n\t}}"
               : {outs}
               : "l"(da), "l"(db), "r"(scale_d));
}}
"""
_DESC_MN = r"""__device__ __forceinline__ unsigned long long tc_wgmma_desc_mn(const void* p, unsigned lbo) {
  unsigned long long a = tc_smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
         | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
"""


_WGMMA_RS = r"""__device__ __forceinline__ void tc_{fn}(float* d, const void* a,
                                                          const void* b, int scale_d{lbo_param}) {{
  const unsigned* ar = reinterpret_cast<const unsigned*>(a);
  unsigned long long db = {desc_b};
  asm volatile("{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{s}, 0;\n\t"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "
               "{{{regs}}}, {{%{a0}, %{a1}, %{a2}, %{a3}}}, %{db}, p, 1, 1, {tb};\n\t}}"
               : {outs}
               : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(db), "r"(scale_d));
}}
"""


def wgmma_rs_function(n: int, ptx_type: str = "bf16", trans_b: int = 0) -> str:
    """The device function issuing wgmma m64n{n}k16 with A in registers: the
    thread's 8 16-bit A values as four 32-bit registers (pairs in order)."""
    count = n // 2
    return _WGMMA_RS.format(
        fn=f"wgmma_rs_m64n{n}k16_{ptx_type}" + ("_t1" if trans_b else ""), n=n, t=ptx_type,
        regs=", ".join(f"%{i}" for i in range(count)),
        outs=", ".join(f'"+f"(d[{i}])' for i in range(count)),
        a0=count, a1=count + 1, a2=count + 2, a3=count + 3, db=count + 4, s=count + 5,
        tb=trans_b, lbo_param=", unsigned lbo_b" if trans_b else "",
        desc_b="tc_wgmma_desc_mn(b, lbo_b)" if trans_b else "tc_wgmma_desc(b)")


def wgmma_name(n: int, ptx_type: str = "bf16", trans_a: int = 0, trans_b: int = 0) -> str:
    """The device function of wgmma m64n{n}k16 on `ptx_type` inputs with the
    operands' major orders (K-major: 0; MN-major: 1): tc_<name>."""
    t = f"_t{trans_a}{trans_b}" if trans_a or trans_b else ""
    return f"wgmma_m64n{n}k16_{ptx_type}{t}"


def wgmma_function(n: int, ptx_type: str = "bf16", trans_a: int = 0, trans_b: int = 0) -> str:
    """The device function issuing wgmma m64n{n}k16 (n / 2 accumulators). An
    MN-major operand's descriptor takes its leading byte offset (from one
    block of 64 M/N columns to the next) as the function's argument."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    text = _WGMMA.format(fn=wgmma_name(n, ptx_type, trans_a, trans_b), n=n, t=ptx_type,
                         regs=regs, outs=outs, da=count, db=count + 1, s=count + 2,
                         ta=trans_a, tb=trans_b,
                         desc_a="tc_wgmma_desc_mn(a, lbo_a)" if trans_a else "tc_wgmma_desc(a)",
                         desc_b="tc_wgmma_desc_mn(b, lbo_b)" if trans_b else "tc_wgmma_desc(b)")
    if trans_a or trans_b:
        text = text.replace("int scale_d)", "int scale_d,\n" + " " * 58 +
                            "unsigned lbo_a, unsigned lbo_b)")
    return text


def _wgmma_variant(call) -> tuple:
    fn = call.fn
    n, k, a_t, b_t = wgmma_types(fn)
    if k == 32:  # fp8 (wgmma_fp8_function): K-major only, the types in the variant
        return n, f"{a_t}.{b_t}", 0, 0
    ta, tb = (int(a.value) if isinstance(a, ir.Imm) else 0 for a in call.args[4:6])
    return n, a_t, ta, tb


# fp8 (m64nNk32, e4m3/e5m2): the PTX ISA's wgmma for 8-bit types takes no transpose
# operands (K-major only); the descriptors are those of 16-bit K-major tiles (a 128-byte
# row holds 128 values; a k32 step is 32 bytes, as a k16 step of 16-bit values)
_WGMMA_FP8 = r"""__device__ __forceinline__ void tc_{fn}(float* d, const void* a,
                                                          const void* b, int scale_d) {{
  unsigned long long da = tc_wgmma_desc(a), db = tc_wgmma_desc(b);
  asm volatile("{{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{s}, 0;\n\t"
               "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{ta}.{tb} "
               "{{{regs}}}, %{da}, %{db}, p, 1, 1;\n\t}}"
               : {outs}
               : "l"(da), "l"(db), "r"(scale_d));
}}
"""


def wgmma_fp8_name(n: int, ta: str, tb: str) -> str:
    return f"wgmma_m64n{n}k32_{ta}_{tb}"


def wgmma_fp8_function(n: int, ta: str, tb: str) -> str:
    """The device function issuing wgmma m64n{n}k32 on fp8 inputs of PTX
    types ta, tb (e4m3, e5m2), both K-major."""
    count = n // 2
    return _WGMMA_FP8.format(fn=wgmma_fp8_name(n, ta, tb), n=n, ta=ta, tb=tb,
                             regs=", ".join(f"%{i}" for i in range(count)),
                             outs=", ".join(f'"+f"(d[{i}])' for i in range(count)),
                             da=count, db=count + 1, s=count + 2)


def _wgmma_rs_variant(call) -> tuple[int, str, int]:
    n = int(call.fn.split("m64n")[1].split("k")[0])
    tb = call.args[4]
    return n, call.fn.rsplit("_", 1)[1], int(tb.value) if isinstance(tb, ir.Imm) else 0


_IM2COL = r"""__device__ __forceinline__ void tc_tma_load_im2col_4d(void* dst, const tc_tensor_map* map,
    void* bar, int c, int w, int h, int n, unsigned short off_w, unsigned short off_h) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};"
               :: "r"(tc_smem_addr(dst)), "l"(map), "r"(tc_smem_addr(bar)), "r"(c), "r"(w),
                  "r"(h), "r"(n), "h"(off_w), "h"(off_h) : "memory");
}
"""


def prelude(used: set[str], calls=()) -> str:
    """The prelude for a program whose intrinsics are `used` (registry names);
    `calls`: its wgmma calls (one device function per shape, type and major
    orders)."""
    parts = [PRELUDE] + ([_IM2COL] if "tma_load_im2col_4d" in used else [])
    variants = sorted({_wgmma_variant(c) for c in calls if c.fn.startswith("wgmma_m64n")})
    rs = sorted({_wgmma_rs_variant(c) for c in calls if c.fn.startswith("wgmma_rs_")})
    if any(ta or tb for _, _, ta, tb in variants) or any(tb for _, _, tb in rs):
        parts.append(_DESC_MN)
    for v in variants:
        parts.append(wgmma_fp8_function(v[0], *v[1].split(".")) if "." in v[1] else
                     wgmma_function(*v))
    for v in rs:
        parts.append(wgmma_rs_function(*v))
    return "".join(parts)


def uses_sm90(names: set[str]) -> bool:
    from ..lower.intrinsics_sm90 import HOPPER
    from ..lower.intrinsics import REGISTRY
    return any(REGISTRY[n].min_arch >= HOPPER for n in names if n in REGISTRY)


# ------------------------------------------------------------------ emitters
def _ref(gen, e) -> str:
    if not isinstance(e, ir.Ref):
        raise CudaError(f"codegen: expected a reference, got {type(e).__name__}")
    return gen.expr(e)


def _map(gen, e) -> str:
    if not isinstance(e, ir.Var) or e.name not in gen.tensor_maps:
        raise CudaError(f"codegen: a TMA copy names {gen.expr(e)!r}, which is not a tensor map "
                        f"parameter of kernel {gen.k.name}")
    return f"&{e.name}"


def _imm(e, what) -> int:
    if not isinstance(e, ir.Imm):
        raise CudaError(f"codegen: {what} must be a constant")
    return int(e.value)


def _emit(fmt):
    def emit(gen, s, d):
        a = s.call.args
        gen.emit(fmt(gen, a), d)
    return emit


EMIT = {
    "mbarrier_init": _emit(lambda g, a: f"tc_mbar_init({_ref(g, a[0])}, {g.expr(a[1])});"),
    "fence_mbarrier_init": _emit(lambda g, a: 'asm volatile("fence.mbarrier_init.release.cluster;'
                                              '" ::: "memory");'),
    "mbarrier_arrive": _emit(lambda g, a: f"tc_mbar_arrive({_ref(g, a[0])});"),
    "mbarrier_expect_tx": _emit(lambda g, a: f"tc_mbar_expect_tx({_ref(g, a[0])}, "
                                             f"{g.expr(a[1])});"),
    "mbarrier_wait": _emit(lambda g, a: f"tc_mbar_wait({_ref(g, a[0])}, {g.expr(a[1])});"),
    "fence_proxy_async": _emit(lambda g, a: 'asm volatile("fence.proxy.async.shared::cta;" ::: '
                                            '"memory");'),
    "named_barrier": _emit(lambda g, a: f'asm volatile("bar.sync %0, %1;" :: "r"({g.expr(a[0])}), '
                                        f'"r"({g.expr(a[1])}) : "memory");'),
    "named_barrier_arrive": _emit(lambda g, a: f'asm volatile("bar.arrive %0, %1;" :: '
                                               f'"r"({g.expr(a[0])}), "r"({g.expr(a[1])}) : '
                                               f'"memory");'),
    "tma_load_2d": _emit(lambda g, a: f"tc_tma_load_2d({_ref(g, a[0])}, {_map(g, a[1])}, "
                                      f"{_ref(g, a[2])}, {g.expr(a[4])}, {g.expr(a[3])});"),
    "tma_store_2d": _emit(lambda g, a: f"tc_tma_store_2d({_map(g, a[0])}, {_ref(g, a[1])}, "
                                       f"{g.expr(a[3])}, {g.expr(a[2])});"),
    "tma_load_3d": _emit(lambda g, a: f"tc_tma_load_3d({_ref(g, a[0])}, {_map(g, a[1])}, "
                                      f"{_ref(g, a[2])}, {g.expr(a[5])}, {g.expr(a[4])}, "
                                      f"{g.expr(a[3])});"),
    "tma_load_im2col_4d": _emit(lambda g, a: f"tc_tma_load_im2col_4d({_ref(g, a[0])}, "
                                             f"{_map(g, a[1])}, {_ref(g, a[2])}, {g.expr(a[6])}, "
                                             f"{g.expr(a[5])}, {g.expr(a[4])}, {g.expr(a[3])}, "
                                             f"{g.expr(a[8])}, {g.expr(a[7])});"),
    "tma_store_3d": _emit(lambda g, a: f"tc_tma_store_3d({_map(g, a[0])}, {_ref(g, a[1])}, "
                                       f"{g.expr(a[4])}, {g.expr(a[3])}, {g.expr(a[2])});"),
    "tma_store_commit": _emit(lambda g, a: 'asm volatile("cp.async.bulk.commit_group;" ::: '
                                           '"memory");'),
    "tma_store_wait": _emit(lambda g, a: f'asm volatile("cp.async.bulk.wait_group.read %0;" :: '
                                         f'"n"({_imm(a[0], "tma_store_wait n")}) : "memory");'),
    "wgmma_fence": _emit(lambda g, a: 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'),
    "wgmma_commit": _emit(lambda g, a: 'asm volatile("wgmma.commit_group.sync.aligned;" ::: '
                                       '"memory");'),
    "wgmma_wait": _emit(lambda g, a: f'asm volatile("wgmma.wait_group.sync.aligned %0;" :: '
                                     f'"n"({_imm(a[0], "wgmma_wait n")}) : "memory");'),
}


def _mn_block_bytes(gen, ref) -> int:
    """The leading byte offset of an MN-major operand: one block (K rows x 64
    columns) of its buffer (..., blocks, K, 64)."""
    b = gen.buffer(ref.buffer)
    if len(b.shape) < 3 or not all(isinstance(d, ir.Imm) for d in b.shape[-2:]):
        raise CudaError(f"codegen: an MN-major wgmma operand '{ref.buffer}' must be a shared "
                        f"buffer (..., blocks, K, 64) of constant K")
    return int(b.shape[-2].value) * int(b.shape[-1].value) * b.dtype.bits // 8


def _emit_wgmma(gen, s, d):
    a = s.call.args
    n, t, ta, tb = _wgmma_variant(s.call)
    if "." in t:  # fp8
        args = [_ref(gen, a[0]), _ref(gen, a[1]), _ref(gen, a[2]), gen.expr(a[3])]
        gen.emit(f"tc_{wgmma_fp8_name(n, *t.split('.'))}({', '.join(args)});", d)
        return
    args = [_ref(gen, a[0]), _ref(gen, a[1]), _ref(gen, a[2]), gen.expr(a[3])]
    if ta or tb:
        args += [str(_mn_block_bytes(gen, a[1]) if ta else 0),
                 str(_mn_block_bytes(gen, a[2]) if tb else 0)]
    gen.emit(f"tc_{wgmma_name(n, t, ta, tb)}({', '.join(args)});", d)


def _emit_wgmma_rs(gen, s, d):
    a = s.call.args
    n, t, tb = _wgmma_rs_variant(s.call)
    args = [_ref(gen, a[0]), _ref(gen, a[1]), _ref(gen, a[2]), gen.expr(a[3])]
    if tb:
        args.append(str(_mn_block_bytes(gen, a[2])))
    gen.emit(f"tc_wgmma_rs_m64n{n}k16_{t}{'_t1' if tb else ''}({', '.join(args)});", d)


for _sfx in ("bf16", "f16"):
    for _n in WGMMA_N:
        EMIT[f"wgmma_m64n{_n}k16_{_sfx}"] = _emit_wgmma
        EMIT[f"wgmma_rs_m64n{_n}k16_{_sfx}"] = _emit_wgmma_rs
for _name in (x for x in REGISTRY if x.startswith("wgmma_m64n") and "k32_" in x):
    EMIT[_name] = _emit_wgmma


def emit_specialize(gen, s: ir.Specialize, d: int) -> None:
    """One branch per role on the warpgroup index (threadIdx.x / 128, uniform
    per warp); the role's register count first (setmaxnreg)."""
    wg = "(threadIdx.x >> 7)"
    for i, r in enumerate(s.roles):
        cond = (f"{wg} == {r.first}" if r.count == 1
                else f"{wg} >= {r.first} && {wg} < {r.first + r.count}")
        gen.emit(("if" if i == 0 else "} else if") + f" ({cond}) {{  // role {r.name}", d)
        if r.regs:
            verb = "inc" if r.regs > register_budget(gen.k) else "dec"
            gen.emit(f'asm volatile("setmaxnreg.{verb}.sync.aligned.u32 %0;" :: "n"({r.regs}));',
                     d + 1)
        role_body(gen, r, f"{wg} - {r.first}", d + 1)
    gen.emit("}", d)


def role_body(gen, r: ir.Role, index: str, d: int) -> None:
    """A role's body with its warpgroup index `var` defined as `index`."""
    v = gen.name(r.var)
    if any(isinstance(x, ir.Var) and x.name == r.var for x in ir.walk(r.body)):
        gen.emit(f"const int {v} = {index};", d)
    saved = gen.simp.enter_loop(r.var, ir.ZERO, ir.const(r.count))
    gen.scopes.append({v})
    gen.stmt(r.body, d)
    gen.scopes.pop()
    gen.simp.restore(r.var, saved)


def register_budget(k: ir.Kernel) -> int:
    """Registers per thread a launch of the kernel's constant block gets at
    most (65536 per multiprocessor, allocated by 8): a role asking for more
    takes them (setmaxnreg.inc), one asking for fewer gives back."""
    const = k.const_block()
    n = const[0] * const[1] * const[2] if const else 1024
    blocks = max(1, k.min_blocks)
    return min(255, 65536 // (n * blocks) // 8 * 8)
