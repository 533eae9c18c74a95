"""A built (or loaded) CUDA kernel as a PyTorch custom operator, so that it runs
inside `torch.compile` graphs without a graph break.

    op = k.torch_op()            # torch.ops.tcomp.<op>_<hash>
    y = op(a, b)                 # CUDA tensors in, fresh CUDA tensors out

* Namespace `tcomp`; the name is the comprehension's name plus a short hash
  of the kernel's metadata and cubin, so two kernels never clash (`name=`
  picks the name instead). Registering the same kernel again returns the
  same operator.
* Schema: one `Tensor` per input, in the def's order; one `Tensor` or a tuple
  of them per output. Outputs are fresh tensors (no mutation, no aliasing),
  allocated by the kernel call.
* The fake (meta) implementation gives output shapes from the sidecar's size
  expressions over the inputs' shapes, with SymInts under dynamic shapes
  (`torch.sym_min`/`sym_max`). With concrete shapes it makes the check every
  target makes (signature.py: the same LangError/LoweringError texts); with
  symbolic ones it checks ranks and dtypes (the same texts) and records the
  size equalities (`torch._check`) the kernel enforces at run time.
* Registered with a FRAGMENT `torch.library.Library` (define + impl: the
  dispatcher calls the implementation directly; see `_register`). The real
  implementation makes inputs contiguous and calls the kernel (CUDA tensors:
  its torch fast path, torch_fast.py). No gradient formula: a backward pass
  through the op raises CudaError.

torch is imported only when an operator is made (it is not a dependency).
"""
from __future__ import annotations

import hashlib
import json
import keyword
import re

from ..errors import CudaError, LangError

NAMESPACE = "tcomp"
_REGISTERED: dict[str, tuple[str, object]] = {}  # qualified name -> (kernel digest, op)


def kernel_digest(kernel) -> str:
    h = hashlib.sha256(json.dumps(kernel.meta, sort_keys=True).encode())
    h.update(kernel.cubin)
    return h.hexdigest()


def op_name(kernel, name: str | None = None) -> str:
    if name is None:
        base = re.sub(r"\W", "_", kernel.meta["op"])
        return f"{base}_{kernel_digest(kernel)[:12]}"
    if not (isinstance(name, str) and name.isidentifier()):
        raise CudaError(f"torch_op: name must be a Python identifier, got {name!r}")
    return name


def _arg_names(specs) -> list[str]:
    out = []
    for i, spec in enumerate(specs):
        n = spec["name"]
        ok = n.isidentifier() and not keyword.iskeyword(n) and n not in ("Tensor", "self")
        out.append(n if ok else f"arg{i}")
    return out


def schema_of(meta: dict) -> str:
    args = ", ".join(f"Tensor {n}" for n in _arg_names(meta["inputs"]))
    outs = meta["outputs"]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"({args}) -> {ret}"


def torch_op(kernel, name: str | None = None):
    """Register `kernel` as `torch.ops.tcomp.<name>` (see the module docstring)
    and return the operator."""
    try:
        import torch
    except ImportError:
        raise CudaError("torch_op: PyTorch is not installed (pip install torch)") from None
    qual = f"{NAMESPACE}::{op_name(kernel, name)}"
    digest = kernel_digest(kernel)
    if qual in _REGISTERED:
        known, op = _REGISTERED[qual]
        if known != digest:
            raise CudaError(f"torch_op: '{qual}' is already registered for another kernel; "
                            f"choose another name")
        return op
    meta = kernel.meta
    op = _register(torch, qual, schema_of(meta), kernel, lambda *args: fake_outputs(meta, args))
    _REGISTERED[qual] = (digest, op)
    return op


_LIBRARY = None  # torch.library.Library(NAMESPACE, "FRAGMENT"), kept alive for the process


