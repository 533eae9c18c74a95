"""Decode attention (a few query rows, a long KV sequence), split over the key
axis T into `parts` (FlashDecoding), from a comprehension and a schedule on
the generic (SIMT) path: no tensor cores.

The split is written in the comprehension (`decode_source`): key j of part p
is p * C + t, C = ceil(T / parts); keys past T are masked (score -inf, value
0), so T need not be a multiple of `parts` and a part may be empty. Each part
p runs the plain softmax chain over its keys (max mx, sum l, unnormalised
weighted sum W); `Schedule.online_softmax("mx", "l", ["W"])` rewrites that
chain into one pass per part. The combine (comprehension statements too)
takes the max m of the parts' maxima, rescales each part by
c_p = exp(mx_p - m) (0 for an empty part, whose max is -inf and whose l and
W are NaN: the ternary keeps that NaN out), sums, and divides:

    m  = max_p mx_p;  L = sum_p c_p l_p;  O = sum_p c_p W_p / L

It equals attention_sm90.source's comprehension (S = rows, tcomp.evaluate
checks it) up to rounding. Why not rfactor: `rfactor` refuses tuple
reductions (the combine of partial expsum states is not a schedule primitive
yet: tuple_stages.refuse), so the split and the combine are spelled in the
comprehension, where evaluate and the sim check them like any statement.
Why V is read in 2-byte elements: a tuple stage's reduction loops must be
innermost (stage_nest), so one thread cannot accumulate 8 consecutive e over
the keys t, which a 16-byte load of a V row would need; K's scores are a
plain `+=!` stage and take 16-byte vectors (_scores).

    k = attention_decode(sizes={"D": 128, "E": 128}, parts=8)   # CUDA
    O = k(Q, K, V)      # Q (Z, S, D), K (Z / g, T, D), V (Z / g, T, E) -> O (Z, S, E)

`fused=True` takes the other route, two kernels built as Kernel IR from a plan
(kernels/attention_decode_fused.py, lower/decode_attention.py): one pass over
K and V in 16-byte loads shared by the g query heads of a group, the online
softmax in registers, then the same combine.
"""
from __future__ import annotations

import math

from ..errors import LoweringError


def decode_source(dtype: str = "bfloat16", scale: float | None = None, d: int = 128,
                  parts: int = 8, kv_group: int = 1) -> str:
    """The split-KV attention comprehension (see the module docstring)."""
    if parts < 1:
        raise LoweringError(f"attention_decode: parts = {parts}; at least 1")
    if kv_group < 1:
        raise LoweringError(f"attention_decode: kv_group = {kv_group}; at least 1")
    s = 1 / math.sqrt(d) if scale is None else scale
    zk, kz = ("Z", "z") if kv_group == 1 else ("ZK", f"z / {kv_group}")
    c = f"((T + {parts - 1}) / {parts})"
    j = f"p * {c} + t"
    return (f"def attention_decode({dtype}(Z, S, D) Q, {dtype}({zk}, T, D) K, "
            f"{dtype}({zk}, T, E) V) -> ({dtype}(Z, S, E) O) {{\n"
            f"    Sc(z, i, p, t) +=! ({j} < T ? float(Q(z, i, d)) * float(K({kz}, {j}, d)) : 0.0)"
            f" where p in 0:{parts}, t in 0:{c}\n"
            f"    Ss(z, i, p, t) = {j} < T ? Sc(z, i, p, t) * {s!r} : -inf\n"
            f"    mx(z, i, p) max=! Ss(z, i, p, t)\n"
            f"    l(z, i, p) +=! exp(Ss(z, i, p, t) - mx(z, i, p))\n"
            f"    W(z, i, p, e) +=! exp(Ss(z, i, p, t) - mx(z, i, p)) * "
            f"({j} < T ? float(V({kz}, {j}, e)) : 0.0)\n"
            f"    m(z, i) max=! mx(z, i, p)\n"
            f"    c(z, i, p) = mx(z, i, p) == -inf ? 0.0 : exp(mx(z, i, p) - m(z, i))\n"
            f"    L(z, i) +=! mx(z, i, p) == -inf ? 0.0 : l(z, i, p) * c(z, i, p)\n"
            f"    O(z, i, e) +=! (mx(z, i, p) == -inf ? 0.0 : W(z, i, p, e) * c(z, i, p)) / L(z, i)\n"
            f"}}")


