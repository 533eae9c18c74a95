"""Stage primitives of the Hopper path (a mixin of primitives.Stage): `tma`
(a shared copy filled by the TMA engine), `persistent` (one block per
multiprocessor walking the output tiles in grouped order), `warp_specialize`
(a producer warpgroup and consumer warpgroups with their register counts)
and `tensorize` with a wgmma intrinsic (`wgmma_m64n{64,128,256}k16`, or k32 for
fp8 inputs: lower/hopper_fp8.py).

Together, on `C(m, n) +=! A(m, k) * B(k, n)` (or B(n, k), A(k, m)):

    m_o, n_o, m_i, n_i = C.tile(m, n, 128, 256)  # block tile
    w, m_w = C.split(m_i, 64)                    # 64 rows per consumer warpgroup
    k_o, k_i = C.split(k, 64)                    # one 128-byte row of 16-bit values
    C.reorder(m_o, n_o, w, k_o, m_w, n_i, k_i)
    for t in ("A", "B"):
        s.cache_read(t, "shared", [C]).compute_at(C, k_o)   # ... then .tma()
    C.pipeline(k_o, stages=4)                    # a ring of 4 slots on full/empty mbarriers
    C.warp_specialize(w, producer_regs=40, consumer_regs=232)
    C.persistent(m_o, n_o, group_m=8)
    C.tensorize(m_w, "wgmma_m64n256k16")

Each checks what it can see when it is called; lower/hopper_plan.py checks
the whole (every part present, the copies where the ring needs them) and
builds the kernel (lower/hopper_gemm.py). docs/schedules.md, "Hopper".
"""
from __future__ import annotations

import re

from ..errors import ScheduleError
from . import directives as D
from .args import as_int
from .stage import SplitRel

WGMMA = re.compile(r"wgmma_m64n(\d+)k(16|32)$")  # k32: fp8 (lower/hopper_fp8.py)
WGMMA_RS = re.compile(r"wgmma_rs_m64n(\d+)k16$")  # A (P) in registers: attention's P . V
WGMMA_N = (64, 128, 256)  # the N the Hopper GEMM builds (lower/hopper_gemm.py)
ATTENTION_BN = (64, 128, 176)  # the keys per step the attention kernel builds (hopper_attention)
ATTENTION_E = (64, 128)  # the columns of its P . V
WGMMA_K_TILE = 64  # k per ring slot: one 128-byte swizzled row of 16-bit values
REG_RANGE = (24, 256)


def split_of(s, leaf: str) -> SplitRel | None:
    """The split that made loop `leaf`, or None."""
    for r in s.relations:
        if isinstance(r, SplitRel) and leaf in (r.outer, r.inner):
            return r
    return None


def looks_like_window(op, d) -> bool:
    """Whether definition `d` of `op` has the shape of a convolution's im2col
    matrix (two indices, no reduction, `cond ? X(4 indices) : 0` over an
    input X); lowering checks the window exactly (lower/im2col.py)."""
    from ..lang.ast import Cast, Const, Read, Select
    rhs = d.rhs
    inputs = {t.name for t in op.inputs}
    other = rhs.b.x if isinstance(rhs, Select) and isinstance(rhs.b, Cast) else \
        getattr(rhs, "b", None)
    return (len(d.spatial) == 2 and not d.reduce and isinstance(rhs, Select)
            and isinstance(rhs.a, Read) and rhs.a.tensor in inputs and len(rhs.a.args) == 4
            and isinstance(other, Const) and other.value == 0)


def _check_window_stage(stage, p):
    """tma() on a computed shared stage: it must look like an im2col matrix."""
    if not looks_like_window(stage._sched.op, stage._s.definition):
        raise ScheduleError(f"{p}: stage '{stage.name}' is computed, not a cache_read copy; "
                            f"the TMA engine computes only a convolution's im2col matrix, "
                            f"A(p, r) = cond ? X(n, h, w, c) : 0 over an input X(N, H, W, C) "
                            f"(docs/hopper.md, \"Convolution\")")


