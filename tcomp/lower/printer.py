"""The one printer of Kernel IR (used by str(), pass dumps, golden tests)."""
from __future__ import annotations

from . import ir

# C's precedence levels (higher binds tighter): `a & b == c` is `a & (b == c)`.
PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7,
        ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
UNARY, ATOM = 11, 12
BITWISE = ("&", "|", "^", "<<", ">>")


def _imm(e: ir.Imm) -> str:
    if e.dtype.is_bool:
        return "true" if e.value else "false"
    if e.dtype.is_float:
        text = repr(float(e.value))
        return text if e.dtype.name == "float32" else f"{e.dtype.name}({text})"
    return str(int(e.value)) if e.dtype.name in ("int32",) else f"{e.dtype.name}({int(e.value)})"


def expr(e: ir.Expr, min_prec: int = 0) -> str:
    if isinstance(e, ir.Imm):
        text, p = _imm(e), ATOM
        if isinstance(e.value, (int, float)) and e.value < 0:
            p = UNARY
    elif isinstance(e, ir.Var):
        text, p = e.name, ATOM
    elif isinstance(e, ir.Load):
        text, p = f"{e.buffer}[{', '.join(expr(i) for i in e.indices)}]", ATOM
    elif isinstance(e, ir.Ref):
        text, p = f"&{e.buffer}[{', '.join(expr(i) for i in e.indices)}]", ATOM
    elif isinstance(e, ir.Bin):
        if e.op in ("min", "max"):
            text, p = f"{e.op}({expr(e.a)}, {expr(e.b)})", ATOM
        else:
            p = PREC[e.op]
            # a bitwise operator's operands are bracketed unless atoms: C's levels for
            # them surprise readers (`a + b ^ c & 7` is `(a + b) ^ (c & 7)`)
            pa, pb = (ATOM, ATOM) if e.op in BITWISE else (p, p + 1)
            text = f"{expr(e.a, pa)} {e.op} {expr(e.b, pb)}"
    elif isinstance(e, ir.Un):
        text, p = f"{e.op}{expr(e.x, ATOM)}", UNARY
    elif isinstance(e, ir.Select):
        text, p = f"{expr(e.cond, 1)} ? {expr(e.a)} : {expr(e.b)}", 0
    elif isinstance(e, ir.Call):
        text, p = f"{e.fn}({', '.join(expr(a) for a in e.args)})", ATOM
    elif isinstance(e, ir.Cast):
        text, p = f"{e.dtype.name}({expr(e.x)})", ATOM
    else:
        raise TypeError(e)
    return f"({text})" if p < min_prec else text