def _register(torch, qual: str, schema: str, kernel, fake):
    """Define `qual` with torch.library's lowest-overhead mechanism: a
    FRAGMENT library's `define` + `impl`, whose call goes from torch's C++
    dispatcher straight to `real` (torch.library.custom_op wraps every call
    in several Python layers: about 9 µs against 2.5 µs on a CPU). Kernels:
    the real implementation for every backend (CompositeExplicitAutograd;
    CUDA tensors take the kernel's torch fast path), an Autograd kernel that
    makes a backward pass through the op an error (without it, torch's
    fallback would only warn and leave the gradients silently missing) and
    the fake implementation for torch.compile and FakeTensorMode."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
    name = qual.split("::", 1)[1]
    _LIBRARY.define(name + schema)
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    tensor = torch.Tensor

    def real(*args):
        out = kernel(*[a if a.is_contiguous() else a.contiguous() for a in args])
        if type(out) is tensor:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        # a def with no inputs returns NumPy arrays: put them on the GPU
        outs = tuple(o if isinstance(o, tensor) else torch.as_tensor(o, device="cuda")
                     for o in outs)
        return outs[0] if len(outs) == 1 else outs

    class NoGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, keyset, *args):
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & after_autograd, *args)

        @staticmethod
        def backward(ctx, *grads):
            raise CudaError(f"torch_op: '{qual}' has no gradient formula: tcomp kernels run "
                            f"forward only; compute the gradient with another operator (or "
                            f"call the op under torch.no_grad())")

    after_autograd = torch._C._after_autograd_keyset
    grad_enabled, any_requires_grad = torch._C.is_grad_enabled, torch._C._any_requires_grad
    below = torch._C._AutoDispatchBelowAutograd

    def autograd(keyset, *args):
        if grad_enabled() and any_requires_grad(*args):
            return NoGradient.apply(keyset, *args)
        with below():
            return op.redispatch(keyset & after_autograd, *args)

    _LIBRARY.impl(name, real, "CompositeExplicitAutograd")
    _LIBRARY.impl(name, autograd, "Autograd", with_keyset=True)
    torch.library.register_fake(qual, fake, lib=_LIBRARY)
    return op


def fake_outputs(meta: dict, args):
    """Output tensors (fake ones under FakeTensorMode) of the right shape,
    dtype and device for inputs `args`: the fake implementation."""
    import torch
    if len(args) != len(meta["inputs"]):
        raise CudaError(f"'{meta['op']}' takes {len(meta['inputs'])} input(s), got {len(args)}")
    if all(isinstance(n, int) for x in args for n in x.shape):
        # concrete shapes: the check every target makes, with its errors (LangError ...)
        _signature(meta).check_call(args, meta["bound_sizes"])
    sizes = dict(meta["bound_sizes"])
    for spec, x in zip(meta["inputs"], args):
        # (symbolic shapes: signature.py's texts for ranks and dtypes, without reading
        # the sizes as ints, which would specialise them)
        if x.dim() != len(spec["shape"]):
            raise LangError(f"input '{spec['name']}' must have {len(spec['shape'])} "
                            f"dimension(s), got {x.dim()} (shape {tuple(x.shape)})")
        want = _torch_dtype(torch, spec["dtype"])
        if x.dtype != want:
            raise LangError(f"input '{spec['name']}' is {spec['dtype']}, but the array passed "
                            f"for it is {str(x.dtype).split('.')[-1]}; convert it explicitly "
                            f"(NumPy: .astype(), torch: .to()), tcomp never casts arrays")
        for j, n in zip(spec["shape"], x.shape):
            if isinstance(j, str) and j not in sizes:
                sizes[j] = n
    for spec, x in zip(meta["inputs"], args):
        for d, (j, n) in enumerate(zip(spec["shape"], x.shape)):
            want = sym_size(j, sizes)
            msg = f"input '{spec['name']}' dimension {d} is {n}, expected {want}"
            if isinstance(n, int) and isinstance(want, int):
                if n != want:
                    raise CudaError(msg)
            else:  # symbolic: a runtime assertion in the compiled graph
                torch._check(n == want, lambda msg=msg: msg)
    device = args[0].device if args else torch.device("cuda")
    outs = []
    for spec in meta["outputs"]:
        shape = [torch.sym_max(0, sym_size(j, sizes)) for j in spec["shape"]]
        outs.append(torch.empty(shape, dtype=_torch_dtype(torch, spec["dtype"]), device=device))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _signature(meta: dict):
    from ..lang import dtypes
    from ..lang.signature import InputSpec, Signature
    if "signature" in meta:
        return Signature.from_json(meta["signature"])
    return Signature(meta["op"], tuple(InputSpec(i["name"], dtypes.BY_NAME[i["dtype"]],
                                                 tuple(i["shape"])) for i in meta["inputs"]))


def sym_size(j, sizes: dict):
    """A sidecar size expression over ints or SymInts (kernel.eval_size's
    arithmetic, with torch.sym_min/sym_max so no guard is added)."""
    import torch
    if isinstance(j, int):
        return j
    if isinstance(j, str):
        return sizes[j]
    op, a, b = j[0], sym_size(j[1], sizes), sym_size(j[2], sizes)
    if op == "min":
        return torch.sym_min(a, b)
    if op == "max":
        return torch.sym_max(a, b)
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b,
            "%": lambda: a % b}[op]()


def _torch_dtype(torch, name: str):
    return getattr(torch, name)
