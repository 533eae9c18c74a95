"""The shared-memory addresses a lowered kernel's warp intrinsics use, lane by
lane, and whether they hit distinct banks: read from the final IR by
evaluating each call's address operand for every thread of the block and every
iteration of the loops around it (a small interpreter of index expressions;
the sizes must keep the loops short).

A 16-byte access per lane is served a quarter warp at a time (8 lanes, 128
bytes: the 32 banks once), so a quarter warp is conflict-free when its 8
addresses lie in 8 distinct 16-byte groups of banks ((address / 16) % 8).
ldmatrix reads its 8x8 matrices one per phase, the 8 row addresses of matrix
i given by lanes 8i..8i+7: the same test per phase."""
from __future__ import annotations

import itertools

from tcomp.lower import ir

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b, "%": lambda a, b: a % b, "&": lambda a, b: a & b,
        "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "<<": lambda a, b: a << b,
        ">>": lambda a, b: a >> b, "min": min, "max": max, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
        "&&": lambda a, b: a and b, "||": lambda a, b: a or b}


def value(e: ir.Expr, env: dict):
    """An integer (or bool) index expression at the variables' values `env`."""
    if isinstance(e, ir.Imm):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    if isinstance(e, ir.Cast):
        return value(e.x, env)
    if isinstance(e, ir.Bin):
        return _OPS[e.op](value(e.a, env), value(e.b, env))
    if isinstance(e, ir.Un):
        x = value(e.x, env)
        return (not x) if e.op == "!" else -x
    if isinstance(e, ir.Select):
        return value(e.a, env) if value(e.cond, env) else value(e.b, env)
    raise TypeError(f"not an index expression: {type(e).__name__}")


def addresses(k: ir.Kernel, fns, operand: int = None) -> dict:
    """{(call, fn, buffer, loop values, warp): [element offset per lane]} of
    every `Evaluate(Call(fn, ...))` with fn in `fns`, its shared address the
    operand at `operand` (default: ldmatrix's source, else the first operand),
    and with "vector_store" in `fns`, of every vectorized loop's vector store
    (its lane-0 offset). Lanes whose guard fails are None."""
    bx, by, bz = (int(d.value) for d in k.block)
    out: dict = {}
    for tz, ty, tx in itertools.product(range(bz), range(by), range(bx)):
        env = {"threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz,
               "blockIdx.x": 0, "blockIdx.y": 0, "blockIdx.z": 0}
        t = (tz * by + ty) * bx + tx  # the linear thread index: warps are 32 in a row
        _walk(k.body, env, (), fns, operand, out, t // 32, t % 32)
    return out


def _walk(s, env, loops, fns, operand, out, warp, lane):
    if isinstance(s, ir.Seq):
        for x in s.stmts:
            _walk(x, env, loops, fns, operand, out, warp, lane)
    elif isinstance(s, ir.For) and s.vector is not None and s.vector.store_base is not None \
            and "vector_store" in fns:  # one vector store per lane, at its lane-0 offset
        lanes = out.setdefault((id(s), "vector_store", s.body.buffer, loops, warp), [None] * 32)
        lanes[lane] = value(s.vector.store_base, env)
    elif isinstance(s, ir.For):
        lo = value(s.lo, env)
        for i in range(lo, lo + value(s.extent, env)):
            _walk(s.body, {**env, s.var: i}, loops + (i,), fns, operand, out, warp, lane)
    elif isinstance(s, ir.Let):
        _walk(s.body, {**env, s.var: value(s.value, env)}, loops, fns, operand, out, warp, lane)
    elif isinstance(s, ir.If):
        if value(s.cond, env):
            _walk(s.then, env, loops, fns, operand, out, warp, lane)
        elif s.else_ is not None:
            _walk(s.else_, env, loops, fns, operand, out, warp, lane)
    elif isinstance(s, ir.Alloc):
        _walk(s.body, env, loops, fns, operand, out, warp, lane)
    elif isinstance(s, ir.Evaluate) and s.call.fn in fns:
        args = s.call.args
        ref = args[operand] if operand is not None else args[-1 if "ldmatrix" in s.call.fn else 0]
        lanes = out.setdefault((id(s), s.call.fn, ref.buffer, loops, warp), [None] * 32)
        lanes[lane] = value(ref.indices[0], env)


def groups(offsets, itemsize: int) -> list[int]:
    """The 16-byte bank group ((byte address / 16) % 8) of each element offset."""
    return [(o * itemsize // 16) % 8 for o in offsets]


def conflicts(k: ir.Kernel, fns, itemsize: int, phases) -> list[str]:
    """Every (call, iteration, warp, phase) whose 8 lanes `phases[p]` do not
    hit 8 distinct bank groups, described; empty when conflict-free."""
    bad = []
    for (_, fn, buf, loops, warp), lanes in addresses(k, fns).items():
        for p in phases:
            offs = [lanes[i] for i in p if lanes[i] is not None]
            g = groups(offs, itemsize)
            if len(set(g)) != len(g):
                bad.append(f"{fn} into {buf} at loops {loops}, warp {warp}, lanes {p[0]}.."
                           f"{p[-1]}: offsets {offs}, bank groups {g}")
    return bad


QUARTERS = [range(8 * q, 8 * q + 8) for q in range(4)]
PHASES = {"ldmatrix_x4": QUARTERS, "ldmatrix_x4_trans": QUARTERS,
          "ldmatrix_x2": QUARTERS[:2], "ldmatrix_x2_trans": QUARTERS[:2],
          "cp_async": QUARTERS, "vector_store": QUARTERS}
