"""Building a specialised schedule (schedule/specialize.py): one kernel per
variant, chosen at each call by the sizes.

`tcomp.lower(s)` of a schedule with variants is a `SpecializedProgram`: the
Kernel IR of each variant, lowered for its condition, then of the general
schedule ("otherwise"); its text prints each under a `# variant` line.
`tcomp.build(s, ...)` is a `SpecializedKernel`: `variants` lists each
`KernelVariant` (its condition and its kernel: `source`, `ptx`, `program`,
`remarks`), `ran` names the variant the last call ran, `variant_for(sizes)`
the one a call at `sizes` would run. The choice is made on the host from the
inputs' shapes, before anything reaches a kernel: no condition is tested on
the device. `export` writes the last variant (correct at every size) with
a SpecializedExportWarning naming the ones it leaves out.

Sizes fixed at build (`sizes=`) decide conditions at build: a variant whose
condition is false there is not built, and one whose condition holds there
is the last one built (the variants after it, the general one included,
could never run).
"""
from __future__ import annotations

import os
import warnings

from .errors import LoweringError, TcompError
from .lower.pipeline import checked_sizes
from .lower.remarks import lowering_remarks
from .schedule.specialize import SizeCondition

OTHERWISE = "otherwise"


def plan(schedule, sizes) -> list[tuple]:
    """[(SizeCondition | None, Schedule, sizes, divisors)]: what to lower, in the
    order a call tries them (None: the general schedule)."""
    bound = checked_sizes(schedule, sizes)
    out = []
    for cond, variant in schedule.specializations:  # (every size is an input's dimension)
        known = {n: bound[n] for n in cond.sizes() if n in bound}
        if known and not SizeCondition(tuple(a for a in cond.atoms if a[0] in known)).holds(known):
            continue  # false at the fixed sizes: never runs
        always = len(known) == len(cond.sizes())
        out.append((cond, variant, {**bound, **cond.fixed()}, cond.divisors()))
        if always:
            return out
    out.append((None, schedule, bound, {}))
    return out


def lower_specialized(schedule, sizes, dump, target=None) -> "SpecializedProgram":
    from .lower.pipeline import lower
    variants = []
    for i, (cond, s, vsizes, divisors) in enumerate(plan(schedule, sizes), 1):
        folder = None if dump is None else os.path.join(
            dump, f"variant{i}" if cond is not None else OTHERWISE)
        variants.append((cond, lower(s, vsizes, dump=folder, divisors=divisors,
                                     target=target)))
    return SpecializedProgram(schedule.op.name, tuple(variants))


def build_specialized(schedule, target: str, sizes, strict: bool, chosen: list):
    """`tcomp.build` of a schedule with variants; `chosen`: build's own remarks
    (what auto_schedule chose)."""
    from .build import SimKernel
    from .lower.pipeline import lower
    kernels = []
    for cond, s, vsizes, divisors in plan(schedule, sizes):
        if target == "sim":
            k = SimKernel(s, vsizes, divisors)
        else:
            from .target_cuda.kernel import CudaKernel
            k = CudaKernel.from_program(lower(s, vsizes, divisors=divisors), target)
        k.remarks = lowering_remarks(k.program)
        kernels.append(KernelVariant(cond, k))
    declined = tuple(f"[{v.name}] {r}" for v in kernels for r in v.kernel.remarks)
    if strict and declined:
        raise LoweringError("build(strict=True): lowering declined what the schedule asked "
                            "for:\n  " + "\n  ".join(declined))
    sk = SpecializedKernel(schedule.op, tuple(kernels), checked_sizes(schedule, sizes), target)
    listed = "; ".join(f"[{i}] {v.name}" for i, v in enumerate(kernels, 1))
    sk.remarks = tuple(chosen) + (f"specialized: {len(kernels)} variant(s), the first whose "
                                  f"condition holds at a call runs: {listed}",) + declined
    return sk


class SpecializedProgram:
    """The Kernel IR of each variant (see the module docstring)."""

    def __init__(self, name: str, variants: tuple):
        self.name, self.variants = name, variants  # ((SizeCondition | None, Program), ...)

    @property
    def kernels(self) -> tuple:
        """Every variant's kernels, in order."""
        return tuple(k for _, p in self.variants for k in p.kernels)

    def __str__(self) -> str:
        parts = [f"# specialized program {self.name}: {len(self.variants)} variant(s), the "
                 f"first whose condition holds at a call runs"]
        for i, (cond, prog) in enumerate(self.variants, 1):
            parts.append(f"# variant {i}: {_name(cond)}{_lowered_as(cond)}")
            parts.append(str(prog))
        return "\n".join(parts)


def _name(cond) -> str:
    return OTHERWISE if cond is None else f"when {cond.text}"


