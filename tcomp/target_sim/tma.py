"""The sim's tensor memory accelerator (TMA) and the async proxy's view of
shared memory (lower/intrinsics_sm90.py).

    tma_load_2d(&S[d], map, &bar, c0, c1)   box of `map`'s buffer at rows c0.., columns
                                            c1.. (outermost first) into S from element d
    tma_load_im2col_4d(&S[d], map, &bar, n, h, w, c, off_h, off_w)
                                            an im2col map's (ir.Im2col) pixels x channels:
                                            consecutive window starts from (n, h, w), each
                                            pixel read at start + (off_h, off_w)
    tma_store_2d(map, &S[d], c0, c1)        the box at S[d] into the buffer (a bulk group)
    tma_store_commit()                      close the thread's group of stores
    tma_store_wait(n)                       all but the n newest groups are done
    fence_proxy_async()                     this thread's shared writes so far are
                                            visible to the async proxy

A box lands where flattening (lower/flatten.py) addresses its elements: row
r, column j of the destination tile (whose first element is S[d], at the
start of a row) at the buffer's row-major offset with its layout's swizzle
(ir.Swizzle) applied, so the tensor map's box width must be the buffer's
row and its swizzle the buffer's layout. A load reads its box when issued
(elements outside the tensor read as zero), writes it into shared memory and
delivers its bytes to the mbarrier; the data counts as landed for the phase
in progress, and only a task that waited for that phase may read it (global
memory a load reads is not race-checked: tcomp kernels do not write what they
load by TMA in the same launch). A store
reads its box of shared memory when issued and writes global memory (the
elements inside the tensor) at its group's wait, or at the block's end.

Checked (SimError): a read of a TMA destination by a task that has not
observed the phase its copy completes on (a missing wait, or a wrong
parity that returned for an older phase), a consumer's data overwritten by
a later load before it released the slot (the producer did not wait for
the slot's empty barrier), a load into elements whose readers (other tasks,
or an in-flight wgmma) are not ordered before it, a generic write of a
store's source before its `tma_store_wait`, and an async-proxy read (TMA
store, wgmma) of a generic write that its writing thread did not follow
with `fence_proxy_async`.
"""
from __future__ import annotations

import numpy as np

from ..errors import SimError
from ..lower import ir
from .memory import NOBODY, Shared, element
from .mbarriers import barrier_args, deliver
from .sync import ALWAYS, INFLIGHT, group_count, sync_of


class ProxyState:
    """What the async proxy needs to know of one shared buffer of the block."""

    def __init__(self, h: Shared):
        n = h.fdata.size
        self.landed = np.full(n, -1, np.int32)        # barrier id of the load that wrote it
        self.phase = np.full(n, -1, np.int64)         # ... and the phase it completes on
        self.prev_phase = np.full(n, -1, np.int64)    # the phase of the load before
        self.reads: dict = {}                         # task -> read stamp per element
        self.gw_lane = np.full(n, -1, np.int32)       # the thread of the last generic write
        self.gw_fence = np.zeros(n, np.int64)         # ... its fence count then
        self.store_src = np.zeros(n, np.int32)        # in-flight TMA stores reading it

    def stamp_reads(self, sync, f, stamp) -> None:
        t = sync.task
        if t is not None:
            r = self.reads.get(t.index)
            if r is None:
                r = self.reads[t.index] = np.full(self.landed.size, -1, np.int64)
            r[f] = stamp

    def generic_read(self, ex, name, h, f) -> None:
        """Hook of load_shared (memory.py): an ordinary read of elements `f`."""
        check_landed(ex, name, h, f, "read of")
        sync = sync_of(ex)
        self.stamp_reads(sync, f, sync.stamp())

    def generic_write(self, ex, name, h, f, lanes) -> None:
        """Hook of store_shared (memory.py): threads `lanes` write elements `f`."""
        _check_overwrite(ex, name, h, f, f"thread {ex._thread(int(lanes[0]))} writes")
        self.landed[f] = -1
        self.gw_lane[f] = lanes
        self.gw_fence[f] = sync_of(ex).fences[lanes]


