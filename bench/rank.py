"""Does the cost estimate rank schedules as the GPU does? (issue 26: Spearman's
rho >= 0.8 between the estimate and H200 times, on the hand schedules of
bench/.) Run on the GPU machine:

    PYTHONPATH=. python3 bench/rank.py [--only NAME,...] [--samples 5] [--minutes 4.5]
                                       [--reps 20] [--seed 0]

For each op (CASES): its hand schedules (bench/schedules.py), `--samples`
candidates drawn from the search space (tcomp.search.Space, seeded) and the
automatic choice (tcomp.auto_schedule) are estimated on the CPU (features.py's
analytic estimate, as the search and auto_schedule rank them), then each is
built for cuda, checked against a float64 NumPy reference of the op on fresh
random data (relative Frobenius error, by the output's type), and timed
(bench/timing.py: CUDA events, L2 flushed, median; two input sets
alternating). A schedule that does not estimate, build, run or pass the check
is kept with its reason and left out of the ranks; an op gets at most its
share of `--minutes` (hand schedules first), and the schedules past it are
skipped with that reason. A kernel that does not return within HANG_S (a
deadlock) ends the run with what was measured written, that kernel marked
HUNG (exit status 3).

Printed: per op, each schedule's estimate and time, then Spearman's rho
between estimate and time over the hand schedules ("hand", the issue's
measure) and over everything timed ("all"); overall, the mean of the per-op
rhos and rho over every (estimate, time) pair pooled across ops (it also asks
whether the estimate orders different ops). JSON with every point goes to
$OUT/rank.json (or ./rank.json).

CPU-only parts (the cases, the references, spearman, the estimates) are
imported by tests/bench/test_rank_cpu.py; torch is imported only to run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import tcomp  # noqa: E402
from tcomp.errors import TcompError  # noqa: E402
from tcomp.lang.symbolic import eval_int  # noqa: E402

import auto_time as AT  # noqa: E402  (the issue's ops, as auto_time.py times them)
import schedules as S  # noqa: E402

SQRT2 = math.sqrt(2.0)
TOL = {"float32": 2e-5, "float64": 1e-12, "float16": 5e-3, "bfloat16": 2e-2}


# ------------------------------------------------------------------ references
def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64: SciPy's where it is installed, else math.erf per element
    (NumPy has none; ~150 ns an element)."""
    try:
        from scipy.special import erf
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
    return erf(x)


def _gelu(y):
    return 0.5 * y * (1.0 + _erf(y / SQRT2))


