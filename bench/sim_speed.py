"""Time the CPU sim target (tcomp/target_sim) on benchmark schedules.

    PYTHONPATH=. python3 bench/sim_speed.py [--repeat N] [--case NAME ...]

Each case builds a schedule of bench/schedules.py for target="sim" at fixed
sizes, runs it on random inputs and checks the result against
`tcomp.evaluate` (the NumPy oracle); it prints the wall-clock seconds of the
first call (which, since the sim compiles a kernel to closures on its first
run, includes that) and the best of `--repeat` calls (lowering excluded). Run it once with
PYTHONPATH pointing at another checkout for a before/after comparison
(BENCHMARKS.md, "Sim speed").
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time

import numpy as np

import tcomp
from tcomp.lang.symbolic import eval_int

HERE = os.path.dirname(os.path.abspath(__file__))


def _schedules():
    # by path: bench/ is not a package, and PYTHONPATH selects which tcomp is timed
    spec = importlib.util.spec_from_file_location("bench_schedules",
                                                  os.path.join(HERE, "schedules.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


S = _schedules()

# name -> (schedule function, keyword arguments, sizes)
CASES = {
    "gemm 256^3 frag+warp+pad+pipe": (S.gemm, S.gemm_variant("frag+warp+pad+pipe"),
                                      {"M": 256, "N": 256, "K": 256}),
    "softmax 256x4096 512t smem": (S.softmax, {"threads": 512, "shared_row": True},
                                  {"N": 256, "D": 4096}),
    "layernorm 256x4096 256t smem vec4": (S.layernorm, {"threads": 256, "shared_row": True,
                                                       "vec": 4},
                                         {"N": 256, "D": 4096}),
}


def _inputs(op, sizes, rng):
    args = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        args.append(rng.standard_normal(shape).astype(t.dtype.numpy))
    return args


def run_case(name, repeat):
    fn, kw, sizes = CASES[name]
    op, s = fn({}, **kw)
    k = tcomp.build(s, target="sim", sizes=sizes)
    args = _inputs(op, sizes, np.random.default_rng(0))
    want = tcomp.evaluate(op, *args)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        got = k(*args)
        times.append(time.perf_counter() - t)
    err = float(np.linalg.norm((got - want).astype(np.float64)) /
                max(np.linalg.norm(want.astype(np.float64)), 1e-30))
    if not err < 1e-5:
        raise SystemExit(f"{name}: sim result differs from tcomp.evaluate "
                         f"(rel. L2 error {err:.2e})")
    return times[0], min(times), err


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (best is shown)")
    ap.add_argument("--case", action="append", choices=sorted(CASES),
                    help="run only this case (repeatable)")
    args = ap.parse_args(argv)
    print(f"tcomp from {os.path.dirname(tcomp.__file__)}; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    for name in args.case or CASES:
        first, best, err = run_case(name, args.repeat)
        print(f"{name:34s} first call {first:7.3f} s, best of {args.repeat} {best:7.3f} s "
              f"(rel. L2 error vs evaluate {err:.1e})", flush=True)


if __name__ == "__main__":
    main()
