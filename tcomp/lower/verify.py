"""Kernel IR verifier, run between passes in tests (and on request).

Checks: every variable is defined (loop, let, size parameter, thread/block
index); every Load/Store/Ref names a known buffer with the right number of
subscripts (before flattening); every intrinsic is registered and takes an
address (`Ref`) exactly where its entry says, and a Ref appears nowhere
else; no collective intrinsic (barrier, cross-thread reduction) sits under
a condition that may differ within the group the intrinsic needs together
(not every thread of it would reach it); a vectorized loop's vector
accesses are its body's, at offsets defined outside the loop.

Divergence is read off the uniformity lattice (arch/hierarchy.py, through
uniformity.py): each enclosing condition, loop bound and role has a
uniformity, and `under`, the least uniform of them, must be at least as
uniform as the intrinsic's group: BLOCK for a block-wide one (barrier,
cross-thread reduction, block scan), WARPGROUP for a warpgroup-wide one
(wgmma), WARP for a warp-wide one (mma.sync, ldmatrix, quad reductions). So
a barrier under `threadIdx.x / 128 == 0` (one warpgroup's condition) is
refused, wgmma there is not; a warp-wide intrinsic may sit under a condition
on threadIdx.y when blockDim.x is a multiple of 32; a role's body is
WARPGROUP-uniform (its warpgroups run it, the others do not).
"""
from __future__ import annotations

from ..errors import LoweringError
from ..arch import threads
from ..arch.hierarchy import Uniformity
from . import intrinsics, ir, uniformity
from .printer import expr as show
from .rewriter import Visitor

THREAD_VARS = threads.INDEX_VARS
# effect -> the group that must reach an intrinsic with it together
GROUP = {"block_collective": Uniformity.BLOCK, "warpgroup_collective": Uniformity.WARPGROUP,
         "warp_collective": Uniformity.WARP}
_WITHIN = {Uniformity.WARPGROUP: "it is uniform only within a warpgroup",
           Uniformity.WARP: "it is uniform only within a warp",
           Uniformity.THREAD: "it may differ between any two threads"}


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
        # What is in scope, the uniformity of the variables in it that are not
        # index registers, and `under`: the least uniform of the conditions, loop
        # bounds and roles around the statement (uniformity.py).
        self.scope = self.defined
        self.block = uniformity.block_extents(k)
        self.known = {n: Uniformity.GRID for n in self.defined - THREAD_VARS}
        self.under = Uniformity.GRID
        self.registers = {b.name for b in program.buffers
                          if b.scope in uniformity.REGISTER_SCOPES}
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

    def uniformity(self, e) -> Uniformity:
        return uniformity.of(e, self.block, self.known, self.registers)

    def _in(self, body, define=None, under=Uniformity.GRID):
        """Visit `body` with `define` (var -> its uniformity) in scope and
        `under` joined into the uniformity of what encloses it."""
        saved = self.scope, self.known, self.under
        if define:
            self.scope = self.scope | set(define)
            self.known = {**self.known, **define}
        self.under = max(self.under, under)
        try:
            self.visit(body)
        finally:
            self.scope, self.known, self.under = saved

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
        bounds = max(self.uniformity(s.lo), self.uniformity(s.extent))
        var = bounds
        if s.tag is not None:  # (before bind_threads) the loop over an index register
            var = max(bounds, self.uniformity(ir.Var(s.tag.name)))
        self._in(s.body, define={s.var: var}, under=bounds)

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
        self._in(s.body, define={s.var: self.uniformity(s.value)})

    def visit_If(self, s):
        self.check_expr(s.cond, self.scope)
        cond = self.uniformity(s.cond)
        self._in(s.then, under=cond)
        if s.else_ is not None:
            self._in(s.else_, under=cond)

    def visit_Specialize(self, s):
        """Roles: warpgroups of the block, none shared, all covered; a role's
        body runs on some threads only (a block-wide collective there is
        refused), uniform per warpgroup (warp and warpgroup collectives are
        not)."""
        name, taken = self.k.name, set()
        if self.under > Uniformity.BLOCK:
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
            self._in(r.body, define={r.var: Uniformity.WARPGROUP}, under=Uniformity.WARPGROUP)

    def visit_Alloc(self, s):
        self.shapes[s.buffer.name] = len(s.buffer.shape)
        if s.buffer.scope in uniformity.REGISTER_SCOPES:
            self.registers.add(s.buffer.name)
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
        one, and a collective one reached by every thread of its group (what
        encloses it is uniform within the group)."""
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
        for effect in sorted(entry.effects & set(GROUP)):
            if self.under > GROUP[effect]:
                raise LoweringError(f"kernel {name}: {entry.what} under a thread-dependent "
                                    f"condition ({_WITHIN[self.under]}; every thread of the "
                                    f"{GROUP[effect]} must reach it)")
