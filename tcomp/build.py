"""`tcomp.lower` and `tcomp.build`: the public entry points of compilation."""
from __future__ import annotations

import numpy as np

from .errors import LoweringError, TcompError
from .lang.evaluate import bind_inputs
from .lang.symbolic import eval_int
from .lower import ir
from .lower.pipeline import lower as _lower

TARGETS = ("sim", "cuda")


def lower(schedule, sizes: dict | None = None, dump: str | None = None) -> ir.Program:
    """Kernel IR of a schedule after the whole pipeline; `str()` prints it.
    `dump`: folder that receives the IR after each pass."""
    return _lower(schedule, sizes, dump=dump)


def build(schedule, target: str = "cuda", sizes: dict | None = None):
    """Compile a schedule for `target` ("sim" runs on the CPU; "cuda" on a GPU)."""
    from .schedule import Schedule
    if not isinstance(schedule, Schedule):
        from .lang.op import Op
        if isinstance(schedule, Op):
            schedule = Schedule(schedule)
        else:
            raise TcompError(f"build: needs a tcomp.Schedule (or an Op), got "
                             f"{type(schedule).__name__}")
    if target == "sim":
        return SimKernel(schedule, sizes)
    if isinstance(target, str) and target.startswith("cuda"):
        from .target_cuda.kernel import CudaKernel
        return CudaKernel.from_schedule(schedule, sizes, target)
    raise TcompError(f"build: unknown target {target!r} (targets: {', '.join(TARGETS)})")


class SimKernel:
    """A compiled program for the "sim" target: call it like `tcomp.evaluate`."""
    target = "sim"

    def __init__(self, schedule, sizes):
        self.schedule = schedule
        self.op = schedule.op
        self.sizes = dict(sizes or {})
        self.program = _lower(schedule, self.sizes, until="flatten_storage")

    def __repr__(self) -> str:
        return f"<tcomp sim kernel {self.op.name}: {len(self.program.kernels)} launch(es)>"

    def __call__(self, *arrays):
        from .target_sim import run_program
        op = self.op
        env, sizes = bind_inputs(op, arrays, self.sizes)
        for b in self.program.buffers:
            if b.role == "input":
                continue
            shape = []
            for d in b.shape:
                shape.append(max(0, _eval(d, sizes)))
            env[b.name] = np.zeros(tuple(shape), b.dtype.numpy)
        run_program(self.program, env, sizes)
        outs = tuple(env[t.name] for t in op.outputs)
        for t in op.outputs:
            if t.declared_shape is not None:
                want = tuple(eval_int(d, sizes) for d in t.declared_shape)
                if want != env[t.name].shape:
                    raise LoweringError(f"output '{t.name}' is declared with shape {want} but "
                                        f"its statements compute shape {env[t.name].shape}")
        return outs[0] if len(outs) == 1 else outs


def _eval(e: ir.Expr, sizes: dict) -> int:
    if isinstance(e, ir.Imm):
        return int(e.value)
    if isinstance(e, ir.Var):
        return int(sizes[e.name])
    if isinstance(e, ir.Bin):
        a, b = _eval(e.a, sizes), _eval(e.b, sizes)
        if e.op in "/%" and b == 0:
            raise LoweringError(f"size expression {e} divides by zero")
        return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0, "%": a % b if b else 0,
                "min": min(a, b), "max": max(a, b)}[e.op]
    raise LoweringError(f"not a size expression: {e}")



def load(path: str):
    """A runnable kernel from `k.export(path)`'s .cubin and .json files."""
    from .target_cuda.kernel import load as _load
    return _load(path)
