"""The sim's warpgroup MMA (lower/intrinsics_sm90.py): `wgmma_m64n{N}k16_bf16`
on the four warps (128 threads) of a warpgroup, asynchronous.

    wgmma_fence()                            (orders register accesses: nothing to do here)
    wgmma_m64nNk16_bf16(&acc[i], &A_s[a], &B_s[b], scale_d, trans_a, trans_b)
                                             D = A . B^T + (scale_d ? D : 0)
    (and _f16: float16 inputs; wgmma_m64nNk32_{e4m3,e5m2}[_{e4m3,e5m2}]: fp8
    inputs, K = 32, A's type then B's where they differ; K-major only)
    wgmma_commit()                           close the warpgroup's group of wgmma
    wgmma_wait(n)                            all but the n newest groups complete

A: 64 rows x 16 columns, B: N rows x 16 columns (fp8: 32 columns, rows of 128
values: the same 32 bytes of K per row), K-major tiles of 128-byte
rows in the 128-byte swizzle (Buffer.layout = Swizzle(128)) starting at the
reference (a row that is a multiple of 8; column 0, 16, 32 or 48), read
through the buffer's layout exactly as flatten.py addresses it. With
trans_a / trans_b = 1 the operand is MN-major: 16 rows (K) of 64 columns
(M or N) from the reference (column 0, a row that is a multiple of 8), one
such block per 64 of M or N, the blocks consecutive in the buffer's
dimension -3 (a buffer (..., blocks, K, 64)). D: the
accumulator registers from `acc[i]` on, N / 2 per thread, in the wgmma
m64nNk16 layout: register r of thread t of the warpgroup holds row
(t/32)*16 + (t%32)/4 + 8*((r/2)%2), column (r/4)*8 + (t%4)*2 + r%2.

The operands are read when the wgmma is issued (they must be readable then:
written, TMA data of an observed phase, generic writes fenced), and count as
being read until its group's wait (a write into them before is reported).
The product is one float64 matrix product per instruction, rounded to
float32 (exact products; the GPU's order of float32 additions is
unspecified). The accumulators are written at the wait: a read or write of
them before (a missing wgmma_wait, or one before the commit) is reported.
"""
from __future__ import annotations

import numpy as np

from ..arch.fragments import WGMMA_A_K16, wgmma_d
from ..errors import SimError
from ..lang import dtypes
from ..lower import ir
from ..lower.intrinsics_sm90 import WGMMA_FP8, WGMMA_N, wgmma_intrinsic, wgmma_types
from .memory import Local, Shared
from .mbarriers import uniform
from .sync import ALWAYS, INFLIGHT, group_count, sync_of
from .tma import check_async_read, tile_offsets

WARPGROUP = 128
_LAYOUTS: dict = {}
_DTYPES = {"bf16": dtypes.bfloat16, "f16": dtypes.float16, "e4m3": dtypes.float8_e4m3fn,
           "e5m2": dtypes.float8_e5m2}


def accumulator_layout(n: int):
    """(row, column) of register r of thread t: two (128, n / 2) arrays (the
    one definition, arch/fragments.py's wgmma_d)."""
    hit = _LAYOUTS.get(n)
    if hit is None:
        hit = _LAYOUTS[n] = wgmma_d(n).table()
    return hit


class Queue:
    """A warpgroup's wgmma in flight: the open group and committed groups."""

    def __init__(self):
        self.open, self.committed = [], []


