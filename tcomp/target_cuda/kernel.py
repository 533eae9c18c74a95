"""`CudaKernel`: a program compiled for the GPU — source, PTX, cubin, launch
metadata — callable on arrays, exportable as `.cubin` + `.json`."""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

import numpy as np

from ..arch import limits
from ..errors import CudaError, TcompError
from ..lang import dtypes
from ..lang.signature import Signature
from ..lower import ir
from ..lower.launch import LaunchLimits, launch_problem
from . import arrays as A
from . import cuda_api, sidecar, streams
from .arch import check_arch, check_features
from .codegen import CodegenOptions, program_source
from .compile import DEFAULT_ARCH, CompileOptions, compile_source
from .index_width import static_index_bits
from .names import cuda_name


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


def describe_program(prog: ir.Program, smem: dict, arch: str) -> dict:
    """The sidecar's description of `prog` compiled for `arch` (`smem`: per
    kernel, its dynamic shared memory and 16-byte aligned buffers)."""
    from .. import __version__
    bufs = {b.name: b for b in prog.buffers}
    declared = prog.declared_shapes
    return {
        "format": sidecar.FORMAT, "tcomp_version": __version__, "arch": arch, "op": prog.name,
        "inputs": [_buf(bufs[n]) for n in prog.inputs],
        "outputs": [_buf(bufs[n]) | {
            "declared_shape": ([size_to_json(d) for d in declared[n]] if n in declared
                               else None),
            "zero_fill": n in prog.zero_fill} for n in prog.outputs],
        "temps": [_buf(b) for b in prog.buffers if b.role == "temp"],
        "sizes": list(prog.sizes), "bound_sizes": dict(prog.bound_sizes),
        "size_sources": {name: list(src) for name, src in prog.size_sources.items()},
        "signature": prog.signature.to_json(),
        "kernels": [{"name": cuda_name(k.name), "grid": [size_to_json(g) for g in k.grid],
                     "block": [size_to_json(b) for b in k.block],
                     "dynamic_smem": smem[k.name]["dynamic_smem"],
                     "aligned_buffers": smem[k.name]["aligned"],
                     "params": [{"buffer": b} for b in k.buffers] + [{"size": s} for s in k.sizes]
                     + [{"tensor_map": _map(m, bufs[m.buffer])} for m in k.tensor_maps],
                     "min_blocks": k.min_blocks}
                    for k in prog.kernels],
    }


def _map(m: ir.TensorMap, b: ir.Buffer) -> dict:
    out = {"name": m.name, "buffer": m.buffer, "dtype": b.dtype.name, "box": list(m.box),
           "swizzle": m.swizzle}
    if m.im2col is not None:
        out["im2col"] = {"lower": list(m.im2col.lower), "upper": list(m.im2col.upper)}
    return out


def _buf(b: ir.Buffer) -> dict:
    return {"name": b.name, "dtype": b.dtype.name, "shape": [size_to_json(d) for d in b.shape]}


@dataclass
class Variant:
    """One compiled index width of a program: its cubin and per-launch metadata
    (the sidecar's "kernels"); loaded into a module on first use."""
    index_bits: int
    cubin: bytes
    kernels: list
    source: str = ""
    ptx: str = ""
    module: object = None


# The most shared memory one block may opt into, by compute capability (the machine
# model's table, arch/limits.py): a kernel above it compiles but can never launch there,
# so it is refused at build, with its figure.
SHARED_PER_BLOCK = limits.SHARED_PER_BLOCK


def check_shared_memory(smem: dict, arch: str) -> None:
    """Raise CudaError when a kernel's dynamic shared memory (`smem`: per
    kernel, program_source's figures) exceeds what `arch` lets one block use
    (an arch not in SHARED_PER_BLOCK is checked at load, against the device)."""
    limit = SHARED_PER_BLOCK.get(arch.rstrip("af"))
    for name, k in smem.items():
        if limit is not None and k["dynamic_smem"] > limit:
            raise CudaError(f"kernel {name} needs {k['dynamic_smem']} bytes of shared memory "
                            f"per block ({k['dynamic_smem'] / 1024:.1f} KiB), more than {arch} "
                            f"allows ({limit // 1024} KiB); use smaller shared tiles or fewer "
                            f"pipeline stages (a shared-memory epilogue's staging tile counts "
                            f"too: its bm x bn output elements)")


def compile_variant(prog: ir.Program, arch: str, index_bits: int) -> tuple[dict, Variant]:
    """Generate and compile `prog` with `index_bits`-bit indices: (meta, variant)."""
    check_arch(arch)
    check_features(prog, arch)
    src, smem = program_source(prog, CodegenOptions(index_bits))
    check_shared_memory(smem, arch)
    c = compile_source(src, prog.name, CompileOptions(arch))
    meta = describe_program(prog, smem, arch)
    meta["index_bits"] = index_bits
    return meta, Variant(index_bits, c.cubin, meta["kernels"], src, c.ptx)


