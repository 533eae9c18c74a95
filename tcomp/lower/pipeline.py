"""The lowering pipeline: one visible list of passes, each `(Kernel, Program) -> Kernel`.

    build (op + schedule -> loop nests, bound inference, tail guards)
    bind_threads     thread-bound loops -> thread indices, predicated stores
    simplify         canonical integer arithmetic, dead branches and loops
    tensor_cores     tensorized loops -> warp intrinsics; fragments -> per-lane registers
    software_pipeline  copies into shared rings issued stages-1 iterations ahead (cp.async)
    insert_barriers  shared-memory synchronisation
    vector_loads     a reduction's piece read into registers by one vectorized copy first
    unroll           expand unrolled loops; check vectorized loops
    simplify         again, after unrolling
    registers        per-thread slices of local arrays -> compact arrays at constant subscripts
    flatten_storage  row-major subscripts (targets that address memory linearly)
    vectorize        which vectorized loops move 4/8/16-byte vectors, recorded on the loop

`lower(..., dump=dir)` writes the IR after construction and after each pass.
`lower(..., target=)` takes the Target the kernels are for (arch/target.py
`resolve`: a Target, "sm_80", "cuda:sm_90a"; None: DEFAULT, sm_90a): the
builder's plans read it (the shared memory a block may have), and the lowered
program's intrinsics must have their features there (target_features.py).
A kernel built whole from a plan (a stage tensorized with wgmma: hopper_plan.py,
hopper_gemm.py; its `# plan:` line in the dumps) runs only PLANNED_PASSES.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ..errors import LoweringError, TcompError
from ..schedule.args import as_int
from ..arch.target import resolve
from . import (barriers, bind_threads, flatten, registers, software_pipeline, target_features,
               tensor_cores, unroll, vector_loads, vectorize)
from .build import Builder
from .ir import Program
from .simplify import simplify
from .verify import verify

PASSES = [
    ("bind_threads", bind_threads.run),
    ("simplify", lambda k, p: simplify(k)),
    ("tensor_cores", tensor_cores.run),
    ("software_pipeline", software_pipeline.run),
    ("insert_barriers", barriers.run),
    ("vector_loads", vector_loads.run),
    ("unroll", unroll.run),
    ("simplify_after_unroll", lambda k, p: simplify(k)),
    ("registers", registers.run),
    ("flatten_storage", flatten.run),
    ("vectorize", vectorize.run),
]


# The passes a planned kernel (Kernel.plan: built whole by hopper_gemm.py) runs: it has
# no thread-bound, tensorized, pipelined or vectorized loops, its barriers are its
# plan's mbarriers and named barriers (insert_barriers would add a block barrier inside
# one role: a deadlock), and its unrolled loops stay loops for the target to unroll.
PLANNED_PASSES = frozenset({"flatten_storage"})


def _run_pass(name, fn, k, prog):
    if k.plan and name not in PLANNED_PASSES:
        return k
    return fn(k, prog)


def lower(schedule, sizes: dict | None = None, dump: str | None = None,
          check: bool = False, until: str | None = None,
          divisors: dict | None = None, target=None) -> Program:
    """Lower a schedule to Kernel IR.

    sizes: size variables to fix at compile time (others stay kernel
    parameters). dump: a folder to write `NN_<pass>.txt` files into.
    check: run the verifier after every pass. until: stop before this pass.
    divisors: size -> a multiple it is known to be (a variant of a
    specialised schedule, lowered for its condition: schedule/specialize.py).
    target: what the kernels are for (a Target or an architecture name;
    None: arch/target.py's DEFAULT, sm_90a).
    """
    from ..schedule import Schedule
    if not isinstance(schedule, Schedule):
        raise LoweringError(f"lower: needs a tcomp.Schedule, got {type(schedule).__name__}")
    sizes = checked_sizes(schedule, sizes)
    target = resolve(target)
    try:
        prog = Builder(schedule, sizes, divisors, target).program()
    except TcompError:
        raise
    except RecursionError:
        raise LoweringError("lower: loop nest too deep") from None
    _dump(dump, 0, "build", prog)
    if check:
        for k in prog.kernels:
            verify(k, prog)
    prog = run_passes(prog, until=until, dump=dump, check=check)
    target_features.check(prog, target)
    return prog


def checked_sizes(schedule, sizes) -> dict:
    """`sizes=` of lower and build as a dict of Python ints, or the LoweringError
    that says what is wrong with it."""
    if sizes is None:
        return {}
    if not isinstance(sizes, Mapping):
        raise LoweringError(f"lower: sizes must be a dict of size variable -> int (like "
                            f"{{'N': 1024}}), got {type(sizes).__name__} {_short(sizes)}")
    out = {}
    for name, v in sizes.items():
        if name not in schedule.op.size_vars:
            raise LoweringError(f"lower: {_short(name)} is not a size variable of "
                                f"'{schedule.op.name}' (sizes: "
                                f"{', '.join(schedule.op.size_vars) or 'none'})")
        if as_int(v) is None or v < 0:
            raise LoweringError(f"lower: size {name} must be a non-negative int, got "
                                f"{_short(v)}")
        out[name] = as_int(v)  # NumPy integers (a shape) become Python ints
    return out


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def run_passes(prog: Program, start: str | None = None, until: str | None = None,
               dump: str | None = None, check: bool = False) -> Program:
    """Run PASSES on `prog`, from pass `start` (None: the first) up to, not
    including, `until` (None: to the end). `lower(s, until=p)` followed by
    `run_passes(that, start=p)` is `lower(s)`: the sim target keeps both IRs."""
    names = [name for name, _ in PASSES]
    for what, name in (("start", start), ("until", until)):
        if name is not None and name not in names:
            raise LoweringError(f"lower: {what}={name!r} is not a pass (passes: "
                                f"{', '.join(names)})")
    first = 0 if start is None else names.index(start)
    flat_from = names.index("flatten_storage")  # subscripts are flat offsets from here on
    for i, (name, fn) in enumerate(PASSES[first:], first + 1):
        if name == until:
            break
        prog = dataclasses.replace(prog, kernels=tuple(_run_pass(name, fn, k, prog)
                                                       for k in prog.kernels))
        _dump(dump, i, name, prog)
        if check:
            for k in prog.kernels:
                verify(k, prog, flat=i - 1 >= flat_from)
    return prog


def _dump(folder, i, name, prog):
    if folder is None:
        return
    if not isinstance(folder, (str, os.PathLike)):
        raise LoweringError(f"lower: dump must be a folder path (str), got {folder!r}")
    path = os.path.join(folder, f"{i:02d}_{name}.txt")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as f:
            f.write(str(prog))
    except OSError as e:
        raise LoweringError(f"lower: cannot write the IR dump {path!r}: "
                            f"{e.strerror or e}; pass dump= a folder you can write to") from None
