"""Helpers of the Hopper sim tests: the GEMM of tcomp.kernels.gemm_sm90 at a
small configuration, its IR edited to break it on purpose, and its oracle."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

import tcomp
from tcomp.build import SimKernel
from tcomp.kernels import GemmConfig, gemm_sm90_program
from tcomp.kernels.gemm_sm90 import SOURCE
from tcomp.lower import ir
from tcomp.lang import dtypes
from tcomp.lower.rewriter import Rewriter

GEMM = tcomp.op(SOURCE)
# one consumer, a 64 x 64 tile and a ring of 2: the ring wraps at K = 256
SMALL = GemmConfig(bm=64, bn=64, stages=2, consumers=1)
BF16 = ml_dtypes.bfloat16


def inputs(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((N, K)).astype(BF16))


def check_product(C, A, B):
    """C is A . B^T accumulated in float32 and rounded once to bfloat16: equal
    to evaluate's result, or one bfloat16 step from it where the order of the
    float32 additions decides the rounding."""
    ref = tcomp.evaluate(GEMM, A, B).astype(np.float32)
    got = C.astype(np.float32)
    assert got.shape == ref.shape
    exact = A.astype(np.float64) @ B.astype(np.float64).T
    step = np.maximum(np.abs(exact).astype(np.float32), 2.0 ** -126)
    ulp = 2.0 ** (np.floor(np.log2(step)) - 7)
    assert (np.abs(got - ref) <= ulp).all()
    assert (got == ref).mean() > 0.99


class _Edit(Rewriter):
    def __init__(self, fn):
        self.fn, self.role = fn, None

    def stmt_Role(self, s):
        outer, self.role = self.role, s.name
        out = self.generic(s)
        self.role = outer
        return out

    def stmt_Evaluate(self, s):
        return self.fn(s, self.role)


def broken(fn, sizes, config=SMALL, maps=None) -> SimKernel:
    """The GEMM with each intrinsic statement `s` (in role `role`, None outside
    the Specialize) replaced by `fn(s, role)` (`ir.seq()` deletes it);
    `maps(tensor_maps)` may replace the tensor-map parameters."""
    prog = gemm_sm90_program(sizes, config)
    (k,) = prog.kernels
    k = dataclasses.replace(k, body=_Edit(fn).stmt(k.body))
    if maps is not None:
        k = dataclasses.replace(k, tensor_maps=maps(k.tensor_maps))
    return SimKernel.from_program(dataclasses.replace(prog, kernels=(k,)))


def drop(name, role=None):
    """An edit deleting intrinsic `name` (in `role`, or anywhere)."""
    def fn(s, r):
        if s.call.fn == name and (role is None or r == role):
            return ir.seq()
        return s
    return fn


def with_args(name, role, change):
    """An edit replacing the arguments of intrinsic `name` in `role`."""
    def fn(s, r):
        if s.call.fn == name and r == role:
            return ir.Evaluate(dataclasses.replace(s.call, args=change(s.call.args)))
        return s
    return fn


# ------------------------------------------------------------------ hand-built kernels
TID = ir.Var("threadIdx.x", ir.int32)
SW = ir.Swizzle(128)


def shared(name, rows, cols=64, dtype=dtypes.bfloat16, layout=SW):
    return ir.Buffer(name, dtype, (c(rows), c(cols)), "shared", layout=layout)


def glob(name, shape, dtype=dtypes.bfloat16, role="input"):
    return ir.Buffer(name, dtype, tuple(c(n) for n in shape), "global", role=role)


def mapvar(name):
    return ir.Var(name, dtypes.uint64)


def c(v):
    return ir.const(v)


def b(op, x, y, dt=ir.int32):
    return ir.Bin(op, x if isinstance(x, ir.Expr) else c(x), y if isinstance(y, ir.Expr) else c(y),
                  dt)


def call(fn, *args):
    return ir.Evaluate(ir.Call(fn, tuple(args), ir.int32))


def ref(buf, *idx):
    return ir.Ref(buf, tuple(i if isinstance(i, ir.Expr) else c(i) for i in idx))


def thread0(body):
    return ir.If(b("==", TID, 0, ir.bool_), body)


def loop(var, n, body):
    return ir.For(var, c(0), c(n), "serial", body)


def run_kernel(body, allocs, globals_, env, maps=(), threads=128):
    """Run a one-block kernel of `threads` threads built here (subscripts per
    dimension, flattened as lowering does) on the arrays of `env`."""
    from tcomp.lower import flatten
    from tcomp.lower.verify import verify
    from tcomp.target_sim import run_program
    for a in reversed(allocs):
        body = ir.Alloc(a, body)
    k = ir.Kernel("hand", tuple(g.name for g in globals_), (), (c(1), c(1), c(1)),
                  (c(threads), c(1), c(1)), body, tensor_maps=tuple(maps))
    prog = ir.Program("hand", tuple(globals_), (k,), (), (), ())
    verify(k, prog)
    k = flatten.run(k, prog)
    run_program(dataclasses.replace(prog, kernels=(k,)), env, {})
    return env