class CudaKernel:
    """Built by `tcomp.build(s, target="cuda")` or `tcomp.load(path)`.

    Index width: kernels index with 32-bit integers where every index fits and
    with 64-bit ones for tensors of 2^31 elements or more (index_width.py).
    With sizes fixed at build the width is chosen then; with symbolic sizes
    the 32-bit variant is built, and a call whose tensors need 64 bits
    compiles the 64-bit variant once (`export` writes both)."""
    target = "cuda"
    remarks: tuple = ()  # set by tcomp.build: what was chosen, what lowering declined

    def __init__(self, meta: dict, cubin: bytes, source: str = "", ptx: str = "", program=None,
                 wide: Variant | None = None):
        self.meta, self.cubin, self.source, self.ptx = meta, cubin, source, ptx
        self.program = program  # the Kernel IR (built kernels; None for loaded ones)
        self.origin = None  # the .cubin a loaded kernel came from
        bits = int(meta.get("index_bits", 32))
        self._variants = {bits: Variant(bits, cubin, meta["kernels"], source, ptx)}
        self._plans = {}  # index bits -> launch_plan.Plan, made on first use
        self._bound = {}  # tuple(sizes.items()) -> launch_plan.Bound, for recent sizes
        self._fixed = None  # the one Bound of a kernel whose every size is fixed at build
        self._fast = None  # torch_fast.py's per-kernel call, made at the first torch call
        if wide is not None:
            self._variants[64] = wide

    @property
    def index_bits(self) -> int:
        """Index width of `cubin` (32 or 64)."""
        return int(self.meta.get("index_bits", 32))

    @classmethod
    def from_program(cls, prog: ir.Program, target: str = "cuda") -> "CudaKernel":
        """Compile a lowered program (`tcomp.build` lowers; the target never does)."""
        arch = target_arch(target)
        meta, v = compile_variant(prog, arch, static_index_bits(prog) or 32)
        return cls(meta, v.cubin, v.source, v.ptx, prog)

    def variant(self, index_bits: int) -> Variant:
        """The compiled variant of this width; the 64-bit one is compiled on
        first use when the program is at hand (built, not loaded, kernels)."""
        if index_bits not in self._variants:
            if self.program is None:
                raise CudaError(f"'{self.meta['op']}' needs 64-bit indexing for these sizes, but "
                                f"it was loaded from files without the 64-bit variant; export it "
                                f"again with this version of tcomp (it writes both variants)")
            _, v = compile_variant(self.program, self.meta["arch"], index_bits)
            self._variants[index_bits] = v
        return self._variants[index_bits]

    def __repr__(self) -> str:
        return (f"<tcomp cuda kernel {self.meta['op']} for {self.meta['arch']}: "
                f"{len(self.meta['kernels'])} launch(es)>")

    # ------------------------------------------------------------------ run
    @functools.cached_property
    def signature(self) -> Signature:
        """The inputs' contract, checked before anything reaches the GPU; rebuilt
        from the sidecar for loaded kernels."""
        return Signature.from_json(self.meta["signature"])

    @functools.cached_property
    def _check(self):
        """The signature's checker, compiled for this kernel's fixed sizes."""
        return self.signature.checker(self.meta["bound_sizes"])

    @functools.cached_property
    def _inputs(self) -> list:
        return [(spec["name"], dtypes.BY_NAME[spec["dtype"]]) for spec in self.meta["inputs"]]

    @functools.cached_property
    def _made(self) -> list:
        """(dtype, zero-fill, is an output) of each output, then each temporary."""
        m = self.meta
        return ([(dtypes.BY_NAME[o["dtype"]], o.get("zero_fill", True), True)
                 for o in m["outputs"]] +
                [(dtypes.BY_NAME[t["dtype"]], True, False) for t in m["temps"]])

    @functools.cached_property
    def _width(self):
        from .launch_plan import compile_width
        return compile_width(self.meta)

    def __call__(self, *args, stream=None):
        """Run the kernel on `args` (API.md); returns the outputs.

        Runs on the caller's stream (streams.py): `stream=` when given (an int
        handle, a torch or CuPy stream, or an object with `__cuda_stream__`),
        else torch's current stream for torch tensors, CuPy's for CuPy arrays,
        the stream a `__cuda_array_interface__` names, else the legacy default
        stream. Device-array calls return without waiting for the GPU; NumPy
        calls copy in and out on that stream and wait for it."""
        if stream is None and self._fast is not None:
            out = self._fast(args)  # torch_fast.py: None for any call it does not take
            if out is not None:
                return out
        if stream is not None:
            stream = streams.from_argument(stream)  # a bad one is refused before any GPU work
        if A.has_dlpack_only(args):
            # Imported first so that the checks see their shapes and dtypes; the producer
            # is told the stream the call will run on.
            names = [i["name"] for i in self.meta["inputs"]]
            args = A.import_dlpack_only(names, args,
                                        A.stream_of(args) if stream is None else stream)
            try:
                return self._run(args, stream)
            finally:
                A.release_args(args)  # DLPack imports that never reached wrap_input
        return self._run(args, stream)

    def _run(self, args, stream: int | None):
        # The checks every target shares (ranks, dims, size variables, dtypes, writes
        # range inference left to run time), before any copy or launch.
        args, sizes = self._check(args)
        bound = self._fixed
        if bound is None:
            key = tuple(sizes.items())
            bound = self._bound.get(key) or self._bind(sizes, key)
        if stream is None and args and type(args[0]) in A.TORCH_TYPES:
            # The call model code makes, every input a contiguous CUDA tensor on device 0,
            # on torch's current stream, with nothing but the work that call needs
            # (torch_fast.py); None for any other call (then `_call`, the general path,
            # takes it and names what is wrong). (No cuCtxSetCurrent: a launch made
            # without tcomp's context current is retried with it, see launch_failed.)
            from .torch_fast import make_torch_call
            plan = bound.plan
            if plan.torch_call is None:
                plan.torch_call = make_torch_call(plan, self._torch_made)
            out = plan.torch_call(args, bound)
            if out is not None:
                if self._fast is None and not self.signature.checks:
                    # from now on __call__ tries this first (the write checks need
                    # the sizes as a dict: a kernel with them keeps this path)
                    self._fast = make_torch_call(plan, self._torch_made, self,
                                                 tuple(x.dtype for x in args))
                return out
        return self._call(args, bound, stream)

    @functools.cached_property
    def _torch_made(self) -> list:
        """`_made` with torch dtypes."""
        import torch
        return [(getattr(torch, dt.name), zero, is_out) for dt, zero, is_out in self._made]

    def _call(self, args, bound, stream: int | None):
        """Any call: NumPy, torch, CuPy, DLPack and array-interface inputs, and
        an explicit `stream=` (here its int handle)."""
        cuda_api.ensure_context()
        if stream is None:
            s, explicit = A.stream_of(args), False
        else:
            s, explicit = stream, True
        taken = []  # what release() hands back or frees
        try:
            ptrs = []
            for (name, want), x in zip(self._inputs, args):
                w = A.wrap_input(name, x, want, s)
                if w.owned or w.imported is not None:
                    taken.append(w)
                ptrs.append(w)
            like = next((w for w in ptrs if w.kind != "numpy"), None)
            made = []
            for (dt, zero, is_out), shape in zip(self._made, bound.shapes):
                a = (A.new_output(shape, dt, like, zero, s, explicit) if is_out else
                     A.new_temp(shape, dt, like, s, explicit))
                if a.owned:
                    taken.append(a)
                made.append(a)
            ptrs = [w.ptr for w in ptrs]
            ptrs += [a.ptr for a in made]
            bound.run(ptrs, s)
            n_out = len(self.meta["outputs"])
            results = [A.finish_output(a, s) for a in made[:n_out]]
            if made[0].kind == "numpy":
                cuda_api.stream_synchronize(s)  # the copies back, queued by finish_output
        except BaseException:
            A.release(taken, s, quiet=True)
            raise
        if taken:
            A.release(taken, s)
        return results[0] if n_out == 1 else tuple(results)

    def _bind(self, sizes: dict, key: tuple):
        """The launch plan of the variant these sizes need (index_width.py),
        made on first use, bound to these sizes; the bindings of recent sizes
        are kept (by `key`, the sizes' items)."""
        bits = max(self._width(sizes), self.index_bits)  # a 64-bit-only kernel runs as is
        plan = self._plans.get(bits)
        if plan is None:
            from .launch_plan import Plan
            cuda_api.ensure_context()
            v = self.variant(bits)
            if v.module is None:
                v.module = cuda_api.Module(v.cubin)
            plan = self._plans[bits] = Plan(self.meta, v.kernels, v.module, bits)
        bound = plan.bind(sizes)
        if not self.meta["sizes"]:
            self._fixed = bound  # (the checker has compared every size with the fixed ones)
        if len(self._bound) >= 64:
            self._bound.clear()  # a program called with ever new sizes: start again
        self._bound[key] = bound
        return bound

    @property
    def _module(self):
        """The loaded module of `cubin` (None before the first call)."""
        return self._variants[self.index_bits].module

    def torch_op(self, name: str | None = None):
        """This kernel as a PyTorch custom operator (`torch.ops.tcomp.<name>`)
        that `torch.compile` traces without a graph break; see torch_op.py."""
        from .torch_op import torch_op
        return torch_op(self, name)

    # ------------------------------------------------------------------ files
    def export(self, path) -> None:
        """Write `path` (.cubin) and the sidecar `path` with .json (entry points,
        launch geometry as size expressions, parameters, sizes, version, arch,
        `index_bits`: size parameters are C `int` for 32, `long long` for 64),
        sealed with the sha256 of each cubin and of its own content (sidecar.py).
        A 32-bit kernel with symbolic sizes also writes its 64-bit variant as
        `<stem>.i64.cubin`, named with its launches under "index64" in the
        sidecar, so `tcomp.load` serves tensors of 2^31 elements or more too."""
        path = cubin_path(path, "export")
        stem = path[:-len(".cubin")]
        meta = {k: v for k, v in self.meta.items()
                if k not in ("index64", "cubin_sha256", "sidecar_sha256")}
        meta.update(format=sidecar.FORMAT, index_bits=self.index_bits,
                    cubin_sha256=sidecar.sha256(self.cubin))
        wide = None
        if self.index_bits == 32 and self.meta["sizes"] and (64 in self._variants
                                                             or self.program is not None):
            wide = self.variant(64)
            meta["index64"] = {"cubin": os.path.basename(stem) + ".i64.cubin",
                               "cubin_sha256": sidecar.sha256(wide.cubin),
                               "kernels": wide.kernels}
        files = [(path, self.cubin)]
        if wide is not None:
            files.append((stem + ".i64.cubin", wide.cubin))
        files.append((stem + ".json", json.dumps(sidecar.seal(meta), indent=1).encode()))
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            for name, data in files:
                with open(name, "wb") as f:
                    f.write(data)
        except OSError as e:
            raise TcompError(f"export: cannot write {path}: {e}") from None

    def check_entry_points(self, bits: int) -> None:
        """Load the variant of `bits`, and check each of its launches' parameters
        against what the driver reports of the function (cuFuncGetParamInfo,
        CUDA 12.4 drivers and later): their number and sizes (CudaError).
        `load` calls it on a machine with a GPU; the module is kept for the calls."""
        v = self.variant(bits)
        module = v.module or cuda_api.Module(v.cubin)
        for kd in v.kernels:
            got = module.param_sizes(kd["name"])
            want = sidecar.param_sizes(kd, bits)
            if got is not None and tuple(got) != want:
                raise CudaError(
                    f"{self.origin or self.meta['op']}: kernel {kd['name']} takes {len(got)} "
                    f"parameter(s) of ({', '.join(map(str, got))}) bytes by the driver's "
                    f"account, but the launch passes {len(want)} of "
                    f"({', '.join(map(str, want))}) bytes; {sidecar.REMEDY}")
        v.module = module