def _scores(s, Sc, d: int, vec: int, threads: int) -> None:
    """The scores Sc(z, i, p, t) = Q . K row: one key row a group of
    d / vec threads (threadIdx.x), each loading vec consecutive elements of it
    as one 16-byte vector (cache_read into registers, row_slices), summed
    across the group (an allreduce); threads / (d / vec) rows a block
    (threadIdx.y), so a warp reads whole rows (two 256-byte rows of D = 128
    bf16)."""
    from ..errors import ScheduleError
    from ..schedule import templates
    lanes = d // vec
    if d % vec or threads % lanes:
        raise ScheduleError(f"attention_decode: D = {d} in pieces of {vec} over {threads} "
                            f"threads: D must be a multiple of {vec} and threads of D / {vec}")
    f = Sc.fuse(*Sc.axes)
    fo, fi = Sc.split(f, threads // lanes)
    Sc.bind(fo, "blockIdx.x")
    Sc.bind(fi, "threadIdx.y")
    C = s.cache_read("K", "local", [Sc])
    C.compute_at(Sc, fi)
    templates.row_slices(C, C.axes[-1], lanes, vec)
    templates.row_slices(Sc, Sc.reduce_axes[-1], lanes, vec)


def decode_schedule(op, d: int, threads: int = 128):
    """The schedule: online_softmax of each part's chain; the scores with
    16-byte vector loads of K (_scores); every other stage's spatial points
    fused and spread over blocks of `threads` threads, except the weighted
    pass W, whose (z, i, p) is a block and e its threads (a warp reads
    consecutive elements of a V row)."""
    import tcomp
    vec = 128 // op.tensor("K").dtype.bits  # elements of K in a 16-byte vector
    s = tcomp.Schedule(op)
    s.online_softmax("mx", "l", ["W"])
    for st in s.stages:
        ax = st.axes
        if st.name == "Sc":
            _scores(s, st, d, vec, threads)
            continue
        if st.name == "W":
            z, i, p, e = ax
            s["W"].bind(s["W"].fuse(z, i, p), "blockIdx.x")
            s["W"].bind(e, "threadIdx.x")
            continue
        f = st.fuse(*ax) if len(ax) > 1 else ax[0]
        fo, fi = st.split(f, threads)
        st.bind(fo, "blockIdx.x")
        st.bind(fi, "threadIdx.x")
    return s


def attention_decode(sizes: dict | None = None, parts: int = 8, dtype: str = "bfloat16",
                     scale: float | None = None, kv_group: int = 1, threads: int = 128,
                     target: str = "cuda", fused: bool | None = None, unroll: int = 4,
                     prefetch: bool = True):
    """The decode kernel, `O = k(Q, K, V)`: a CudaKernel, or with
    `target="sim"` a SimKernel. `sizes` must give D and E (the head sizes);
    Z, S and T may be given too (fixed) or left to the call. With
    `fused=True`, the fused kernels of attention_decode_fused.py (one pass over
    K and V, 16-byte loads, `unroll` keys per row group per step; `sizes` must
    give S too; `threads` is then its block size; `prefetch`: the next step's K
    and V rows load into registers during this step's arithmetic); with
    `fused=False`, the comprehension route (seven kernels from the
    comprehension and its schedule); with `fused=None` (the default), the
    fused kernels where they apply, else the comprehension route, and the
    kernel's `remarks` say which and why."""
    import tcomp
    sizes = dict(sizes or {})
    if fused or fused is None:
        from .attention_decode_fused import attention_decode_fused
        try:
            k = attention_decode_fused(sizes, parts, dtype, scale, kv_group, unroll, threads,
                                       target, prefetch)
        except LoweringError as e:
            if fused:
                raise
            why = str(e).splitlines()[0]
        else:
            if fused is None:
                k.remarks = ("attention_decode: the fused kernels (fused=None: they apply "
                             "here)",) + tuple(getattr(k, "remarks", ()))
            return k
    if "D" not in sizes or "E" not in sizes:
        raise LoweringError("attention_decode: give the head sizes D and E in sizes")
    op = tcomp.op(decode_source(dtype, scale, sizes["D"], parts, kv_group))
    k = tcomp.build(decode_schedule(op, sizes["D"], threads), target=target, sizes=sizes)
    if fused is None:
        k.remarks = (f"attention_decode: the comprehension route (seven kernels): the fused "
                     f"kernels do not apply here ({why})",) + tuple(k.remarks)
    return k
