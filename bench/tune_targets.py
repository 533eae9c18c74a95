"""The search's targets (issue 13) on a GPU: tune one case, then time the
best schedule found against the library and our best hand schedule in the
same run, after a float64 check.

    PYTHONPATH=. python3 bench/tune_targets.py gemm_fp32 --trials 300 --minutes 9
    PYTHONPATH=. python3 bench/tune_targets.py softmax layernorm --trials 200 --minutes 4
    PYTHONPATH=. python3 bench/tune_targets.py gemm_bf16 --trials 300 --minutes 9
    PYTHONPATH=. python3 bench/tune_targets.py conv2d --trials 300 --minutes 5
    PYTHONPATH=. python3 bench/tune_targets.py bmm_fp16 bmm_bf16 --trials 300 --minutes 5
    PYTHONPATH=. python3 bench/tune_targets.py softmax_bf16_wide layernorm_fp32_wide
    python3 bench/tune_targets.py --plot $OUT/tune_targets.json curve.png

Records go to $OUT/tune_<case>.jsonl (or ./tune_<case>.jsonl), a rerun resumes
them; a summary line per case is appended to $OUT/tune_targets.json, and
each trial's (index, elapsed, time, best so far) to the records for the
curve (bench/tune_curve.py when present draws it)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import tcomp
from tcomp.search import LocalRunner

sys.path.insert(0, os.path.dirname(__file__))
import schedules as S  # noqa: E402
from timing import timed  # noqa: E402  (CUDA events, L2 flushed, median)

BMM_BT = ("def bmm_bt(float(B, M, K) X, float(B, N, K) Y) -> (O) "
          "{ O(b, m, n) +=! X(b, m, k) * Y(b, n, k) }")


def _gemm_fp32():
    op = tcomp.op(S.GEMM)
    sizes = {"M": 4096, "N": 4096, "K": 4096}
    A = torch.randn(4096, 4096, device="cuda")
    B = torch.randn(4096, 4096, device="cuda")

    def lib():
        torch.backends.cuda.matmul.allow_tf32 = False
        return lambda: torch.matmul(A, B)
    hand = S.gemm(sizes, **S.gemm_variant("frag+warp+pad+pipe"))[1]  # best hand (BENCHMARKS.md)
    return op, sizes, (A, B), lib(), "torch.matmul fp32 (cuBLAS, no TF32)", hand, \
        lambda: A.double() @ B.double()


def _gemm_bf16():
    # the best hand schedule: the Hopper schedule (docs/schedules.md, "Hopper"; BENCHMARKS.md,
    # 2026-12-02: 771 TFLOP/s at 4096^3, B as (K, N))
    from tcomp.kernels.gemm_sm90 import hopper_schedule
    op = tcomp.op(S.TC_GEMM)
    hand = hopper_schedule(op)
    sizes = {"M": 4096, "N": 4096, "K": 4096}
    A = torch.randn(4096, 4096, device="cuda").bfloat16()
    B = torch.randn(4096, 4096, device="cuda").bfloat16()
    return op, sizes, (A, B), lambda: torch.matmul(A, B), "torch.matmul bf16 (cuBLAS)", hand, \
        lambda: A.double() @ B.double()


def _bmm(dt, nb, m, n, k):
    """Batched GEMM (S.TC_BMM in `dt`) against torch.bmm (issue 24's batched cases: the
    tc_tile rule now draws tensor-core plans for it, batch axes on blockIdx.z, and
    hopper_tile the Hopper ones); the hand schedule is the Hopper one (ping-pong 64 x 256,
    the batched rows of BENCHMARKS.md) on an H100/H200, else tc_gemm's best."""
    src = S.TC_BMM.replace("bfloat16", dt)
    op, hand = S.tc_gemm(tcomp.op(src), **S.TC_BEST)
    if torch.cuda.get_device_capability() == (9, 0):  # the Hopper schedule (BENCHMARKS.md's)
        from tcomp.kernels.gemm_sm90 import GemmConfig, hopper_schedule
        hand = hopper_schedule(op, GemmConfig(bm=64, bn=256, pingpong=True))
    sizes = {"NB": nb, "M": m, "N": n, "K": k}
    A = torch.randn(nb, m, k, device="cuda").to(getattr(torch, dt))
    B = torch.randn(nb, k, n, device="cuda").to(getattr(torch, dt))
    return op, sizes, (A, B), lambda: torch.bmm(A, B), f"torch.bmm {dt}", hand, \
        lambda: torch.bmm(A.double(), B.double())


def _row(name):
    def make():
        src = S.SOFTMAX if name == "softmax" else S.LAYERNORM
        op = tcomp.op(src)
        sizes = {"N": 32768, "D": 4096}
        X = torch.randn(32768, 4096, device="cuda")
        if name == "softmax":
            args = (X,)
            return op, sizes, args, lambda: torch.softmax(X, -1), "torch.softmax", \
                S.softmax(sizes, threads=256, **S.row_variant("vec4+rcp"))[1], \
                lambda: torch.softmax(X.double(), -1)
        g, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        args = (X, g, b)
        f = torch.nn.functional.layer_norm
        return op, sizes, args, lambda: f(X, (4096,), g, b), "torch layer_norm", \
            S.layernorm(sizes, threads=512, vec=4)[1], \
            lambda: f(X.double(), (4096,), g.double(), b.double())
    return make


