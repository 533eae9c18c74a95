"""Intrinsics as data: every intrinsic of Kernel IR is one entry here.

An entry says what the intrinsic is (a one-line description), what its
operands are (an address `ir.Ref` or a value; for an address, the memory
scopes its buffer may live in and whether it is read, written or both; the
element types allowed) and what it does besides computing a value (reads or
writes memory, completes later, must be reached by every thread of a warp
or a block). Passes ask the registry, not the node type: the accesses
helper reads the operands' read/write, the verifier refuses a collective
under a thread-dependent condition.

The targets give each entry its meaning, in tables keyed by the same name
(imports go one way: lang <- schedule <- lower <- targets): the CUDA
emitter in target_cuda/intrinsics.py, the sim rule in
target_sim/intrinsics.py; a test checks that every entry has both.

An intrinsic appears in the IR as `Evaluate(Call(name, operands))`, the
operands in the order of `Intrinsic.operands`. Two are statements of their
own, because passes build and read their fields: `ir.Barrier` ("barrier")
and `ir.AllReduce` ("allreduce"); their operands name the node's fields.
Adding an intrinsic: one `register(Intrinsic(...))` below, its CUDA emitter
and its sim rule. `kind="tensorize"` entries are what `tensorize` accepts:
their tile shapes and types are in schedule/tensor_intrinsics.py (the
schedule checks a loop nest against them before lowering), whose listing is
`tcomp.intrinsics()`; a test checks the two agree.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arch import target
from ..arch.instructions import TENSOR_CORE
from ..arch.tensorize import TENSORIZE
from . import ir

READ, WRITE, READWRITE = "read", "write", "readwrite"
# What an intrinsic does besides computing its value.
EFFECTS = frozenset({
    "pure",              # nothing: a value from its operands
    "reads",             # reads memory through its address operands
    "writes",            # writes memory through its address operands
    "async",             # its writes land later (at a wait), not when it runs
    "warp_collective",   # every thread of the warp reaches it together
    "block_collective",  # every thread of the block reaches it together
    "warpgroup_collective",  # the 4 warps of a warpgroup (128 threads) reach it together
    "blocking",          # waits for other threads or a copy engine (an mbarrier phase, ...)
    "async_proxy",       # memory it touches is read or written by the async proxy (TMA, wgmma)
    "fence",             # orders memory operations (proxies, barrier initialisation)
})
KINDS = ("statement", "tensorize")


@dataclass(frozen=True)
class Operand:
    """One operand. `ref`: an address (`ir.Ref`) rather than a value;
    `access`: what the intrinsic does at that address (values are read);
    `scopes`: the memories an address may point into (empty: any);
    `dtypes`: the allowed element or value types by name (empty: any)."""
    name: str
    ref: bool = False
    access: str = READ
    scopes: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Intrinsic:
    name: str
    description: str  # one line, for listings and messages
    operands: tuple[Operand, ...]
    effects: frozenset[str]
    kind: str = "statement"
    noun: str = ""  # how messages call it ("barrier"); the name when empty
    # the machine-model feature it needs (tcomp/arch/target.py FEATURES: "mma_sync", "tma",
    # "wgmma", ...); "" when every GPU has it
    feature: str = ""
    # the tensor-core instruction it issues (arch/instructions.py TENSOR_CORE: its shape and
    # the group that issues it, what a cost model counts its flops by); "" for none
    instruction: str = ""
    # the bytes of registers each thread receives per execution, where the instruction
    # fixes them (ldmatrix_xN: N 32-bit registers); 0 otherwise
    lane_bytes: int = 0

    @property
    def min_arch(self) -> int:
        """The first compute capability with the feature (80: sm_80; 90 for an
        architecture-specific one; 0: all)."""
        if not self.feature:
            return 0
        cc = target.FEATURES[self.feature][0]
        return 90 if cc is None else cc[0] * 10 + cc[1]

    @property
    def only_in(self) -> tuple[str, ...]:
        """The architecture-specific targets that alone have it (wgmma: sm_90a)."""
        return target.ARCH_SPECIFIC.get(self.feature, ())

    @property
    def collective(self) -> bool:
        return bool(self.effects & {"warp_collective", "warpgroup_collective",
                                    "block_collective"})

    @property
    def what(self) -> str:
        return self.noun or self.name


REGISTRY: dict[str, Intrinsic] = {}


def register(entry: Intrinsic) -> Intrinsic:
    """Add `entry`; a second entry of the same name, an unknown effect or
    kind, or an access other than read/write/readwrite is a programming error."""
    if entry.name in REGISTRY:
        raise ValueError(f"intrinsic '{entry.name}' is registered twice")
    if not entry.effects <= EFFECTS:
        raise ValueError(f"intrinsic '{entry.name}': unknown effects "
                         f"{sorted(entry.effects - EFFECTS)}")
    if entry.feature and entry.feature not in target.FEATURES:
        raise ValueError(f"intrinsic '{entry.name}': unknown target feature {entry.feature!r}")
    if entry.instruction and entry.instruction not in TENSOR_CORE:
        raise ValueError(f"intrinsic '{entry.name}': unknown tensor-core instruction "
                         f"{entry.instruction!r}")
    if entry.kind not in KINDS:
        raise ValueError(f"intrinsic '{entry.name}': kind must be one of {KINDS}")
    for op in entry.operands:
        if op.access not in (READ, WRITE, READWRITE) or (op.access != READ and not op.ref):
            raise ValueError(f"intrinsic '{entry.name}': operand '{op.name}' has access "
                             f"{op.access!r} (values are read; addresses read, write or both)")
    REGISTRY[entry.name] = entry
    return entry


def of(node) -> Intrinsic | None:
    """The entry of an intrinsic statement (`Evaluate` of a registered call,
    `Barrier`, `AllReduce`), else None."""
    if isinstance(node, ir.Evaluate):
        return REGISTRY.get(node.call.fn)
    name = getattr(type(node), "INTRINSIC", None)
    return REGISTRY[name] if name is not None else None


def operands(node) -> list[tuple[Operand, object]]:
    """(operand, its value in `node`) for an intrinsic statement: the call's
    arguments in order, or the fields of a node-backed intrinsic."""
    entry = of(node)
    if entry is None:
        return []
    if isinstance(node, ir.Evaluate):
        return list(zip(entry.operands, node.call.args))
    return [(op, getattr(node, op.name)) for op in entry.operands]


def tensorize_intrinsics() -> dict[str, str]:
    """name -> one-line description of every intrinsic `tensorize` accepts."""
    return {n: e.description for n, e in sorted(REGISTRY.items()) if e.kind == "tensorize"}


# ------------------------------------------------------------------ entries
register(Intrinsic(
    "barrier", "wait until every thread of the block reaches it (CUDA __syncthreads)",
    operands=(), effects=frozenset({"block_collective"})))

register(Intrinsic(
    "allreduce", "combine a per-thread scalar over the threads along one block axis; "
                 "every one of them gets the result",
    operands=(Operand("buffer", ref=True, access=READWRITE, scopes=("local",)),
              Operand("extent", dtypes=("int32",))),
    effects=frozenset({"reads", "writes", "block_collective"}),
    noun="cross-thread reduction"))

# Block scans (Stage.scan; lowering: scan.py). The threads along threadIdx.x (the whole
# block x dimension, `threads` of them) hold one element each, in thread order; the scan
# combines them with the carry (the running value of the tiles before) and advances it.
SCAN_OPS = {"+": "scan_add", "*": "scan_mul", "max": "scan_max", "min": "scan_min",
            "linear": "scan_linear"}
_SCAN_TYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")
for _op, _name in SCAN_OPS.items():
    _coef = (Operand("coef", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
             ) if _op == "linear" else ()
    register(Intrinsic(
        _name, ("the linear recurrence h = a h' + b" if _op == "linear" else f"'{_op}'") +
        " scanned over the threads along threadIdx.x: each thread's element becomes the "
        "carry combined with the elements of the threads up to it (inclusive), and every "
        "thread's carry the carry combined with all of them" +
        (" (elements: coef a, value b)" if _op == "linear" else ""),
        operands=_coef + (
            Operand("value", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
            Operand("carry", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
            Operand("threads", dtypes=("int32",))),
        effects=frozenset({"reads", "writes", "block_collective"}), noun="block scan"))

# Quad reductions: the four consecutive lanes 4g .. 4g + 3 of a warp (the threads that share
# a row of an mma.sync / wgmma accumulator) combine a float32 register; each gets the result
# (two butterfly shuffles, __shfl_xor_sync with lane masks 1 and 2)
QUAD_OPS = {"max": "quad_max", "+": "quad_sum"}
for _op, _name in QUAD_OPS.items():
    register(Intrinsic(
        _name, f"combine a float32 register with '{_op}' over the 4 lanes of each quad of the "
               f"warp (lanes 4g .. 4g + 3); each of them gets the result",
        operands=(Operand("value", ref=True, access=READWRITE, scopes=("local",),
                          dtypes=("float32",)),),
        effects=frozenset({"reads", "writes", "warp_collective"}), noun="quad reduction"))

# Multi-block scans (Stage.scan(..., lookback=True); lowering: scan_lookback.py). As a
# block scan, but exclusive, over the threads' totals, and with the carry of the block's
# tile found by a decoupled look-back (Merrill & Garland) through global memory: tile
# `tile` of a row publishes its aggregate (flag 1), combines the aggregates of the tiles
# before it back to one that published its inclusive prefix (flag 2; tile 0 starts
# from the carry operand), then publishes its own inclusive prefix (flag 2). `status`
# is a Ref at the tile's first status word (schedule/scan.Lookback: `words` uint64
# words a tile, flag << 32 | a 32-bit piece of the value); tile t's predecessors are
# the t slots below it.
LOOKBACK_OPS = {"+": "scan_lookback_add", "*": "scan_lookback_mul", "max": "scan_lookback_max",
                "min": "scan_lookback_min", "linear": "scan_lookback_linear"}
for _op, _name in LOOKBACK_OPS.items():
    _lin = _op == "linear"
    _coef = (Operand("coef", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
             ) if _lin else ()
    register(Intrinsic(
        _name, ("the linear recurrence h = a h' + b" if _lin else f"'{_op}'") +
        " scanned over the tiles of a row, one tile a block, the threads along threadIdx.x "
        "holding each the combine of its elements: each thread's value becomes the state "
        "before its elements (the carry of the tile, found by a decoupled look-back across "
        "blocks, combined with the threads before it), every thread's carry the state after "
        "the tile" + (" (elements: coef a, value b)" if _lin else ""),
        operands=_coef + (
            Operand("value", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
            Operand("carry", ref=True, access=READWRITE, scopes=("local",), dtypes=_SCAN_TYPES),
            Operand("status", ref=True, access=READWRITE, scopes=("global",),
                    dtypes=("uint64",)),
            Operand("tile", dtypes=("int32",)),
            Operand("threads", dtypes=("int32",))),
        # (its waits are on other blocks' flags, inside the intrinsic: no "blocking", which
        # is a wait on this block's mbarriers or copies)
        effects=frozenset({"reads", "writes", "block_collective"}), noun="multi-block scan"))

# Tensor cores (layouts: warp_layouts.py; lowering: tensor_cores.py). Fragments
# are per-lane registers; every lane of the warp executes these together.
_16BIT = ("bfloat16", "float16")
_FRAGMENT = ("fragment", "local")

register(Intrinsic(
    "mma_m16n8k16", TENSORIZE["mma_m16n8k16"].doc,
    operands=(Operand("d", ref=True, access=WRITE, scopes=_FRAGMENT, dtypes=("float32",)),
              Operand("a", ref=True, scopes=_FRAGMENT, dtypes=_16BIT),
              Operand("b", ref=True, scopes=_FRAGMENT, dtypes=_16BIT),
              Operand("c", ref=True, scopes=_FRAGMENT, dtypes=("float32",))),
    effects=frozenset({"reads", "writes", "warp_collective"}), kind="tensorize", feature="mma_sync",
    instruction="mma_m16n8k16"))

for _count in (1, 2, 4):
    for _trans in (False, True):
        register(Intrinsic(
            f"ldmatrix_x{_count}" + ("_trans" if _trans else ""),
            f"load {_count} 8x8 matrices of 16-bit elements from shared memory into "
            f"fragments{', transposed' if _trans else ''} (ldmatrix)",
            operands=(Operand("dst", ref=True, access=WRITE, scopes=_FRAGMENT, dtypes=_16BIT),
                      Operand("src", ref=True, scopes=("shared",), dtypes=_16BIT)),
            effects=frozenset({"reads", "writes", "warp_collective"}), feature="ldmatrix",
            lane_bytes=4 * _count))

# Asynchronous copies (cp.async): a copy lands at the wait that completes its group.
register(Intrinsic(
    "cp_async", "copy 4, 8 or 16 bytes from global to shared memory asynchronously, "
                "zero-filling past the source bytes (cp.async)",
    operands=(Operand("dst", ref=True, access=WRITE, scopes=("shared",)),
              Operand("src", ref=True, scopes=("global",)),
              Operand("bytes", dtypes=("int32",)),
              Operand("src_bytes", dtypes=("int32",))),
    effects=frozenset({"reads", "writes", "async"}), feature="cp_async"))
register(Intrinsic(
    "cp_async_commit", "close the group of this thread's asynchronous copies issued so far",
    operands=(), effects=frozenset({"async"}), feature="cp_async"))
register(Intrinsic(
    "cp_async_wait", "wait until all but the n newest committed groups of copies have landed",
    operands=(Operand("n", dtypes=("int32",)),), effects=frozenset({"async"}), feature="cp_async"))


# Hopper (sm_90a): mbarriers, TMA and wgmma, in their own module
from . import intrinsics_sm90  # noqa: E402,F401
