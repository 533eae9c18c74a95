"""Kernel IR verifier, run between passes in tests (and on request).

Checks: every variable is defined (loop, let, size parameter, thread/block
index); every Load/Store/Ref names a known buffer with the right number of
subscripts (before flattening); every intrinsic is registered and takes an
address (`Ref`) exactly where its entry says, and a Ref appears nowhere
else; no collective intrinsic (barrier, cross-thread reduction) sits under
a condition that depends on the thread index (not every thread would reach
it), no warp-collective one under a condition that depends on the lane
(threadIdx.x); a vectorized loop's vector accesses are its body's, at
offsets defined outside the loop.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..arch import threads
from . import intrinsics, ir
from .printer import expr as show
from .rewriter import Visitor

THREAD_VARS = threads.INDEX_VARS


def verify(k: ir.Kernel, program: ir.Program, flat: bool = False) -> None:
    v = _Verify(k, program, flat)
    for g in k.grid + k.block:
        v.check_expr(g, v.defined)
    v.visit(k.body)


class _Verify(Visitor):
    def __init__(self, k: ir.Kernel, program: ir.Program, flat: bool):
        self.k, self.flat = k, flat
        self.shapes = {b.name: len(b.shape) for b in program.buffers}
        self.defined = (set(THREAD_VARS) | set(program.sizes) | set(k.sizes)
                        | {m.name for m in k.tensor_maps})
        # What is in scope, which variables depend on the thread index, and
        # whether a thread-dependent condition encloses the statement.
        self.scope = self.defined
        self.tdep = {a.name for a in threads.THREAD}
        self.divergent = False
        # The same for the lane (threadIdx.x): what warp-collective intrinsics need.
        self.lane_dep = {threads.THREAD[0].name}
        self.lane_divergent = False
        self.operands = set()  # ids of the Refs intrinsics take as address operands

    def check_expr(self, e, scope):
        for x in ir.walk_expr(e):
            if isinstance(x, ir.Var) and x.name not in scope:
                raise LoweringError(f"kernel {self.k.name}: variable '{x.name}' used but not "
                                    f"defined")
            if isinstance(x, (ir.Load, ir.Ref)):
                self.check_buf(x.buffer, len(x.indices))
            if isinstance(x, ir.Ref) and id(x) not in self.operands:
                raise LoweringError(f"kernel {self.k.name}: {show(x)} is an address, usable "
                                    f"only as an operand of an intrinsic that takes one")

    def check_buf(self, name, n):
        if name not in self.shapes:
            raise LoweringError(f"kernel {self.k.name}: unknown buffer '{name}'")
        if not self.flat and self.shapes[name] != n:
            raise LoweringError(f"kernel {self.k.name}: buffer '{name}' has {self.shapes[name]} "
                                f"dimensions but is accessed with {n} subscripts")

    def generic_visit(self, s):
        # A statement's own expressions are checked in the current scope; its
        # statements are visited (those defining a variable have their own method).
        for c in ir.children(s):
            if isinstance(c, ir.Expr):
                self.check_expr(c, self.scope)
            else:
                self.visit(c)

    def _in(self, body, scope=None, tdep=None, divergent=None, lane_dep=None,
            lane_divergent=None):
        saved = self.scope, self.tdep, self.divergent, self.lane_dep, self.lane_divergent
        self.scope = saved[0] if scope is None else scope
        self.tdep = saved[1] if tdep is None else tdep
        self.divergent = saved[2] if divergent is None else divergent
        self.lane_dep = saved[3] if lane_dep is None else lane_dep
        self.lane_divergent = saved[4] if lane_divergent is None else lane_divergent
        try:
            self.visit(body)
        finally:
            self.scope, self.tdep, self.divergent, self.lane_dep, self.lane_divergent = saved

    def visit_Store(self, s):
        self.check_buf(s.buffer, len(s.indices))
        self.generic_visit(s)

    def visit_For(self, s):
        self.check_expr(s.lo, self.scope)
        self.check_expr(s.extent, self.scope)
        if s.vector is not None:
            self.check_vector(s)
        # a trip count that differs between threads (a region that moves with the
        # thread) makes the body divergent: a barrier inside is reached a different
        # number of times (fuzz seed 10 pair 5951: a shared copy inside such a loop)
        used = ir.free_vars(s.lo) | ir.free_vars(s.extent)
        div = True if used & self.tdep else None
        lane = True if used & self.lane_dep else None
        self._in(s.body, scope=self.scope | {s.var}, divergent=div, lane_divergent=lane)

    def check_vector(self, s):
        """The vector accesses name the loop's own store and loads; their lane-0
        offsets do not vary with the loop."""
        k, v = self.k, s.vector
        if not isinstance(s.body, ir.Store) or (v.store_base is None and not v.loads):
            raise LoweringError(f"kernel {k.name}: vectorized loop '{s.var}' carries vector "
                                f"accesses but its body is not one store with them")
        reads = set(ir.walk_expr(s.body.value))
        for ld in v.loads:
            if ld not in reads:
                raise LoweringError(f"kernel {k.name}: vectorized loop '{s.var}' names a vector "
                                    f"load of '{ld.buffer}' that its body does not read")
        for base in v.load_bases + ((v.store_base,) if v.store_base is not None else ()):
            self.check_expr(base, self.scope)

    def visit_Let(self, s):
        self.check_expr(s.value, self.scope)
        used = ir.free_vars(s.value)
        self._in(s.body, scope=self.scope | {s.var},
                 tdep=self.tdep | {s.var} if used & self.tdep else None,
                 lane_dep=self.lane_dep | {s.var} if used & self.lane_dep else None)

    def visit_If(self, s):
        self.check_expr(s.cond, self.scope)
        used = ir.free_vars(s.cond)
        div = self.divergent or bool(used & self.tdep)
        lane = self.lane_divergent or bool(used & self.lane_dep)
        self._in(s.then, divergent=div, lane_divergent=lane)
        if s.else_ is not None:
            self._in(s.else_, divergent=div, lane_divergent=lane)

    def visit_Specialize(self, s):
        """Roles: warpgroups of the block, none shared, all covered; a role's
        body runs on some threads only (a block-wide collective there is
        refused), uniform per warpgroup (warp and warpgroup collectives are
        not)."""
        name, taken = self.k.name, set()
        if self.divergent:
            raise LoweringError(f"kernel {name}: a Specialize under a thread-dependent "
                                f"condition (every thread of the block must reach it)")
        for r in s.roles:
            mine = set(range(r.first, r.first + r.count))
            if r.count < 1 or r.first < 0 or mine & taken:
                raise LoweringError(f"kernel {name}: role '{r.name}' takes warpgroups "
                                    f"{r.first}..{r.first + r.count - 1}, overlapping another "
                                    f"role or empty")
            if r.regs and (r.regs % 8 or not 24 <= r.regs <= 256):
                raise LoweringError(f"kernel {name}: role '{r.name}' asks for {r.regs} "
                                    f"registers per thread; setmaxnreg takes a multiple of 8 "
                                    f"in 24..256")
            taken |= mine
        block = self.k.const_block()
        if block is None or block[1:] != (1, 1) or block[0] != 128 * len(taken) \
                or taken != set(range(len(taken))):
            raise LoweringError(f"kernel {name}: the roles cover warpgroups {sorted(taken)}, but "
                                f"the block is {block}: a Specialize needs a constant block of "
                                f"128 threads along x per warpgroup, each in one role")
        for r in s.roles:
            self._in(r.body, scope=self.scope | {r.var}, divergent=True)

    def visit_Alloc(self, s):
        self.shapes[s.buffer.name] = len(s.buffer.shape)
        self.visit(s.body)

    def visit_AllReduce(self, s):
        self.check_buf(s.buffer, 1)
        self.check_expr(s.extent, self.defined)
        self.check_intrinsic(s)

    def visit_Barrier(self, s):
        self.check_intrinsic(s)

    def visit_Evaluate(self, s):
        self.check_intrinsic(s)
        self.generic_visit(s)

    def check_intrinsic(self, s):
        """A registered intrinsic, with an address exactly where its entry takes
        one, and a collective one reached by every thread (no thread-dependent
        condition around it)."""
        entry = intrinsics.of(s)
        name = self.k.name
        if entry is None:
            raise LoweringError(f"kernel {name}: '{s.call.fn}' is not a registered intrinsic "
                                f"(tcomp/lower/intrinsics.py)")
        if isinstance(s, ir.Evaluate):
            args = s.call.args
            if len(args) != len(entry.operands):
                raise LoweringError(f"kernel {name}: intrinsic '{entry.name}' takes "
                                    f"{len(entry.operands)} operands, got {len(args)}")
            for op, a in zip(entry.operands, args):
                if op.ref != isinstance(a, ir.Ref):
                    raise LoweringError(f"kernel {name}: operand '{op.name}' of intrinsic "
                                        f"'{entry.name}' must be "
                                        f"{'an address (Ref)' if op.ref else 'a value'}, got "
                                        f"{show(a)}")
                self.operands.add(id(a))
        # A warp-wide one may sit under a condition uniform across a warp's
        # lanes (threadIdx.y, with warps along x); the sim checks whole warps.
        if ("block_collective" in entry.effects and self.divergent) or (
                entry.effects & {"warp_collective", "warpgroup_collective"}
                and self.lane_divergent):
            raise LoweringError(f"kernel {name}: {entry.what} under a thread-dependent "
                                f"condition")
