"""The sim's meaning of asynchronous copies (`cp.async`): a copy from global
to shared memory is a pending write that lands when a `cp_async_wait(n)`
completes its commit group, so a read (or an ordinary write) of its
destination before that is reported, as is a copy whose group is never
waited for and whose destination is read anyway.

    cp_async(&S[i], &G[j], bytes, src_bytes)  copy `bytes` bytes (4, 8 or 16) of G from
                                              element j to S from element i; only the
                                              first `src_bytes` are read, the rest of
                                              the destination is zero-filled
    cp_async_commit()                         close the group of copies issued so far
    cp_async_wait(n)                          land every committed group but the n newest

The values are read from global memory when the copy is issued (tcomp kernels
do not write what they copy asynchronously in the same launch). The queue is
per batch of blocks; all threads of a block issue, commit and wait together
(the copies of inactive lanes are not issued).
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import ir
from .memory import Shared
from .sync import group_count


def compile_call(launch, call: ir.Call):
    """A closure for an asynchronous-copy intrinsic, or None for another call."""
    if call.fn == "cp_async":
        return _copy(launch, call)
    if call.fn == "cp_async_commit":
        def commit(env, mask):
            q = _queue(launch)
            q["committed"].append(q["open"])
            q["open"] = []
        return commit
    if call.fn == "cp_async_wait":
        keep = group_count(launch.kname, call)

        def wait(env, mask):
            q = _queue(launch)
            while len(q["committed"]) > keep:
                for land in q["committed"].pop(0):
                    land()
        return wait
    return None


def _queue(launch):
    """This batch's queue: the open group and the committed groups, oldest first."""
    q = getattr(launch, "_async", None)
    if q is None or q["batch"] is not launch.batch:
        q = launch._async = {"batch": launch.batch, "open": [], "committed": []}
    return q


def pending_of(h, blocks_size):
    """The pending-write flags of shared buffer handle `h` (made on first use)."""
    p = getattr(h, "pending", None)
    if p is None:
        p = h.pending = np.zeros(blocks_size, bool)
    return p


def _unordered(launch, name, hd, shared_flat, n, mask):
    """Report a copy issued into an element another thread read or wrote since
    the block's last barrier: the hardware may write it at any moment until
    the wait, so landing after a later barrier does not order it. (Checked
    here, at the issue: when the copy lands, that barrier has already
    cleared the trackers.)"""
    lanes = launch.lane if mask is None else np.flatnonzero(mask)
    tid = launch.tid[lanes]
    for e in range(n):
        f = shared_flat[lanes] + e
        for table, what in ((hd.freader, "read"), (hd.fwriter, "wrote")):
            marks = table[f]
            bad = Shared.foreign(marks, tid)
            if bad.any():
                j = int(np.argmax(bad))
                lane = int(lanes[j])
                other = Shared.who(launch, marks[j], lane, tid[j])
                raise SimError(f"kernel {launch.kname}: thread {launch._thread(lane)} issues a "
                               f"cp_async to shared {name} at offset {int(f[j]) % hd.size} that "
                               f"{other} {what} since the last barrier (missing barrier before "
                               f"the copy) in block {launch._block(lane)}")


def _copy(launch, call: ir.Call):
    dst, src, nbytes, src_bytes = call.args
    if not (isinstance(dst, ir.Ref) and isinstance(src, ir.Ref) and isinstance(nbytes, ir.Imm)):
        raise SimError(f"kernel {launch.kname}: cp_async takes (&shared[...], &global[...], "
                       f"constant bytes, source bytes)")
    nb = int(nbytes.value)
    if nb not in (4, 8, 16):
        raise SimError(f"kernel {launch.kname}: cp_async copies 4, 8 or 16 bytes, not {nb}")
    didx = [launch.compile_expr(i) for i in dst.indices]
    sidx = [launch.compile_expr(i) for i in src.indices]
    sbytes = launch.compile_expr(src_bytes)

    def issue(env, mask):
        hd = launch.mem.get(dst.buffer)
        if hd is None or hd.buf.scope != "shared":
            raise SimError(f"kernel {launch.kname}: cp_async destination '{dst.buffer}' is not a "
                           f"shared buffer")
        arr = launch.globals.get(src.buffer)
        if arr is None:
            raise SimError(f"kernel {launch.kname}: cp_async source '{src.buffer}' is not a "
                           f"global buffer")
        if arr.dtype != hd.buf.dtype.numpy:
            raise SimError(f"kernel {launch.kname}: cp_async copies bytes: {src.buffer} "
                           f"({arr.dtype}) and {dst.buffer} ({hd.buf.dtype}) differ in type")
        item = hd.buf.dtype.numpy.itemsize
        n = nb // item
        sb = np.broadcast_to(np.asarray(sbytes(env, mask), np.int64), (launch.L,))
        reading = sb > 0 if mask is None else (sb > 0) & mask
        _, doff = launch.offsets(dst.buffer, [f(env, mask) for f in didx], hd.shape, mask,
                                 "cp_async to")
        doff = np.broadcast_to(np.asarray(doff, np.int64), (launch.L,))
        bad = (doff * item) % nb != 0
        if mask is not None:
            bad &= mask
        if bad.any():
            lane = int(np.argmax(bad))
            raise SimError(f"kernel {launch.kname}: cp_async of {nb} bytes to {dst.buffer} at "
                           f"element {int(doff[lane])}, not {nb}-byte aligned (thread "
                           f"{launch._thread(lane)})")
        svals = [f(env, mask) for f in sidx]
        _, soff = launch.offsets(src.buffer, svals, arr.shape, reading, "cp_async from")
        soff = np.broadcast_to(np.asarray(soff, np.int64), (launch.L,))
        flat = arr.reshape(-1)
        vals = np.zeros((launch.L, n), arr.dtype)
        for e in range(n):
            ok = reading & (sb > e * item)
            idx = np.where(ok, soff + e, 0)
            if ok.any() and (idx[ok] >= flat.size).any():
                lane = int(np.argmax(ok & (idx >= flat.size)))
                raise SimError(f"kernel {launch.kname}: cp_async reads {src.buffer} at flat "
                               f"offset {int(idx[lane])}, past its {flat.size} elements (thread "
                               f"{launch._thread(lane)}, block {launch._block(lane)})")
            vals[:, e] = np.where(ok, flat[idx], 0)
        shared_flat = launch._shared_flat(hd, doff)
        _unordered(launch, dst.buffer, hd, shared_flat, n, mask)
        pend = pending_of(hd, hd.fdata.size)
        lanes = slice(None) if mask is None else mask
        for e in range(n):
            pend[shared_flat[lanes] + e] = True
        snapshot_mask = None if mask is None else mask.copy()

        def land():
            for e in range(n):
                pend[shared_flat[lanes] + e] = False
                launch.store_shared(dst.buffer, hd, doff + e, vals[:, e], snapshot_mask)
        _queue(launch)["open"].append(land)
    return issue
