"""The walk of one kernel body that features.py reads its counts from: per
thread, every node weighted by the trip counts of the loops around it, with
the coalescing of each global access (two neighbouring lanes' addresses),
the vector accesses `vectorize` would make, and the guards that unrolling
decides (features.py's docstring says what is counted and why)."""
from __future__ import annotations

import dataclasses
import itertools
import math

from ..lower import intrinsics, ir, vectorize
from ..lower.rewriter import Rewriter

SCOPES = ("global", "shared", "local", "fragment")
_SUMMED = (["flops", "special", "mma_flops", "int_ops"]
           + [f"{s}_{d}_bytes" for s in SCOPES for d in ("load", "store")]
           + ["global_sector_bytes", "global_vector_bytes", "unique_global_bytes",
              "mma", "ldmatrix", "cp_async", "cp_async_bytes", "barriers", "allreduce",
              "stores", "mem_instructions", "inflight_bytes"])

_FLOAT_OPS = frozenset({"+", "-", "*", "/", "min", "max"})
_MMA_FLOPS = {"mma_m16n8k16": 2 * 16 * 8 * 16}


# ------------------------------------------------------------------ one kernel
class _Walk:
    """Per-thread counts of one kernel body (weights: enclosing trip counts).
    `flat`: whether subscripts are flat (else vector accesses are predicted)."""

    def __init__(self, scopes: dict, sizes: dict, lane_var: str | None, flat: bool = True,
                 threads: int | None = None):
        self.flat = flat
        self.threads = threads  # of the block: a Role's share of them runs its body
        self.scopes = dict(scopes)
        self.c = {n: 0.0 for n in _SUMMED}
        self.sector_bytes = 0.0
        self.vector_bytes = 0
        self.stages = 0
        self.unroll = 1
        self.unrolled: dict[str, range] = {}  # unrolled loops around: var -> its values
        self.unroll_lets: dict[str, ir.Expr] = {}  # lets over those (and sizes) only
        self.size_names = set(sizes)
        self.touched = set()
        self.lane_var = lane_var
        self.vector_lanes = 1  # lanes of the vector loops around: one thread's contiguous piece
        # trips of the serial loops around (over their pipeline depth): a thread's loads in
        # one such trip are independent of each other, so in flight together
        self.serial = 1.0
        # two evaluation environments: lane 0 and its neighbour along the lane axis
        self.env0 = {k: int(v) for k, v in sizes.items()}
        self.env1 = dict(self.env0)
        for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z", "blockIdx.x", "blockIdx.y",
                  "blockIdx.z"):
            self.env0[t] = self.env1[t] = 0
        if lane_var is not None:
            self.env1[lane_var] = 1

    def stmt(self, s, w: float, unroll: int) -> None:
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, w, unroll)
        elif isinstance(s, ir.For):
            n = _eval(s.extent, self.env0)
            n = max(0, n) if n is not None else 1
            lo0 = _eval(s.lo, self.env0)
            lo1 = _eval(s.lo, self.env1)
            self.env0[s.var] = lo0 if lo0 is not None else 0
            self.env1[s.var] = lo1 if lo1 is not None else self.env0[s.var]
            self.stages = max(self.stages, s.stages)
            if s.kind == "thread":  # iterations are threads, counted by the launch
                n = 1
            u = unroll * n if s.kind == "unroll" else unroll
            self.unroll = max(self.unroll, u)
            vector = s.vector
            if vector is None and s.kind == "vectorize" and not self.flat:
                vector = self._predict_vector(s)
            if vector is not None:
                self.vector_bytes = max(self.vector_bytes, vector.bytes)
                vec = vector.bytes * (len(vector.loads) + (vector.store_base is not None))
                if self._scope_of_vector(vector) == "global":
                    self.c["global_vector_bytes"] += w * vec
            copies = s.kind == "unroll" and lo0 is not None and _eval(s.extent, {}) is not None
            if copies:  # the unroll pass will make a copy per value: guards may decide
                self.unrolled[s.var] = range(lo0, lo0 + n)
            lanes, serial = self.vector_lanes, self.serial
            if vector is not None:
                self.vector_lanes = lanes * max(1, n)
            if s.kind == "serial":
                self.serial = serial * max(1.0, n / max(1, s.stages))
            self.stmt(s.body, w * n, u)
            self.vector_lanes, self.serial = lanes, serial
            if copies:
                del self.unrolled[s.var]
        elif isinstance(s, ir.Let):
            self.env0[s.var] = _eval(s.value, self.env0)
            self.env1[s.var] = _eval(s.value, self.env1)
            self.expr(s.value, w)
            known = ir.free_vars(s.value) <= self._decidable()
            if known:
                self.unroll_lets[s.var] = s.value
            self.stmt(s.body, w, unroll)
            if known:
                del self.unroll_lets[s.var]
        elif isinstance(s, ir.Alloc):
            self.scopes[s.buffer.name] = (s.buffer.scope, s.buffer)
            self.stmt(s.body, w, unroll)
        elif isinstance(s, ir.If):
            self.expr(s.cond, w)
            taken, decided = self._guard(s.cond)
            self.stmt(s.then, w * taken, unroll)
            if s.else_ is not None:
                self.stmt(s.else_, w * (1 - taken if decided else 1), unroll)
        elif isinstance(s, ir.Store):
            self.c["stores"] += w
            self._access(s.buffer, s.indices, _bytes(self._dtype(s.buffer, s.value.dtype)), w,
                         "store")
            for e in s.indices:
                self.expr(e, w)
            self.expr(s.value, w)
        elif isinstance(s, ir.Barrier):
            self.c["barriers"] += w
        elif isinstance(s, ir.AllReduce):
            self.c["allreduce"] += w
        elif isinstance(s, ir.Evaluate):
            self._intrinsic(s.call, w)
        elif isinstance(s, ir.Role):
            # counts are per thread of the block: a role's body runs on its warpgroups
            # only (a producer's copies are not every thread's); its index at the
            # role's first warpgroup, as lane 0 stands for the threads
            share = 128 * s.count / self.threads if self.threads else 1.0
            self.env0[s.var] = self.env1[s.var] = 0
            self.stmt(s.body, w * min(1.0, share), unroll)
        else:  # any other statement: its children
            for c in ir.children(s):
                if isinstance(c, ir.Stmt):
                    self.stmt(c, w, unroll)
                else:
                    self.expr(c, w)

    def expr(self, e, w: float) -> None:
        known = self._decidable() if self.unrolled else None
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, ir.Bin):
                if x.dtype.is_float and x.op in _FLOAT_OPS:
                    self.c["flops"] += w
                elif known is not None and _constant(x, known):
                    continue  # a constant in every unrolled copy: folded, no operation
                else:
                    self.c["int_ops"] += w / self.vector_lanes  # once per vector
            elif isinstance(x, ir.Call):
                if x.fn not in intrinsics.REGISTRY:
                    self.c["special"] += w
            elif isinstance(x, ir.Load):
                self._access(x.buffer, x.indices, _bytes(x.dtype), w, "load")
            stack.extend(ir.children(x))

    def _intrinsic(self, call: ir.Call, w: float) -> None:
        fn = call.fn
        if fn in _MMA_FLOPS:
            self.c["mma"] += w
            self.c["mma_flops"] += w * _MMA_FLOPS[fn] / 32  # per thread: the warp's share
        elif fn.startswith("wgmma_m64n"):  # a warpgroup's 64 x N x 16 (the Hopper GEMM)
            n = int(fn[len("wgmma_m64n"):].split("k")[0])
            self.c["mma"] += w
            self.c["mma_flops"] += w * 2 * 64 * n * 16 / 128  # per thread: its share
        elif fn.startswith("ldmatrix_x"):
            count = int(fn[len("ldmatrix_x")])
            self.c["ldmatrix"] += w
            self.c["shared_load_bytes"] += w * count * 128 / 32  # count 8x8 16-bit tiles
            self.c["fragment_store_bytes"] += w * count * 128 / 32
        elif fn == "cp_async":
            src, nbytes = call.args[1], _eval(call.args[2], self.env0) or 16
            self.c["cp_async"] += w
            self.c["cp_async_bytes"] += w * nbytes
            self.c["shared_store_bytes"] += w * nbytes
            self._access(src.buffer, src.indices, nbytes, w, "load")
            self.c["global_vector_bytes"] += w * nbytes if nbytes >= 8 else 0
            self.vector_bytes = max(self.vector_bytes, nbytes)
        elif fn == "cp_async_wait":
            # waiting for all but the n newest groups: a ring of n + 2 stages
            n = _eval(call.args[0], self.env0)
            self.stages = max(self.stages, (n or 0) + 2)
        for a in call.args:
            if not isinstance(a, ir.Ref):
                self.expr(a, w)

    def _decidable(self) -> set:
        return set(self.unrolled) | set(self.unroll_lets) | self.size_names

    def _guard(self, cond) -> tuple[float, bool]:
        """(share of the unrolled copies in which `cond` can hold, whether
        it is decided in every copy). The conjuncts over unrolled loop
        variables and constants only are what simplification after unrolling
        folds: copies where one is false lose the then-branch. Others are
        assumed true (guards in tiled code nearly always are)."""
        if not self.unrolled:
            return 1.0, False
        known, parts = self._decidable(), _conjuncts(cond)
        mine = [c for c in parts if ir.free_vars(c) <= known and
                ir.free_vars(c) & (set(self.unrolled) | set(self.unroll_lets))]
        if not mine:
            return 1.0, False
        names = sorted(set().union(*(ir.free_vars(c) for c in mine)) & set(self.unrolled)
                       | {v for c in mine for x in ir.free_vars(c) if x in self.unroll_lets
                          for v in ir.free_vars(self.unroll_lets[x]) if v in self.unrolled})
        combos = math.prod(len(self.unrolled[v]) for v in names)
        if combos > 4096:
            return 1.0, False
        true = 0
        for values in itertools.product(*(self.unrolled[v] for v in names)):
            env = {**self.env0, **dict(zip(names, values))}
            for var, e in self.unroll_lets.items():
                env[var] = _eval(e, env)
            if all(_eval(c, env) for c in mine):
                true += 1
        return true / combos, len(mine) == len(parts)

    def _strides(self, buf: str):
        """Row-major element strides of `buf` at the tuning sizes (None if unknown)."""
        entry = self.scopes.get(buf)
        if entry is None:
            return None
        dims = [_eval(d, self.env0) for d in entry[1].shape]
        if any(d is None for d in dims):
            return None
        out, stride = [], 1
        for d in reversed(dims):
            out.append(stride)
            stride *= d
        return out[::-1]

    def _predict_vector(self, loop: ir.For):
        """The VectorAccess `vectorize` would give `loop` once flattened."""
        flat = _RowMajor(self._strides).stmt(loop.body)
        if flat is None or _RowMajor.failed(flat):
            return None
        dtypes = {n: e[1].dtype for n, e in self.scopes.items()}
        local = {n for n, e in self.scopes.items() if e[0] == "local"}
        return vectorize.vector_access(dataclasses.replace(loop, body=flat), dtypes, local)

    def _dtype(self, buf: str, fallback):
        entry = self.scopes.get(buf)
        return entry[1].dtype if entry else fallback

    def _scope_of_vector(self, v: ir.VectorAccess) -> str:
        names = [x.buffer for x in v.loads]
        return "global" if any(self.scopes.get(n, ("global",))[0] == "global" for n in names) \
            else "other"

    def _access(self, buf: str, indices, nbytes: int, w: float, kind: str) -> None:
        scope = self.scopes.get(buf, ("global", None))[0]
        scope = scope if scope in SCOPES else "local"
        self.c[f"{scope}_{kind}_bytes"] += w * nbytes
        if scope in ("global", "shared"):  # one instruction per vector of `vector_lanes`
            self.c["mem_instructions"] += w / self.vector_lanes
        if scope != "global":
            return

        self.touched.add(buf)
        # bytes between what neighbouring lanes touch -> sectors a warp moves per access
        stride = None
        entry = self.scopes.get(buf)
        strides = [1] if len(indices) == 1 else self._strides(buf)
        if entry is not None and strides is not None:
            a = b = 0
            for i, st in zip(indices, strides):
                x, y = _eval(i, self.env0), _eval(i, self.env1)
                if x is None or y is None:
                    a = None
                    break
                a, b = a + x * st, b + y * st
            if a is not None:
                stride = abs(b - a) * _bytes_of(entry[1])
        if stride is None or self.lane_var is None:
            per_thread = nbytes  # unknown: count as coalesced
        elif stride == 0:
            per_thread = max(nbytes, 32) / 32  # a broadcast: one sector for the warp
        elif stride <= nbytes * self.vector_lanes:
            # neighbouring threads' pieces abut: a vector access of `vector_lanes` elements
            # each moves whole sectors (a float4 per thread at 16-byte strides)
            per_thread = nbytes
        else:
            per_thread = min(max(nbytes, 32), stride)  # lanes in different sectors
        self.sector_bytes += w * per_thread
        if kind == "load":  # what this access has in flight from memory (a broadcast: little)
            self.c["inflight_bytes"] += w * per_thread / self.serial


