"""`CudaKernel`: a program compiled for the GPU — source, PTX, cubin, launch
metadata — callable on arrays, exportable as `.cubin` + `.json`."""
from __future__ import annotations

import ctypes
import json
import os

import numpy as np

from ..errors import CudaError, TcompError
from ..lang import dtypes
from ..lower import ir
from ..lower.launch import LaunchLimits, launch_problem
from . import arrays as A
from . import cuda_api
from .codegen import program_source
from .compile import DEFAULT_ARCH, CompileOptions, compile_source

FORMAT = 1


def size_to_json(e: ir.Expr):
    if isinstance(e, ir.Imm):
        return int(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Bin) and e.op in ("+", "-", "*", "/", "%", "min", "max"):
        return [e.op, size_to_json(e.a), size_to_json(e.b)]
    raise CudaError(f"export: cannot describe size expression {e}")


def eval_size(j, sizes: dict) -> int:
    if isinstance(j, int):
        return j
    if isinstance(j, str):
        return int(sizes[j])
    op, a, b = j[0], eval_size(j[1], sizes), eval_size(j[2], sizes)
    if op in ("/", "%") and b == 0:
        raise CudaError("size expression divides by zero")
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0, "%": a % b if b else 0,
            "min": min(a, b), "max": max(a, b)}[op]


def size_text(j) -> str:
    """A size expression's JSON form as readable text: ["-", "H", "KH"] -> "H - KH"."""
    if not isinstance(j, list):
        return str(j)
    op, a, b = j
    if op in ("min", "max"):
        return f"{op}({size_text(a)}, {size_text(b)})"
    wrap = lambda x: f"({size_text(x)})" if isinstance(x, list) else size_text(x)  # noqa: E731
    return f"{wrap(a)} {op} {wrap(b)}"


def launch_dims(kd: dict, sizes: dict) -> tuple[list[int], list[int]]:
    """A kernel's grid and block (from its sidecar entry) at these sizes."""
    return ([eval_size(g, sizes) for g in kd["grid"]],
            [eval_size(b, sizes) for b in kd["block"]])


def check_launch(kd: dict, grid, block, limits: LaunchLimits) -> None:
    """Raise CudaError when a non-empty launch of `kd` at these dimensions
    exceeds `limits` (the device's, and the compiled kernel's own)."""
    problem = launch_problem(kd["name"], grid, block, limits,
                             block_exprs=[size_text(b) for b in kd["block"]])
    if problem is not None:
        raise CudaError(problem)


def target_arch(target: str) -> str:
    """'cuda' -> the attached GPU's arch, else sm_90a; 'cuda:sm_80' -> sm_80."""
    for sep in (":", " -arch=", " --arch="):
        if sep in target:
            return target.split(sep, 1)[1].strip()
    if cuda_api.have_device():
        return cuda_api.device().arch
    return DEFAULT_ARCH


def describe_program(prog: ir.Program, op, smem: dict, arch: str) -> dict:
    from .. import __version__
    bufs = {b.name: b for b in prog.buffers}
    sources = {}
    for i, t in enumerate(op.inputs):
        for d, dim in enumerate(t.shape):
            from ..lang.ast import Size
            if isinstance(dim, Size):
                sources.setdefault(dim.name, [i, d])
    return {
        "format": FORMAT, "tcomp_version": __version__, "arch": arch, "op": op.name,
        "inputs": [_buf(bufs[n]) for n in prog.inputs],
        "outputs": [_buf(bufs[n]) | {"declared_shape": None, "zero_fill": _needs_zero(op, n)}
                    for n in prog.outputs],
        "temps": [_buf(b) for b in prog.buffers if b.role == "temp"],
        "sizes": list(prog.sizes), "bound_sizes": dict(prog.bound_sizes),
        "size_sources": sources,
        "kernels": [{"name": k.name, "grid": [size_to_json(g) for g in k.grid],
                     "block": [size_to_json(b) for b in k.block],
                     "dynamic_smem": smem[k.name]["dynamic_smem"],
                     "aligned_buffers": smem[k.name]["aligned"],
                     "params": [{"buffer": b} for b in k.buffers] + [{"size": s} for s in k.sizes]}
                    for k in prog.kernels],
    }


