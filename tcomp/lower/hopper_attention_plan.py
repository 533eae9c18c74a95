"""The Hopper attention kernel's plan, read off a schedule: the weighted sum of
an online softmax (the tuple stage `Schedule.online_softmax` makes, e.g.
attention's `O.online`) tensorized with `wgmma_rs_m64nEk16` is not built as
loops; its tiles, ring, roles and grid are read from the schedule's decisions,
checked as a whole here, and hopper_attention.py builds the kernel from them.

What the schedule must say (each missing part is a LoweringError naming the
primitive that supplies it), on `on = s["O.online"]` with axes z, i, e and
the key axis j:

    i -> (i_o, i_i) by 64 x consumers; i_i -> (w, i_w) by 64    split
    j -> (j_o, j_i) by the keys per step (64, 128 or 176)       split
    loops z, i_o, then w and j_o, then i_w, e, j_i              reorder
    Q read through a shared copy computed at i_o, K and V through copies
      computed at j_o, all filled by TMA                       cache_read, tma
    the scores computed at j_o, tensorized with wgmma_m64n{bn}k16   compute_at, tensorize
    pipeline(j_o, stages)                                       the K/V ring
    warp_specialize(w, ...)                                     the roles
    persistent(z, i_o, group_m=1) or z and i_o bound to block indices
    epilogue(O)                                                 O = acc / sum, TMA store
    tensorize(i_w, "wgmma_rs_m64n{E}k16")                       P . V, P in registers
    optionally epilogue(L), L = mx + log(l) over the (mx, l)    the log-sum-exp, written
      statistics stage                                          from the running max, sum

The scores are matched as `[j > i ? -inf :] Sc(z, i, j) * scale` with
`Sc(z, i, j) +=! Q(z, i, d) * K(z', j, d)` (casts allowed) and the weights as
V(z', j, e), z' = z or z / g (grouped-query attention): the comprehension of
kernels/attention_sm90.source().
"""
from __future__ import annotations

from types import SimpleNamespace

from ..arch.limits import shared_per_block
from ..errors import LoweringError
from ..lang import ast as A
from ..lang import dtypes
from ..schedule.primitives_hopper import ATTENTION_BN, WGMMA, WGMMA_RS
from ..schedule.statistics_epilogue import statistics_stage
from . import ir
from .construct import ident, lang_sub
from .hopper_attention import SMEM_LIMIT, AttentionPlan, smem_bytes
from .hopper_plan import split_once, tensorized_leaf, tile_grid
from .ir_walk import walk
from .printer import expr

HEADS = (64, 128)  # D and E the kernel builds


def _bad(stage, msg):
    raise LoweringError(f"tensorize wgmma_rs: stage '{stage}': {msg}")


def _split(st, parent, stage, what):
    return split_once(st, parent, what, lambda msg: _bad(stage, msg))


def _strip(x):
    while isinstance(x, A.Cast):
        x = x.x
    return x


def _names(read) -> list:
    return [a.name if isinstance(a, A.Index) else None for a in read.args]


def _group(arg, z):
    """g when `arg` is z (1) or z / g (grouped-query attention), else None."""
    if isinstance(arg, A.Index) and arg.name == z:
        return 1
    if isinstance(arg, A.Binary) and arg.op == "/" and isinstance(arg.a, A.Index) and \
            arg.a.name == z and isinstance(arg.b, A.Const) and int(arg.b.value) == arg.b.value \
            and arg.b.value >= 1:
        return int(arg.b.value)
    return None


def _is_neg_inf(x) -> bool:
    x = _strip(x)
    if isinstance(x, A.Const):
        return x.value == float("-inf")
    return isinstance(x, A.Unary) and x.op == "-" and isinstance(_strip(x.x), A.Const) and \
        _strip(x.x).value == float("inf")


def _scores(stage, x, z, i, j):
    """(scores tensor, scale, causal) of the online softmax's value x."""
    causal = False
    x = _strip(x)
    if isinstance(x, A.Select):
        c = x.cond
        if not (isinstance(c, A.Binary) and c.op == ">" and isinstance(c.a, A.Index) and
                c.a.name == j and isinstance(c.b, A.Index) and c.b.name == i and
                _is_neg_inf(x.a)):
            _bad(stage, f"its scores are masked by another condition than the causal "
                        f"'{j} > {i} ? -inf : ...'")
        causal, x = True, _strip(x.b)
    scale = 1.0
    if isinstance(x, A.Binary) and x.op == "*":
        for read, k in ((x.a, x.b), (x.b, x.a)):
            if isinstance(_strip(read), A.Read) and isinstance(_strip(k), A.Const):
                x, scale = _strip(read), float(_strip(k).value)
                break
    if not isinstance(x, A.Read) or _names(x) != [z, i, j]:
        _bad(stage, f"its softmax is over values it does not read as scale * S({z}, {i}, {j}) "
                    f"(optionally masked by {j} > {i} ? -inf : ...) of a scores stage S")
    return x.tensor, scale, causal


