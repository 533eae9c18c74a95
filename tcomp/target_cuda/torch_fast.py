"""The call model code makes, as generated code: every input a contiguous
CUDA tensor on device 0, torch's current stream, outputs allocated by torch.

Two forms, one body (`make_torch_call`):

* per launch plan, `call(args, bound) -> outputs or None`: what
  kernel.CudaKernel._run calls after the signature check and the binding;
* per kernel, `call(args) -> outputs or None`, made after the first such
  call succeeds: what CudaKernel.__call__ tries first. It opens with the
  signature checker's comparisons (as signature.check_lines, for one array
  type: dtypes by identity, a constant shape in one comparison), then
  finds the Bound (the one of a kernel whose sizes are fixed at build, else
  the kernel's Bound for these sizes, when it is there and of this plan).

Both return None for any call they do not take — another array type, a
stream= argument, a dtype, shape or size the fast comparisons do not accept,
a tensor elsewhere than device 0 or not contiguous, sizes not bound yet — and
the general path then takes the call and names what is wrong. What they do
is exactly what `Bound.run` does for such a call: the same parameter slots
(per thread), the same alignment check and error, the same launch and the
retry on a context error (`cuda_api.launch_failed`).

Why generated: at a few microseconds a call, every Python loop, list,
attribute lookup and frame counts. The function names each input, pointer
and size as a local, allocates with the shape as `size=` (torch's parser
takes that tuple twice as fast as a positional one: 0.5 µs), and fills each
launch's parameter slots with one slice assignment in parameter order. What
changes with the sizes (output shapes, size parameters, each launch's head,
None for an empty launch) comes from the Bound as one tuple, `Bound.flat`.
"""
from __future__ import annotations

import sys
import threading

from ..errors import CudaError
from ..lang.signature import CHECK_ENV
from . import arrays as A
from . import cuda_api, streams


