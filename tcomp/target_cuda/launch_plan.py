"""A compiled variant's launch plan: everything about a kernel call that does
not change from call to call, worked out once when the variant is loaded.

Per call, what is left is: the sizes (from the signature check), the output
shapes and launch dimensions (constants when the sizes were fixed at build,
else one compiled Python expression each), pointers into parameter slots,
and one `cuLaunchKernel` per launch.

* Size expressions of the sidecar (JSON: int, size name, [op, a, b]) are
  compiled to Python closures (`compile_sizes`), with kernel.eval_size's
  arithmetic: floor division, and a CudaError on division by zero.
* Function handles and their launch limits are fetched once; a launch whose
  dimensions are constant is checked against them once (a launch that can
  never be valid fails the first call, before anything is queued), one with
  runtime dimensions per call.
* Parameters (`ParamSlots`): one 8-byte slot per kernel parameter and a
  `void*[]` of the slots' addresses, allocated once per launch and thread;
  cuLaunchKernel receives that array's address, an int, which cuda.bindings
  passes through untouched (a (values, types) tuple is converted per call).
"""
from __future__ import annotations

import ctypes
import operator
import sys
import threading

from ..errors import CudaError
from ..lower.launch import launch_problem
from . import cuda_api
from .index_width import LIMIT

if sys.byteorder != "little":  # pragma: no cover - CUDA hosts are little-endian
    raise ImportError("tcomp's kernel parameter packing assumes a little-endian host")


