"""`tcomp.lower` and `tcomp.build`: the public entry points of compilation."""
from __future__ import annotations

import numpy as np

from .errors import LoweringError, SimError, TcompError
from .lang.evaluate import bind_inputs
from .lang.symbolic import eval_int
from .lower import ir
from .lower.pipeline import lower as _lower
from .lower.pipeline import checked_sizes, run_passes
from .lower.remarks import lowering_remarks

TARGETS = ("sim", "cuda")


def lower(schedule, sizes: dict | None = None, dump: str | None = None, *,
          target=None) -> ir.Program:
    """Kernel IR of a schedule after the whole pipeline; `str()` prints it.
    `dump`: folder that receives the IR after each pass. `target`: the GPU
    the kernels are for (a tcomp.arch.Target, "sm_80", "cuda:sm_90a"; None:
    sm_90a): a kernel needing what it lacks is a LoweringError. A schedule
    with variants (`Schedule.specialize`) gives a SpecializedProgram: each
    variant's IR (specialized.py), dumped into a subfolder each."""
    if getattr(schedule, "specializations", None):
        from .specialized import lower_specialized
        return lower_specialized(schedule, sizes, dump, target)
    return _lower(schedule, sizes, dump=dump, target=target)


def build(schedule, target: str = "cuda", sizes: dict | None = None, *, records=None,
          strict: bool = False, specialize: bool = False):
    """Compile a schedule for `target` ("sim" runs on the CPU; "cuda" on a GPU).

    Given an Op instead of a Schedule, the schedule is chosen first by
    `tcomp.auto_schedule(op, sizes, records=records)` (search/auto.py: the
    search space ranked by the cost estimate, checked on the sim; tuning
    `records` win when they hold one). The kernel's `remarks` say what was
    chosen and what lowering declined; `strict=True` makes anything lowering
    declined (a lowering remark) a LoweringError instead. `specialize=True`
    (an Op only) lets the choice add size-specialised variants where its
    vectors need a divisibility (auto_schedule's `specialize`): the kernel then
    dispatches on the host between one kernel per variant (specialized.py);
    by default an Op builds one kernel, with `source`, `cubin`, `torch_op`,
    `export` as any."""
    from .schedule import Schedule
    from .lang.op import Op
    remarks = []
    if isinstance(schedule, Op):
        from .search.auto import choose  # (search sits above build: imported on use)
        choice = choose(schedule, sizes, "sim" if target == "sim" else "cuda", records=records,
                        specialize=specialize)
        schedule, remarks = choice.schedule, list(choice.remarks)
    elif not isinstance(schedule, Schedule):
        raise TcompError(f"build: needs a tcomp.Schedule (or an Op), got "
                         f"{type(schedule).__name__}")
    elif specialize:
        raise TcompError("build: specialize= lets the automatic choice for an Op add variants; "
                         "this call passes a Schedule (give it variants with "
                         "Schedule.specialize)")
    elif records is not None:
        raise TcompError("build: records= chooses a schedule for an Op; this call passes a "
                         "Schedule (pass the Op, or tcomp.search.best(records, op, sizes))")
    if target not in TARGETS and not (isinstance(target, str) and target.startswith("cuda")):
        raise TcompError(f"build: unknown target {target!r} (targets: {', '.join(TARGETS)})")
    if schedule.specializations:
        from .specialized import build_specialized
        return build_specialized(schedule, target, sizes, strict, remarks)
    if target == "sim":
        k = SimKernel(schedule, sizes)
    else:
        from .target_cuda.kernel import CudaKernel
        k = CudaKernel.from_program(_lower(schedule, sizes), target)
    declined = lowering_remarks(k.program)
    if strict and declined:
        raise LoweringError("build(strict=True): lowering declined what the schedule asked "
                            "for:\n  " + "\n  ".join(declined))
    k.remarks = tuple(remarks) + declined
    return k


