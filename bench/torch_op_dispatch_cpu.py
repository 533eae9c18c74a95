"""Per-call cost of going through `k.torch_op()` rather than calling the kernel,
on the CPU: a stand-in kernel (the op needs only `meta`, `cubin` and a call)
returning torch.empty_like, called directly and through the registered op.

    PYTHONPATH=. python3 bench/torch_op_dispatch_cpu.py TAG   (TAG: any text, for a fresh op name)
"""
import sys, timeit, torch, tcomp
from tcomp.target_cuda.torch_op import torch_op
SRC = "def fma(float(N) A, float(N) B) -> (C) { C(i) = A(i) * B(i) + A(i) }"
k = tcomp.build(tcomp.Schedule(tcomp.op(SRC)), target="cuda")
class Stand:
    def __init__(s, k): s.meta, s.cubin = k.meta, k.cubin + sys.argv[1].encode()
    def __call__(s, a, b): return torch.empty_like(a)
st = Stand(k)
op = torch_op(st)
x = torch.empty(4096); y = torch.empty(4096)
n = 20000
def t(name, stmt):
    r = min(timeit.repeat(stmt, globals=globals(), number=n, repeat=7))/n*1e6
    print(f"{r:.2f} us  {name}")
t("stand-in kernel direct", "st(x, y)")
t("through k.torch_op()", "op(x, y)")
with torch.no_grad():
    t("through k.torch_op() under no_grad", "op(x, y)")
