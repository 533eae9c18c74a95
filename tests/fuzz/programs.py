"""Random valid tensor-comprehension programs for the differential fuzzer.

A program is generated as TC text (so the parser is exercised), one
statement at a time: after each statement the program so far is checked with
`tcomp.op`, which also gives the dtypes the next statement needs (an in-place
update casts its right-hand side to its tensor's type). A statement the
language refuses is drawn again (the refusals are counted in
`ProgramGen.rejected`, so that a generator bug shows as a high count, not as
silence); what comes out is always a valid program.

What is drawn: 1-3 size variables (1..5 each), 1-3 inputs of rank 0-3 and
any dtype, then 1-4 statements: elementwise maps (transposed and broadcast
reads, constant subscripts, gathers `T(G(i) % N)`), reductions (`+=!`,
`max=!`, `min=!`, `*=!` over one or two reduction indices), in-place updates
(`O(i) = O(i) * 2`, `O(i) += ...` continuing a reduction, shifted reads
`O(i - 1)` with `where i in 1:N` that need a snapshot, a lazy ternary
`i + 1 < N ? O(i + 1) : c` that reads out of bounds only where not taken),
`where x = ...` lets; expressions with arithmetic, comparisons, `&&`/`||`/`!`,
ternaries, builtins, `min`/`max` and casts between every type. Outputs are a
random subset of the tensors written, in random order; the rest are
temporaries. Names are drawn partly from `names.py` (hygiene).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

import tcomp
from tcomp.lang.symbolic import eval_int

from . import names as N

DTYPES = (["float"] * 8 + ["int32"] * 3 + ["double"] * 2 + ["half"] * 2 + ["bfloat16", "int8",
          "uint8", "int64", "bool", "bool", "int16", "uint16", "uint32", "uint64"])
CAST_TYPES = ["float", "double", "half", "bfloat16", "int32", "int8", "uint8", "int64", "bool",
              "int16", "uint32", "float32", "float16", "float64"]
FLOAT_KINDS = {"float", "float32", "double", "float64", "half", "float16", "bfloat16"}
FLOAT_FUNS1 = ["exp", "log", "sqrt", "tanh", "sigmoid", "fabs", "floor", "ceil", "sin", "cos",
               "erf", "rsqrt", "abs", "round", "trunc"]
FLOAT_FUNS2 = ["fmax", "fmin", "pow", "atan2", "fmod", "copysign", "hypot"]
FLOAT_LITS = ["0.5", "2.0", "1.5", "0.25", "3.0", "1e-3", "1e2", "0.1"]
REDUCE_OPS = ["+=!", "+=!", "max=!", "min=!", "*=!"]
DATA_KINDS = ["exact"] * 6 + ["uniform"] * 3 + ["special"]


def kind_of(dtype: str) -> str:
    if dtype in FLOAT_KINDS:
        return "f"
    return "b" if dtype == "bool" else "i"


@dataclass
class Tensor:
    name: str
    dims: list  # size variable names or int literals
    dtype: str  # a TC type name
    is_input: bool

    def decl(self) -> str:
        return f"{self.dtype}({', '.join(map(str, self.dims))}) {self.name}" if self.dims \
            else f"{self.dtype} {self.name}"


@dataclass
class Program:
    source: str
    op: object  # tcomp Op
    sizes: dict
    rejected: list = field(default_factory=list)
    hygienic: list = field(default_factory=list)  # the names from the hygiene pools


class ProgramGen:
    def __init__(self, rng: random.Random, hygiene: float = 0.35):
        self.rng, self.hygiene = rng, hygiene
        self.taken: set[str] = set()
        self.hygienic: set[str] = set()  # names drawn from the pools of names.py
        self.rejected: list[str] = []

    # ------------------------------------------------------------ names
    def fresh(self, role: str, derived_from: list[str] = ()) -> str:
        r = self.rng
        pools = []
        if r.random() < self.hygiene:
            pools.append(r.choice([N.CPP_KEYWORDS, N.CUDA_NAMES]))
            if derived_from:
                pools.insert(0, N.derived("index" if role in ("size", "let", "written", "input")
                                          and r.random() < 0.6 else "tensor",
                                          r.choice(list(derived_from)), r.choice(list(derived_from))))
        pools.append(N.PLAIN[role])
        for pool in pools:
            free = [n for n in pool if n not in self.taken]
            if free:
                name = r.choice(free) if pool is not N.PLAIN[role] else free[0]
                self.taken.add(name)
                if pool is not N.PLAIN[role]:
                    self.hygienic.add(name)
                return name
        i = 0
        while f"{N.PLAIN[role][0]}{i}" in self.taken:
            i += 1
        self.taken.add(f"{N.PLAIN[role][0]}{i}")
        return f"{N.PLAIN[role][0]}{i}"

    # ------------------------------------------------------------ program
    def generate(self) -> Program:
        r = self.rng
        # Index names first: sizes, tensors and lets may then be named like what a
        # split or fuse of those indices generates (the capture of defect 2).
        self.index_pool = [self.fresh("index") for _ in range(r.randint(3, 5))]
        self.size_names = [self.fresh("size", self.index_pool) for _ in range(r.choice([1, 2, 2, 3]))]
        self.sizes = {n: r.choice([1, 2, 2, 3, 3, 4, 5]) for n in self.size_names}
        self.def_name = self.fresh("def")
        self.tensors: dict[str, Tensor] = {}
        uncovered = list(self.size_names)
        for _ in range(r.randint(1, 3)):
            rank = r.choice([0, 1, 1, 2, 2, 2, 3])
            dims = [r.choice(self.size_names) if r.random() > 0.08 else r.choice([2, 3])
                    for _ in range(rank)]
            self._add_input(dims)
            uncovered = [s for s in uncovered if s not in dims]
        if uncovered:  # every size variable is bound by some input's shape
            self._add_input(uncovered)
        if r.random() < 0.3:  # an index tensor for gathers
            self._add_input([r.choice(self.size_names)], r.choice(["int32", "int64", "uint8"]))
        self.stmts: list[str] = []
        self.written: list[str] = []
        self.frozen: set[str] = set()  # tensors another statement read: no more updates
        for _ in range(r.choice([1, 2, 2, 3, 3, 4])):
            self._statement()
        if not self.stmts:
            raise GeneratorStuck("no statement of this program was accepted")
        outs = [t for t in self.written if r.random() < 0.6] or [r.choice(self.written)]
        r.shuffle(outs)
        src = self._source(outs)
        try:
            op = tcomp.op(src)
        except tcomp.LangError as e:  # (temporaries changed the answer: keep every output)
            self.rejected.append(f"outputs {outs}: {e.message}")
            src = self._source(self.written)
            op = tcomp.op(src)
        used = sorted(n for n in self.hygienic if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", src))
        return Program(src, op, dict(self.sizes), self.rejected, used)

    def _add_input(self, dims, dtype=None):
        name = self.fresh("input", self.index_pool + list(self.tensors))
        self.tensors[name] = Tensor(name, dims, dtype or self.rng.choice(DTYPES), True)

    def _source(self, outs) -> str:
        ins = ", ".join(t.decl() for t in self.tensors.values() if t.is_input)
        typed = []
        for o in outs:
            t = self.tensors[o]
            typed.append(t.decl() if self.rng.random() < 0.15 and t.dtype else o)
        body = "\n".join("    " + s for s in self.stmts)
        return f"def {self.def_name}({ins}) -> ({', '.join(typed)}) {{\n{body}\n}}"

    def _statement(self):
        for _ in range(8):
            text, target, new = self._draw_statement()
            self.stmts.append(text)
            if new:
                self.written.append(target)
            try:
                op = tcomp.op(self._source(self.written))
            except tcomp.LangError as e:
                self.rejected.append(f"{text!r}: {e.message}")
                self.stmts.pop()
                if new:
                    self.written.pop()
                    del self.tensors[target]
                    self.taken.discard(target)
                continue
            for t in op.outputs:
                self.tensors[t.name].dtype = t.dtype.name
            self.frozen |= self.reads - {target}
            return

    # ------------------------------------------------------------ statements
    def _draw_statement(self):
        r = self.rng
        self.where: list[str] = []
        self.shift: dict[str, int] = {}
        self.self_read = None
        self.lets: list[str] = []
        self.bounded: set[str] = set()  # indices some read subscripts alone
        self.used: set[str] = set()  # indices the statement mentions
        self.reads: set[str] = set()  # tensors it reads
        self.lazy: set[str] = set()
        # (reads see a tensor's final value: no update after another statement read it)
        existing = [t for t in self.written if t not in self.frozen
                    and (self.tensors[t].dims or r.random() < 0.3)]
        if existing and r.random() < 0.35:
            return self._inplace(r.choice(existing))
        # a new tensor: its spatial indices, each over a size variable
        rank = r.choice([0, 1, 1, 2, 2, 3])
        self.vars = {}
        pool = list(self.index_pool)
        r.shuffle(pool)
        for v in pool[:rank]:
            self.vars[v] = r.choice(self.size_names)
        spatial = list(self.vars)
        reduce = r.random() < 0.45
        op_text = "="
        if reduce:
            for v in pool[rank:rank + r.choice([1, 1, 2])]:
                self.vars[v] = r.choice(self.size_names)
            op_text = r.choice(REDUCE_OPS)
        rhs = self.expr(r.randint(1, 4))
        if op_text in ("+=!", "*=!") and self.last_kind == "b":
            rhs = f"int32({rhs})"  # (bool sums and products are refused)
        rhs = self._with_lets(rhs)
        name = self.fresh("written", self.index_pool + list(self.tensors) + [self.def_name])
        self.tensors[name] = Tensor(name, [self.vars[v] for v in spatial], "", False)
        return self._finish(name, spatial, op_text, rhs), name, True

    def _inplace(self, name):
        r = self.rng
        t = self.tensors[name]
        pool = list(self.index_pool)
        r.shuffle(pool)
        self.vars = {v: d for v, d in zip(pool, t.dims)}
        spatial = list(self.vars)
        self.self_read = name
        if spatial and r.random() < 0.3:  # a shifted read of the tensor: a snapshot
            v = r.choice(spatial)
            if isinstance(self.vars[v], str):
                # (1:N keeps the shape; 0:N - 1 would shrink it: the last writer sets it)
                self.shift[v] = -1
                self.where.append(f"{v} in 1:{self.vars[v]}")
        op_text = r.choice(["=", "=", "max=", "min="] if t.dtype == "bool" else
                           ["=", "=", "+=", "max=", "min=", "*=", "+=!"])
        if op_text != "=" and r.random() < 0.5:
            for v in pool[len(spatial):len(spatial) + 1]:
                self.vars[v] = r.choice(self.size_names)
        if op_text == "=" and not self.shift and r.random() < 0.6:
            rhs = f"{self.read(name)} {r.choice(['*', '+', '-'])} {self.expr(2)}"
        else:
            rhs = self.expr(r.randint(1, 4))
        rhs = f"{t.dtype}({self._with_lets(rhs)})"
        return self._finish(name, spatial, op_text, rhs), name, False

    def _finish(self, name, spatial, op_text, rhs):
        # Every index that no read bounds gets a range clause (inference needs one).
        self.used |= set(spatial)
        for v, d in self.vars.items():
            if v in self.used and (v not in self.bounded or v in self.lazy) and v not in self.shift:
                self.where.append(f"{v} in 0:{d}")
        lhs = f"{name}({', '.join(spatial)})" if spatial or self.rng.random() < 0.5 else name
        where = f" where {', '.join(self.lets + self.where)}" if self.lets or self.where else ""
        return f"{lhs} {op_text} {rhs}{where}"

    def _with_lets(self, rhs):
        if self.rng.random() < 0.15:
            let = self.fresh("let", list(self.vars))
            self.lets.append(f"{let} = {self.expr(2)}")
            return f"{rhs} + {let}" if self.last_kind != "b" else f"({rhs}) + {let}"
        return rhs

    # ------------------------------------------------------------ expressions
    def expr(self, depth: int, want: str | None = None) -> str:
        """An expression; `want` "num" never gives a bool, "cond" never a float.
        Sets self.last_kind to "f", "i" or "b"."""
        return self._expr(depth, want)

    def _expr(self, depth, want):
        r = self.rng
        if depth <= 0 or r.random() < 0.25:
            return self.leaf(want)
        c = r.randrange(9)
        if want == "cond" and c not in (2, 3, 4, 5):
            c = r.choice([2, 3, 4])
        if c in (0, 1):  # arithmetic
            op = r.choice(["+", "-", "*", "/", "%", "+", "*"])
            a = self._expr(depth - 1, "num")
            ka = self.last_kind
            if op in "/%" and ka != "f" and r.random() < 0.5:
                b, kb = str(r.randint(1, 5)), "i"
            else:
                b = self._expr(depth - 1, "num")
                kb = self.last_kind
                if op in "/%" and ka != "f" and kb != "f":  # (never an integer division by 0)
                    b = f"({b} % 5 + 1)"
            self.last_kind = "f" if "f" in (ka, kb) else "i"
            return f"({a} {op} {b})"
        if c == 2:  # comparison
            a, b = self._expr(depth - 1, None), self._expr(depth - 1, None)
            self.last_kind = "b"
            return f"({a} {r.choice(['<', '<=', '>', '>=', '==', '!='])} {b})"
        if c == 3:  # logic
            a, b = self._expr(depth - 1, "cond"), self._expr(depth - 1, "cond")
            self.last_kind = "b"
            return f"({a} {r.choice(['&&', '||'])} {b})"
        if c == 4:
            a = self._expr(depth - 1, "cond")
            self.last_kind = "b"
            return f"!{a}" if a.startswith("(") or a.isidentifier() else f"!({a})"
        if c == 5:  # ternary
            cond = self._expr(depth - 1, "cond")
            a = self._expr(depth - 1, want)
            ka = self.last_kind
            b = self._expr(depth - 1, want)
            self.last_kind = "f" if "f" in (ka, self.last_kind) else \
                ("b" if ka == self.last_kind == "b" else "i")
            return f"({cond} ? {a} : {b})"
        if c == 6:  # builtins
            if r.random() < 0.6:
                f, args = r.choice(FLOAT_FUNS1), [self._expr(depth - 1, "num")]
            else:
                f = r.choice(FLOAT_FUNS2)
                args = [self._expr(depth - 1, "num"), self._expr(depth - 1, "num")]
            self.last_kind = "f"
            return f"{f}({', '.join(args)})"
        if c == 7:  # min / max keep the kind
            a = self._expr(depth - 1, "num")
            ka = self.last_kind
            b = self._expr(depth - 1, "num")
            self.last_kind = "f" if "f" in (ka, self.last_kind) else "i"
            return f"{r.choice(['min', 'max'])}({a}, {b})"
        # casts
        t = r.choice(CAST_TYPES if want is None else
                     [x for x in CAST_TYPES if (kind_of(x) != "b") == (want == "num")
                      or want == "cond" and kind_of(x) != "f"])
        a = self._expr(depth - 1, None)
        if r.random() < 0.5 and self.last_kind != "f":
            a = f"{a} * {r.choice(FLOAT_LITS)}"  # a float that casts to an integer
        self.last_kind = kind_of(t)
        return f"{t}({a})"

    def leaf(self, want):
        r = self.rng
        for _ in range(6):
            c = r.randrange(10)
            if c < 6:
                cands = [t for t in self.tensors.values() if t.dtype]  # (checked ones)
                t = r.choice(cands)
                k = kind_of(t.dtype)
                if want == "num" and k == "b" or want == "cond" and k == "f":
                    continue
                self.last_kind = k
                return self.read(t.name)
            if c == 6 and self.vars:
                self.last_kind = "i"
                v = r.choice(list(self.vars))  # an index as a value
                self.used.add(v)
                return v
            if c == 7:
                self.last_kind = "i"
                return r.choice(self.size_names)
            if c == 8 and want != "cond":
                self.last_kind = "f"
                return r.choice(FLOAT_LITS)
            if c == 9:
                self.last_kind = "i"
                return str(r.randint(0, 7))
        self.last_kind = "i"
        return str(r.randint(1, 3))

    def read(self, name: str) -> str:
        """A read of `name` whose subscripts stay in bounds."""
        r = self.rng
        t = self.tensors[name]
        self.reads.add(name)
        if not t.dims:
            return name
        if name == self.self_read and r.random() < 0.1:
            # lazy: the read out of bounds is in the branch not taken
            lazy = [(v, d) for v, d in self.vars.items() if d in t.dims and isinstance(d, str)
                    and v not in self.shift]
            if lazy:
                v, d = r.choice(lazy)
                self.used.add(v)
                self.lazy.add(v)  # (its range comes from a clause, not from this read)
                return (f"({v} + 1 < {d} ? {self._sub_read(t, d, v)} : "
                        f"{t.dtype}({r.randint(0, 3)}))")
        subs = []
        for d in t.dims:
            cands = [v for v, s in self.vars.items() if s == d]
            c = r.random()
            if cands and c < 0.85:
                v = r.choice(cands)
                self.used.add(v)
                if v in self.shift and name == self.self_read and r.random() < 0.6:
                    subs.append(f"{v} - 1")
                else:
                    subs.append(v)
                    self.bounded.add(v)
            elif c < 0.93 and isinstance(d, str) and self._gather_source(d) is not None:
                subs.append(f"{self._gather_source(d)} % {d}")
            else:
                subs.append(str(r.randrange(d)) if isinstance(d, int) else "0")
        return f"{name}({', '.join(subs)})"

    def _sub_read(self, t, d, v):
        subs = []
        for dim in t.dims:
            subs.append(f"{v} + 1" if dim == d and v not in subs else "0")
        return f"{t.name}({', '.join(subs)})"

    def _gather_source(self, d):
        for t in self.tensors.values():
            if t.is_input and t.dtype in ("int32", "int64", "uint8") and len(t.dims) == 1:
                cands = [v for v, s in self.vars.items() if s == t.dims[0]]
                if cands:
                    v = cands[0]
                    self.bounded.add(v)
                    self.used.add(v)
                    self.reads.add(t.name)
                    return f"{t.name}({v})"
        return None


class GeneratorStuck(Exception):
    """The generator found no valid statement (counted, then the seed is skipped)."""


def make_inputs(op, sizes, rng: np.random.Generator, kind: str):
    """Random inputs for `op`: "exact" values (multiples of 1/4 in [-2, 2], small
    integers: sums and products stay exact in any order), "uniform" floats, or
    "special" floats sprinkled with +-inf, NaN and -0.0."""
    out = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        dt = t.dtype
        if dt.is_bool:
            a = rng.random(shape) < 0.5
        elif dt.is_float:
            if kind == "exact":
                a = rng.integers(-8, 9, shape) / 4.0
            else:
                a = rng.uniform(-2, 2, shape)
            if kind == "special":
                pick = rng.random(shape)
                a = np.where(pick < 0.08, np.inf, np.where(pick < 0.16, -np.inf, np.where(
                    pick < 0.24, np.nan, np.where(pick < 0.3, -0.0, a))))
        else:
            lo = 0 if dt.name.startswith("u") else -6
            a = rng.integers(lo, 7, shape)
        out.append(np.asarray(a).astype(dt.numpy))
    return out