def _at(h, f):
    return element(h.shape, int(f) % max(h.size, 1))


# ------------------------------------------------------------------ checks
def check_landed(ex, name, h, f, what: str) -> None:
    """The running task (or lock-step code) may read elements `f`: every TMA
    load that wrote them completed on a phase it observed."""
    px = h.proxy
    ids = px.landed[f]
    if not (ids >= 0).any():
        return
    sync = sync_of(ex)
    for bid in np.unique(ids[ids >= 0]):
        sel = ids == bid
        need = px.phase[f][sel]
        seen = sync.seen(int(bid))
        if (need <= seen).all():
            continue
        j = int(np.flatnonzero(sel)[int(np.argmax(need > seen))])
        ph, bar = int(px.phase[f][j]), sync.bar_names[int(bid)]
        who = "" if sync.task is None else f" by {sync.task.describe()}"
        head = (f"kernel {ex.kname}: {what} shared {name}{_at(h, f[j])}{who} before the TMA "
                f"load to it completed: the load completes phase {ph} (parity {ph % 2}) of "
                f"mbarrier {bar}")
        if seen >= 0 and int(px.prev_phase[f][j]) == seen:
            raise SimError(f"{head}, but this task waited for phase {seen} and read the data "
                           f"of that phase, which a later load overwrote: the ring slot was "
                           f"overwritten before its consumer released it (the producer must "
                           f"wait on the slot's empty barrier before loading into it)")
        last = sync.last_wait.get((sync.observer(), int(bid)))
        if last is None:
            raise SimError(f"{head}, and the reader never waited on {bar} (a missing "
                           f"mbarrier_wait)")
        p, q = last
        state = " (the barrier's initial state: it returned at once)" if q < 0 else ""
        raise SimError(f"{head}, but the reader's last mbarrier_wait on {bar} was for parity "
                       f"{p}, which returned for phase {q}{state}: a wrong parity (it must be "
                       f"{ph % 2} for phase {ph})")


def check_async_read(ex, name, h, f, what: str) -> None:
    """An async-proxy read (TMA store source, wgmma operand) of elements `f`."""
    px = h.proxy
    if not h.fwritten[f].all():
        j = int(np.argmax(~h.fwritten[f]))
        raise SimError(f"kernel {ex.kname}: {what} reads shared {name}{_at(h, f[j])}, which "
                       f"nothing wrote")
    check_landed(ex, name, h, f, f"{what} reads")
    lanes = px.gw_lane[f]
    generic = lanes >= 0
    if generic.any():
        sync = sync_of(ex)
        stale = generic & (sync.fences[np.maximum(lanes, 0)] <= px.gw_fence[f])
        if stale.any():
            j = int(np.argmax(stale))
            raise SimError(f"kernel {ex.kname}: {what} reads shared {name}{_at(h, f[j])}, written "
                           f"by thread {ex._thread(int(lanes[j]))} with ordinary stores and no "
                           f"fence_proxy_async after them: the async proxy may not see the "
                           f"write (a fence_proxy_async between the writes and the barrier "
                           f"before the {what} is missing)")