def warpgroups(ex, mask, fn: str) -> list[int]:
    """The active warpgroups (whole ones: every thread takes part)."""
    if ex.T % WARPGROUP:
        raise SimError(f"kernel {ex.kname}: warpgroup-collective {fn} in a block of {ex.T} threads "
                       f"(a multiple of 128 is needed)")
    if mask is None:
        return list(range(ex.L // WARPGROUP))
    m = mask.reshape(-1, WARPGROUP)
    some, every = m.any(axis=1), m.all(axis=1)
    if (some & ~every).any():
        w = int(np.argmax(some & ~every))
        raise SimError(f"kernel {ex.kname}: warpgroup-collective {fn} reached by only "
                       f"{int(m[w].sum())} of the 128 threads of warpgroup {w} (block "
                       f"{ex._block(0)}); every thread of a warpgroup must execute it")
    return [int(w) for w in np.flatnonzero(every)]


def _operand(ex, name, where, rows, fn, what, dtype, mn_major):
    """The shared tile of operand `what` and its flat offsets, in the order
    of a (rows x kc) K-major matrix (kc: 16 16-bit or 32 fp8 values, 32
    bytes); `where(h)` gives its first element."""
    h = ex.mem.get(name)
    lay = getattr(getattr(h, "buf", None), "layout", None)
    row, kc = 1024 // dtype.bits, 256 // dtype.bits  # values per 128-byte row, per wgmma
    if not isinstance(h, Shared) or h.buf.dtype != dtype or lay is None or \
            lay.span != 128 or h.shape[-1] != row:
        raise SimError(f"kernel {ex.kname}: {fn} operand {what} '{name}' must be a shared "
                       f"{dtype} tile of 128-byte rows ({row} elements) in the 128-byte "
                       f"swizzle (Buffer.layout = Swizzle(128))")
    if mn_major and dtype.is_fp8:
        raise SimError(f"kernel {ex.kname}: {fn} operand {what} '{name}': an fp8 wgmma "
                       f"operand is K-major only (trans_a = trans_b = 0)")
    d = where(h)
    r0, col = divmod(d, row)
    if not mn_major:
        if r0 % 8 or col % kc:
            raise SimError(f"kernel {ex.kname}: {fn} operand {what} starts at element ({r0}, "
                           f"{col}) of {name}: a wgmma tile starts at a row that is a multiple "
                           f"of 8 and a column that is a multiple of {kc}")
        f = tile_offsets(ex, name, h, d, rows, kc, fn)
    else:
        k_rows = int(h.shape[-2]) if len(h.shape) >= 3 else 0
        if not k_rows or r0 % 8 or col or (r0 % k_rows) + 16 > k_rows:
            raise SimError(f"kernel {ex.kname}: {fn} MN-major operand {what} starts at element "
                           f"({r0}, {col}) of {name} {tuple(h.shape)}: an MN-major wgmma tile is "
                           f"16 rows of K from a row that is a multiple of 8, column 0, in a "
                           f"buffer (..., blocks, K, 64)")
        f = np.concatenate([tile_offsets(ex, name, h, d + j * k_rows * 64, 16, 64, fn)
                            .reshape(16, 64).T for j in range(rows // 64)]).reshape(-1)
    check_async_read(ex, name, h, f, "wgmma")
    return h, f


_A_ROW, _A_COL = WGMMA_A_K16.table()


def _register_a(ex, fn, a_ref, idx, env, mask, lanes, dtype, flat):
    """A in registers (wgmma_rs_*): the warpgroup's 8 values per thread from
    `a_ref` on, placed by the WGMMA_A_K16 layout into a 64 x 16 matrix."""
    h = ex.mem.get(a_ref.buffer)
    if type(h) is not Local or h.buf.dtype != dtype:
        raise SimError(f"kernel {ex.kname}: {fn} operand A '{a_ref.buffer}' must be {dtype} "
                       f"registers (a local buffer) allocated here")
    off = flat(a_ref.buffer, h, idx, env, mask, lanes)
    if off < 0 or off + 8 > h.size:
        raise SimError(f"kernel {ex.kname}: {fn} operand A {a_ref.buffer}[{off}:{off + 8}] "
                       f"outside its {h.size} registers")
    if not h.written[lanes, off:off + 8].all():
        raise SimError(f"kernel {ex.kname}: {fn} reads A registers {a_ref.buffer}[{off}:"
                       f"{off + 8}] before every thread of the warpgroup wrote them")
    if h.pending is not None and (h.pending[lanes, off:off + 8] > 0).any():
        raise SimError(f"kernel {ex.kname}: {fn} reads A registers {a_ref.buffer}[{off}:"
                       f"{off + 8}] that a wgmma in flight writes")
    a = np.zeros((64, 16))
    a[_A_ROW, _A_COL] = h.data[lanes, off:off + 8].astype(np.float64)
    return a


def _mma(ex, s):
    fn = s.call.fn
    n, kc, ta, tb = wgmma_types(fn)
    regs = n // 2
    dtype, b_dtype = _DTYPES[ta], _DTYPES[tb]
    rs = fn.startswith("wgmma_rs_")
    if rs:
        d_ref, a_ref, b_ref, scale, trans_b = s.call.args
        trans_a = ir.Imm(0, dtypes.int32)
    else:
        d_ref, a_ref, b_ref, scale, trans_a, trans_b = s.call.args
    trans = []
    for t, w in ((trans_a, "trans_a"), (trans_b, "trans_b")):
        if not isinstance(t, ir.Imm) or int(t.value) not in (0, 1):
            raise SimError(f"kernel {ex.kname}: {fn} {w} must be the constant 0 or 1")
        trans.append(bool(int(t.value)))
    for r, w in ((d_ref, "D"), (a_ref, "A"), (b_ref, "B")):
        if not isinstance(r, ir.Ref):
            raise SimError(f"kernel {ex.kname}: {fn} operand {w} must be a reference")
    idx = [[ex.compile_expr(i) for i in r.indices] for r in (d_ref, a_ref, b_ref)]
    scale_f = ex.compile_expr(scale)
    row, col = accumulator_layout(n)

    def flat(name, h, fns, env, mask, lanes):
        vals = [f(env, mask) for f in fns]
        _, off = ex.offsets(name, vals, h.shape, mask, f"{fn} operand")
        return uniform(ex, np.broadcast_to(np.asarray(off, np.int64), (ex.L,)), lanes,
                       f"{fn}'s address of {name}")

    def mma(env, mask):
        sync = sync_of(ex)
        for wg in warpgroups(ex, mask, fn):
            lanes = np.arange(wg * WARPGROUP, (wg + 1) * WARPGROUP)
            hd = ex.mem.get(d_ref.buffer)
            if type(hd) is not Local or hd.buf.dtype != dtypes.float32:
                raise SimError(f"kernel {ex.kname}: {fn} accumulators '{d_ref.buffer}' must be "
                               f"float32 registers (a local buffer) allocated here")
            off = flat(d_ref.buffer, hd, idx[0], env, mask, lanes)
            if off < 0 or off + regs > hd.size:
                raise SimError(f"kernel {ex.kname}: {fn} accumulators {d_ref.buffer}[{off}:"
                               f"{off + regs}] outside its {hd.size} registers")
            if rs:
                a = _register_a(ex, fn, a_ref, idx[1], env, mask, lanes, dtype, flat)
            else:
                ha, fa = _operand(ex, a_ref.buffer, lambda h: flat(a_ref.buffer, h, idx[1], env,
                                                                   mask, lanes), 64, fn, "A",
                                    dtype, trans[0])
                a = ha.fdata[fa].astype(np.float64).reshape(64, kc)
            hb, fb = _operand(ex, b_ref.buffer, lambda h: flat(b_ref.buffer, h, idx[2], env,
                                                               mask, lanes), n, fn, "B",
                                b_dtype, trans[1])
            acc = uniform(ex, scale_f(env, mask), lanes, f"{fn}'s scale_d") != 0
            b = hb.fdata[fb].astype(np.float64).reshape(n, kc)
            dm = a @ b.T
            if acc:
                cur = _current(ex, hd, off, regs, lanes, fn)
                c = np.zeros((64, n))
                c[row, col] = cur
                dm = dm + c
            out = dm.astype(np.float32)[row, col]
            if hd.pending is None:
                hd.pending = np.zeros(hd.data.shape, np.int32)
                hd.pending_data = np.zeros_like(hd.data)
            hd.pending[lanes, off:off + regs] += 1
            hd.pending_data[lanes, off:off + regs] = out
            hd.full.difference_update(range(off, off + regs))
            shared = ((hb, fb),) if rs else ((ha, fa), (hb, fb))
            for h, f in shared:
                h.proxy.stamp_reads(sync, f, INFLIGHT)
            q = sync.wgmma.setdefault(wg, Queue())
            q.open.append((hd, off, regs, lanes, out, shared))
            if rs:  # the A registers are read until the wait: not to be written before it
                ha = ex.mem.get(a_ref.buffer)
                aoff = flat(a_ref.buffer, ha, idx[1], env, mask, lanes)
                if ha.pending is None:
                    ha.pending = np.zeros(ha.data.shape, np.int32)
                    ha.pending_data = np.zeros_like(ha.data)
                ha.pending[lanes, aoff:aoff + 8] += 1
                q.open.append((ha, aoff, 8, lanes, None, ()))
    return mma


def _current(ex, hd, off, regs, lanes, fn):
    """The accumulators a wgmma with scale_d adds to: the value of the wgmma
    in flight on them, or the registers (which must be written)."""
    pend = hd.pending[lanes, off:off + regs] > 0 if hd.pending is not None else None
    vals = hd.data[lanes, off:off + regs].copy()
    if pend is not None and pend.any():
        vals[pend] = hd.pending_data[lanes, off:off + regs][pend]
    written = hd.written[lanes, off:off + regs] | (pend if pend is not None else False)
    if not written.all():
        raise SimError(f"kernel {ex.kname}: {fn} accumulates (scale_d = 1) into "
                       f"{hd.buf.name}[{off}:{off + regs}] before every register was written "
                       f"(the first wgmma of a tile takes scale_d = 0)")
    return vals


def _commit(ex, s):
    def commit(env, mask):
        sync = sync_of(ex)
        for wg in warpgroups(ex, mask, "wgmma_commit"):
            q = sync.wgmma.setdefault(wg, Queue())
            q.committed.append(q.open)
            q.open = []
    return commit


def _wait(ex, s):
    keep = group_count(ex.kname, s.call)

    def wait(env, mask):
        groups = warpgroups(ex, mask, "wgmma_wait")
        yield ALWAYS  # the tensor cores take their time: the other tasks go first
        sync = sync_of(ex)
        for wg in groups:
            q = sync.wgmma.get(wg)
            while q is not None and len(q.committed) > keep:
                for hd, off, regs, lanes, out, reads in q.committed.pop(0):
                    hd.pending[lanes, off:off + regs] -= 1
                    if out is None:  # A registers read by a wgmma_rs: released
                        continue
                    hd.data[lanes, off:off + regs] = out
                    hd.written[lanes, off:off + regs] = True
                    for h, f in reads:
                        h.proxy.stamp_reads(sync, f, sync.stamp())
    return wait


def _fence(ex, s):
    def fence(env, mask):
        warpgroups(ex, mask, "wgmma_fence")
    return fence


def pending_registers(ex, name, h, off, lanes, what: str) -> None:
    """Hook of load_local/store_local (memory.py): a register a wgmma in
    flight writes is neither read nor written."""
    p = h.pending[lanes, off] if np.ndim(off) == 0 else h.pending[lanes, off[lanes]]
    if (p > 0).any():
        lane = int(lanes[int(np.argmax(p > 0))])
        i = int(off) if np.ndim(off) == 0 else int(off[lane])
        raise SimError(f"kernel {ex.kname}: {what} local {name}[{i}] (thread "
                       f"{ex._thread(lane)}) while a wgmma writing it is in flight: its "
                       f"accumulators are written at the wgmma_wait of its group (a "
                       f"wgmma_commit and wgmma_wait before this access are missing)")


RULES = {"wgmma_fence": _fence, "wgmma_commit": _commit,
         **{f"wgmma{rs}_m64n{n}k16_{t}": _mma for n in WGMMA_N for t in ("bf16", "f16")
            for rs in ("", "_rs")},
         **{wgmma_intrinsic(n, _DTYPES[a], _DTYPES[b]): _mma for n in WGMMA_N
            for a in WGMMA_FP8 for b in WGMMA_FP8}}
BLOCKING = {"wgmma_wait": _wait}
