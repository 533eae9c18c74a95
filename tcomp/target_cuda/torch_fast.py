"""The call model code makes, as one generated function per launch plan: every
input a contiguous CUDA tensor on device 0, torch's current stream, outputs
allocated by torch. (kernel.CudaKernel._run calls it after the signature
check; it returns None for any other call, which the general path takes.)

Why generated: at a few microseconds per call, every Python-level loop,
list, attribute lookup and frame counts. The function for a plan names each
input, pointer and parameter slot as a local, allocates with the shape
unpacked (`torch.empty(n, dtype=..)`: torch parses separate ints faster than
a tuple), and fills each launch's parameter slots with one slice assignment
in parameter order; what changes with the sizes (output shapes, size
parameters, each launch's head or None for an empty launch) comes from the
`Bound` as one flat tuple, `Bound.flat`.

It does exactly what `Bound.run` does for such a call: the same parameter
slots (per thread), the same alignment check and error, the same launch and
retry on a context error (`cuda_api.launch_failed`).
"""
from __future__ import annotations

import sys
import threading

from ..errors import CudaError
from . import arrays as A
from . import cuda_api, streams


def make_torch_call(plan, made: list):
    """A function `(args, bound) -> outputs or None` for `plan` (see the
    module docstring); `args` has passed the signature check. `made`: (torch
    dtype, zero-filled, is an output) of each output, then each temp."""
    empty, zeros, dev = A.torch_allocators()
    n_inputs = plan.n_inputs
    env = {"TT": A.TORCH_TYPES, "raw": streams.torch_raw_stream(), "launch":
           cuda_api.kernel_launcher(), "failed": cuda_api.launch_failed, "CudaError": CudaError,
           "tls": threading.local(), "new_slots": lambda: _new_slots(plan), "dev": dev,
           "empty": empty, "zeros": zeros}
    xs = [f"x{i}" for i in range(n_inputs)]
    lines = ["def call(args, b):"]
    lines.append(f"    {', '.join(xs)}{',' if n_inputs == 1 else ''} = args" if xs else
                 "    pass")
    if xs:
        tests = " or ".join(f"type({x}) not in TT or not {x}.is_cuda or {x}.get_device() != 0 "
                            f"or not {x}.is_contiguous()" for x in xs)
        lines.append(f"    if {tests}:")
        lines.append("        return None")
    # b.flat: dims of each made tensor, size parameter values, launch heads
    names = []
    dims = []
    for i, rank in enumerate(plan.ranks):
        dims.append([f"n{i}_{d}" for d in range(rank)])
        names += dims[-1]
    sizes = [f"e{i}" for i in range(len(plan.size_params))]
    heads = [f"h{i}" for i in range(len(plan.launches))]
    names += sizes + heads
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = b.flat")
    ptrs = [f"{x}.data_ptr()" for x in xs]
    outs = []
    # torch's own allocators parse a shape given as `size=` twice as fast as a positional
    # one (0.5 µs a call); anything else (a test's stand-in) gets it positionally
    torch = sys.modules.get("torch")
    size = "size=" if torch is not None and (empty, zeros) == (torch.empty, torch.zeros) else ""
    for i, (dt, zero, is_out) in enumerate(made):
        env[f"T{i}"] = dt
        shape = "(" + "".join(f"{d}, " for d in dims[i]) + ")"
        lines.append(f"    t{i} = {'zeros' if zero else 'empty'}({size}{shape}, dtype=T{i}, "
                     f"device=dev)")
        if is_out:
            outs.append(f"t{i}")
    lines += [f"    p{i} = {p}" for i, p in enumerate(ptrs + [f"t{i}.data_ptr()"
                                                              for i in range(len(made))])]
    values = [f"p{i}" for i in range(n_inputs + len(made))] + sizes
    lines.append("    s = raw(0)")
    lines.append("    if s == 1: s = 0")  # CU_STREAM_LEGACY is the legacy default stream
    if any(launch.n_params for launch in plan.launches):
        lines += ["    try:", "        slots = tls.slots", "    except AttributeError:",
                  "        slots = tls.slots = new_slots()"]
    for j, launch in enumerate(plan.launches):
        env[f"L{j}"] = launch
        lines.append(f"    if h{j} is not None:")
        if launch.aligned:
            cond = " or ".join(f"{values[i]} % 16" for i in launch.aligned)
            lines.append(f"        if {cond}:")
            lines.append(f"            raise CudaError(L{j}.misaligned([{', '.join(values)}]))")
        if launch.n_params:
            picked = ", ".join(values[i] for i in launch.slot_order)
            lines.append(f"        v, a = slots[{j}]")
            lines.append(f"        v[:{launch.n_params}] = ({picked},)")
        else:
            lines.append("        a = 0")
        lines.append(f"        err = launch(*h{j}, s, a, 0)[0]")
        lines.append("        if err:")
        lines.append(f"            failed(err, (*h{j}, s, a, 0))")
    ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
    lines.append(f"    return {ret}")
    exec("\n".join(lines), env)  # noqa: S102 - our own text
    call = env["call"]
    call.source = "\n".join(lines)
    return call


def _new_slots(plan) -> list:
    """This thread's (values, kernelParams address) per launch of `plan`: the
    launches' own `ParamSlots`."""
    out = []
    for launch in plan.launches:
        s = launch.slots()
        out.append((s.values, s.address))
    return out