# ------------------------------------------------------------- size expressions
def _div(a: int, b: int) -> int:
    if b == 0:
        raise CudaError("size expression divides by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise CudaError("size expression divides by zero")
    return a % b


def size_code(j) -> str:
    """Python source computing a sidecar size expression from a dict `s`."""
    if isinstance(j, bool):
        raise CudaError(f"malformed size expression {j!r} in the sidecar")
    if isinstance(j, int):
        return str(j)
    if isinstance(j, str):
        return f"s[{j!r}]"
    if not (isinstance(j, list) and len(j) == 3):
        raise CudaError(f"malformed size expression {j!r} in the sidecar")
    op, a, b = j[0], size_code(j[1]), size_code(j[2])
    if op in ("+", "-", "*"):
        return f"({a} {op} {b})"
    if op in ("/", "%"):
        return f"{'_div' if op == '/' else '_mod'}({a}, {b})"
    if op in ("min", "max"):
        return f"{op}({a}, {b})"
    raise CudaError(f"malformed size expression {j!r} in the sidecar")


def compile_sizes(exprs, wrap: str = "{}"):
    """A function sizes -> tuple of the expressions' values; `wrap` is a
    format for each value's code (e.g. "max(0, {})")."""
    code = ", ".join(wrap.format(size_code(j)) for j in exprs)
    return eval(f"lambda s: ({code}{',' if exprs else ''})",  # noqa: S307 - our own text
                {"_div": _div, "_mod": _mod, "min": min, "max": max})


def is_constant(j) -> bool:
    return isinstance(j, int) or (isinstance(j, list) and all(is_constant(x) for x in j[1:]))


# ------------------------------------------------------------- parameters
class ParamSlots:
    """`kernelParams` for one launch: n 8-byte slots and the `void*[n]` array
    of their addresses (`address`, 0 when there are no parameters). A
    pointer fills a slot; a C `int` size reads the slot's low 4 bytes (the
    value, on a little-endian host), a `long long` all 8."""

    def __init__(self, n: int):
        self.values = (ctypes.c_uint64 * max(n, 1))()
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
        self.address = ctypes.addressof(self.pointers) if n else 0
        self.n = n

    def fill(self, values) -> int:
        """Store the parameter values (ints); returns the kernelParams address."""
        self.values[:self.n] = values
        return self.address


# ------------------------------------------------------------- launches
class Launch:
    """One `__global__` function of a variant, ready to launch."""

    def __init__(self, kd: dict, slot_of: dict, sizes_fixed: dict | None):
        self.name = kd["name"]
        self.func = self.limits = None  # set by `load`
        self.smem = int(kd["dynamic_smem"])
        self.kd = kd
        dims = list(kd["grid"]) + list(kd["block"])
        # values of a call: [buffer pointers in slot order..., size values...]
        self.pick = _getter([slot_of[p["buffer"]] if "buffer" in p else slot_of[("size", p["size"])]
                             for p in kd["params"]])
        self.n_params = len(kd["params"])
        self.aligned = tuple(slot_of[n] for n in kd.get("aligned_buffers", ()))
        self.dims = None  # the six constant dimensions, when they are constant
        self.dims_of = None  # else: sizes -> the six dimensions
        if sizes_fixed is not None or all(is_constant(d) for d in dims):
            self.dims = tuple(int(x) for x in compile_sizes(dims)(sizes_fixed or {}))
        else:
            self.dims_of = compile_sizes(dims)
        self._tls = threading.local()

    def load(self, module) -> None:
        """Fetch the function handle and its limits; check constant dimensions."""
        self.func = module.function(self.name, self.smem)
        self.limits = module.limits[self.name]
        if self.dims is not None:
            self.check(self.dims)

    @property
    def empty(self) -> bool:
        return self.dims is not None and min(self.dims) <= 0

    def check(self, dims) -> None:
        """The launch fits the device and the function (else CudaError)."""
        gx, gy, gz, bx, by, bz = dims
        lim = self.limits
        kt = lim.kernel_threads if lim.kernel_threads is not None else lim.threads_per_block
        if (bx * by * bz <= min(lim.threads_per_block, kt) and bx <= lim.block[0]
                and by <= lim.block[1] and bz <= lim.block[2] and gx <= lim.grid[0]
                and gy <= lim.grid[1] and gz <= lim.grid[2]):
            return
        from .kernel import size_text
        problem = launch_problem(self.name, dims[:3], dims[3:], lim,
                                 block_exprs=[size_text(b) for b in self.kd["block"]])
        if problem is not None:
            raise CudaError(problem)

    def slots(self) -> ParamSlots:
        s = getattr(self._tls, "slots", None)
        if s is None:
            s = self._tls.slots = ParamSlots(self.n_params)
        return s

    def run(self, values: list, sizes: dict, stream: int) -> None:
        dims = self.dims
        if dims is None:
            dims = self.dims_of(sizes)
            if min(dims) <= 0:
                return  # an empty range: nothing to compute (a 0-thread launch is invalid)
            self.check(dims)
        for i in self.aligned:
            if values[i] % 16:
                raise CudaError(self._misaligned(values))
        params = self.slots().fill(self.pick(values)) if self.n_params else 0
        cuda_api.launch_packed(self.func, *dims, self.smem, stream, params)

    def _misaligned(self, values) -> str:
        for name, i in zip(self.kd["aligned_buffers"], self.aligned):
            if values[i] % 16:
                return (f"kernel {self.name} accesses '{name}' with 16-byte vectors, but its "
                        f"pointer is not 16-byte aligned")
        raise AssertionError("no misaligned buffer")


def _getter(indices):
    """values -> the tuple of values at `indices` (operator.itemgetter returns a
    bare value for one index)."""
    if not indices:
        return lambda values: ()
    if len(indices) == 1:
        i = indices[0]
        return lambda values: (values[i],)
    return operator.itemgetter(*indices)


class Plan:
    """The launch plan of one compiled variant (see the module docstring).

    `buffers`: the call's buffer order (inputs, outputs, temps): slot i of a
    call's values is buffer i's pointer; the size parameters follow, in
    `size_params` order."""

    def __init__(self, meta: dict, kernels: list, module, index_bits: int):
        self.index_bits = index_bits
        self.buffers = [b["name"] for b in meta["inputs"] + meta["outputs"] + meta["temps"]]
        self.size_params = sorted({p["size"] for kd in kernels for p in kd["params"]
                                   if "size" in p})
        slot_of = {n: i for i, n in enumerate(self.buffers)}
        slot_of.update({("size", n): len(self.buffers) + i for i, n in enumerate(self.size_params)})
        fixed = dict(meta["bound_sizes"]) if not meta["sizes"] else None
        self.size_values = compile_sizes(self.size_params)
        made = meta["outputs"] + meta["temps"]
        shapes = [d for b in made for d in b["shape"]]
        ranks = [len(b["shape"]) for b in made]
        flat = compile_sizes(shapes, "max(0, {})")
        self._split = _splitter(ranks)
        self.shapes = self._split(flat(fixed)) if fixed is not None else None
        self._shapes_of = flat
        self.declared = [(i, b["name"], compile_sizes(b["declared_shape"]))
                         for i, b in enumerate(meta["outputs"])
                         if b.get("declared_shape") is not None]
        self.launches = []
        for kd in kernels:
            launch = Launch(kd, slot_of, fixed)
            if launch.empty:
                continue  # nothing to compute at these sizes: no function to load
            launch.load(module)
            self.launches.append(launch)

    def shapes_for(self, sizes: dict):
        """The shapes of the outputs and temps (in `meta` order) at these sizes."""
        return self.shapes if self.shapes is not None else self._split(self._shapes_of(sizes))

    def check_declared(self, shapes, sizes: dict) -> None:
        for i, name, want_of in self.declared:
            want = want_of(sizes)
            if want != tuple(shapes[i]):
                raise CudaError(f"output '{name}' is declared with shape {want} but its "
                                f"statements compute shape {tuple(shapes[i])}")

    def run(self, pointers: list, sizes: dict, stream: int) -> None:
        values = pointers + list(self.size_values(sizes)) if self.size_params else pointers
        for launch in self.launches:
            launch.run(values, sizes, stream)


def _splitter(ranks):
    """flat tuple -> tuple of per-tensor shape tuples."""
    bounds, at = [], 0
    for r in ranks:
        bounds.append((at, at + r))
        at += r
    return lambda flat: tuple(tuple(flat[a:b]) for a, b in bounds)


# ------------------------------------------------------------- index width
def compile_width(meta: dict):
    """sizes -> 32 or 64: index_width.index_bits_for over every tensor and
    launch of the program, as one compiled expression (sizes outside the C
    int range, tensors or launches of 2^31 elements or threads or more)."""
    products = []
    for b in meta["inputs"]:
        products.append(_product(b["shape"], clamp=False))
    for b in meta["outputs"] + meta["temps"]:
        products.append(_product(b["shape"], clamp=True))
    for kd in meta["kernels"]:
        products.append(_product(list(kd["grid"]) + list(kd["block"]), clamp=False))
    code = " or ".join(f"{p} >= {LIMIT}" for p in products) or "False"
    wide = eval(f"lambda s: {code}",  # noqa: S307 - our own text
                {"_div": _div, "_mod": _mod, "min": min, "max": max})

    def width(sizes: dict) -> int:
        for v in sizes.values():
            if not -LIMIT <= v < LIMIT:
                return 64
        return 64 if wide(sizes) else 32
    return width


def _product(dims, clamp: bool) -> str:
    parts = [f"max(0, {size_code(d)})" if clamp else size_code(d) for d in dims]
    return "(" + " * ".join(parts) + ")" if parts else "1"
