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


def shared_accesses(k: ir.Kernel, buffer: str) -> dict:
    """{(statement, "load" | "store", loop values, warp): (bytes per lane, [element offset
    per lane])} of every access to the shared buffer `buffer` (flat, after the final
    passes): element loads and stores, and the vectors of vectorized loops (one access
    of `VectorAccess.bytes` per lane, at its lane-0 offset). Lanes whose guard fails
    are None."""
    bx, by, bz = (int(d.value) for d in k.block)
    itemsize = {x.buffer.name: x.buffer.dtype.numpy.itemsize for x in ir.walk(k.body)
                if isinstance(x, ir.Alloc)}[buffer]
    out: dict = {}

    def note(node, kind, loops, warp, lane, width, offset):
        entry = out.setdefault((id(node), kind, loops, warp), (width, [None] * 32))
        entry[1][lane] = offset

    def walk(s, env, loops, warp, lane):
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                walk(x, env, loops, warp, lane)
        elif isinstance(s, ir.For) and s.vector is not None and (
                s.vector.store_base is not None or s.vector.loads):
            v = s.vector
            for ld, base in zip(v.loads, v.load_bases):
                if ld.buffer == buffer:
                    note(ld, "load", loops, warp, lane, v.bytes, value(base, env))
            if s.vector.store_base is not None and s.body.buffer == buffer:
                note(s, "store", loops, warp, lane, v.bytes, value(v.store_base, env))
            if s.vector.store_base is None:  # stored lane by lane: walk the lanes
                lo = value(s.lo, env)
                for i in range(lo, lo + value(s.extent, env)):
                    walk_stores(s.body, {**env, s.var: i}, loops + (i,), warp, lane)
        elif isinstance(s, ir.For):
            lo = value(s.lo, env)
            for i in range(lo, lo + value(s.extent, env)):
                walk(s.body, {**env, s.var: i}, loops + (i,), warp, lane)
        elif isinstance(s, ir.Let):
            walk(s.body, {**env, s.var: value(s.value, env)}, loops, warp, lane)
        elif isinstance(s, ir.If):
            if value(s.cond, env):
                walk(s.then, env, loops, warp, lane)
            elif s.else_ is not None:
                walk(s.else_, env, loops, warp, lane)
        elif isinstance(s, ir.Alloc):
            walk(s.body, env, loops, warp, lane)
        elif isinstance(s, ir.Store):
            walk_stores(s, env, loops, warp, lane)
            for x in ir.walk(s.value):
                if isinstance(x, ir.Load) and x.buffer == buffer:
                    note(x, "load", loops, warp, lane, itemsize, value(x.indices[0], env))

    def walk_stores(s, env, loops, warp, lane):
        if isinstance(s, ir.Store) and s.buffer == buffer:
            note(s, "store", loops, warp, lane, itemsize, value(s.indices[0], env))

    for tz, ty, tx in itertools.product(range(bz), range(by), range(bx)):
        env = {"threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz,
               "blockIdx.x": 0, "blockIdx.y": 0, "blockIdx.z": 0}
        t = (tz * by + ty) * bx + tx
        walk(k.body, env, (), t // 32, t % 32)
    return out, itemsize


def wavefront_conflicts(k: ir.Kernel, buffer: str) -> list[str]:
    """Every warp-wide access to shared `buffer` that takes more wavefronts than
    its bytes need: the hardware serves accesses of up to 4 bytes a lane by the
    whole warp, 8-byte ones by half warps, 16-byte ones by quarter warps; within
    one such group, two distinct 4-byte words in one bank ((byte / 4) % 32) are
    a conflict (lanes reading or writing the same word are not). Empty when
    conflict-free."""
    accesses, itemsize = shared_accesses(k, buffer)
    bad = []
    for (_, kind, loops, warp), (width, lanes) in accesses.items():
        group = 32 if width <= 4 else 128 // width
        for g0 in range(0, 32, group):
            words = {}
            for ln in range(g0, g0 + group):
                if lanes[ln] is None:
                    continue
                byte = lanes[ln] * itemsize
                for w in range(byte // 4, (byte + width - 1) // 4 + 1):
                    words.setdefault(w % 32, set()).add(w)
            worst = max((len(ws) for ws in words.values()), default=1)
            if worst > 1:
                bad.append(f"{width}-byte {kind} of {buffer} at loops {loops}, warp {warp}, "
                           f"lanes {g0}..{g0 + group - 1}: {worst}-way bank conflict")
    return bad