class SimKernel:
    """A compiled program for the "sim" target: call it like `tcomp.evaluate`.

    It runs `program`, the final Kernel IR (the whole pipeline: what the CUDA
    target prints), so every layout decision (storage order, padding, flat
    offsets) shows in the values it computes. `unflattened` is the same IR
    before storage flattening, with one subscript per buffer dimension: when
    a run of `program` fails, it is run too, and its error (naming the
    subscript and the dimension at fault) is reported when it has one.
    `set_unflattened(p)` replaces both by `p` and its flattening (the tests
    that break the IR on purpose)."""
    target = "sim"
    remarks: tuple = ()  # set by tcomp.build: what was chosen, what lowering declined
    max_instances: int | None = None  # set in __init__: the work guards (target_sim/work.py)
    max_thread_steps: int | None = None

    def __init__(self, schedule, sizes, divisors: dict | None = None):
        self.schedule = schedule
        self.op = schedule.op
        self.sizes = checked_sizes(schedule, sizes)
        from .target_sim import work
        self.max_instances, self.max_thread_steps = work.MAX_INSTANCES, work.MAX_THREAD_STEPS
        self.set_unflattened(_lower(schedule, self.sizes, until="flatten_storage",
                                    divisors=divisors))

    @classmethod
    def from_program(cls, prog: ir.Program) -> "SimKernel":
        """A sim kernel running `prog` as it is: a Program built without a
        schedule (tcomp.kernels builds Kernel IR directly), already flattened.
        It is called like the op (the program's signature checks the inputs)."""
        from .target_sim import work
        k = cls.__new__(cls)
        k.schedule = k.op = k.unflattened = None
        k.sizes = dict(prog.bound_sizes)
        k.program = prog
        k.max_instances, k.max_thread_steps = work.MAX_INSTANCES, work.MAX_THREAD_STEPS
        return k

    def set_unflattened(self, prog: ir.Program) -> None:
        """Run `prog` (IR before storage flattening) flattened from now on."""
        self.unflattened = prog
        self.program = run_passes(prog, start="flatten_storage")

    def __repr__(self) -> str:
        name = self.op.name if self.op is not None else self.program.name
        return f"<tcomp sim kernel {name}: {len(self.program.kernels)} launch(es)>"

    def __call__(self, *arrays):
        op = self.op
        if op is None:
            return self._call_program(arrays)
        inputs, sizes = bind_inputs(op, arrays, self.sizes)
        from .target_sim import work
        work.check(self.program, sizes, self.max_instances, self.max_thread_steps)
        env = self._run(self.program, inputs, sizes)
        outs = tuple(env[t.name] for t in op.outputs)
        for t in op.outputs:
            if t.declared_shape is not None:
                want = tuple(eval_int(d, sizes) for d in t.declared_shape)
                if want != env[t.name].shape:
                    raise LoweringError(f"output '{t.name}' is declared with shape {want} but "
                                        f"its statements compute shape {env[t.name].shape}")
        return outs[0] if len(outs) == 1 else outs

    def _call_program(self, arrays):
        prog = self.program
        arrays, sizes = prog.signature.check_call(arrays, self.sizes)
        inputs = {n: np.require(np.asarray(a), requirements="C")
                  for n, a in zip(prog.inputs, arrays)}
        env = self._run(prog, inputs, sizes)
        outs = tuple(env[n] for n in prog.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _run(self, prog, inputs, sizes) -> dict:
        from .target_sim import run_program
        env = dict(inputs)
        for b in prog.buffers:
            if b.role == "input":
                continue
            shape = []
            for d in b.shape:
                shape.append(max(0, _eval(d, sizes)))
            env[b.name] = np.zeros(tuple(shape), b.dtype.numpy)
        try:
            run_program(prog, env, sizes)
        except SimError as final:
            if prog is not self.program or self.unflattened is None:
                raise
            # The flat offset at fault says less than the subscripts before
            # flattening (which dimension overflowed): run that IR, on fresh
            # buffers, for its message; if it runs clean, the fault is in the
            # flattening itself and the final IR's message stands.
            try:
                self._run(self.unflattened, inputs, sizes)
            except SimError as structured:
                raise structured from None
            raise final
        return env


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