class HopperPrimitives:
    def tma(self, swizzle: int = 128):
        """Fill this shared copy (a cache_read stage) with the TMA engine:
        one thread issues a bulk tensor copy of the whole tile, which
        completes on an mbarrier, in the 128-byte swizzle (the layout wgmma
        reads). Used by the Hopper GEMM (tensorize with wgmma).

        A.shared: for ax0, ax1: A_shared[ax0, ax1] = A[..]
        --tma()-->  A.shared: tma_load_2d(&A_shared[slot, 0, 0], tmA, &full[slot], m0, k0)

        On a stage of the op set to shared scope whose definition is the
        im2col matrix of a convolution (lower/im2col.py gives the form), the
        copies are TMA im2col copies of the input's windows:

        Acol (shared): Acol[p, r] = h >= 0 && ... ? X(n, h, w, r % C) : 0
        --tma()-->  tma_load_im2col_4d(&A_s[slot, 0, 0], tmA, &full[slot], n, h, w, c, kh, kw)
        """
        p = "tma"
        s = self._s
        if s.origin == "statement" and s.scope == "shared":
            _check_window_stage(self, p)
        elif s.origin != "cache_read" or s.scope != "shared":
            raise ScheduleError(f"{p}: stage '{self.name}' is not a shared copy; the TMA engine "
                                f"fills copies made by cache_read(tensor, 'shared', readers), "
                                f"or a convolution's im2col matrix computed in shared memory")
        if swizzle != 128 or isinstance(swizzle, bool):
            raise ScheduleError(f"{p}: swizzle must be 128 (the 128-byte swizzle wgmma reads), "
                                f"got {swizzle!r}")
        if s.transformed() or s.swizzle is not None or s.storage is not None or s.align:
            raise ScheduleError(f"{p}: stage '{self.name}' has loop or storage transformations; "
                                f"the TMA engine copies the tile in its own order and layout "
                                f"(call tma() on the plain copy)")
        self._sched.directives.append(D.Tma(self.name, swizzle))
        s.tma = swizzle

    def persistent(self, outer, inner, group_m: int = 8):
        """Walk the tiles of loops `outer` x `inner` with a persistent grid:
        one block per multiprocessor (the SM count is read at launch), block
        b computing tiles b, b + SMs, ...; consecutive tiles go down `group_m`
        rows of `outer` before the next column of `inner` (grouped order: the
        blocks running at once share their A and B tiles in L2).

        for m_o, n_o: tile(m_o, n_o)
        --persistent(m_o, n_o, group_m=8)-->
            for t in 0:ceil((tiles - blockIdx.x) / SMs): tile = blockIdx.x + t * SMs
                m_o, n_o = grouped(tile, 8); tile(m_o, n_o)
        """
        p = "persistent"
        self._not_inline(p)
        o, i = self._leaf(outer, p, "outer"), self._leaf(inner, p, "inner")
        s = self._s
        g = as_int(group_m)
        if isinstance(group_m, bool) or g is None or not 1 <= g <= 64:
            raise ScheduleError(f"{p}: group_m must be an int from 1 to 64, got {group_m!r}")
        if o == i or s.leaves.index(o) + 1 != s.leaves.index(i):
            raise ScheduleError(f"{p}: '{i}' must be the loop right inside '{o}' (the two loops "
                                f"of the output tiles)")
        for leaf in (o, i):
            if leaf in s.bind or s.kinds[leaf] != "spatial":
                raise ScheduleError(f"{p}: loop '{leaf}' must be a spatial loop that is not "
                                    f"bound (the persistent grid binds the tiles itself)")
        if getattr(s, "persistent", None):
            raise ScheduleError(f"{p}: stage '{self.name}' is persistent already")
        self._sched.directives.append(D.Persistent(self.name, o, i, g))
        s.persistent = (o, i, g)

    def warp_specialize(self, ax, producer_regs: int = 40, consumer_regs: int = 232,
                        pingpong: bool = False):
        """Split the block into roles: one producer warpgroup whose one thread
        issues the TMA copies of the pipelined loop, and one consumer
        warpgroup per iteration of loop `ax` (each computing its part of
        the tile, e.g. 64 rows), the roles synchronised by the ring's
        full/empty mbarriers. `producer_regs` / `consumer_regs`: the registers
        per thread each role keeps (setmaxnreg; multiples of 8 in 24..256).
        `pingpong=True`: two consumer warpgroups take whole tiles in turn
        (tiles 0, 2, ... and 1, 3, ...), each computing every iteration of
        `ax` (the tile's 64-row slabs), so that one's epilogue runs while the
        other's wgmma do (small K, heavy epilogues).

        for w in 0:2: for k_o: mma(w, k_o)
        --warp_specialize(w, 40, 232)-->
            role producer (warpgroup 0, 40 regs): for k_o: wait empty; tma ...
            role consumer (warpgroups 1..2, 232 regs): for k_o: wait full; mma(w, k_o); arrive empty
        """
        p = "warp_specialize"
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        for what, r in (("producer_regs", producer_regs), ("consumer_regs", consumer_regs)):
            n = as_int(r)
            if isinstance(r, bool) or n is None or n % 8 or not REG_RANGE[0] <= n <= REG_RANGE[1]:
                raise ScheduleError(f"{p}: {what} must be a multiple of 8 from {REG_RANGE[0]} to "
                                    f"{REG_RANGE[1]}, got {r!r}")
        rel = split_of(s, name)
        if rel is None or rel.outer != name or s.kinds[name] != "spatial":
            raise ScheduleError(f"{p}: loop '{name}' must be the outer loop of a split of a "
                                f"spatial loop (its iterations are the consumer warpgroups: "
                                f"split m_i by 64 and specialise the outer part)")
        if name in s.bind or name in s.unroll or name in s.vectorize:
            raise ScheduleError(f"{p}: loop '{name}' is bound, unrolled or vectorized; the "
                                f"roles bind it to warpgroups themselves")
        if getattr(s, "roles", None):
            raise ScheduleError(f"{p}: stage '{self.name}' is warp-specialised already")
        if not isinstance(pingpong, bool):
            raise ScheduleError(f"{p}: pingpong must be True or False, got {pingpong!r}")
        self._sched.directives.append(D.WarpSpecialize(self.name, name, int(producer_regs),
                                                       int(consumer_regs), pingpong))
        s.roles = (name, int(producer_regs), int(consumer_regs), pingpong)

    def epilogue(self, stage):
        """Compute the elementwise stage `stage`, which reads this (Hopper)
        stage's result at the same indices, from the accumulators when each
        tile is done: its value (bias, activation, residual, cast, ...) is what
        the TMA-store epilogue writes, into `stage`'s tensor. This stage's
        tensor, a temporary, is then never stored (its scope becomes local:
        the accumulators); other tensors `stage` reads are loaded per element.

        T: for m, n: T[m, n] = sum_k A . B        D: for m, n: D[m, n] = f(T[m, n], bias[n])
        --T.epilogue(D)-->  T: for tiles: acc = sum_k A . B; D[tile] = f(acc, bias[n])  (TMA store)

        A stage that reads only the (M, L) statistics stage online_softmax
        leaves (attention's log-sum-exp) is computed from this stage's running
        max and sum instead (schedule/statistics_epilogue.py).
        """
        p = "epilogue"
        sched = self._sched
        if not isinstance(stage, type(self)) or stage._sched is not sched:
            raise ScheduleError(f"{p}: stage must be a Stage of the same schedule, got {stage!r}")
        s, e = self._s, stage._s
        t, d = s.definition, e.definition
        if stage.name == self.name:
            raise ScheduleError(f"{p}: stage '{self.name}' cannot be its own epilogue")
        from . import statistics_epilogue as SE
        stats = SE.statistics_stage(sched, s, e)
        if stats is not None:  # over the running statistics (attention's log-sum-exp)
            SE.attach(self, stage, stats)
            self._sched.directives.append(D.Epilogue(self.name, stage.name))
            return
        if getattr(s, "epilogue", None):
            raise ScheduleError(f"{p}: stage '{self.name}' has the epilogue '{s.epilogue}' already")
        if e.attach != ("root",) or e.transformed():
            raise ScheduleError(f"{p}: stage '{stage.name}' must be unscheduled (computed at "
                                f"root, no loop transformations): the kernel of "
                                f"'{self.name}' computes it from the accumulators")
        if d.reduce or len(d.spatial) != len(t.spatial) or d.reduce_op is not None:
            raise ScheduleError(f"{p}: stage '{stage.name}' must be elementwise over the indices "
                                f"of '{self.name}' (no reduction)")
        op = sched.op
        outs = {x.name for x in op.outputs + op.inputs}
        for tensor in t.tensors:  # a tuple stage (online softmax's O.online): each component
            if tensor in outs:
                raise ScheduleError(f"{p}: '{tensor}' is an output of '{op.name}'; only a "
                                    f"temporary's values can stay in the accumulators")
            others = [r for r in sched.readers(tensor) if r != stage.name]
            if others or len(sched.writers(tensor)) != 1:
                raise ScheduleError(f"{p}: '{tensor}' is also "
                                    + (f"read by stage '{others[0]}'" if others else
                                       "written by another statement")
                                    + f"; an epilogue must be its only use")
            bad = _reads_elsewhere(d, tensor)
            if bad:
                raise ScheduleError(f"{p}: stage '{stage.name}' reads '{tensor}' at ({bad}), "
                                    f"not at its own indices ({', '.join(d.spatial)})")
        self._sched.directives.append(D.Epilogue(self.name, stage.name))
        s.epilogue = stage.name
        e.attach = ("epilogue", self.name)
        _in_registers(sched, s, t.tensors)

    def _tensorize_wgmma(self, ax, intrin: str):
        """tensorize(ax, "wgmma_m64nNk16"): the loops from `ax` inward (64 rows
        of m, N columns of n, 64 of k, in any order) computed by wgmma from
        the shared tiles, accumulating in the warpgroup's registers."""
        from .primitives_compute import _root_and_extent
        p = "tensorize"
        name = self._leaf(ax, p)
        s = self._s
        m = WGMMA.match(intrin)
        n = int(m.group(1)) if m else 0
        ns = ATTENTION_BN if s.attach[0] == "at" else WGMMA_N
        if m and m.group(2) == "32" and s.attach[0] == "at":
            raise ScheduleError(f"{p}: {intrin} (fp8) is built for the Hopper GEMM; a stage "
                                f"computed at another's loop takes wgmma_m64nNk16 (bfloat16 "
                                f"or float16)")
        if n not in ns:
            kk = m.group(2) if m else "16"  # (k32: the fp8 names)
            raise ScheduleError(f"{p}: unknown intrinsic {intrin!r}; the Hopper path takes "
                                f"{', '.join(f'wgmma_m64n{x}k{kk}' for x in ns)}"
                                + (" for a stage computed at another's loop (attention's "
                                   "scores)" if ns is ATTENTION_BN else ""))
        d = s.definition
        if (s.scope != "global" and not s.epilogue) or s.origin != "statement":
            raise ScheduleError(f"{p}: {intrin} accumulates in the warpgroup's registers and "
                                f"stores the tile itself: tensorize the stage of the statement "
                                f"'{self.name}' (no cache_write)")
        if s.attach[0] == "at":
            self._wgmma_at(name, intrin)
            return
        roles = contraction_roles(d)
        if isinstance(roles, str):
            raise ScheduleError(f"{p}: stage '{self.name}': {roles} ({intrin} computes "
                                f"C[m, n] += A[m, k] * B[n, k] with A and B in either order)")
        a, b = roles[0], roles[2]
        dts = [self._sched.tensors[t][0].name for t in (a, b)]
        from .wgmma_inputs import check_wgmma_inputs
        k_tile = check_wgmma_inputs(intrin, m.group(2), roles, dts, d)
        if (d.acc_dtype.name if d.acc_dtype else "") != "float32":
            raise ScheduleError(f"{p}: {intrin} accumulates in float32, stage '{self.name}' in "
                                f"{d.acc_dtype}")
        want = {d.spatial[-2]: 64, d.spatial[-1]: n, d.reduce[0]: k_tile}
        inner = s.leaves[s.leaves.index(name):]
        seen = set()
        for leaf in inner:
            if leaf in s.bind or leaf in s.vectorize or leaf in s.unroll or leaf in s.tensorize:
                raise ScheduleError(f"{p}: loop '{leaf}' inside '{name}' is bound, unrolled, "
                                    f"vectorized or tensorized already")
            root, extent = _root_and_extent(s, leaf)
            if root not in want or root in seen or split_of(s, leaf) is None or \
                    split_of(s, leaf).inner != leaf:
                raise ScheduleError(f"{p}: the loops from '{name}' inward must be the inner loops "
                                    f"of splits of {', '.join(want)}, one each; '{leaf}' is not "
                                    f"(or compute the stage at a consumer's loop first: its "
                                    f"tile is then the region that loop needs)")
            if extent != want[root]:
                raise ScheduleError(f"{p}: loop '{leaf}' (of '{root}') has "
                                    f"{extent if extent is not None else 'a variable number of'} "
                                    f"iterations; {intrin} needs {want[root]} (split "
                                    f"'{root}' by {want[root]})")
            seen.add(root)
        missing = [r for r in want if r not in seen]
        if missing:
            raise ScheduleError(f"{p}: no loop of '{missing[0]}' from '{name}' inward; {intrin} "
                                f"needs the m, n and k loops of its tile there (reorder them "
                                f"innermost)")
        self._sched.directives.append(D.Tensorize(self.name, name, intrin))
        s.tensorize[name] = intrin


    def _wgmma_at(self, name, intrin):
        """tensorize with wgmma a stage computed at a consumer's loop (attention's
        scores at the key loop of its online softmax): the tile is the region that
        loop needs, so the loops from `name` inward are the stage's own m, n and k,
        unsplit (their extents, 64 x N x all of k, are checked when lowered); the
        result stays in the warpgroup's registers, which the consumer reads. The
        operands' outer subscripts may be expressions (K(z / g, j, d): the
        consumer's plan matches them)."""
        from ..lang.ast import Binary, Cast, Index, Read
        p = "tensorize"
        s = self._s
        d = s.definition
        if d.reduce_op != "+" or len(d.spatial) < 2 or len(d.reduce) != 1:
            raise ScheduleError(f"{p}: stage '{self.name}': it is not a sum over one reduction "
                                f"axis into rows and columns ({intrin} computes C[m, n] += "
                                f"A[m, k] * B[n, k])")

        def strip(x):
            while isinstance(x, Cast):
                x = x.x
            return x
        e = strip(d.rhs)
        reads = [strip(x) for x in (e.a, e.b)] if isinstance(e, Binary) and e.op == "*" else []
        if len(reads) != 2 or not all(isinstance(r, Read) and len(r.args) >= 2 and all(
                isinstance(a, Index) for a in r.args[-2:]) for r in reads):
            raise ScheduleError(f"{p}: stage '{self.name}': its value is not a product of two "
                                f"tensor reads at plain loop variables ({intrin} computes "
                                f"C[m, n] += A[m, k] * B[n, k])")
        dts = [self._sched.tensors[r.tensor][0].name for r in reads]
        if dts[0] != dts[1] or dts[0] not in ("bfloat16", "float16"):
            raise ScheduleError(f"{p}: {intrin} takes bfloat16 or float16 inputs (both the "
                                f"same), but '{reads[0].tensor}' and '{reads[1].tensor}' are "
                                f"{dts[0]} and {dts[1]}")
        if (d.acc_dtype.name if d.acc_dtype else "") != "float32":
            raise ScheduleError(f"{p}: {intrin} accumulates in float32, stage '{self.name}' in "
                                f"{d.acc_dtype}")
        inner = s.leaves[s.leaves.index(name):]
        roots = [d.spatial[-2], d.spatial[-1], d.reduce[0]]
        for leaf in inner:  # (before the shape check, which transformed() would also trip)
            if leaf in s.bind or leaf in s.vectorize or leaf in s.unroll:
                raise ScheduleError(f"{p}: loop '{leaf}' inside '{name}' is bound, unrolled or "
                                    f"vectorized already")
        if sorted(inner) != sorted(roots) or s.transformed():
            raise ScheduleError(f"{p}: stage '{self.name}' is computed at loop "
                                f"'{s.attach[2]}' of '{s.attach[1]}': its tile is the region "
                                f"that loop needs, so the loops from '{name}' inward must be "
                                f"its own {', '.join(roots)}, unsplit and innermost; they are "
                                f"{', '.join(inner)}")
        if s.tensor in {x.name for x in self._sched.op.outputs + self._sched.op.inputs}:
            raise ScheduleError(f"{p}: '{s.tensor}' is an output of '{self._sched.op.name}'; a "
                                f"stage computed at another's loop keeps its tile in registers "
                                f"(a temporary)")
        states = self._sched.states
        others = [r for r in self._sched.readers(s.tensor) if r != s.attach[1] and
                  states[r].attach != ("epilogue", s.attach[1])]  # (its running statistics)
        if others:
            raise ScheduleError(f"{p}: '{s.tensor}' is also read by stage '{others[0]}'; its "
                                f"tile stays in the registers of '{s.attach[1]}', which must "
                                f"be its only reader (or its statistics: epilogue(...) of a "
                                f"stage over them first)")
        self._sched.directives.append(D.Tensorize(self.name, name, intrin))
        s.tensorize[name] = intrin
        _in_registers(self._sched, s, (s.tensor,))

    def _tensorize_wgmma_rs(self, ax, intrin: str):
        """tensorize(ax, "wgmma_rs_m64nNk16") on the weighted sum of an online
        softmax (the tuple stage Schedule.online_softmax makes, e.g. attention's
        O.online): O += P . V per key block with P = exp(x - m) in registers
        (wgmma's register-A form; x the scores of a stage tensorized with wgmma
        at the key loop) and V from shared memory. The loops from `ax` inward:
        64 rows (the inner loop of a split of the rows by 64), the weighted sum's
        own columns e (unsplit: N is all of them) and the keys of one block (the
        inner loop of a split of the key axis), in that order."""
        from .primitives_compute import _root_and_extent
        from ..lang.ast import Cast, Index, Read
        p = "tensorize"
        self._not_inline(p)
        name = self._leaf(ax, p)
        s = self._s
        m = WGMMA_RS.match(intrin)
        n = int(m.group(1)) if m else 0
        if n not in ATTENTION_E:
            raise ScheduleError(f"{p}: unknown intrinsic {intrin!r}; the register-A form takes "
                                f"{', '.join(f'wgmma_rs_m64n{x}k16' for x in ATTENTION_E)}")
        d = s.definition
        if d.monoid != "expsum" or len(d.tensors) != 3:
            raise ScheduleError(f"{p}: {intrin} computes the weighted sum of an online softmax "
                                f"(P . V with P in registers): tensorize the stage "
                                f"Schedule.online_softmax made for a weighted sum (e.g. "
                                f"'O.online'); '{self.name}' is not one")
        if len(d.spatial) < 2 or len(d.reduce) != 1:
            raise ScheduleError(f"{p}: stage '{self.name}' reduces over "
                                f"{', '.join(d.reduce)} at ({', '.join(d.spatial)}); {intrin} "
                                f"takes rows, columns and one key axis")
        rows, cols, (keys,) = d.spatial[-2], d.spatial[-1], d.reduce
        w = d.rhs.items[1]
        while isinstance(w, Cast):
            w = w.x
        if not (isinstance(w, Read) and [a.name if isinstance(a, Index) else None
                                         for a in w.args[-2:]] == [keys, cols]):
            raise ScheduleError(f"{p}: the weights of '{self.name}' must be a tensor read at "
                                f"(..., {keys}, {cols}) (V in P . V), read from shared memory")
        if self._sched.tensors[w.tensor][0].name not in ("bfloat16", "float16"):
            raise ScheduleError(f"{p}: {intrin} takes bfloat16 or float16 weights; "
                                f"'{w.tensor}' is {self._sched.tensors[w.tensor][0]}")
        inner = s.leaves[s.leaves.index(name):]
        got = [_root_and_extent(s, leaf) for leaf in inner]
        ok = (len(inner) == 3 and got[0] == (rows, 64) and split_of(s, inner[0]).inner == inner[0]
              and got[1][0] == cols and inner[1] == cols and got[2][0] == keys
              and split_of(s, inner[2]) is not None and split_of(s, inner[2]).inner == inner[2])
        if not ok:
            raise ScheduleError(f"{p}: the loops from '{name}' inward must be 64 rows (the "
                                f"inner loop of a split of '{rows}' by 64), the columns "
                                f"'{cols}' (unsplit) and one block of keys (the inner loop of "
                                f"a split of '{keys}'), in that order; they are "
                                f"{', '.join(inner)}")
        for leaf in inner:
            if leaf in s.bind or leaf in s.vectorize or leaf in s.unroll or leaf in s.tensorize:
                raise ScheduleError(f"{p}: loop '{leaf}' inside '{name}' is bound, unrolled, "
                                    f"vectorized or tensorized already")
        self._sched.directives.append(D.Tensorize(self.name, name, intrin))
        s.tensorize[name] = intrin