def _check_overwrite(ex, name, h, f, what: str) -> None:
    """A write (TMA load or generic store) of elements `f`, by the running
    task: nobody's reads of them may be unordered before it."""
    px, sync = h.proxy, sync_of(ex)
    if px.store_src[f].any():
        j = int(np.argmax(px.store_src[f] > 0))
        raise SimError(f"kernel {ex.kname}: {what} shared {name}{_at(h, f[j])} while a TMA store "
                       f"reading it is in flight (a tma_store_wait for its group is missing "
                       f"before the write)")
    for u, stamps in px.reads.items():
        s = stamps[f]
        bad = ~sync.ordered_before_me(u, s)
        if bad.any():
            j = int(np.argmax(bad))
            reader = sync.task_named(u)
            if s[j] == INFLIGHT:
                ring = ": the ring slot was overwritten before its consumer released it (it " \
                       "must arrive on the slot's empty barrier after its wgmma_wait)" \
                    if what.startswith("a TMA load") else ""
                raise SimError(f"kernel {ex.kname}: {what} shared {name}{_at(h, f[j])} while a "
                               f"wgmma of {reader} reads it (before its wgmma_wait){ring}")
            raise SimError(f"kernel {ex.kname}: {what} shared {name}{_at(h, f[j])} that "
                           f"{reader} read, and its release (an mbarrier arrive) is not ordered "
                           f"before this write: the ring slot was overwritten before its "
                           f"consumer released it")


