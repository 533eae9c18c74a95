"""CUDA for a scatter's stores (lower/scatter_store.py): atomic updates and
range checks of data-dependent subscripts.

    O[i] += v  @atomic        ->  tc_atomic_add(&O[i], v);
    check 0 <= I[i] < M       ->  if (I[i] < 0 || I[i] >= M) __trap();

Each `tc_atomic_<op>` is an overload per element type, emitted only for the
types a program updates: atomicAdd for float, double, int, unsigned and (as
unsigned long long, the same bits) long long; for __half and __nv_bfloat16
CUDA's own atomicAdd (sm_70 / sm_80 and above); atomicMax/atomicMin for the
integers; for floats a compare-and-swap loop on the bits (16-bit atomicCAS for
__half and __nv_bfloat16) with fmax/fmin, so that NaN is ignored as in every
other max/min of tcomp. Float updates land in the order the threads arrive:
a float sum may differ from run to run in its last bits.
"""
from __future__ import annotations

from ..lower import ir
from ..lower.rewriter import walk_stmts
from .ctypes_table import ctype

NAME = {"+": "add", "max": "max", "min": "min"}

# the unsigned type of a float's bits, the reinterpretations, the float math type
_BITS = {
    "float": ("unsigned int", "__float_as_uint({})", "__uint_as_float({})", "float", "{}", "{}"),
    "double": ("unsigned long long", "(unsigned long long)__double_as_longlong({})",
               "__longlong_as_double((long long){})", "double", "{}", "{}"),
    "__half": ("unsigned short", "__half_as_ushort({})", "__ushort_as_half({})", "float",
               "__half2float({})", "__float2half({})"),
    "__nv_bfloat16": ("unsigned short", "__bfloat16_as_ushort({})", "__ushort_as_bfloat16({})",
                      "float", "__bfloat162float({})", "__float2bfloat16({})"),
}


def _helper(op: str, c: str) -> str:
    name = f"tc_atomic_{NAME[op]}"
    head = f"__device__ __forceinline__ void {name}({c}* p, {c} v) {{"
    if op == "+":
        if c == "long long":
            return (f"{head} atomicAdd(reinterpret_cast<unsigned long long*>(p), "
                    f"(unsigned long long)v); }}")
        return f"{head} atomicAdd(p, v); }}"
    if c not in _BITS:
        return f"{head} atomic{'Max' if op == 'max' else 'Min'}(p, v); }}"
    u, to_bits, from_bits, math_t, widen, narrow = _BITS[c]
    f = ("fmax" if op == "max" else "fmin") + ("f" if math_t == "float" else "")
    new = narrow.format(f"{f}({widen.format(from_bits.format('assumed'))}, {widen.format('v')})")
    return "\n".join([
        head,
        f"  {u}* a = reinterpret_cast<{u}*>(p);",
        f"  {u} old = *a, assumed;",
        "  do {",
        "    assumed = old;",
        f"    {u} next = {to_bits.format(new)};",
        "    if (next == assumed) return;",
        "    old = atomicCAS(a, assumed, next);",
        "  } while (old != assumed);",
        "}"])


def prelude(prog: ir.Program) -> str | None:
    """The helpers the program's atomic updates call (None when it has none)."""
    types = {b.name: b.dtype for b in prog.buffers}
    need = []
    for k in prog.kernels:
        for s in walk_stmts(k.body):
            if isinstance(s, ir.Store) and s.atomic is not None:
                key = (s.atomic, ctype(types[s.buffer]))
                if key not in need:
                    need.append(key)
    if not need:
        return None
    return "// tcomp: atomic updates of scatters\n" + "\n".join(_helper(op, c) for op, c in need)


def emit_store(gen, s: ir.Store, d: int) -> None:
    gen.emit(f"tc_atomic_{NAME[s.atomic]}(&{gen.name(s.buffer)}[{gen.expr(s.indices[0])}], "
             f"{gen.expr(s.value)});", d)


def emit_check(gen, s: ir.IndexCheck, d: int) -> None:
    v, n = gen.expr(s.value), gen.expr(s.extent)
    gen.emit(f"if ({v} < 0 || {v} >= {n}) __trap();  // {s.what}", d)