def _constant(e, known: set) -> bool:
    """Whether integer expression `e` reads only constants and variables in `known`."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var):
            if x.name not in known:
                return False
        elif not isinstance(x, (ir.Imm, ir.Bin, ir.Un, ir.Cast, ir.Select)):
            return False
        stack.extend(ir.children(x))
    return True


def _conjuncts(c) -> list:
    if isinstance(c, ir.Bin) and c.op == "&&":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _bytes(dt) -> int:
    return max(1, dt.bits // 8)


def _bytes_of(buf) -> int:
    return _bytes(buf.dtype)


def _lane_var(res) -> str | None:
    for axis, d in zip("xyz", res.block):
        if d > 1:
            return f"threadIdx.{axis}"
    return None


class _RowMajor(Rewriter):
    """Subscripts as one row-major offset (what flatten_storage computes);
    a buffer of unknown shape leaves the marker subscript `_UNKNOWN`."""

    def __init__(self, strides):
        self.strides = strides

    def _flat(self, buf, indices):
        if len(indices) == 1:
            return indices
        st = self.strides(buf)
        if st is None:
            return (_UNKNOWN,)
        out = None
        for i, n in zip(indices, st):
            t = i if n == 1 else ir.Bin("*", i, ir.const(n), ir.int32)
            out = t if out is None else ir.Bin("+", out, t, ir.int32)
        return (out if out is not None else ir.const(0),)

    def expr_Load(self, e: ir.Load) -> ir.Expr:
        return ir.Load(e.buffer, self._flat(e.buffer, self.exprs(e.indices)), e.dtype)

    def stmt_Store(self, s: ir.Store) -> ir.Stmt:
        return ir.Store(s.buffer, self._flat(s.buffer, self.exprs(s.indices)),
                        self.expr(s.value), loc=s.loc, atomic=s.atomic)

    @staticmethod
    def failed(s) -> bool:
        return any(x is _UNKNOWN for x in ir.walk(s))


_UNKNOWN = ir.Var("__unknown_shape__")


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
        "min": min, "max": max, "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
        ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
        "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b))}


def _eval(e, env: dict):
    """An integer expression's value in `env`, or None when it reads memory
    or an unknown variable."""
    if isinstance(e, ir.Imm):
        return int(e.value) if not isinstance(e.value, float) else None
    if isinstance(e, ir.Var):
        return env.get(e.name)
    if isinstance(e, ir.Bin):
        a = _eval(e.a, env)
        if a is None:
            return None
        b = _eval(e.b, env)
        return None if b is None else _OPS[e.op](a, b) if e.op in _OPS else None
    if isinstance(e, ir.Select):
        c = _eval(e.cond, env)
        return None if c is None else _eval(e.a if c else e.b, env)
    if isinstance(e, ir.Cast) and e.dtype.is_int:
        return _eval(e.x, env)
    if isinstance(e, ir.Un) and e.op == "-":
        x = _eval(e.x, env)
        return None if x is None else -x
    return None