def _bmm_bt():
    op = tcomp.op(BMM_BT)
    sizes = {"B": 64, "M": 512, "N": 512, "K": 256}
    X = torch.randn(64, 512, 256, device="cuda")
    Y = torch.randn(64, 512, 256, device="cuda")

    def lib():
        torch.backends.cuda.matmul.allow_tf32 = False
        return lambda: torch.bmm(X, Y.transpose(1, 2))
    # "hand" here is the default schedule: nobody wrote one for this op
    return op, sizes, (X, Y), lib(), "torch.bmm fp32 (no TF32)", tcomp.Schedule(op), \
        lambda: torch.bmm(X.double(), Y.double().transpose(1, 2))


def _conv2d():
    """conv2d fp16 N32 C256 56x56 K256 3x3 pad 1 (bench/tc_conv.py's case, NHWC, an im2col
    temporary the search inlines or keeps) against cuDNN on channels-last tensors, its faster
    form; the hand schedule: the Hopper one on an H100/H200, else the best mma.sync one."""
    from tc_conv import VARIANTS as CONV_VARIANTS
    op = tcomp.op(S.TC_CONV2D)
    N, H, W, C, K = 32, 56, 56, 256, 256
    sizes = {"N": N, "H": H, "W": W, "C": C, "K": K, "R": 9 * C}
    torch.backends.cudnn.benchmark = True
    X = torch.randn(N, H, W, C, device="cuda").half()
    Wt = torch.randn(9 * C, K, device="cuda").half()
    x_cl = X.permute(0, 3, 1, 2)
    filt = Wt.reshape(3, 3, C, K).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    F = torch.nn.functional

    def exact():
        o = F.conv2d(x_cl.double(), filt.double(), padding=1)
        return o.permute(0, 2, 3, 1).reshape(N * H * W, K)
    hand = S.tc_conv2d(**CONV_VARIANTS["128x128_w64x64_k64_async3_swz_pairs"])[1]
    if torch.cuda.get_device_capability() == (9, 0):  # the Hopper path (kernels/conv_sm90.py)
        from tcomp.kernels.conv_sm90 import conv2d_schedule
        hand = conv2d_schedule(op)
    return op, sizes, (X, Wt), lambda: F.conv2d(x_cl, filt, padding=1), \
        "cuDNN conv2d fp16 channels-last", hand, exact


def _rows(kind, dt, n, d, streamed=False):
    """bench/row_schedules.py's ops (the row in registers, issue 14) at n x d in `dt`; the
    hand schedule is row_schedules' kernel (softmax with exp2), the library torch's."""
    import row_schedules as R
    tdt = getattr(torch, dt)
    X = torch.randn(n, d, device="cuda").to(tdt)
    sizes = {"N": n, "D": d}
    if kind == "softmax":
        op, hand = R.softmax(d, dt, exp2=True)
        return op, sizes, (X,), lambda: torch.softmax(X, -1), "torch.softmax", hand, \
            lambda: torch.softmax(X.double(), -1)
    g = torch.randn(d, device="cuda").to(tdt)
    b = torch.randn(d, device="cuda").to(tdt)
    op, hand = R.layernorm_streamed(d, dt) if streamed else R.layernorm(d, dt)
    f = torch.nn.functional.layer_norm
    return op, sizes, (X, g, b), lambda: f(X, (d,), g, b), "torch layer_norm", hand, \
        lambda: f(X.double(), (d,), g.double(), b.double())


def _gemm_bf16_bias_gelu():
    # the fused GEMM + bias + GELU; hand: the Hopper schedule with T.epilogue(D)
    from tcomp.kernels.gemm_sm90 import hopper_schedule
    op = tcomp.op(S.TC_GEMM_GELU)
    hand = hopper_schedule(op, stage="C")
    hand["C"].epilogue(hand["D"])
    M, N, K = 8192, 8192, 4096
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    bias = torch.randn(N, device="cuda")
    F = torch.nn.functional

    def exact():
        x = A.double() @ B.double() + bias.double()
        return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))
    return op, {"M": M, "N": N, "K": K}, (A, B, bias), \
        lambda: F.gelu(torch.matmul(A, B) + bias.bfloat16()), "torch.matmul + eager bias, GELU", \
        hand, exact