# ------------------------------------------------------------------ boxes
def tile_offsets(ex, name, h, d: int, rows: int, cols: int, fn: str) -> np.ndarray:
    """Flat offsets (rows x cols) of the tile of shared buffer `h` whose first
    element is flat offset `d`, as flatten.py lays the buffer out."""
    b = h.buf
    W = int(h.shape[-1]) if h.shape else 1
    total_rows = h.size // max(W, 1)
    item = b.dtype.numpy.itemsize
    r0, col = divmod(int(d), W)
    lay = b.layout
    n = g = e = 1
    if lay is not None:
        n, g = lay.chunks(W * item)
        e = 16 // item
        col = ((col // e) ^ ((r0 // g) % n)) * e + col % e
    if col + cols > W or r0 + rows > total_rows or d < 0:
        raise SimError(f"kernel {ex.kname}: {fn}: a tile of {rows} x {cols} at element "
                       f"({r0}, {col}) of {name} (rows of {W}) does not fit in the buffer")
    r = r0 + np.arange(rows, dtype=np.int64)[:, None]
    j = col + np.arange(cols, dtype=np.int64)[None, :]
    if lay is not None:
        j = ((j // e) ^ ((r // g) % n)) * e + j % e
    return (r * W + j).reshape(-1)


def _map_and_tile(ex, fn, map_e, ref, idx, env, mask, lane):
    """(TensorMap, global array, shared handle, flat offsets of the tile) of
    one copy; `idx`: the compiled subscripts of `ref`."""
    if not isinstance(map_e, ir.Var) or map_e.name not in ex.tensor_maps:
        raise SimError(f"kernel {ex.kname}: {fn} names {map_e}, which is not a tensor map "
                       f"parameter of the kernel")
    m = ex.tensor_maps[map_e.name]
    arr = ex.globals.get(m.buffer)
    rank = 3 if fn.endswith("_3d") else 2
    if fn.endswith("_im2col_4d"):
        if m.im2col is None or not isinstance(arr, np.ndarray) or arr.ndim != 4:
            raise SimError(f"kernel {ex.kname}: {fn} through {m.name}: an im2col copy needs an "
                           f"im2col tensor map over a 4-D buffer ('{m.buffer}')")
    elif m.im2col is not None:
        raise SimError(f"kernel {ex.kname}: {fn} through {m.name}, an im2col tensor map: "
                       f"its copies are tma_load_im2col_4d")
    elif not isinstance(arr, np.ndarray) or arr.ndim != rank or len(m.box) != rank or \
            (rank == 3 and m.box[0] != 1):
        raise SimError(f"kernel {ex.kname}: {fn} through {m.name}: a {rank}-D copy needs a "
                       f"{rank}-D box over a {rank}-D buffer ('{m.buffer}')"
                       + (", the box 1 in the outermost dimension" if rank == 3 else ""))
    _encodable(ex, m, arr)
    h = ex.mem.get(ref.buffer)
    if not isinstance(h, Shared):
        raise SimError(f"kernel {ex.kname}: {fn}'s shared operand '{ref.buffer}' is not a shared "
                       f"buffer allocated here")
    b = h.buf
    W = int(h.shape[-1]) if h.shape else 1
    span = 0 if b.layout is None else b.layout.span
    if m.box[-1] != W or m.swizzle != span or arr.dtype != b.dtype.numpy:
        raise SimError(f"kernel {ex.kname}: tensor map {m.name} (box {list(m.box)}, swizzle "
                       f"{m.swizzle}, {m.buffer}: {arr.dtype}) does not agree with shared "
                       f"{ref.buffer} (rows of {W} {b.dtype} elements, swizzle {span}): the "
                       f"box's width must be the buffer's row and the swizzles equal")
    vals = [i(env, mask) for i in idx]
    _, off = ex.offsets(ref.buffer, vals, h.shape, mask, f"{fn} at")
    d = int(np.broadcast_to(np.asarray(off, np.int64), (ex.L,))[lane])
    return m, arr, h, tile_offsets(ex, ref.buffer, h, d, m.box[-2], m.box[-1], fn)


def _encodable(ex, m, arr) -> None:
    """What the driver would refuse to encode (the CUDA target's own check:
    rows of whole 16-byte units, box sizes), so that what runs here launches
    there."""
    from ..errors import CudaError
    from ..target_cuda.tensor_maps import spec
    im2col = None if m.im2col is None else {"lower": m.im2col.lower, "upper": m.im2col.upper}
    try:
        spec(m.name, m.buffer, arr.dtype.name, arr.shape, m.box, m.swizzle, im2col)
    except CudaError as e:
        raise SimError(f"kernel {ex.kname}: {e}") from None


def _window(arr, c0, c1, box):
    """Index arrays of the box at (c0, c1) and where they are inside `arr`."""
    r = c0 + np.arange(box[0])[:, None]
    j = c1 + np.arange(box[1])[None, :]
    inside = (r >= 0) & (r < arr.shape[0]) & (j >= 0) & (j < arr.shape[1])
    return (np.broadcast_to(np.clip(r, 0, max(arr.shape[0] - 1, 0)), inside.shape),
            np.broadcast_to(np.clip(j, 0, max(arr.shape[1] - 1, 0)), inside.shape), inside)


def _im2col_values(ex, m, arr, coords):
    """The rows of an im2col copy (ir.Im2col) at (n, h, w, c, off_h, off_w):
    `pixels` consecutive window starts from (n, h, w) in the bounding box
    (w fastest, then h, then n; past the last image: zeros), each the
    `channels` channels from c of the pixel at the start plus the offsets
    (zeros outside the buffer)."""
    n, h, w, c, oh, ow = coords
    N, H, W, C = arr.shape
    (lh, lw), (uh, uw) = m.im2col.lower, m.im2col.upper
    hb, wb = H - 1 + uh - lh + 1, W - 1 + uw - lw + 1  # window starts per column, per row
    if hb <= 0 or wb <= 0 or not (0 <= n < N and lh <= h < lh + hb and lw <= w < lw + wb):
        raise SimError(f"kernel {ex.kname}: an im2col copy through {m.name} starts at window "
                       f"(n={n}, h={h}, w={w}), outside its bounding box (n in 0..{N - 1}, h "
                       f"in {lh}..{lh + hb - 1}, w in {lw}..{lw + wb - 1})")
    pixels, channels = m.box
    idx = ((n * hb) + (h - lh)) * wb + (w - lw) + np.arange(pixels, dtype=np.int64)
    nn = idx // (hb * wb)
    hh = lh + idx // wb % hb + oh
    ww = lw + idx % wb + ow
    cc = c + np.arange(channels, dtype=np.int64)
    inside = ((nn < N) & (hh >= 0) & (hh < H) & (ww >= 0) & (ww < W))[:, None] & \
        ((cc >= 0) & (cc < C))[None, :]
    got = arr[np.clip(nn, 0, N - 1)[:, None], np.clip(hh, 0, H - 1)[:, None],
              np.clip(ww, 0, W - 1)[:, None], np.clip(cc, 0, C - 1)[None, :]]
    return np.where(inside, got, np.zeros((), arr.dtype)).reshape(-1)


def _box_values(m, arr, coords):
    """The elements of a tiled copy's box at `coords` (zeros outside the buffer,
    and for a matrix past a batch's end)."""
    mat, (y, x), _ = _matrix(arr, coords)
    if mat is None:
        return np.zeros(m.box[-2] * m.box[-1], arr.dtype)
    r, j, inside = _window(mat, y, x, m.box[-2:])
    return np.where(inside, mat[r, j], np.zeros((), arr.dtype)).reshape(-1)


def _coords(ex, fns, env, mask, lane):
    return [int(np.broadcast_to(np.asarray(f(env, mask), np.int64), (ex.L,))[lane]) for f in fns]


# ------------------------------------------------------------------ rules
def _matrix(arr, coords):
    """The 2-D matrix a copy at `coords` addresses (of a 3-D buffer: the
    outermost coordinate's, None outside the buffer), its (row, column)
    coordinates, and the flat offset of its first element."""
    if arr.ndim == 2:
        return arr, coords, 0
    z, y, x = coords
    if not 0 <= z < arr.shape[0]:
        return None, (y, x), 0
    return arr[z], (y, x), z * arr.shape[1] * arr.shape[2]


def _load(ex, s):
    fn = s.call.fn
    dst, map_e, bar, *cs = s.call.args
    if not isinstance(dst, ir.Ref):
        raise SimError(f"kernel {ex.kname}: {fn}'s destination must be a reference")
    bname, bar_get = barrier_args(ex, bar, fn)
    didx = [ex.compile_expr(i) for i in dst.indices]
    cfs = [ex.compile_expr(c) for c in cs]

    def load(env, mask):
        hb, elems, lanes = bar_get(env, mask)
        sync = sync_of(ex)
        for lane, elem in zip(lanes, elems):
            m, arr, h, f = _map_and_tile(ex, fn, map_e, dst, didx, env, mask, lane)
            mb = hb.bars[int(elem)]
            if not mb.inited:
                raise SimError(f"kernel {ex.kname}: {fn} completes on mbarrier "
                               f"{bname}[{int(elem)}] before its mbarrier_init")
            coords = _coords(ex, cfs, env, mask, lane)
            vals = (_im2col_values(ex, m, arr, coords) if m.im2col is not None else
                    _box_values(m, arr, coords))
            _check_overwrite(ex, dst.buffer, h, f, f"a TMA load (by thread "
                                                   f"{ex._thread(int(lane))}) writes")
            px = h.proxy
            bid = sync.bar_id(bname, int(elem))
            px.prev_phase[f] = np.where(px.landed[f] == bid, px.phase[f], -1)
            px.landed[f], px.phase[f], px.gw_lane[f] = bid, mb.phase, -1
            h.fdata[f] = vals
            h.fwritten[f] = True
            h.fwriter[f] = NOBODY
            h.freader[f] = NOBODY
            deliver(ex, f"mbarrier {bname}[{int(elem)}]", mb, vals.size * arr.itemsize)
    return load


class StoreQueue:
    def __init__(self):
        self.open, self.committed = [], []


def _store(ex, s):
    fn = s.call.fn
    map_e, src, *cs = s.call.args
    if not isinstance(src, ir.Ref):
        raise SimError(f"kernel {ex.kname}: {fn}'s source must be a reference")
    sidx = [ex.compile_expr(i) for i in src.indices]
    cfs = [ex.compile_expr(c) for c in cs]

    def store(env, mask):
        sync = sync_of(ex)
        for lane in (ex.lane if mask is None else np.flatnonzero(mask)):
            m, arr, h, f = _map_and_tile(ex, fn, map_e, src, sidx, env, mask, lane)
            mat, (y, x), base = _matrix(arr, _coords(ex, cfs, env, mask, lane))
            if mat is None:  # past the batch's end: nothing is written
                continue
            r, j, inside = _window(mat, y, x, m.box[-2:])
            fin = f[inside.reshape(-1)]
            check_async_read(ex, src.buffer, h, fin, "TMA store")
            bad = Shared.foreign(h.fwriter[fin], ex.tid[lane])
            if bad.any():
                k = int(np.argmax(bad))
                raise SimError(f"kernel {ex.kname}: a TMA store by thread {ex._thread(int(lane))} "
                               f"reads shared {src.buffer}{_at(h, fin[k])}, written by another "
                               f"thread with no barrier since (a named barrier or "
                               f"__syncthreads between the writes and the store is missing)")
            h.proxy.store_src[fin] += 1
            sync.stores.setdefault(int(lane), StoreQueue()).open.append(
                (m.buffer, arr, r[inside], j[inside], h.fdata[fin].copy(), h, fin, int(lane),
                 base))
    return store


def _land(ex, copy) -> None:
    name, arr, r, j, vals, h, fin, lane, base = copy
    h.proxy.store_src[fin] -= 1
    flat = (base + r * arr.shape[-1] + j).astype(np.int64)
    data = ex.flat_globals[name]
    if ex.races.tracks(name) and flat.size:
        ex.races.write(name, arr.shape, flat, np.full(flat.size, lane, np.int64), vals,
                       data[flat])
    data[flat] = vals


def _commit(ex, s):
    def commit(env, mask):
        sync = sync_of(ex)
        for lane in (ex.lane if mask is None else np.flatnonzero(mask)):
            q = sync.stores.setdefault(int(lane), StoreQueue())
            q.committed.append(q.open)
            q.open = []
    return commit


def _wait(ex, s):
    keep = group_count(ex.kname, s.call)

    def wait(env, mask):
        yield ALWAYS  # the copies take their time: the other tasks go first
        sync = sync_of(ex)
        for lane in (ex.lane if mask is None else np.flatnonzero(mask)):
            q = sync.stores.get(int(lane))
            while q is not None and len(q.committed) > keep:
                for copy in q.committed.pop(0):
                    _land(ex, copy)
    return wait


def _fence(ex, s):
    def fence(env, mask):
        sync = sync_of(ex)
        if mask is None:
            sync.fences += 1
        else:
            sync.fences[mask] += 1
    return fence


def finish_block(ex) -> None:
    """The block ends: its TMA stores still in flight land."""
    sync = getattr(ex, "sync", None)
    if sync is None or sync.batch is not ex.batch:
        return
    for lane in sorted(sync.stores):
        q = sync.stores[lane]
        for group in q.committed + [q.open]:
            for copy in group:
                _land(ex, copy)
    sync.stores.clear()


def async_buffers(k: ir.Kernel) -> set:
    """Shared buffers an async-proxy intrinsic (TMA, wgmma) names: they get a
    ProxyState when allocated."""
    from ..lower.intrinsics import of
    from ..lower.rewriter import walk_stmts
    out = set()
    for s in walk_stmts(k.body):
        if isinstance(s, ir.Evaluate):
            e = of(s)
            if e is not None and "async_proxy" in e.effects:
                out |= {a.buffer for a in s.call.args if isinstance(a, ir.Ref)}
    return out


def uses_sm90(k: ir.Kernel, proxied: set) -> bool:
    """Whether kernel `k` uses the Hopper mechanisms (a Specialize, mbarriers,
    async-proxy buffers `proxied`): it runs one block per batch."""
    from ..lower.rewriter import walk_stmts
    return bool(proxied) or any(
        isinstance(s, ir.Specialize) or (isinstance(s, ir.Alloc) and s.buffer.scope == "barrier")
        for s in walk_stmts(k.body))


RULES = {"tma_load_2d": _load, "tma_store_2d": _store, "tma_load_3d": _load,
         "tma_load_im2col_4d": _load,
         "tma_store_3d": _store, "tma_store_commit": _commit,
         "fence_proxy_async": _fence}
BLOCKING = {"tma_store_wait": _wait}