def _softmax(X):
    e = np.exp(X - X.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(X, g, b, eps=1e-5):
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    return (X - mu) / np.sqrt(var + eps) * g + b


def _add_rmsnorm(X, R, w):
    H = X + R
    return H, H / np.sqrt((H * H).mean(axis=-1, keepdims=True) + 1e-6) * w


def _depthwise(I, Wt):
    _, _, H, W = I.shape
    C, KH, KW = Wt.shape
    out = np.zeros(I.shape[:2] + (H - KH + 1, W - KW + 1))
    for kh in range(KH):
        for kw in range(KW):
            out += I[:, :, kh:kh + H - KH + 1, kw:kw + W - KW + 1] * \
                Wt[:, kh, kw][None, :, None, None]
    return out


def _stencil(X):
    return (4 * X[1:-1, 1:-1] - X[:-2, 1:-1] - X[2:, 1:-1] - X[1:-1, :-2] - X[1:-1, 2:])


def _swiglu(X, W1, W3):
    G = X @ W1
    return G / (1.0 + np.exp(-G)) * (X @ W3)


def _conv2d_nhwc(X, Wt):
    """TC_CONV2D: 3x3, stride 1, padding 1, NHWC; Wt is (9 C, K), r = (kh, kw, c)."""
    N, H, W, C = X.shape
    P = np.zeros((N, H + 2, W + 2, C))
    P[:, 1:-1, 1:-1] = X
    out = np.zeros((N, H, W, Wt.shape[1]))
    for kh in range(3):
        for kw in range(3):
            r = (kh * 3 + kw) * C
            out += P[:, kh:kh + H, kw:kw + W] @ Wt[r:r + C]
    return out.reshape(N * H * W, -1)


# ------------------------------------------------------------------ cases
@dataclass
class Case:
    """One op: its source, the sizes it is timed at, small sizes (the CPU test
    of its reference), the float64 reference (NumPy arrays in the op's input
    order -> one array or a tuple in its output order), and its hand
    schedules: name -> a function returning (op, Schedule)."""
    src: str
    sizes: dict
    small: dict
    ref: object
    hand: dict = field(default_factory=dict)


def _gemm(v):
    return lambda: S.gemm({}, **S.gemm_variant(v))


def _row(fn, threads, shared, vec=1, **kw):
    return lambda: fn({}, threads, shared, vec=vec, **kw)


def _tc(op_src=None, **kw):
    return lambda: S.tc_gemm(tcomp.op(op_src) if op_src else None, **kw)


ROWS = {"N": 32768, "D": 4096}
ROWS_SMALL = {"N": 5, "D": 300}
G2 = {"M": 2048, "N": 2048, "K": 2048}
G4 = {"M": 4096, "N": 4096, "K": 4096}
GEMM_SMALL = {"M": 37, "N": 45, "K": 29}
TC_GELU_BEST = {**S.TC_BEST, "smem_epilogue": False}

CASES = {
    "gemm_fp32": Case(S.GEMM, G2, GEMM_SMALL, lambda A, B: A @ B, {
        v: _gemm(v) for v in ("frag+scalar", "frag", "frag+warp+pad", "frag+warp+pad+pipe",
                              "frag+warp+pad+pipe+g8", "shared+warp+pad+pipe+g8")}),
    "softmax": Case(S.SOFTMAX, ROWS, ROWS_SMALL, _softmax, {
        "512t,smem": _row(S.softmax, 512, True), "256t,L2": _row(S.softmax, 256, False),
        "256t,smem,vec4+rcp": _row(S.softmax, 256, True, 4, rcp=True),
        "1024t,smem,vec4": _row(S.softmax, 1024, True, 4)}),
    "layernorm": Case(S.LAYERNORM, ROWS, ROWS_SMALL, _layernorm, {
        "512t,smem": _row(S.layernorm, 512, True), "256t,L2": _row(S.layernorm, 256, False),
        "512t,smem,vec4": _row(S.layernorm, 512, True, 4),
        "128t,smem": _row(S.layernorm, 128, True)}),
    "rowsum": Case(S.ROWSUM, ROWS, ROWS_SMALL, lambda X: X.sum(axis=-1), {
        f"{t}t,unroll{u}": (lambda t=t, u=u: S.rowsum({}, t, u))
        for t, u in ((256, 8), (128, 4), (512, 8), (1024, 2))}),
    "transpose": Case(S.TRANSPOSE, {"M": 8192, "N": 8192}, {"M": 37, "N": 70},
                      lambda A: np.ascontiguousarray(A.T), {
        f"tile{t},rows{r}": (lambda t=t, r=r: S.transpose({}, t, r))
        for t, r in ((32, 8), (32, 4), (32, 32), (16, 4))}),
    "gelu": Case(S.GELU, {"N": 1 << 24}, {"N": 1001}, lambda X, w, b: _gelu(X * w + b), {
        f"{t}t,vec{v}": (lambda t=t, v=v: S.gelu({}, t, v))
        for t, v in ((256, 4), (256, 1), (128, 2), (1024, 4))}),
    "fma": Case(S.FMA, {"N": 1 << 26}, {"N": 1001}, lambda A, B: A * B + A, {
        f"{t}t": (lambda t=t: S.fma({}, t)) for t in (64, 256, 1024)}),
    "tc_gemm_bf16": Case(S.TC_GEMM, G4, GEMM_SMALL, lambda A, B: A @ B, {
        "plain": _tc(), "pipe3": _tc(pipeline=3), "best": _tc(**S.TC_BEST),
        "bk64,swizzle": _tc(bk=64, swizzle=True), "64x64": _tc(bm=64, bn=64, wm=32, wn=32)}),
    "tc_gemm_bias_gelu_bf16": Case(
        S.TC_GEMM_GELU, G4, GEMM_SMALL, lambda A, B, bias: _gelu(A @ B + bias), {
            "plain": _tc(S.TC_GEMM_GELU), "best": _tc(S.TC_GEMM_GELU, **TC_GELU_BEST),
            "best,smem_epilogue": _tc(S.TC_GEMM_GELU, **S.TC_BEST, smem_epilogue=True)}),
    "tc_conv2d_fp16": Case(
        S.TC_CONV2D, {"N": 32, "H": 56, "W": 56, "C": 256, "R": 9 * 256, "K": 256},
        {"N": 2, "H": 5, "W": 6, "C": 8, "R": 72, "K": 16}, _conv2d_nhwc, {
            "plain": lambda: S.tc_conv2d(), "best": lambda: S.tc_conv2d(**S.TC_BEST)}),
    # the issue's ops (bench/auto_time.py): no hand schedules, the space and the choice
    "swiglu": Case(AT.SWIGLU, G2, GEMM_SMALL, _swiglu),
    "gemm_bias_gelu": Case(AT.GEMM_BIAS_GELU, G2, GEMM_SMALL,
                           lambda A, B, bias: _gelu(A @ B + bias)),
    "add_rmsnorm": Case(AT.ADD_RMSNORM, ROWS, ROWS_SMALL, _add_rmsnorm),
    "group_norm": Case(AT.GROUP_NORM, AT.OPS["group_norm"][1], {"N": 2, "G": 3, "D": 50},
                       _layernorm),
    "depthwise_conv": Case(AT.DEPTHWISE, AT.OPS["depthwise_conv"][1],
                           {"N": 2, "C": 3, "H": 9, "W": 8, "KH": 3, "KW": 3}, _depthwise),
    "stencil": Case(AT.STENCIL, AT.OPS["stencil"][1], {"H": 13, "W": 70}, _stencil),
    "bmm_fp16": Case(AT.BMM_FP16, AT.OPS["bmm_fp16"][1], {"NB": 3, "M": 37, "N": 45, "K": 29},
                     lambda A, B: A @ B),
}


# ------------------------------------------------------------------ inputs, check
def inputs(op, sizes: dict, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniform [-1, 1) inputs rounded to each input's type, as float32 arrays
    (bfloat16 and float16 values are exact in float32: the GPU gets them
    converted, the reference in float64)."""
    out = []
    for t in op.inputs:
        shape = tuple(eval_int(d, sizes) for d in t.shape)
        a = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        if t.dtype.name in ("bfloat16", "float16"):
            a = a.astype(t.dtype.numpy).astype(np.float32)
        elif not t.dtype.is_float:
            raise ValueError(f"rank.py: input '{t.name}' of '{op.name}' is {t.dtype}: give it "
                             f"an input maker")
        out.append(a)
    return out


def reference(case: Case, arrays: list) -> tuple:
    out = case.ref(*[a.astype(np.float64) for a in arrays])
    return out if isinstance(out, tuple) else (out,)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64).reshape(want.shape), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def check(op, got: tuple, want: tuple) -> str | None:
    """None when every output is within its type's tolerance, else why not."""
    for t, g, w in zip(op.outputs, got, want):
        e = rel_err(g, w)
        tol = TOL.get(t.dtype.name, 2e-5)
        if not e <= tol:
            return f"output {t.name}: relative error {e:.2e} > {tol:.0e} ({t.dtype})"
    return None


# ------------------------------------------------------------------ ranks
def ranks(xs) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span."""
    xs = np.asarray(xs, np.float64)
    order = np.argsort(xs, kind="stable")
    r = np.empty(len(xs))
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b) -> float | None:
    """Spearman's rho (Pearson's r of the ranks); None for fewer than 3 pairs
    or when either side is constant (no order to compare)."""
    if len(a) != len(b):
        raise ValueError(f"spearman: {len(a)} values against {len(b)}")
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return None if den == 0 else float((ra * rb).sum() / den)


# ------------------------------------------------------------------ points (CPU)
@dataclass
class Point:
    """One schedule of one op: where it came from ("hand", "sample", "auto"),
    its estimate, and (after the GPU run) its time, error, or why it was
    left out."""
    op: str
    name: str
    kind: str
    schedule: object = None
    estimate_ms: float | None = None
    time_ms: float | None = None
    rel_err: float | None = None
    skipped: str | None = None

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "schedule"}


def estimate(schedule, sizes: dict) -> float:
    """The analytic estimate of a schedule at sizes, as the search computes it
    (validate up to unroll, features, analytic_ms); TcompError when the
    schedule does not validate (the reason)."""
    from tcomp.search import features as F
    from tcomp.search.rules.base import limits_for
    from tcomp.search.validate import validate
    res = validate(schedule.op, schedule, sizes, "cuda", limits_for("cuda"))
    if not res.ok:
        raise TcompError(str(res))
    return F.analytic_ms(F.extract(res, sizes))


def points(name: str, samples: int, seed: int = 0) -> list[Point]:
    """The estimated points of CASES[name]: hand schedules, `samples` drawn
    candidates and the automatic choice (a point that does not estimate is
    kept, skipped with the reason)."""
    from tcomp.search import auto
    from tcomp.search.rules.base import limits_for
    from tcomp.search.space import Space
    case = CASES[name]
    out = []
    for hname, make in case.hand.items():
        p = Point(name, hname, "hand")
        try:
            _, p.schedule = make()
            p.estimate_ms = estimate(p.schedule, case.sizes)
        except TcompError as e:
            p.skipped = f"estimate: {str(e).splitlines()[0][:300]}"
        out.append(p)
    op = tcomp.op(case.src)
    if samples:
        space = Space(op, case.sizes, "cuda", limits_for("cuda"))
        for i, c in enumerate(space.generate(samples, np.random.default_rng(seed))):
            from tcomp.search import features as F
            out.append(Point(name, f"sample{i} {c.sketch}", "sample", c.replay(op),
                             F.analytic_ms(space.features[c.schedule])))
    ch = auto.choose(op, case.sizes, "cuda", check=False)
    out.append(Point(name, f"auto {ch.sketch}", "auto", ch.schedule, ch.estimate_ms))
    return out


def summary(pts: list[Point]) -> dict:
    """Spearman's rho per op (hand schedules; everything timed) and overall."""
    timed = [p for p in pts if p.time_ms is not None and p.estimate_ms is not None]
    per_op = {}
    for name in dict.fromkeys(p.op for p in pts):
        mine = [p for p in timed if p.op == name]
        hand = [p for p in mine if p.kind == "hand"]
        per_op[name] = {
            "hand": spearman([p.estimate_ms for p in hand], [p.time_ms for p in hand]),
            "all": spearman([p.estimate_ms for p in mine], [p.time_ms for p in mine]),
            "timed": len(mine), "hand_timed": len(hand)}

    def mean(key):
        xs = [r[key] for r in per_op.values() if r[key] is not None]
        return sum(xs) / len(xs) if xs else None
    hand = [p for p in timed if p.kind == "hand"]
    return {"per_op": per_op, "mean_hand": mean("hand"), "mean_all": mean("all"),
            "pooled_hand": spearman([p.estimate_ms for p in hand], [p.time_ms for p in hand]),
            "pooled_all": spearman([p.estimate_ms for p in timed], [p.time_ms for p in timed])}


# ------------------------------------------------------------------ GPU
HANG_S = 60  # a kernel whose check and timing take longer is taken to hang the GPU


class Watchdog:
    """A kernel that never returns (a deadlocked barrier) would stop the run
    with nothing written: past HANG_S, `on_hang` writes what was measured,
    the point marked as hung, and the process exits (status 3)."""

    def __init__(self, on_hang):
        self.on_hang, self.timer = on_hang, None

    def arm(self, p: Point):
        import threading
        self.disarm()
        self.timer = threading.Timer(HANG_S, self._fire, (p,))
        self.timer.daemon = True
        self.timer.start()

    def disarm(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fire(self, p: Point):
        p.skipped = f"HUNG: no return within {HANG_S} s (run stopped here; rerun with --only leaving this op out)"
        try:
            self.on_hang()
        finally:
            os._exit(3)


def measure(name: str, pts: list[Point], reps: int, deadline: float, seed: int,
            watchdog: Watchdog | None = None) -> None:
    """Build, check and time each point of op `name` (in place), until `deadline`
    (time.monotonic()); `watchdog` is armed around each kernel's runs."""
    import torch
    from timing import timed
    case = CASES[name]
    op = tcomp.op(case.src)
    rng = np.random.default_rng(seed)
    sets = [inputs(op, case.sizes, rng) for _ in range(2)]
    want = reference(case, sets[0])
    dev = [[_to_torch(a, t.dtype.name) for a, t in zip(s, op.inputs)] for s in sets]
    for p in pts:
        if p.skipped is not None:
            continue
        if time.monotonic() > deadline:
            p.skipped = "time: this op's share of --minutes was spent"
            continue
        try:
            k = tcomp.build(p.schedule, target="cuda", sizes=case.sizes)
        except TcompError as e:
            p.skipped = f"build: {str(e).splitlines()[0][:300]}"
            continue
        if watchdog is not None:
            watchdog.arm(p)
        try:
            with torch.no_grad():
                got = k(*dev[0])
                torch.cuda.synchronize()
            got = got if isinstance(got, tuple) else (got,)
            got = tuple(g.double().cpu().numpy() if hasattr(g, "cpu") else np.asarray(g)
                        for g in got)
            why = check(op, got, want)
            p.rel_err = max(rel_err(g, w) for g, w in zip(got, want))
            if why is not None:
                p.skipped = f"WRONG: {why}"
                continue
            turn = [0]

            def call():
                turn[0] ^= 1
                return k(*dev[turn[0]])
            p.time_ms = timed(call, reps)
        except Exception as e:  # a crash of one kernel must not end the run
            p.skipped = f"run: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        finally:
            if watchdog is not None:
                watchdog.disarm()


def _to_torch(a: np.ndarray, dtype: str):
    import torch
    return torch.from_numpy(a).cuda().to(getattr(torch, dtype))


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--samples", type=int, default=5, help="search candidates per op")
    ap.add_argument("--minutes", type=float, default=4.5, help="the whole run's budget")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)} (ops: {', '.join(CASES)})")
    import torch
    t0 = time.monotonic()
    share = a.minutes * 60 / len(names)
    allpts = []
    path = os.path.join(os.environ.get("OUT", "."), "rank.json")

    def write():
        info = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                    date=time.strftime("%Y-%m-%d"), args=vars(a), summary=summary(allpts),
                    points=[p.row() for p in allpts])
        with open(path, "w") as f:
            json.dump(info, f, indent=1)
    watchdog = Watchdog(write)
    for i, name in enumerate(names):
        pts = points(name, a.samples, a.seed)
        allpts += pts
        measure(name, pts, a.reps, t0 + share * (i + 1), a.seed, watchdog)
        s = summary(pts)["per_op"][name]
        print(f"\n{name} {CASES[name].sizes}: rho hand {_fmt(s['hand'], '.3f')} "
              f"({s['hand_timed']} timed), all {_fmt(s['all'], '.3f')} ({s['timed']} timed)")
        for p in pts:
            print(f"  {p.kind:6s} {p.name[:60]:60s} est {_fmt(p.estimate_ms):>9s} ms  "
                  f"gpu {_fmt(p.time_ms):>9s} ms  {p.skipped or ''}", flush=True)
    s = summary(allpts)
    print(f"\nSpearman's rho, estimate vs H200 time: mean over ops {_fmt(s['mean_hand'], '.3f')} "
          f"(hand schedules), {_fmt(s['mean_all'], '.3f')} (all timed); pooled "
          f"{_fmt(s['pooled_hand'], '.3f')} (hand), {_fmt(s['pooled_all'], '.3f')} (all); "
          f"{time.monotonic() - t0:.0f} s")
    print("op | rho hand | rho all | timed")
    for name, r in s["per_op"].items():
        print(f"{name} | {_fmt(r['hand'], '.3f')} | {_fmt(r['all'], '.3f')} | {r['timed']}")
    write()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