def _check_32bit(name: str, shape) -> None:
    n = 1
    for d in shape:
        n *= int(d)
    if n >= 2 ** 31:
        raise CudaError(f"'{name}' has {n} elements; generated kernels index with 32-bit "
                        f"integers, so tensors of 2^31 elements or more are not supported yet")


def _needs_zero(op, name: str) -> bool:
    """Outputs start zero-filled; skip the fill when the first statement writing
    the tensor covers all of it (from 0 to its shape in every dimension)."""
    from ..lang.ast import Const
    from ..lang.symbolic import NotSymbolic, to_sympy
    t = op.tensor(name)
    first = next(st for st in op.statements if st.tensor == name)
    if first.continues:
        return True
    try:
        for v, dim in zip(first.spatial, t.shape):
            r = first.range_of(v)
            if not (isinstance(r.lo, Const) and r.lo.value == 0):
                return True
            if (to_sympy(r.hi) - to_sympy(dim)).simplify() != 0:
                return True
    except NotSymbolic:
        return True
    return False


def _buf(b: ir.Buffer) -> dict:
    return {"name": b.name, "dtype": b.dtype.name, "shape": [size_to_json(d) for d in b.shape]}


class CudaKernel:
    """Built by `tcomp.build(s, target="cuda")` or `tcomp.load(path)`."""
    target = "cuda"

    def __init__(self, meta: dict, cubin: bytes, source: str = "", ptx: str = "", program=None,
                 op=None):
        self.meta, self.cubin, self.source, self.ptx = meta, cubin, source, ptx
        self.program, self.op = program, op
        self._module = None

    @classmethod
    def from_schedule(cls, schedule, sizes=None, target: str = "cuda") -> "CudaKernel":
        from ..lower.pipeline import lower
        prog = lower(schedule, sizes)
        src, smem = program_source(prog)
        arch = target_arch(target)
        c = compile_source(src, schedule.op.name, CompileOptions(arch))
        meta = describe_program(prog, schedule.op, smem, arch)
        for out, t in zip(meta["outputs"], schedule.op.outputs):
            if t.declared_shape is not None:
                from ..lower.translate import size_expr
                from ..lower.simplify import simplify_expr
                out["declared_shape"] = [size_to_json(simplify_expr(size_expr(
                    d, lambda n: ir.const(prog.bound_sizes[n]) if n in prog.bound_sizes
                    else ir.Var(n)))) for d in t.declared_shape]
        return cls(meta, c.cubin, src, c.ptx, prog, schedule.op)

    def __repr__(self) -> str:
        return (f"<tcomp cuda kernel {self.meta['op']} for {self.meta['arch']}: "
                f"{len(self.meta['kernels'])} launch(es)>")

    # ------------------------------------------------------------------ run
    def _bind(self, args):
        m = self.meta
        if len(args) != len(m["inputs"]):
            names = ", ".join(i["name"] for i in m["inputs"]) or "none"
            raise CudaError(f"'{m['op']}' takes {len(m['inputs'])} input(s) ({names}), got "
                            f"{len(args)}")
        return args

    def __call__(self, *args):
        m = self.meta
        self._bind(args)
        dev = cuda_api.device()
        dev.activate()
        if self._module is None:
            self._module = cuda_api.Module(self.cubin)
        wrapped, temps = [], []
        try:
            for spec, x in zip(m["inputs"], args):
                wrapped.append(A.wrap_input(spec["name"], x, dtypes.BY_NAME[spec["dtype"]]))
            sizes = dict(m["bound_sizes"])
            for spec, w in zip(m["inputs"], wrapped):
                if len(w.shape) != len(spec["shape"]):
                    raise CudaError(f"input '{spec['name']}' must have {len(spec['shape'])} "
                                    f"dimension(s), got {len(w.shape)}")
                for d, (j, n) in enumerate(zip(spec["shape"], w.shape)):
                    if isinstance(j, str) and j not in sizes:
                        sizes[j] = int(n)
            for spec, w in zip(m["inputs"], wrapped):
                for d, (j, n) in enumerate(zip(spec["shape"], w.shape)):
                    want = eval_size(j, sizes)
                    if want != n:
                        raise CudaError(f"input '{spec['name']}' dimension {d} is {n}, expected "
                                        f"{want} ({j if isinstance(j, str) else 'fixed'})")
            for spec, w in zip(m["inputs"], wrapped):
                _check_32bit(spec["name"], w.shape)
            like = next((w for w in wrapped if w.kind != "numpy"), None)
            outs = {}
            for spec in m["outputs"] + m["temps"]:
                shape = tuple(max(0, eval_size(j, sizes)) for j in spec["shape"])
                _check_32bit(spec["name"], shape)
                is_out = spec in m["outputs"]
                arr = A.new_output(shape, dtypes.BY_NAME[spec["dtype"]], like if is_out else None,
                                   zero=spec.get("zero_fill", True))
                outs[spec["name"]] = arr
                if not is_out:
                    temps.append(arr)
            ptrs = {spec["name"]: w.ptr for spec, w in zip(m["inputs"], wrapped)}
            ptrs.update({n: a.ptr for n, a in outs.items()})
            for kd in m["kernels"]:
                grid, block = launch_dims(kd, sizes)
                if min(grid) <= 0 or min(block) <= 0:
                    continue  # an empty range: nothing to compute
                for name in kd.get("aligned_buffers", ()):
                    if ptrs[name] % 16:
                        raise CudaError(f"kernel {kd['name']} accesses '{name}' with 16-byte "
                                        f"vectors, but its pointer is not 16-byte aligned")
                f = self._module.function(kd["name"], kd["dynamic_smem"])
                check_launch(kd, grid, block, self._module.limits[kd["name"]])
                params = []
                for p in kd["params"]:
                    if "buffer" in p:
                        params.append((ctypes.c_void_p, ptrs[p["buffer"]]))
                    else:
                        params.append((ctypes.c_int, sizes[p["size"]]))
                cuda_api.launch(f, grid, block, kd["dynamic_smem"], params)
            if like is None:
                cuda_api.synchronize()
            results = []
            for spec in m["outputs"]:
                a = outs[spec["name"]]
                if spec.get("declared_shape") is not None:
                    want = tuple(eval_size(j, sizes) for j in spec["declared_shape"])
                    if want != tuple(a.shape):
                        raise CudaError(f"output '{spec['name']}' is declared with shape {want} but "
                                        f"its statements compute shape {tuple(a.shape)}")
                results.append(A.finish_output(a))
            A.release(list(outs.values()))
            return results[0] if len(results) == 1 else tuple(results)
        finally:
            A.release(wrapped + temps)

    # ------------------------------------------------------------------ files
    def export(self, path: str) -> None:
        """Write `path` (.cubin) and the sidecar `path` with .json (entry points,
        launch geometry as size expressions, parameters, sizes, version, arch)."""
        if not path.endswith(".cubin"):
            raise TcompError(f"export: path must end with .cubin, got '{path}'")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(self.cubin)
        with open(path[:-len(".cubin")] + ".json", "w") as f:
            json.dump(self.meta, f, indent=1)


def load(path: str) -> CudaKernel:
    """A runnable kernel from files written by `export`."""
    if not path.endswith(".cubin"):
        raise TcompError(f"load: path must end with .cubin, got '{path}'")
    side = path[:-len(".cubin")] + ".json"
    try:
        with open(path, "rb") as f:
            cubin = f.read()
        with open(side) as f:
            meta = json.load(f)
    except OSError as e:
        raise TcompError(f"load: {e}") from None
    except ValueError as e:
        raise TcompError(f"load: {side} is not valid JSON ({e})") from None
    if meta.get("format") != FORMAT:
        raise TcompError(f"load: {side} has format {meta.get('format')!r}, expected {FORMAT}")
    return CudaKernel(meta, cubin)


del np