def stmt(s: ir.Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, ir.Seq):
        return [line for x in s.stmts for line in stmt(x, indent)]
    if isinstance(s, ir.Store):
        op, value = "=", expr(s.value)
        if s.atomic is not None:  # a scatter's atomic update (lower/scatter_store.py)
            op, value = f"{s.atomic}=", f"{value}  @atomic"
        return [f"{pad}{s.buffer}[{', '.join(expr(i) for i in s.indices)}] {op} {value}"]
    if isinstance(s, ir.IndexCheck):
        return [f"{pad}check 0 <= {expr(s.value)} < {expr(s.extent)}  # {s.what}"]
    if isinstance(s, ir.For):
        lo = expr(s.lo)
        hi = expr(s.extent) if lo == "0" else f"{lo} + {expr(s.extent, PREC['+'])}"
        kind = f"  @{s.tag}" if s.tag else ("" if s.kind == "serial" else f"  @{s.kind}")
        if s.intrin:
            kind = f"  @tensorize({s.intrin})"
        if s.vector is not None:
            kind += f"({_vector(s)})"
        if s.unroll_by:
            kind += f"  @unroll_by({s.unroll_by})"
        if s.stages:
            kind += f"  @stages({s.stages})"
        return [f"{pad}for {s.var} in {lo}:{hi}{kind}"] + stmt(s.body, indent + 1)
    if isinstance(s, ir.If):
        out = [f"{pad}if {expr(s.cond)}"] + stmt(s.then, indent + 1)
        if s.else_ is not None:
            out += [f"{pad}else"] + stmt(s.else_, indent + 1)
        return out
    if isinstance(s, ir.Let):
        return [f"{pad}let {s.var} = {expr(s.value)}"] + stmt(s.body, indent)
    if isinstance(s, ir.Barrier):
        return [f"{pad}barrier()"]
    if isinstance(s, ir.AllReduce):
        return [f"{pad}{s.buffer}[0] = allreduce_{_opname(s.op)}({s.buffer}[0]) over {s.tag} "
                f"({expr(s.extent)} threads)"]
    if isinstance(s, ir.Evaluate):
        return [f"{pad}{expr(s.call)}"]
    if isinstance(s, ir.Specialize):
        out = [f"{pad}specialize"]
        for r in s.roles:
            wgs = f"{r.first}" if r.count == 1 else f"{r.first}..{r.first + r.count - 1}"
            regs = f" regs={r.regs}" if r.regs else ""
            out += [f"{pad}  role {r.name}: {r.var} = warpgroup - {r.first} (warpgroups "
                    f"{wgs}){regs}"] + stmt(r.body, indent + 2)
        return out
    if isinstance(s, ir.Alloc):
        b = s.buffer
        shape = ", ".join(expr(d) for d in b.shape)
        layout = f" {b.layout}" if b.layout is not None else ""
        return [f"{pad}alloc {b.scope} {b.dtype.name} {b.name}[{shape}]{layout}"] + \
            stmt(s.body, indent)
    raise TypeError(s)


def _vector(s: ir.For) -> str:
    """`16 bytes: load A[base], store B[base]`: the vector accesses of a loop,
    each at its lane-0 offset."""
    v = s.vector
    lanes = int(s.extent.value) if isinstance(s.extent, ir.Imm) else 0

    def size(ld):  # a load of another size than the store's (a float2 bias, a bf16x2 store)
        n = lanes * ld.dtype.numpy.itemsize
        return f" ({n} bytes)" if lanes and n != v.bytes else ""
    parts = [f"load {ld.buffer}[{expr(b)}]{size(ld)}" for ld, b in zip(v.loads, v.load_bases)]
    body = s.body
    if v.store_base is not None:
        parts.append(f"store {body.buffer}[{expr(v.store_base)}]")
    else:
        parts.append("store per lane")
    return f"{v.bytes} bytes: {', '.join(parts)}"


def _opname(op: str) -> str:
    return {"+": "sum", "*": "prod"}.get(op, op)


def _im2col(m: ir.TensorMap) -> str:
    if m.im2col is None:
        return ""
    c = m.im2col
    return f", im2col(lower={list(c.lower)}, upper={list(c.upper)})"


def kernel_to_text(k: ir.Kernel) -> str:
    grid = ", ".join(expr(g) for g in k.grid)
    block = ", ".join(expr(b) for b in k.block)
    params = ", ".join(k.buffers + k.sizes)
    maps = "".join(f", {m.name}: tensor_map({m.buffer}, box=[{', '.join(map(str, m.box))}], "
                   f"swizzle={m.swizzle}{_im2col(m)})" for m in k.tensor_maps)
    bounds = f" min_blocks={k.min_blocks}" if k.min_blocks else ""
    head = f"kernel {k.name}({params}{maps}) grid=({grid}) block=({block}){bounds}"
    notes = ([f"  # plan: {k.plan}"] if k.plan else []) + [f"  # remark: {r}" for r in k.remarks]
    return "\n".join([head] + notes + stmt(k.body, 1))


def program_to_text(p: ir.Program) -> str:
    lines = [f"# program {p.name}"]
    for b in p.buffers:
        shape = ", ".join(expr(d) for d in b.shape)
        lines.append(f"buffer {b.role} {b.scope} {b.dtype.name} {b.name}[{shape}]")
    for k in p.kernels:
        lines.append(kernel_to_text(k))
    return "\n".join(lines) + "\n"