def cubin_path(path, what: str) -> str:
    """`path` as a str ending in .cubin (TcompError otherwise)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TcompError(f"{what}: path must be a str or os.PathLike naming a .cubin file, "
                         f"got {type(path).__name__}")
    if not path.endswith(".cubin"):
        raise TcompError(f"{what}: path must end with .cubin, got '{path}'")
    if "\x00" in path:
        raise TcompError(f"{what}: path must not contain a NUL character, got {path!r}")
    return path


def load(path) -> CudaKernel:
    """A runnable kernel from files written by `export`, checked before any
    use (sidecar.py); on a GPU also against the driver (`check_entry_points`)."""
    path = cubin_path(path, "load")
    side = path[:-len(".cubin")] + ".json"
    try:
        cubin = _read(path)
    except OSError as e:
        raise TcompError(f"load: {e}") from None
    meta = sidecar.read_json(side)
    sidecar.validate(meta, side)
    sidecar.check_cubin(cubin, path, meta["cubin_sha256"], meta["kernels"], meta["index_bits"])
    wide = None
    if "index64" in meta:
        w = meta["index64"]
        wide_path = os.path.join(os.path.dirname(path), w["cubin"])
        try:
            data = _read(wide_path)
        except OSError as e:
            raise TcompError(f"load: {side} names the 64-bit variant '{w['cubin']}', which "
                             f"cannot be read ({e})") from None
        sidecar.check_cubin(data, wide_path, w["cubin_sha256"], w["kernels"], 64)
        wide = Variant(64, data, w["kernels"])
    k = CudaKernel(meta, cubin, wide=wide)
    k.origin = path
    if cuda_api.have_device():
        for bits in k._variants:
            k.check_entry_points(bits)
    return k


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


del np
