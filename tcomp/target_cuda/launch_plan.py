"""A compiled variant's launch plan: everything about a kernel call that does
not change from call to call, worked out once when the variant is loaded.

Per call, what is left is: the sizes (from the signature check), the plan
bound to them (`Bound`: output shapes, launch dimensions, size parameters;
made once for sizes fixed at build, and kept for the sizes of the last
call otherwise, so a model calling with the same shapes pays for it once),
pointers into parameter slots, and one `cuLaunchKernel` per launch.

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
from ..lower.ir import SM_COUNT
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

    def __init__(self, n: int, n_maps: int = 0):
        self.values = (ctypes.c_uint64 * max(n, 1))()
        base = ctypes.addressof(self.values)
        addresses = [base + 8 * i for i in range(n)]
        self.maps = None
        if n_maps:  # 128-byte tensor-map parameters after the 8-byte ones
            from .tensor_maps import MapParams
            self.maps = MapParams(n_maps)
            addresses += [self.maps.address(i) for i in range(n_maps)]
        self.pointers = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self.address = ctypes.addressof(self.pointers) if addresses else 0
        self.n = n

    def fill(self, values) -> int:
        """Store the parameter values (ints); returns the kernelParams address."""
        self.values[:self.n] = values
        return self.address


# ------------------------------------------------------------- launches
class Launch:
    """One `__global__` function of a variant: its handle, limits, parameter
    order and launch dimensions (constants, or a compiled expression)."""

    def __init__(self, kd: dict, slot_of: dict, sizes_fixed: dict | None):
        self.name = kd["name"]
        self.func = self.limits = None  # set by `load`
        self.smem = int(kd["dynamic_smem"])
        self.kd = kd
        dims = list(kd["grid"]) + list(kd["block"])
        # a call's values: [buffer pointers in slot order..., size values...]; tensor maps
        # (128-byte parameters, tensor_maps.py) come last, encoded per call from a pointer
        plain = [p for p in kd["params"] if "tensor_map" not in p]
        self.maps = [(slot_of[p["tensor_map"]["buffer"]], p["tensor_map"])
                     for p in kd["params"] if "tensor_map" in p]
        self.slot_order = [slot_of[p["buffer"]] if "buffer" in p else slot_of[("size", p["size"])]
                           for p in plain]
        self.pick = _getter(self.slot_order)
        self.n_params = len(plain)
        self.aligned = tuple(slot_of[n] for n in kd.get("aligned_buffers", ()))
        self.dims_of = compile_sizes(dims)  # sizes -> the six dimensions
        self.dims = None  # the six dimensions, when they are the same for every call
        if sizes_fixed is not None or all(is_constant(d) for d in dims):
            self.dims = tuple(int(x) for x in self.dims_of(sizes_fixed or {}))
        self._tls = threading.local()

    def load(self, module) -> None:
        """Fetch the function handle and its limits; check constant dimensions."""
        self.func = module.function(self.name, self.smem)
        self.limits = module.limits[self.name]
        if self.dims is not None and min(self.dims) > 0:
            self.check(self.dims)

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
        """This thread's parameter slots for this launch."""
        s = getattr(self._tls, "slots", None)
        if s is None:
            s = self._tls.slots = ParamSlots(self.n_params, len(self.maps))
        return s

    def fill_maps(self, slots: ParamSlots, values, shapes: dict) -> None:
        """Encode this launch's tensor maps for the call's pointers (`values`,
        by slot) and buffer shapes (`shapes`: buffer name -> dims)."""
        from . import tensor_maps
        for i, (slot, m) in enumerate(self.maps):
            sp = tensor_maps.spec(m["name"], m["buffer"], m["dtype"], shapes[m["buffer"]],
                                  m["box"], m["swizzle"], m.get("im2col"))
            slots.maps.fill(i, values[slot], sp)

    def misaligned(self, values) -> str | None:
        for name, i in zip(self.kd["aligned_buffers"], self.aligned):
            if values[i] % 16:
                return (f"kernel {self.name} accesses '{name}' with 16-byte vectors, but its "
                        f"pointer is not 16-byte aligned")
        return None


def _getter(indices):
    """values -> the tuple of values at `indices` (operator.itemgetter returns a
    bare value for one index)."""
    if not indices:
        return lambda values: ()
    if len(indices) == 1:
        i = indices[0]
        return lambda values: (values[i],)
    return operator.itemgetter(*indices)