def plan(builder, stage: str) -> AttentionPlan | None:
    """The plan of `stage` when it is tensorized with wgmma_rs, else None."""
    sched = builder.sched
    st = sched.states[stage]
    hit = tensorized_leaf(st, WGMMA_RS)
    if hit is None:
        return None
    leaf, intrin = hit
    E_n = int(WGMMA_RS.match(intrin).group(1))
    d = st.definition
    if len(d.spatial) != 3:
        _bad(stage, f"it runs over ({', '.join(d.spatial)}); the attention kernel takes a "
                    f"batch axis (batch x heads), the queries and the columns")
    z, i, e = d.spatial
    (j,) = d.reduce
    rm = _split(st, i, stage, "the block's queries: split by 64 x consumers")
    rw = _split(st, rm.inner, stage, "by 64: one part per consumer warpgroup")
    rj = _split(st, j, stage, "the keys per step")
    if len(st.relations) != 3:
        _bad(stage, f"it has loop transformations besides the splits of '{i}' and '{j}'")
    io, w, iw, jo, ji = rm.outer, rw.outer, rw.inner, rj.outer, rj.inner
    order = st.leaves
    if order[:2] != [z, io] or set(order[2:4]) != {w, jo} or order[4:] != [iw, e, ji]:
        _bad(stage, f"its loops must be {z}, {io}, then {w} and {jo} (either order), then the "
                    f"tensorized {iw}, {e}, {ji}; they are {', '.join(order)} (reorder)")
    bm, bn = rm.factor, rj.factor
    pingpong = bool(st.roles and st.roles[3])
    if rw.factor != 64 or bm not in (128, 192):
        _bad(stage, f"the block's queries ({bm}) must be split by 64 into 2 or 3 consumer "
                    f"warpgroups: split '{i}' by 128 or 192, then by 64")
    consumers = bm // 64
    if pingpong and consumers != 2:
        _bad(stage, "ping-pong consumers take turns in pairs: split the queries by 128")
    if bn not in ATTENTION_BN:
        _bad(stage, f"'{j}' is split by {bn}; the kernel takes "
                    f"{', '.join(map(str, ATTENTION_BN))} keys per step")
    if st.roles is None or st.roles[0] != w:
        _bad(stage, f"warp_specialize({w!r}) is needed: a producer warpgroup issues the TMA "
                    f"copies, the {consumers} iterations of '{w}' are consumer warpgroups")
    _, preg, creg, _ = st.roles
    if 128 * (preg + consumers * creg) > 65536:
        _bad(stage, f"warp_specialize: {preg} + {consumers} x {creg} registers per thread of "
                    f"128-thread warpgroups need {128 * (preg + consumers * creg)}; a "
                    f"multiprocessor has 65536 (lower consumer_regs)")
    persistent, group_m = tile_grid(st, z, io, lambda msg: _bad(stage, msg), ", group_m=1")
    if group_m != 1:
        _bad(stage, f"persistent(..., group_m={group_m}): the attention kernel walks a "
                    f"matrix's query tiles in its own order (causal: longest first); give "
                    f"group_m=1")
    if set(st.pipeline) != {jo}:
        _bad(stage, f"pipeline({jo!r}, stages=N) is needed (the ring of K and V slots the TMA "
                    f"engine fills ahead of the wgmma), and no other loop pipelined")
    stages = st.pipeline[jo]
    # what is computed at the loops: the scores and the TMA copies
    at = {n_: s_ for n_, s_ in sched.states.items() if s_.attach[:2] == ("at", stage)}
    copies, scores = {}, []
    for name, cs in at.items():
        if cs.origin == "cache_read":
            if cs.tma is None or cs.attach[2] not in (io, jo):
                _bad(stage, f"the copy '{name}' must be filled by TMA (.tma()) and computed "
                            f"at '{io}' (Q) or '{jo}' (K, V)")
            (src,) = cs.definition.reads()
            copies[cs.tensor] = (src, cs.attach[2])
        elif cs.attach[2] == jo and any(WGMMA.match(x) for x in cs.tensorize.values()):
            scores.append(name)
        else:
            _bad(stage, f"stage '{name}' is computed at its loop '{cs.attach[2]}'; only the "
                        f"scores (tensorized with wgmma, at '{jo}') and the TMA copies of Q, K "
                        f"and V may be")
    x, vread = d.rhs.items
    sc_tensor, scale, causal = _scores(stage, x, z, i, j)
    sc_name = next((n_ for n_ in scores if sched.states[n_].tensor == sc_tensor), None)
    if sc_name is None:
        _bad(stage, f"its scores '{sc_tensor}' must be computed at '{jo}' "
                    f"(compute_at({stage!r}, {jo!r})) and tensorized with "
                    f"wgmma_m64n{bn}k16")
    if len(scores) != 1:
        _bad(stage, f"stages {', '.join(scores)} are tensorized at '{jo}'; one scores stage")
    sc = sched.states[sc_name]
    sbn = int(WGMMA.match(next(iter(sc.tensorize.values()))).group(1))
    if sbn != bn:
        _bad(stage, f"its scores are tensorized with wgmma_m64n{sbn}k16, but '{j}' is split by "
                    f"{bn}: the scores of one step are 64 x {bn} (wgmma_m64n{bn}k16)")
    q, k, g = _score_operands(stage, sc, copies)
    vread = _strip(vread)
    vnames = _names(vread)
    if vnames[1:] != [j, e] or _group(vread.args[0], z) != g or vread.tensor not in copies:
        _bad(stage, f"its weights must be read as V({z}{'' if g == 1 else f' / {g}'}, {j}, {e}) "
                    f"through a TMA copy (the matrix of K)")
    for tensor, want in ((q, io), (k, jo), (vread.tensor, jo)):
        if copies[tensor][1] != want:
            _bad(stage, f"the copy '{tensor}' of '{copies[tensor][0]}' is computed at "
                        f"'{copies[tensor][1]}'; "
                        + ("Q's tile stays for the whole query tile: compute it at "
                           f"'{io}'" if want == io else f"K and V go through the ring: compute "
                                                        f"them at '{jo}'"))
    if len(copies) != 3:
        extra_c = sorted(set(copies) - {q, k, vread.tensor})
        _bad(stage, f"the copy '{extra_c[0]}' is not read by the kernel")
    qt, kt, vt = copies[q][0], copies[k][0], copies[vread.tensor][0]
    # the epilogue: O = acc / sum
    if st.epilogue is None:
        _bad(stage, f"epilogue(...) is needed: the stage that divides the weighted sum by "
                    f"the row sum (O = acc / sum) is computed from the accumulators")
    es = sched.states[st.epilogue]
    ed = es.definition
    dv = _strip(ed.rhs)
    _, tsum, tacc = d.tensors
    if not (isinstance(dv, A.Binary) and dv.op == "/" and isinstance(_strip(dv.a), A.Read) and
            isinstance(_strip(dv.b), A.Read) and _strip(dv.a).tensor == tacc and
            _strip(dv.b).tensor == tsum):
        _bad(stage, f"its epilogue '{es.name}' must be {tacc} / {tsum} (what online_softmax "
                    f"makes)")
    out_tensor = es.tensor
    # types and sizes
    dt = sched.tensors[qt][0]
    out = sched.tensors[out_tensor][0]
    if dt not in (dtypes.bfloat16, dtypes.float16) or \
            any(sched.tensors[t_][0] != dt for t_ in (kt, vt)):
        _bad(stage, f"Q, K and V must be all bfloat16 or all float16; they are "
                    f"{', '.join(str(sched.tensors[t_][0]) for t_ in (qt, kt, vt))}")
    if out not in (dtypes.bfloat16, dtypes.float16):
        _bad(stage, f"its output '{out_tensor}' is {out}; the TMA-store epilogue writes "
                    f"bfloat16 or float16")
    ext = {}
    sd = sc.definition
    (dd,) = sd.reduce
    for var, rng in list(d.ranges.items()) + [("d", sd.ranges[dd])]:
        lo, hi = rng
        if builder.lsize(lo) != ir.ZERO:
            _bad(stage, f"loop '{var}' starts at {lo}, not 0")
        ext[var] = builder.lsize(lang_sub(hi, lo))
    D_, E_ = ext["d"], ext[e]
    for what, val in (("D", D_), ("E", E_)):
        if not (isinstance(val, ir.Imm) and val.value in HEADS):
            _bad(stage, f"the head size {what} is {expr(val)}; the kernel takes {what} = 64 or "
                        f"128, fixed at build (sizes={{'{what}': 128}})")
    if E_.value != E_n:
        _bad(stage, f"it is tensorized with {intrin}, but '{e}' has {E_.value} columns "
                    f"(wgmma_rs_m64n{E_.value}k16)")

    need = smem_bytes(SimpleNamespace(bm=bm, bn=bn, stages=stages), D_.value, E_.value,
                      dt.bits // 8)
    # (an arch the table does not know: sm_90's figure; the CUDA target asks the device)
    limit = shared_per_block(builder.target.name, SMEM_LIMIT)
    if need > limit:
        _bad(stage, f"{bm} queries x {bn} keys per step with a {stages}-slot ring at "
                    f"D={D_.value}, E={E_.value} need {need} bytes of shared memory; a block "
                    f"may have {limit} on {builder.target} (fewer stages, or split '{j}' by "
                    f"less)")

    def dims(tensor):
        return [builder.lsize(x_) for x_ in sched.tensors[tensor][1]]
    kz = ext[z] if g == 1 else None
    for tensor, want in ((qt, [ext[z], ext[i], D_]), (kt, [kz, ext[j], D_]),
                         (vt, [kz, ext[j], E_]), (out_tensor, [ext[z], ext[i], E_])):
        got = dims(tensor)
        for n_, (a_, b_) in enumerate(zip(got, want)):
            if b_ is not None and a_ != b_:
                _bad(stage, f"'{tensor}' has {expr(a_)} in dimension {n_} where the loops run "
                            f"over {expr(b_)}; the tiles cover whole tensors")
    lse = _lse_output(builder, stage, st, ext, (z, i))
    used = dict.fromkeys(x_.name for var in (z, i, j) for x_ in walk(ext[var])
                         if isinstance(x_, ir.Var))
    return AttentionPlan(
        name=f"{builder.op.name}_{ident(stage)}", q=qt, k=kt, v=vt, o=out_tensor, dtype=dt,
        out=out, Z=ext[z], S=ext[i], T=ext[j], D=D_.value, E=E_.value, sizes=tuple(used),
        scale=scale, causal=causal, bm=bm, bn=bn, stages=stages, producer_regs=preg,
        consumer_regs=creg, pingpong=pingpong, kv_group=g, persistent=persistent, lse=lse)


def _lse_output(builder, stage, st, ext, zi):
    """The log-sum-exp output of a statistics epilogue (`epilogue(L)` with
    L = mx + log(l) over the running max and sum: statistics_epilogue.py),
    or None."""
    if st.row_epilogue is None:
        return None
    sched = builder.sched
    ls = sched.states[st.row_epilogue]
    d = ls.definition
    mx, lsum = statistics_stage(sched, st, ls).definition.tensors
    rhs = _strip(d.rhs)

    def is_read(x, t):
        x = _strip(x)
        return isinstance(x, A.Read) and x.tensor == t
    ok = isinstance(rhs, A.Binary) and rhs.op == "+" and any(
        is_read(a_, mx) and isinstance(_strip(b_), A.Call) and _strip(b_).fn == "log" and
        len(_strip(b_).args) == 1 and is_read(_strip(b_).args[0], lsum)
        for a_, b_ in ((rhs.a, rhs.b), (rhs.b, rhs.a)))
    if not ok:
        _bad(stage, f"its statistics epilogue '{ls.name}' must be {mx} + log({lsum}) (the "
                    f"log-sum-exp: what the kernel writes from its running max and sum)")
    if sched.tensors[ls.tensor][0] != dtypes.float32:
        _bad(stage, f"its log-sum-exp output '{ls.tensor}' is {sched.tensors[ls.tensor][0]}; "
                    f"the kernel writes float32")
    dims = [builder.lsize(x_) for x_ in sched.tensors[ls.tensor][1]]
    if dims != [ext[zi[0]], ext[zi[1]]]:
        _bad(stage, f"'{ls.tensor}' has dimensions ({', '.join(expr(x_) for x_ in dims)}) "
                    f"where the loops run over ({expr(ext[zi[0]])}, {expr(ext[zi[1]])})")
    return ls.tensor


def _score_operands(stage, sc, copies):
    """(Q's copy, K's copy, kv group) of the scores stage `sc`:
    Sc(z, i, j) +=! Q(z, i, d) * K(z', j, d)."""
    sd = sc.definition
    zs, is_, js = sd.spatial if len(sd.spatial) == 3 else (None, None, None)
    body = _strip(sd.rhs)
    ok = zs is not None and sd.reduce_op == "+" and len(sd.reduce) == 1 and \
        isinstance(body, A.Binary) and body.op == "*"
    if ok:
        (dd,) = sd.reduce
        ra, rb = _strip(body.a), _strip(body.b)
        ok = isinstance(ra, A.Read) and isinstance(rb, A.Read) and \
            _names(ra) == [zs, is_, dd] and _names(rb)[1:] == [js, dd]
    if not ok:
        _bad(stage, f"its scores '{sc.name}' must be S(z, i, j) +=! Q(z, i, d) * K(z, j, d) "
                    f"(or K(z / g, j, d)), both read K-major")
    g = _group(rb.args[0], zs)
    if g is None:
        _bad(stage, f"its scores read K at ({', '.join(map(str, _names(rb)))}); the matrix of K "
                    f"must be {zs} or {zs} / g")
    for r in (ra, rb):
        if r.tensor not in copies:
            _bad(stage, f"its scores read '{r.tensor}' from global memory; read it through a "
                        f"TMA copy: s.cache_read('{r.tensor}', 'shared', [scores]) computed at "
                        f"a loop of '{stage}', then .tma()")
    return ra.tensor, rb.tensor, g