def _in_registers(sched, st, tensors) -> None:
    """Stage `st`'s `tensors` kept in registers (scope local: never stored)."""
    for tensor in tensors:
        dtype, shape, _ = sched.tensors[tensor]
        sched.tensors[tensor] = (dtype, shape, "local")
    st.scope = "local"


def _reads_elsewhere(d, tensor) -> str:
    """The subscripts of a read of `tensor` in `d` that are not d's own
    spatial indices in order ("" when every read is)."""
    from ..lang.ast import Index, Read, walk
    exprs = [d.rhs, *d.lets.values()]
    for x in (y for e in exprs for y in walk(e)):
        if isinstance(x, Read) and x.tensor == tensor:
            names = [a.name if isinstance(a, Index) else None for a in x.args]
            if names != list(d.spatial):
                return ", ".join(n or "an expression" for n in names)
    return ""


def contraction_roles(d):
    """(A, A's subscripts, B, B's subscripts) when `d` computes
    C[(z,) m, n] += A[.] * B[.] with A read at ((z,) m, k) or ((z,) k, m)
    and B at ((z,) n, k) or ((z,) k, n), casts allowed: at most one batch
    axis z, outermost, which an operand may also not have (one operand shared
    by the whole batch); else a sentence saying what it computes instead."""
    from ..lang.ast import Binary, Cast, Index, Read
    if d.reduce_op != "+" or len(d.spatial) not in (2, 3) or len(d.reduce) != 1:
        if d.reduce_op == "+" and len(d.spatial) > 3 and len(d.reduce) == 1:
            return (f"it is a product batched over {', '.join(d.spatial[:-2])}; the Hopper "
                    f"path takes one batch axis (fuse them in the comprehension, or tensorize "
                    f"with mma_m16n8k16)")
        return "it is not a sum over one reduction axis into two spatial axes"
    m, n = d.spatial[-2:]
    z = d.spatial[0] if len(d.spatial) == 3 else None
    (k,) = d.reduce

    def strip(x):
        while isinstance(x, Cast):
            x = x.x
        return x
    e = strip(d.rhs)
    if not (isinstance(e, Binary) and e.op == "*"):
        return "its value is not a product of two tensor reads"

    def read(x):
        x = strip(x)
        if not isinstance(x, Read) or len(x.args) not in (2, 3) or \
                not all(isinstance(i, Index) for i in x.args):
            return None
        names = tuple(i.name for i in x.args)
        if len(names) == 3 and (z is None or names[0] != z):
            return None
        return x.tensor, names
    ra, rb = read(e.a), read(e.b)
    if ra is None or rb is None:
        return ("its factors are not reads of two tensors at plain loop variables (2-D, or "
                "3-D with the batch axis first)")
    for first, second in ((ra, rb), (rb, ra)):
        if set(first[1][-2:]) == {m, k} and set(second[1][-2:]) == {n, k}:
            if z is not None and len(first[1]) == 2 and len(second[1]) == 2:
                return f"neither factor is read at the batch axis {z}"
            return first[0], first[1], second[0], second[1]
    return (f"its factors are read at ({', '.join(ra[1])}) and ({', '.join(rb[1])}), not at "
            f"(m, k) and (n, k) in either order")
