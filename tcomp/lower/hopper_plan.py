"""The Hopper GEMM's plan, read off a schedule (schedule/primitives_hopper.py):
a stage tensorized with a wgmma intrinsic is not built as loops; its tile
sizes, ring, roles and grid are read from the schedule's decisions, checked
as a whole here, and hopper_gemm.py builds the kernel from them.

What the schedule must say (each missing part is a LoweringError naming the
primitive that supplies it):

    m -> (m_o, m_i) by bm; m_i -> (w, m_w) by 64    tile / split
    n -> (n_o, n_i) by N of the intrinsic           tile / split
    k -> (k_o, k_i) by 64 (fp8, k32: 128)           split
    loops m_o, n_o, then w and k_o, then the three tensorized ones
    A and B read through shared copies computed at k_o, filled by TMA
    pipeline(k_o, stages)                           the ring
    warp_specialize(w, ...)                         the roles
    persistent(m_o, n_o, group_m) or both tile loops bound to block indices
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lang import dtypes
from ..schedule.primitives_hopper import WGMMA, contraction_roles
from ..schedule.wgmma_inputs import K_TILE
from ..schedule.stage import FuseRel, SplitRel
from . import im2col, ir
from .construct import ident, lang_sub
from .hopper_gemm import GemmPlan, scalar_var
from .ir_walk import walk
from .printer import expr
from .translate import Translator, cast


def tensorized_leaf(st, pattern=WGMMA):
    """(leaf, intrinsic) of a stage tensorized with an intrinsic `pattern`
    matches (wgmma; hopper_attention_plan: wgmma_rs), or None."""
    for leaf, intrin in st.tensorize.items():
        if pattern.match(intrin):
            return leaf, intrin
    return None


def wgmma_leaf(st):
    """(leaf, intrinsic) of a stage tensorized with wgmma, or None."""
    return tensorized_leaf(st)


def _bad(stage, msg):
    raise LoweringError(f"tensorize wgmma: stage '{stage}': {msg}")


def split_once(st, parent, what, bad):
    """The one split of loop `parent` by a factor, or bad(the message)."""
    rels = [r for r in st.relations if isinstance(r, SplitRel) and r.parent == parent]
    if len(rels) != 1 or rels[0].factor is None:
        bad(f"loop '{parent}' must be split once by a factor ({what})")
    return rels[0]


def tile_grid(st, o, i, bad, hint=""):
    """(persistent, group_m) of a Hopper stage whose tile loops are o, i:
    persistent(o, i, ...) or both bound to block indices, no other loop
    bound; else bad(the message)."""
    persistent, group_m = True, 1
    if st.persistent is not None:
        if st.persistent[:2] != (o, i):
            bad(f"persistent must name the tile loops ({o!r}, {i!r})")
        group_m = st.persistent[2]
    elif st.bind.get(o, "").startswith("blockIdx") and st.bind.get(i, "").startswith("blockIdx"):
        persistent = False
    else:
        bad(f"its tile loops {o!r}, {i!r} need persistent({o}, {i}{hint}) or binding to block "
            f"indices")
    extra = set(st.bind) - {o, i}
    if extra:
        bad(f"loop '{sorted(extra)[0]}' is bound; the roles bind the loops inside the tile "
            f"themselves")
    return persistent, group_m


def _split(st, parent, stage, what):
    return split_once(st, parent, what, lambda msg: _bad(stage, msg))


def plan(builder, stage: str) -> GemmPlan | None:
    """The plan of `stage` when it is tensorized with wgmma, else None."""
    sched = builder.sched
    st = sched.states[stage]
    hit = wgmma_leaf(st)
    if hit is None:
        return None
    leaf, intrin = hit
    bn = int(WGMMA.match(intrin).group(1))
    bk = K_TILE[WGMMA.match(intrin).group(2)]  # one 128-byte row: 64 16-bit, 128 fp8 values
    d = st.definition
    roles = contraction_roles(d)
    if isinstance(roles, str):
        _bad(stage, roles)
    m, n = d.spatial[-2:]
    z = d.spatial[0] if len(d.spatial) == 3 else None  # the batch axis
    (k,) = d.reduce
    if any(isinstance(r, FuseRel) for r in st.relations):
        _bad(stage, "its loops are fused; the Hopper GEMM walks tiles of m and n itself")
    rm = _split(st, m, stage, "the block's rows: tile(m, n, 64 x consumers, N)")
    rw = _split(st, rm.inner, stage, "by 64: one part per consumer warpgroup")
    rn = _split(st, n, stage, f"by {bn}, the N of {intrin}")
    rk = _split(st, k, stage, f"by {bk}")
    if len(st.relations) != 4:
        _bad(stage, "it has loop transformations besides the tiles of m, n and k")
    mo, wo, wi, no, ni, ko, ki = rm.outer, rw.outer, rw.inner, rn.outer, rn.inner, rk.outer, rk.inner
    order = st.leaves
    if z is not None:
        if order[0] != z:
            _bad(stage, f"its batch loop '{z}' must be the outermost loop, unsplit (the tiles "
                        f"of every matrix of the batch are walked together)")
        order = order[1:]
    if order[:2] != [mo, no] or set(order[2:4]) != {wo, ko} or order[4] != leaf or \
            set(order[4:]) != {wi, ni, ki}:
        _bad(stage, f"its loops must be {mo}, {no}, then {wo} and {ko} (either order), then "
                    f"the tensorized {wi}, {ni}, {ki}; they are {', '.join(order)} (reorder)")
    bm = rm.factor
    pingpong = bool(st.roles and st.roles[3])
    if rw.factor != 64 or bm % 64 or not 1 <= bm // 64 <= 2:
        _bad(stage, f"the block's rows ({bm}) must be 64 or 128: " +
             ("one or two 64-row slabs per consumer" if pingpong else
              "64 per consumer warpgroup, one or two consumers"))
    consumers = 2 if pingpong else bm // 64
    if pingpong and bm // 64 * bn // 2 > 128:
        _bad(stage, f"ping-pong consumers each hold a whole {bm} x {bn} tile: "
                    f"{bm // 64 * bn // 2} float32 accumulators per thread, more than 128 "
                    f"(take 64 rows with N = 256, or 128 rows with N = 128)")
    if rn.factor != bn or rk.factor != bk:
        _bad(stage, f"n must be split by {bn} and k by {bk}")
    # the roles
    if st.roles is None or st.roles[0] != wo:
        _bad(stage, f"warp_specialize({wo!r}) is needed: a producer warpgroup issues the TMA "
                    f"copies, the {consumers} iteration(s) of '{wo}' are consumer warpgroups")
    _, preg, creg, _ = st.roles
    if 128 * (preg + consumers * creg) > 65536:
        _bad(stage, f"warp_specialize: {preg} + {consumers} x {creg} registers per thread of "
                    f"128-thread warpgroups need {128 * (preg + consumers * creg)}; a "
                    f"multiprocessor has 65536 (lower consumer_regs)")
    # the grid
    persistent, group_m = tile_grid(st, mo, no, lambda msg: _bad(stage, msg))
    # the ring and its copies
    if set(st.pipeline) != {ko}:
        _bad(stage, f"pipeline({ko!r}, stages=N) is needed (the ring of shared slots the "
                    f"TMA engine fills ahead of the wgmma), and no other loop pipelined")
    stages = st.pipeline[ko]
    at = {n_: s_ for n_, s_ in sched.states.items() if s_.attach[:2] == ("at", stage)}
    sources, window = {}, None
    a, a_sub, b_t, b_sub = roles
    for name, cs in at.items():
        if cs.attach[2] != ko or cs.tma is None:
            _bad(stage, f"stage '{name}' is computed at its loop '{cs.attach[2]}'; only the TMA "
                        f"copies of A and B (cache_read(..., 'shared') computed at {ko!r}, then "
                        f"tma()) may be")
        if cs.origin == "cache_read":
            (src,) = cs.definition.reads()
        elif cs.tensor == a and z is None:  # A computed as a convolution's im2col matrix
            window = im2col.window(builder, cs, lambda msg: _bad(stage, msg))
            src = window.tensor
        else:
            _bad(stage, f"stage '{name}' is filled by the TMA engine in im2col mode, so it must "
                        f"be the A operand (M x K) of an unbatched product")
        sources[cs.tensor] = src
    for t in (a, b_t):
        if t not in sources:
            _bad(stage, f"'{t}' is read from global memory; read it through a TMA copy: "
                        f"s.cache_read('{t}', 'shared', [C]) computed at {ko!r}, then .tma()")
    out_tensor = st.tensor if st.epilogue is None else sched.states[st.epilogue].tensor
    out = sched.tensors[out_tensor][0]
    if out not in (dtypes.bfloat16, dtypes.float16, dtypes.float32):
        _bad(stage, f"its output '{out_tensor}' is {out}; the TMA-store epilogue writes "
                    f"bfloat16, float16 or float32" + (
                        f" (a product of fp8 values is fp8: declare the output's type, e.g. "
                        f"-> (bfloat16(M, N) {out_tensor}))" if out.is_fp8 else ""))
    # sizes: the loops cover the tensors exactly (the TMA engine clips at their ends)
    ext = {}
    if z is not None and st.epilogue is not None:
        _bad(stage, "a batched product with a fused epilogue is not built on the Hopper path "
                    "yet; compute the epilogue as its own stage")
    for var in (m, n, k) + ((z,) if z else ()):
        lo, hi = d.ranges[var]
        if builder.lsize(lo) != ir.ZERO:
            _bad(stage, f"loop '{var}' starts at {lo}, not 0")
        ext[var] = builder.lsize(lang_sub(hi, lo))

    def dims_of(tensor):
        return [builder.lsize(x) for x in sched.tensors[tensor][1]]
    if window is not None:
        _check_window(builder, stage, window, a, a_sub, (m, k), ext, bk)
    for tensor, subs in ((sources[a], a_sub), (sources[b_t], b_sub),
                         (out_tensor, tuple(d.spatial))):
        if window is not None and tensor == window.tensor:
            continue
        for dim, var in zip(dims_of(tensor), subs):
            if dim != ext[var]:
                _bad(stage, f"'{tensor}' has a dimension of {expr(dim)} where loop '{var}' runs "
                            f"over {expr(ext[var])}; the tiles cover whole tensors")
        inner = dims_of(tensor)[-1]
        item = sched.tensors[tensor][0].bits // 8
        if isinstance(inner, ir.Imm) and (inner.value * item) % 16:
            _bad(stage, f"'{tensor}' has rows of {inner.value} elements ({inner.value * item} "
                        f"bytes); the TMA engine needs rows of a multiple of 16 bytes")
    epi, loads, scalars = (None, (), ()) if st.epilogue is None else \
        _epilogue(builder, stage, st, sched.states[st.epilogue], ext, (m, n), out)
    dt = sched.tensors[sources[a]][0]
    used = dict.fromkeys(x.name for var in (m, n, k) + ((z,) if z else ()) for x in walk(ext[var])
                         if isinstance(x, ir.Var))  # M's, then N's, then K's, then the batch's
    return GemmPlan(
        name=f"{builder.op.name}_{ident(stage)}", a=sources[a], b=sources[b_t], c=out_tensor,
        dtype=dt, b_dtype=sched.tensors[sources[b_t]][0], out=out, a_mn=a_sub[-1] == m,
        b_mn=b_sub[-1] == n,
        M=ext[m], N=ext[n], K=ext[k], sizes=tuple(used), bm=bm, bn=bn, bk=bk, stages=stages,
        consumers=consumers, group_m=group_m, producer_regs=preg, consumer_regs=creg,
        persistent=persistent, epilogue=epi, loads=loads, scalars=scalars, pingpong=pingpong,
        Z=ext[z] if z else None, a_batched=len(a_sub) == 3, b_batched=len(b_sub) == 3,
        window=window)


def _check_window(builder, stage, w, a, a_sub, mk, ext, bk):
    """An im2col A operand: read as A(m, k), over the whole window matrix,
    each K tile (bk wide: 64 16-bit or 128 fp8 values) inside one filter
    position (C a multiple of bk)."""
    if tuple(a_sub) != mk:
        _bad(stage, f"it reads its im2col operand '{a}' at ({', '.join(a_sub)}); the "
                    f"convolution's windows are A(m, k) (pixels by window positions)")
    if not isinstance(w.C, ir.Imm) or w.C.value % bk:
        _bad(stage, f"the im2col operand '{a}' reads {expr(w.C)} channels per pixel; each K "
                    f"tile of {bk} must lie in one filter position, so the channels must be a "
                    f"multiple of {bk} fixed at build (sizes=...)")
    mul = lambda x, y: ir.Bin("*", x, y, ir.int32)  # noqa: E731
    for var, want, what in ((mk[0], mul(mul(w.N, w.Ho), w.Wo), "N Ho Wo"),
                            (mk[1], mul(w.C, ir.const(w.R * w.S)), "R S C")):
        want = im2col.simplified(want)
        if not im2col.same(ext[var], want):
            _bad(stage, f"loop '{var}' runs over {expr(ext[var])}, not over the {what} = "
                        f"{expr(want)} of '{a}''s windows")


def _epilogue(builder, stage, st, es, ext, mn, out):
    """The epilogue stage `es` (T.epilogue(D)) as a function of the global
    (row, col) and the accumulator, the tensors it loads, and of those the 0-d
    ones (a scale: read once per consumer, as `scalar_var(t)`)."""
    sched = builder.sched
    d = es.definition
    for var, tvar in zip(d.spatial, mn):
        lo, hi = d.ranges[var]
        if builder.lsize(lo) != ir.ZERO or builder.lsize(lang_sub(hi, lo)) != ext[tvar]:
            _bad(stage, f"its epilogue '{es.name}' runs '{var}' over {lo}:{hi}, not over the "
                        f"range of '{tvar}'")
    own = dict(zip(d.spatial, mn))
    loads = []
    from ..lang.ast import Index, Read, walk as lwalk
    for x in (y for e in (d.rhs, *d.lets.values()) for y in lwalk(e)):
        if not isinstance(x, Read) or x.tensor == st.tensor:
            continue
        names = [a.name if isinstance(a, Index) else None for a in x.args]
        dims = [builder.lsize(s_) for s_ in sched.tensors[x.tensor][1]]
        if any(nm not in own for nm in names) or any(
                dim != ext[own[nm]] for dim, nm in zip(dims, names)):
            _bad(stage, f"its epilogue '{es.name}' reads '{x.tensor}' at "
                        f"({', '.join(nm or 'an expression' for nm in names)}); the Hopper "
                        f"epilogue reads other tensors at its own indices, over their whole "
                        f"extent")
        if x.tensor not in loads:
            loads.append(x.tensor)
    t_dtype = sched.tensors[st.tensor][0]

    def value(row, col, acc):
        index = {d.spatial[0]: row, d.spatial[1]: col}

        def read(tensor, args, dt):
            if tensor == st.tensor:
                return cast(acc, t_dtype)
            return ir.Var(scalar_var(tensor), dt) if tensor in scalars else \
                ir.Load(tensor, args, dt)
        return cast(Translator(index, d.lets, builder.size, read)(d.rhs), out)
    scalars = tuple(t for t in loads if not sched.tensors[t][1])
    return value, tuple(loads), tuple((t, sched.tensors[t][0]) for t in scalars)