def make_torch_call(plan, made: list, kernel=None, seen: tuple = ()):
    """The fast call of `plan` (module docstring): per plan, or with `kernel`
    (its signature, fixed sizes and Bounds) the per-kernel form. `made`:
    (torch dtype, zero-filled, is an output) of each output, then each temp.
    `seen` (per-kernel form): the dtype objects of a call the checker accepted,
    compared by identity (another object of the same dtype takes the general path)."""
    if plan.has_tensor_maps:  # encoded per call from the pointers: the general path does it
        return lambda *args: None
    empty, zeros, dev = A.torch_allocators()
    n_inputs = plan.n_inputs
    env = {"TT": A.TORCH_TYPES, "raw": streams.torch_raw_stream(), "launch":
           cuda_api.kernel_launcher(), "failed": cuda_api.launch_failed, "CudaError": CudaError,
           "tls": threading.local(), "new_slots": lambda: _new_slots(plan), "dev": dev,
           "empty": empty, "zeros": zeros, "P": plan, **CHECK_ENV}
    xs = [f"x{i}" for i in range(n_inputs)]
    unpack = f"{', '.join(xs)}{',' if n_inputs == 1 else ''} = args" if xs else "raise _Miss"
    # (get_device() is -1 for a CPU tensor: 0 means CUDA device 0)
    torch_tests = [f"if type({x}) not in TT or {x}.get_device() != 0 "
                   f"or not {x}.is_contiguous(): raise _Miss" for x in xs]
    if kernel is None:
        lines = ["def call(args, b):", "    try:", f"        {unpack}"]
        lines += [f"        {t}" for t in torch_tests]
        lines += ["    except _Miss:", "        return None"]
    else:
        body, items = _check_lines(kernel.signature, dict(kernel.meta["bound_sizes"]), seen, env)
        lines = ["def call(args):", "    try:", f"        {unpack}"]
        lines += [f"        {t}" for t in torch_tests + body]
        lines += ["    except Exception:", "        return None"]
        if kernel._fixed is not None:
            env["B"] = kernel._fixed
            lines.append("    b = B")
        else:  # the key of kernel._bound: the checker's sizes' items
            env["bounds"] = kernel._bound
            key = "(" + "".join(f"({k!r}, {v}), " for k, v in items) + ")"
            lines += [f"    b = bounds.get({key})", "    if b is None or b.plan is not P:",
                      "        return None"]
    dims, names = [], []
    for i, rank in enumerate(plan.ranks):
        dims.append([f"n{i}_{d}" for d in range(rank)])
        names += dims[-1]
    sizes = [f"e{i}" for i in range(len(plan.size_params))]
    names += sizes + [f"h{i}" for i in range(len(plan.launches))]
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = b.flat")
    # torch's own allocators parse a shape given as `size=` twice as fast as a positional
    # one; anything else (a test's stand-in) gets it positionally
    torch = sys.modules.get("torch")
    size = "size=" if torch is not None and (empty, zeros) == (torch.empty, torch.zeros) else ""
    outs = []
    for i, (dt, zero, is_out) in enumerate(made):
        env[f"T{i}"] = dt
        shape = "(" + "".join(f"{d}, " for d in dims[i]) + ")"
        lines.append(f"    t{i} = {'zeros' if zero else 'empty'}({size}{shape}, dtype=T{i}, "
                     f"device=dev)")
        if is_out:
            outs.append(f"t{i}")
    ptrs = [f"{x}.data_ptr()" for x in xs] + [f"t{i}.data_ptr()" for i in range(len(made))]
    lines += [f"    p{i} = {p}" for i, p in enumerate(ptrs)]
    values = [f"p{i}" for i in range(len(ptrs))] + sizes
    lines += ["    s = raw(0)", "    if s == 1:", "        s = 0"]  # CU_STREAM_LEGACY: legacy default
    if any(launch.n_params for launch in plan.launches):
        lines += ["    try:", "        slots = tls.slots", "    except AttributeError:",
                  "        slots = tls.slots = new_slots()"]
    for j, launch in enumerate(plan.launches):
        env[f"L{j}"] = launch
        lines.append(f"    if h{j} is not None:")
        if launch.aligned:
            cond = " or ".join(f"{values[i]} % 16" for i in launch.aligned)
            lines += [f"        if {cond}:",
                      f"            raise CudaError(L{j}.misaligned([{', '.join(values)}]))"]
        if launch.n_params:
            picked = "".join(f"{values[i]}, " for i in launch.slot_order)
            lines += [f"        v, a = slots[{j}]", f"        v[:{launch.n_params}] = ({picked})"]
        else:
            lines.append("        a = 0")
        lines += [f"        err = launch(*h{j}, s, a, 0)[0]", "        if err:",
                  f"            failed(err, (*h{j}, s, a, 0))"]
    lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
    source = "\n".join(lines)
    exec(source, env)  # noqa: S102 - our own text
    call = env["call"]
    call.source = source
    return call


def _check_lines(sig, compiled: dict, seen: tuple, env: dict):
    """signature.check_lines for tensors of one array type: the dtype compared by
    identity with the one `seen` (env's D0, D1, ...), a shape of constants with one
    tuple comparison, else unpacked (a wrong rank raises, which is a miss); the
    sizes' items as check_lines gives them."""
    body, bound = [], {}
    for i, spec in enumerate(sig.inputs):
        env[f"D{i}"] = seen[i]
        body.append(f"if x{i}.dtype is not D{i}: raise _Miss")
        if all(not isinstance(d, str) for d in spec.dims):
            body.append(f"if x{i}.shape != ({''.join(f'{int(d)}, ' for d in spec.dims)}): "
                        f"raise _Miss")
            continue
        names, tests = [], []
        for k, d in enumerate(spec.dims):
            if isinstance(d, str) and d not in bound:
                bound[d] = f"v{len(bound)}"
                names.append(bound[d])
            else:
                names.append(f"w{i}_{k}")
                tests.append(f"w{i}_{k} != {bound[d] if isinstance(d, str) else int(d)}")
        body.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = x{i}.shape")
        if tests:
            body.append(f"if {' or '.join(tests)}: raise _Miss")
    tests = [f"{bound[name]} != {int(v)}" for name, v in compiled.items() if name in bound]
    if tests:
        body.append(f"if {' or '.join(tests)}: raise _Miss")
    items = list(bound.items()) + [(k, repr(int(v))) for k, v in compiled.items()
                                   if k not in bound]
    return body, items


def _new_slots(plan) -> list:
    """This thread's (values, kernelParams address) per launch of `plan`: the
    launches' own `ParamSlots`."""
    out = []
    for launch in plan.launches:
        s = launch.slots()
        out.append((s.values, s.address))
    return out
