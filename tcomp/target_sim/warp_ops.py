"""The sim's meaning of the warp-collective tensor-core intrinsics: `ldmatrix`
and `mma.sync.m16n8k16`, executed on the per-lane fragment registers the way
the PTX ISA defines them (lower/warp_layouts.py has the layouts).

A warp is 32 consecutive threads of a block (linear thread index), so a
block's thread count must be a multiple of 32 and every lane of a warp must
reach the intrinsic (the instructions are `.aligned`): anything else is a
SimError, as it is undefined behaviour on the GPU. A fragment read before it
was written, a row address that is not 16-byte aligned, or a shared element
no thread wrote (or wrote without a barrier since) is reported like any other
access.

Each rule is compiled once per Evaluate into a closure `(env, mask) -> None`,
like the executor's statements.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lang import dtypes, minmax
from ..lower import ir
from ..lower.warp_layouts import MMA_A, MMA_B, MMA_C, WARP, ldmatrix_source

_A_ROW, _A_COL = MMA_A.table()
_B_ROW, _B_COL = MMA_B.table()
_C_ROW, _C_COL = MMA_C.table()


def compile_call(launch, call: ir.Call):
    """A closure running `call`, or None when it is not a warp intrinsic."""
    fn = call.fn
    if fn.startswith("ldmatrix_"):
        return _ldmatrix(launch, call)
    if fn == "mma_m16n8k16":
        return _mma(launch, call)
    if fn in ("quad_max", "quad_sum"):
        return _quad(launch, call)
    return None


def _ref(launch, e, what: str):
    if not isinstance(e, ir.Ref):
        raise SimError(f"kernel {launch.kname}: {what} must be a buffer reference (Ref), got "
                       f"{type(e).__name__}")
    return e.buffer, [launch.compile_expr(i) for i in e.indices]


def _warps(launch, mask, fn: str):
    """The active warps of the batch as a bool array over (lanes // 32); a warp
    with only some lanes active is an error."""
    if launch.T % WARP:
        raise SimError(f"kernel {launch.kname}: warp-collective {fn} in a block of {launch.T} "
                       f"threads (blocks of a multiple of 32 threads are needed)")
    if mask is None:
        return None
    m = mask.reshape(-1, WARP)
    some, every = m.any(axis=1), m.all(axis=1)
    partial = some & ~every
    if partial.any():
        w = int(np.argmax(partial))
        lane = w * WARP
        raise SimError(f"kernel {launch.kname}: warp-collective {fn} reached by only "
                       f"{int(m[w].sum())} of the 32 lanes of warp {(lane % launch.T) // WARP} "
                       f"(block {launch._block(lane)}); every lane of a warp must execute it")
    return every


def _fragment(launch, name: str, fn: str):
    h = launch.mem.get(name)
    if h is None or h.buf.scope not in ("fragment", "local"):
        raise SimError(f"kernel {launch.kname}: {fn} operand '{name}' is not a fragment "
                       f"(register) buffer allocated here")
    return h


def _reg_offset(launch, name, idx, env, n, fn):
    """The constant register offset of a fragment operand (the same for every lane)."""
    h = _fragment(launch, name, fn)
    vals = [f(env, None) for f in idx]
    if any(np.ndim(v) and not (np.asarray(v) == np.asarray(v).reshape(-1)[0]).all()
           for v in vals):
        raise SimError(f"kernel {launch.kname}: {fn} operand {name}: register offsets must be "
                       f"the same for every lane")
    subs = [int(np.asarray(v).reshape(-1)[0]) for v in vals]
    off = subs[0] if len(subs) == 1 else launch.flatten(subs, h.shape)
    if not 0 <= off or off + n > h.size:
        raise SimError(f"kernel {launch.kname}: {fn} operand {name}[{off}:{off + n}] outside its "
                       f"{h.size} registers")
    return h, off


def _read_regs(launch, h, off, n, lanes, fn):
    sel = h.written[:, off:off + n] if lanes is None else h.written[lanes, off:off + n]
    if not sel.all():
        raise SimError(f"kernel {launch.kname}: {fn} reads fragment {h.buf.name}[{off}:{off + n}] "
                       f"before every lane wrote it")
    return h.data[:, off:off + n]


def _write_regs(h, off, vals, lanes):
    n = vals.shape[1]
    if lanes is None:
        h.data[:, off:off + n] = vals
        h.written[:, off:off + n] = True
    else:
        h.data[lanes, off:off + n] = vals[lanes]
        h.written[lanes, off:off + n] = True


def _quad(launch, call: ir.Call):
    """quad_max / quad_sum: the register combined over lanes 4g .. 4g + 3 (max
    as fmaxf: a NaN loses to a number, as on the GPU), every lane of the quad
    getting the result."""
    fn = call.fn
    name, idx = _ref(launch, call.args[0], f"{fn} operand")

    def run(env, mask):
        warps = _warps(launch, mask, fn)
        h, off = _reg_offset(launch, name, idx, env, 1, fn)
        lanes = _active_lanes(warps)
        vals = _read_regs(launch, h, off, 1, lanes, fn)[:, 0].reshape(-1, 4)
        r = minmax.MAX.reduce(vals, axis=1) if fn == "quad_max" else \
            (vals[:, 0] + vals[:, 1]) + (vals[:, 2] + vals[:, 3])
        _write_regs(h, off, np.repeat(r.astype(h.data.dtype), 4)[:, None], lanes)
    return run


def _active_lanes(warps):
    return None if warps is None else np.repeat(warps, WARP)


def _ldmatrix(launch, call: ir.Call):
    """ldmatrix_x{1,2,4}[_trans](dst fragment Ref, src shared Ref): each lane
    gives the address of one 8-element row (lanes 8q..8q+7: matrix q)."""
    fn = call.fn
    parts = fn.split("_")
    count = int(parts[1][1:])
    trans = parts[-1] == "trans"
    dst, didx = _ref(launch, call.args[0], f"{fn} destination")
    src, sidx = _ref(launch, call.args[1], f"{fn} source")
    n = 2 * count
    # per element e of the result: (the lane that gave the row address, the column in
    # that row) for each lane of a warp; fixed by the instruction, so worked out once
    # here rather than per run (evaluating the layout for every lane took most of a
    # tensor-core kernel's sim time)
    sources = [tuple(np.array(x) for x in zip(*(ldmatrix_source(l, e, trans)
                                                 for l in range(WARP)))) for e in range(n)]

    def run(env, mask):
        warps = _warps(launch, mask, fn)
        lanes = _active_lanes(warps)
        hd, doff = _reg_offset(launch, dst, didx, env, n, fn)
        hs = launch.mem.get(src)
        if hs is None or hs.buf.scope != "shared":
            raise SimError(f"kernel {launch.kname}: {fn} source '{src}' is not a shared buffer")
        vals = [f(env, lanes) for f in sidx]
        _, addr = launch.offsets(src, vals, hs.shape, lanes, "read of")
        addr = np.broadcast_to(np.asarray(addr, np.int64), (launch.L,))
        elem = hs.buf.dtype.numpy.itemsize
        # lanes that give a row address: 8 per matrix
        giving = (launch.lane % WARP) < 8 * count
        if lanes is not None:
            giving &= lanes
        bad = giving & ((addr * elem) % 16 != 0)
        if bad.any():
            lane = int(np.argmax(bad))
            raise SimError(f"kernel {launch.kname}: {fn} row address of thread "
                           f"{launch._thread(lane)} (block {launch._block(lane)}) is element "
                           f"{int(addr[lane])} of {src}, not 16-byte aligned")
        base = launch.lane - launch.lane % WARP
        out = np.empty((launch.L, n), hs.buf.dtype.numpy)
        j = launch.lane % WARP
        for e in range(n):
            sl, col = sources[e]
            flat = addr[base + sl[j]] + col[j]
            out[:, e] = launch.load_shared(src, hs, [flat], lanes)
        _write_regs(hd, doff, out, lanes)
    return run


def _mma(launch, call: ir.Call):
    """mma_m16n8k16(D, A, B, C): D = A @ B + C per warp; A 16x16 and B 16x8 of
    bfloat16 or float16, C and D float32, with MMA_A/MMA_B/MMA_C's layouts.
    The products are exact in float32; the sum is formed in float64 and
    rounded once to float32 (the GPU's order of additions is unspecified)."""
    fn = call.fn
    refs = [_ref(launch, a, f"{fn} operand {w}") for a, w in zip(call.args, "DABC")]

    def run(env, mask):
        warps = _warps(launch, mask, fn)
        lanes = _active_lanes(warps)
        (hd, d), (ha, a), (hb, b), (hc, c) = [
            _reg_offset(launch, name, idx, env, n, fn)
            for (name, idx), n in zip(refs, (4, 8, 4, 4))]
        for h, want in ((ha, "16-bit"), (hb, "16-bit"), (hc, "float32"), (hd, "float32")):
            ok = h.buf.dtype in (dtypes.bfloat16, dtypes.float16) if want == "16-bit" else \
                h.buf.dtype == dtypes.float32
            if not ok:
                raise SimError(f"kernel {launch.kname}: {fn} operand {h.buf.name} is "
                               f"{h.buf.dtype}, needs {want}")
        if ha.buf.dtype != hb.buf.dtype:
            raise SimError(f"kernel {launch.kname}: {fn} A is {ha.buf.dtype} but B is "
                           f"{hb.buf.dtype}")
        nw = launch.L // WARP
        av = _read_regs(launch, ha, a, 8, lanes, fn).astype(np.float64).reshape(nw, WARP, 8)
        bv = _read_regs(launch, hb, b, 4, lanes, fn).astype(np.float64).reshape(nw, WARP, 4)
        cv = _read_regs(launch, hc, c, 4, lanes, fn).astype(np.float64).reshape(nw, WARP, 4)
        am = np.zeros((nw, 16, 16))
        bm = np.zeros((nw, 16, 8))
        cm = np.zeros((nw, 16, 8))
        am[:, _A_ROW, _A_COL] = av
        bm[:, _B_ROW, _B_COL] = bv
        cm[:, _C_ROW, _C_COL] = cv
        dm = (am @ bm + cm).astype(np.float32)
        _write_regs(hd, d, dm[:, _C_ROW, _C_COL].reshape(launch.L, 4), lanes)
    return run