CASES = {"gemm_fp32": _gemm_fp32, "gemm_bf16": _gemm_bf16,
         "gemm_bf16_bias_gelu": _gemm_bf16_bias_gelu, "softmax": _row("softmax"),
         "layernorm": _row("layernorm"), "bmm_bt": _bmm_bt, "conv2d": _conv2d,
         # batched half GEMMs on tensor cores (issue 24: the search gave fp16 0.28x torch.bmm)
         "bmm_fp16": lambda: _bmm("float16", 64, 512, 512, 64),
         "bmm_bf16": lambda: _bmm("bfloat16", 64, 512, 512, 64),
         "bmm_bf16_large": lambda: _bmm("bfloat16", 8, 2048, 2048, 128),
         # the row-in-registers kernels of issue 14 (the row_regs rule)
         "softmax_bf16_wide": lambda: _rows("softmax", "bfloat16", 4096, 32768),
         "layernorm_fp32_wide": lambda: _rows("layernorm", "float32", 4096, 32768),
         "layernorm_bf16": lambda: _rows("layernorm", "bfloat16", 32768, 4096),
         # hand: the streamed row (bench/row_schedules.py layernorm_streamed, the row_stream rule)
         "layernorm_bf16_wide": lambda: _rows("layernorm", "bfloat16", 4096, 32768, streamed=True)}


def check(k, args, exact) -> float:
    got = k(*args)
    torch.cuda.synchronize()
    want = exact()
    return ((got.double() - want).abs().max() / (want.abs().max() + 1e-30)).item()


def timed_slow(fn, reps):
    """`timed`, but a kernel of more than 50 ms per call (an unscheduled op's
    default schedule) is timed over 3 calls, and one of more than 0.5 s by
    its second call alone (CUDA events)."""
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    if first > 0.5:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e)
    if first > 0.05:
        return timed(fn, 3)
    return timed(fn, reps)


def run(name, args_ns, out):
    op, sizes, args, lib, lib_name, hand, exact = CASES[name]()
    recs = os.path.join(out, f"tune_{name}.jsonl")
    t0 = time.time()
    last = [0.0]

    def progress(p):
        now = time.time()
        if now - last[0] > 15:
            last[0] = now
            print(f"  [{name}] {p.done}/{p.total} trials, best {p.best_ms} ms, "
                  f"{p.elapsed_s:.0f} s, last {p.last.sketch} {p.last.time_ms} {p.last.error}",
                  flush=True)
    with LocalRunner(devices=[0]) as runner:
        res = tcomp.tune(op, sizes, trials=args_ns.trials, records=recs, target="cuda",
                         runner=runner, batch=args_ns.batch, patience=None,
                         time_limit_s=60 * args_ns.minutes, progress=progress)
    tune_s = time.time() - t0
    row = {"case": name, "sizes": sizes, "trials": len(res.history), "stopped": res.stopped,
           "tune_s": round(tune_s, 1), "best_sketch": res.best.sketch,
           "errors": res.errors() if callable(getattr(res, "errors", None)) else None}
    kt = tcomp.build(res.schedule, target="cuda", sizes=sizes)
    kh = tcomp.build(hand, target="cuda", sizes=sizes)
    row["err_tuned"], row["err_hand"] = check(kt, args, exact), check(kh, args, exact)
    row["lib"], row["lib_ms"] = lib_name, timed(lib, args_ns.reps)
    row["tuned_ms"] = timed(lambda: kt(*args), args_ns.reps)
    row["tuned_vs_lib"] = row["lib_ms"] / row["tuned_ms"]
    print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    row["hand_ms"] = timed_slow(lambda: kh(*args), args_ns.reps)
    row["tuned_vs_lib"] = row["lib_ms"] / row["tuned_ms"]
    row["tuned_vs_hand"] = row["hand_ms"] / row["tuned_ms"]
    row["first_trial_ms"] = next((t.time_ms for t in res.history if t.ok), None)
    best, curve = float("inf"), []
    for t in res.history:
        if t.ok and t.time_ms is not None:
            best = min(best, t.time_ms)
        curve.append((t.index, round(t.elapsed_s, 2), t.time_ms, None if best == float("inf")
                      else best, t.predicted_ms))
    row["curve"] = curve
    print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    with open(os.path.join(out, "tune_targets.json"), "a") as f:
        f.write(json.dumps(row) + "\n")


def plot(summary: str, png: str) -> None:
    """Best so far against trials and against seconds, one panel pair per case of
    a tune_targets.json, with the library's and the hand schedule's times."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [json.loads(line) for line in open(summary)]
    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 3.2 * len(rows)), squeeze=False)
    for (a, b), r in zip(axes, rows):
        pts = [(i, t, best) for i, t, _, best, _ in r["curve"] if best is not None]
        for ax, x in ((a, [p[0] for p in pts]), (b, [p[1] for p in pts])):
            ax.step(x, [p[2] for p in pts], where="post", label="tcomp tune, best so far")
            ax.axhline(r["lib_ms"], color="k", ls="--", label=f"{r['lib']} (same run)")
            ax.axhline(r["hand_ms"], color="g", ls=":", label="best hand schedule")
            ax.set_yscale("log")
            ax.set_ylabel("ms")
            ax.set_title(f"{r['case']} {r['sizes']}", fontsize=9)
        a.set_xlabel("trials")
        b.set_xlabel("seconds")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    if sys.argv[1:2] == ["--plot"]:  # --plot SUMMARY.json OUT.png
        plot(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", choices=list(CASES))
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=9.0, help="time limit of each tune")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    out = os.environ.get("OUT", ".")
    for name in a.cases:
        try:
            run(name, a, out)
        except Exception as e:  # one case's failure is reported, the next one runs
            print(f"{name}: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