def _lowered_as(cond) -> str:
    if cond is None:
        return ""
    said = [f"{n} as {n} / {m} * {m}" for n, m in cond.divisors().items()] + \
           [f"{n} = {v}" for n, v in cond.fixed().items()]
    return f" (lowered with {', '.join(said)})" if said else ""


class KernelVariant:
    """One variant of a SpecializedKernel: `condition` (None for the general
    one), `name` ("when D % 4 == 0" or "otherwise"), `kernel`. Called alone,
    it refuses sizes where its condition does not hold."""

    def __init__(self, condition, kernel):
        self.condition, self.kernel = condition, kernel
        self.name = _name(condition)

    def __getattr__(self, name):  # source, ptx, cubin, program, remarks, export, ...
        if name in ("kernel", "condition", "name"):
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def __repr__(self) -> str:
        return f"<tcomp kernel variant {self.name}: {self.kernel!r}>"

    def __call__(self, *args, **kwargs):
        if self.condition is not None:
            sizes = _call_sizes(args, self.condition.sizes(), self.kernel.program.size_sources)
            if sizes is not None and not self.condition.holds(sizes):
                raise TcompError(f"this variant runs only {self.name}; these inputs have "
                                 f"{_sizes_text(sizes)}: call the specialized kernel, which "
                                 f"chooses the variant")
        return self.kernel(*args, **kwargs)


class SpecializedKernel:
    """A kernel per variant, chosen at each call (see the module docstring)."""

    def __init__(self, op, variants: tuple, bound: dict, target: str):
        self.op, self.variants, self.bound = op, variants, bound
        self.target = "sim" if target == "sim" else "cuda"
        self.ran = None  # the name of the variant the last call ran
        self._sources = variants[-1].kernel.program.size_sources
        self._names = tuple(dict.fromkeys(n for v in variants if v.condition is not None
                                          for n in v.condition.sizes() if n not in bound))
        self.remarks: tuple = ()

    def __repr__(self) -> str:
        names = ", ".join(v.name for v in self.variants)
        return f"<tcomp specialized {self.target} kernel {self.op.name}: {names}>"

    def variant_for(self, sizes: dict) -> KernelVariant:
        """The variant a call at `sizes` (a dict of the sizes its conditions name) runs."""
        sizes = {**sizes, **self.bound}
        for v in self.variants:
            if v.condition is None or v.condition.holds(sizes):
                return v
        return self.variants[-1]  # (the last built holds at the fixed sizes)

    def __call__(self, *args, **kwargs):
        sizes = _call_sizes(args, self._names, self._sources)
        # inputs whose shapes cannot be read go to the last variant, whose own
        # checks then name what is wrong with them
        v = self.variants[-1] if sizes is None else self.variant_for(sizes)
        out = v.kernel(*args, **kwargs)
        self.ran = v.name
        return out

    @property
    def program(self) -> SpecializedProgram:
        return SpecializedProgram(self.op.name, tuple((v.condition, v.kernel.program)
                                                      for v in self.variants))

    def _joined(self, attr: str, comment: str) -> str:
        return "\n".join(f"{comment} variant {i}: {v.name}\n{getattr(v.kernel, attr)}"
                         for i, v in enumerate(self.variants, 1))

    @property
    def source(self) -> str:
        """Every variant's CUDA C++, each under a `// variant i: ...` line."""
        return self._joined("source", "//")

    @property
    def ptx(self) -> str:
        return self._joined("ptx", "//")

    @property
    def cubin(self):
        raise TcompError("a specialized kernel has one cubin per variant: read "
                         "k.variants[i].cubin")

    def export(self, path) -> None:
        """Write the last variant (the general one, correct at every size; or the
        one the fixed sizes chose), as `CudaKernel.export` does; the others are
        not written, and a SpecializedExportWarning says so: export them one by
        one (`k.variants[i].export(path)`) to choose among them yourself."""
        last = self.variants[-1]
        if len(self.variants) > 1:
            others = ", ".join(v.name for v in self.variants[:-1])
            warnings.warn(f"export: {path} holds the '{last.name}' variant only, which is "
                          f"correct at every size; the faster variant(s) {others} are not "
                          f"exported (export each with k.variants[i].export(path) and choose "
                          f"among them in your program)", SpecializedExportWarning,
                          stacklevel=2)
        last.kernel.export(path)


class SpecializedExportWarning(UserWarning):
    """`SpecializedKernel.export` wrote one variant of several."""


def _call_sizes(args, names, sources) -> dict | None:
    """The sizes `names` as the call's inputs give them (None when a shape
    cannot be read: the kernel's own checks then say what is wrong)."""
    out = {}
    try:
        for n in names:
            pos, dim = sources[n]
            out[n] = int(args[pos].shape[dim])
    except (KeyError, IndexError, AttributeError, TypeError, ValueError):
        return None
    return out


def _sizes_text(sizes: dict) -> str:
    return ", ".join(f"{n}={v}" for n, v in sizes.items())