class Bound:
    """A plan at one set of sizes: the shapes of the outputs and temps, the
    size parameters' values, and each non-empty launch with its dimensions
    checked. A kernel keeps the Bound of the sizes it was last called with."""

    def __init__(self, plan: "Plan", sizes: dict):
        self.plan = plan
        self.shapes = plan._split(plan._shapes_of(sizes))
        for i, name, want_of in plan.declared:
            want = want_of(sizes)
            if want != self.shapes[i]:
                raise CudaError(f"output '{name}' is declared with shape {want} but its "
                                f"statements compute shape {self.shapes[i]}")
        if plan.uses_sm_count:
            sizes = {**sizes, SM_COUNT: cuda_api.sm_count()}
        self.extra = list(plan.size_values(sizes))
        # each buffer's dimensions at these sizes (what a tensor map encodes)
        self.buffer_dims = ({name: tuple(max(0, v) for v in f(sizes))
                             for name, f in plan.buffer_shapes.items()}
                            if plan.has_tensor_maps else None)
        self.calls = []  # (launch, cuLaunchKernel's first eight arguments)
        for launch in plan.launches:
            dims = launch.dims or tuple(launch.dims_of(sizes))
            if min(dims) <= 0:
                continue  # an empty range: nothing to compute (a 0-thread launch is invalid)
            if launch.dims is None:
                launch.check(dims)
            self.calls.append((launch, (launch.func, *dims, launch.smem)))
        # what torch_fast's generated call reads: the made tensors' dimensions, the size
        # parameters, then each launch's head (None: empty at these sizes)
        heads = {id(launch): head for launch, head in self.calls}
        self.flat = (*[d for shape in self.shapes for d in shape], *self.extra,
                     *[heads.get(id(launch)) for launch in plan.launches])

    def run(self, pointers: list, stream: int) -> None:
        """Launch everything on `stream`; `pointers`: one per buffer of the plan."""
        values = pointers + self.extra if self.extra else pointers
        launch_kernel = cuda_api.kernel_launcher()
        for launch, head in self.calls:
            if launch.aligned:
                problem = launch.misaligned(values)
                if problem is not None:
                    raise CudaError(problem)
            if launch.maps:
                slots = launch.slots()
                launch.fill_maps(slots, values, self.buffer_dims)
                slots.fill(launch.pick(values))
                params = slots.address
            else:
                params = launch.slots().fill(launch.pick(values)) if launch.n_params else 0
            err = launch_kernel(*head, stream, params, 0)[0]
            if err:
                cuda_api.launch_failed(err, (*head, stream, params, 0))


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
        self.uses_sm_count = SM_COUNT in self.size_params
        if self.uses_sm_count and fixed is not None:
            fixed = {**fixed, SM_COUNT: cuda_api.sm_count()}
        self.size_values = compile_sizes(self.size_params)
        self.has_tensor_maps = any("tensor_map" in p for kd in kernels for p in kd["params"])
        self.buffer_shapes = {b["name"]: compile_sizes(b["shape"])
                              for b in meta["inputs"] + meta["outputs"] + meta["temps"]}
        made = meta["outputs"] + meta["temps"]
        self.ranks = [len(b["shape"]) for b in made]
        self.n_inputs = len(meta["inputs"])
        self.torch_call = None  # the torch fast path (torch_fast.py), made by the kernel
        self._shapes_of = compile_sizes([d for b in made for d in b["shape"]], "max(0, {})")
        self._split = _splitter([len(b["shape"]) for b in made])
        self.declared = [(i, b["name"], compile_sizes(b["declared_shape"]))
                         for i, b in enumerate(meta["outputs"])
                         if b.get("declared_shape") is not None]
        self.launches = []
        for kd in kernels:
            launch = Launch(kd, slot_of, fixed)
            if launch.dims is not None and min(launch.dims) <= 0:
                continue  # never anything to compute: no function to load
            launch.load(module)
            self.launches.append(launch)
        # with every size fixed at build, the one Bound (made at the first call)
        self.fixed = fixed

    def bind(self, sizes: dict) -> Bound:
        return Bound(self, sizes)


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

    uses_sm = any(p.get("size") == SM_COUNT for kd in meta["kernels"] for p in kd["params"])

    def width(sizes: dict) -> int:
        if uses_sm:
            sizes = {**sizes, SM_COUNT: cuda_api.sm_count()}
        for v in sizes.values():
            if not -LIMIT <= v < LIMIT:
                return 64
        return 64 if wide(sizes) else 32
    return width


def _product(dims, clamp: bool) -> str:
    parts = [f"max(0, {size_code(d)})" if clamp else size_code(d) for d in dims]
    return "(" + " * ".join(parts) + ")" if parts else "1"
