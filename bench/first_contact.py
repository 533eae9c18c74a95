"""Issue 26's first-contact table, in one GPU command: for each op the issue
names (bench/auto_time.py's OPS: group norm, depthwise conv, batched GEMM
fp16, 5-point stencil, SwiGLU, add + RMSNorm, GEMM + bias + GELU), the plain
default (`tcomp.build(tcomp.Schedule(op))`: one thread), the auto schedule
(`tcomp.auto_schedule`, as `tcomp.build(op)` chooses it), a tuned kernel
(`tcomp.tune`, `--trials` trials within `--tune-s` seconds) and torch (and
Triton where bench/ has the kernel), each checked against a float64
reference on random data before it is timed (a wrong kernel is reported, not
timed), with the ratios and auto_schedule's CPU seconds.

    PYTHONPATH=. python3 bench/first_contact.py [--only NAME,...] [--trials 64]
        [--tune-s 20] [--plain-max-s 12] [--reps 20] [--batch 8] [--dry-run]

Prints the estimated device time first, then a line per kernel as it is timed,
then a markdown table; writes $OUT/first_contact.json (or ./first_contact.json),
rewritten after each op, and the tuning records $OUT/first_contact_<op>.jsonl.

Timing (bench/timing.py: CUDA events, L2 flushed, median of `--reps`): the
first call of every kernel is timed alone and its output checked; a call of
more than 5 s is reported from that one call, one of more than 50 ms from
one more call after it (by the timer where that one is faster: a first call
that autotuned or loaded a module), anything faster by the timer. The plain default
runs for seconds to many minutes at these sizes, so it is first run at probe
sizes (`identity.small_sizes` at 2^22 of work) and its full-size time
extrapolated by the work ratio (`identity.work_of`); where that estimate is
above `--plain-max-s`, the extrapolation is reported (marked `~`, with the
probe's sizes, checked at them) instead of a full-size run. Data of a probe
fits the L2 cache, so an extrapolation is a lower bound of the plain time
(and of "plain / auto").

`--dry-run` (no GPU, no torch): chooses and builds every kernel but the tuned
one with NVRTC and prints the plan and the estimate.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import tcomp  # noqa: E402
from tcomp.lang.symbolic import eval_int  # noqa: E402
from tcomp.search import auto  # noqa: E402
from tcomp.search.identity import sizes_text, small_sizes, work_of  # noqa: E402

import auto_time  # noqa: E402  (OPS: the sources and sizes)
import first_contact_refs as refs  # noqa: E402

NAMES = tuple(refs.REFERENCES)  # the seven ops, in the order
PROBE_WORK = 1 << 22   # work of the plain default's probe run (~0.02-0.5 s of one thread)
SLOW_CALL_S = 5.0      # a first call longer than this is the figure (one call)
WARM_CALL_S = 0.05     # one longer than this is timed once more, after it
# the estimate's parts, seconds: runner and torch start; per op: the auto choice and three
# NVRTC builds, the probe, the references and the fast kernels' timing; a tune round past
# its time limit (the limit is checked between rounds)
START_S, BUILD_S, PROBE_S, TIMING_S, ROUND_S = 20.0, 5.0, 1.0, 3.0, 6.0


def estimate_s(n_ops: int, tune_s: float, plain_max_s: float) -> float:
    """The device seconds a run of `n_ops` ops takes at most, as planned: a full-size
    plain run is at most max(plain_max_s, two calls under SLOW_CALL_S) (an extrapolation
    below plain_max_s that was low by more than the probe's cache advantage costs more)."""
    plain = PROBE_S + max(plain_max_s, 2 * SLOW_CALL_S)
    return START_S + n_ops * (BUILD_S + plain + TIMING_S + tune_s + ROUND_S)


def extrapolate_ms(probe_ms: float, op, probe: dict, sizes: dict) -> float:
    """The plain default's full-size time from its probe, linear in the work."""
    return probe_ms * work_of(op, sizes) / work_of(op, probe)


def timing_rule(first_ms: float) -> str:
    """How a kernel whose first call took `first_ms` is timed: "first" (that call is the
    figure), "again" (one more call) or "timer" (bench/timing.py's median)."""
    if first_ms > SLOW_CALL_S * 1e3:
        return "first"
    return "again" if first_ms > WARM_CALL_S * 1e3 else "timer"


def ratio(a, b):
    """a / b of two kernel results' ms, None where either has no time."""
    ta, tb = (r.get("ms") if r else None for r in (a, b))
    return ta / tb if ta and tb else None


def _cell(r) -> str:
    if not r:
        return "-"
    if r.get("error"):
        return "failed"
    if r.get("wrong"):
        return f"wrong (err {r['err']:.1e})"
    ms = r["ms"]
    text = f"{ms:.4g}" if ms < 1e4 else f"{ms:.3e}"
    return f"~{text}" if r.get("extrapolated") else text


def _ratio_cell(x) -> str:
    return "-" if x is None else (f"{x:.3g}" if x < 100 else f"{x:,.0f}")


COLUMNS = ("op", "plain ms", "auto ms", "tuned ms (trials)", "torch ms", "Triton ms",
           "auto / tuned (goal <= 2)", "plain / auto (goal >= 100)", "torch / auto",
           "auto CPU s (goal <= 1)", "auto sketch")


def table(rows: list[dict]) -> str:
    """The markdown table of the rows (`~`: extrapolated from the probe)."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in rows:
        tuned = _cell(r.get("tuned"))
        if r.get("tuned") and r["tuned"].get("trials") is not None:
            tuned += f" ({r['tuned']['trials']})"
        tri = r.get("triton")
        cells = [r["op"], _cell(r.get("plain")), _cell(r.get("auto")), tuned,
                 _cell(r.get("torch")), _cell(tri) if tri else "-",
                 _ratio_cell(ratio(r.get("auto"), r.get("tuned"))),
                 _ratio_cell(ratio(r.get("plain"), r.get("auto"))),
                 _ratio_cell(ratio(r.get("torch"), r.get("auto"))),
                 f"{r['auto_cpu_s']:.2f}" if r.get("auto_cpu_s") is not None else "-",
                 f"`{r.get('auto_sketch', '-')}`"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def choose_auto(op, sizes):
    """auto_schedule's choice and its CPU seconds (process time, as bench/auto_time.py)."""
    c0 = time.process_time()
    choice = auto.choose(op, sizes, "cuda")
    return choice, time.process_time() - c0


def plan(name: str) -> dict:
    """What the run does for `name`, without a GPU: its sizes, the plain default's probe
    sizes and work ratio, and the peers."""
    src, sizes, _ = auto_time.OPS[name]
    op = tcomp.op(src)
    probe = small_sizes(op, sizes, PROBE_WORK)
    label, _ = refs.PEERS[name]
    return dict(op=op, sizes=sizes, probe=probe, work_ratio=work_of(op, sizes) / work_of(op, probe),
                torch=label, triton="add + triton_rows.rmsnorm" if name == "add_rmsnorm" else None)


def dry_run(names, a) -> int:
    """Choose and build (NVRTC, no GPU) every kernel but the tuned one; print the plan."""
    for name in names:
        p = plan(name)
        op, sizes = p["op"], p["sizes"]
        choice, cpu = choose_auto(op, sizes)
        t0 = time.perf_counter()
        tcomp.build(choice.schedule, target="cuda", sizes=sizes)
        tcomp.build(tcomp.Schedule(op), target="cuda", sizes=sizes)
        tcomp.build(tcomp.Schedule(op), target="cuda", sizes=p["probe"])
        print(f"{name}: {sizes_text(sizes)}; auto {choice.sketch} ({choice.candidates} "
              f"candidates, {cpu:.2f} s CPU, estimate {choice.estimate_ms:.4g} ms); plain probe "
              f"{sizes_text(p['probe'])} (x{p['work_ratio']:.4g} to full); tune {a.trials} trials "
              f"<= {a.tune_s:g} s; torch: {p['torch']}; Triton: {p['triton'] or '-'}; built 3 "
              f"kernels in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


# ---------------------------------------------------------------- the GPU run
def _git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                              capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class Gpu:
    """The torch side: inputs, references, and timing by bench/timing.py."""

    def __init__(self, reps: int):
        import torch
        from timing import timed
        self.torch, self.timed, self.reps = torch, timed, reps
        torch.backends.cuda.matmul.allow_tf32 = False  # the comprehensions compute in float32
        torch.backends.cudnn.allow_tf32 = False

    def inputs(self, op, sizes: dict) -> list:
        """Uniform in [-1, 1), in each input's dtype, on the GPU (seeded)."""
        torch = self.torch
        g = torch.Generator(device="cuda").manual_seed(0)
        return [(torch.rand([eval_int(d, sizes) for d in t.shape], device="cuda", generator=g)
                 * 2 - 1).to(getattr(torch, t.dtype.name)) for t in op.inputs]

    def reference(self, name: str, args: list) -> tuple:
        return refs.REFERENCES[name](self.torch, *[x.double() for x in args])

    def _one_call(self, fn, args):
        torch = self.torch
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        out = fn(*args)
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e), out if isinstance(out, tuple) else (out,)

    def measure(self, fn, args, want: tuple, tol: float) -> dict:
        """Checked on its first call, then timed (the module docstring's rules)."""
        try:
            first, out = self._one_call(fn, args)
            err = refs.max_error(tuple(o.double() for o in out), want)
        except Exception as e:  # a failing kernel is a row of the table, not the end of it
            return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        del out
        if not err <= tol:
            return {"wrong": True, "err": err, "first_ms": first}
        how = timing_rule(first)
        if how == "first":
            return {"ms": first, "calls": "1", "err": err}
        if how == "again":  # (a first call that autotuned or loaded a module is timed again)
            again = self._one_call(fn, args)[0]
            if timing_rule(again) != "timer":
                return {"ms": again, "calls": "1 after 1 warm-up", "err": err}
        return {"ms": self.timed(lambda: fn(*args), self.reps), "calls": f"median of {self.reps}",
                "err": err}


def _say(name, what, r):
    print(f"  [{name}] {what}: {_cell(r)} ms {json.dumps(r)}", flush=True)


def run_op(name: str, a, gpu: Gpu, runner, out_dir: str) -> dict:
    p = plan(name)
    op, sizes = p["op"], p["sizes"]
    tol = refs.TOLERANCE[op.outputs[0].dtype.name]
    row, t0 = {"op": name, "sizes": sizes, "tol": tol}, time.perf_counter()
    choice, row["auto_cpu_s"] = choose_auto(op, sizes)
    row["auto_sketch"], row["auto_remarks"] = choice.sketch, list(choice.remarks)
    args = gpu.inputs(op, sizes)
    want = gpu.reference(name, args)
    k_auto = tcomp.build(choice.schedule, target="cuda", sizes=sizes)
    row["auto"] = gpu.measure(k_auto, args, want, tol)
    _say(name, f"auto ({choice.sketch}, {row['auto_cpu_s']:.2f} s CPU)", row["auto"])
    label, fn = refs.PEERS[name]
    row["torch"] = dict(gpu.measure(fn, args, want, tol), name=label)
    _say(name, label, row["torch"])
    try:
        tri = refs.triton_peer(name)
    except Exception as e:  # no Triton on this machine
        row["triton"] = {"error": f"{type(e).__name__}: {e}"}
    else:
        if tri is not None:
            row["triton"] = dict(gpu.measure(tri[1], args, want, tol), name=tri[0])
            _say(name, tri[0], row["triton"])
    row["plain"] = plain(name, p, a, gpu, args, want, tol)
    _say(name, "plain default", row["plain"])
    row["tuned"] = tuned(name, op, sizes, a, gpu, runner, args, want, tol, out_dir)
    _say(name, "tuned", row["tuned"])
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def plain(name, p, a, gpu: Gpu, args, want, tol) -> dict:
    op, sizes, probe = p["op"], p["sizes"], p["probe"]
    s = tcomp.Schedule(op)
    pargs = gpu.inputs(op, probe)
    k = tcomp.build(s, target="cuda", sizes=probe)
    pr = gpu.measure(k, pargs, gpu.reference(name, pargs), tol)
    if "ms" not in pr:
        return dict(pr, probe=probe)
    est = extrapolate_ms(pr["ms"], op, probe, sizes)
    if est > a.plain_max_s * 1e3:
        return {"ms": est, "extrapolated": True, "probe": probe, "probe_ms": pr["ms"],
                "err": pr["err"], "work_ratio": p["work_ratio"]}
    r = gpu.measure(tcomp.build(s, target="cuda", sizes=sizes), args, want, tol)
    return dict(r, probe=probe, probe_ms=pr["ms"], extrapolated_ms=est)


def tuned(name, op, sizes, a, gpu: Gpu, runner, args, want, tol, out_dir) -> dict:
    t0 = time.perf_counter()
    try:
        res = tcomp.tune(op, sizes, trials=a.trials, target="cuda", runner=runner,
                         records=os.path.join(out_dir, f"first_contact_{name}.jsonl"),
                         batch=a.batch, patience=None, time_limit_s=a.tune_s)
        info = dict(trials=len(res.history), stopped=res.stopped, sketch=res.best.sketch,
                    tune_s=round(time.perf_counter() - t0, 1), tune_ms=res.time_ms)
        k = tcomp.build(res.schedule, target="cuda", sizes=sizes)
    except Exception as e:  # (nothing valid found: no best)
        return {"error": f"{type(e).__name__}: {str(e)[:300]}",
                "tune_s": round(time.perf_counter() - t0, 1)}
    return dict(gpu.measure(k, args, want, tol), **info)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help=f"comma-separated ops (default: {','.join(NAMES)})")
    ap.add_argument("--trials", type=int, default=64, help="tcomp.tune's trials per op")
    ap.add_argument("--tune-s", type=float, default=20.0, help="tcomp.tune's time limit per op")
    ap.add_argument("--plain-max-s", type=float, default=12.0,
                    help="extrapolate the plain default's time where its estimate is above this")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="tcomp.tune's candidates per round")
    ap.add_argument("--dry-run", action="store_true", help="build and print the plan (no GPU)")
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)} (ops: {', '.join(NAMES)})")
    if a.trials < 1 or a.tune_s <= 0 or a.plain_max_s <= 0 or a.reps < 1 or a.batch < 1:
        ap.error("--trials, --reps and --batch must be positive integers, --tune-s and "
                 "--plain-max-s positive")
    est = estimate_s(len(names), a.tune_s, a.plain_max_s)
    print(f"estimate: at most ~{est:.0f} s ({est / 60:.1f} min) of device time for "
          f"{len(names)} op(s): {a.trials} trials <= {a.tune_s:g} s tuning each, the plain "
          f"default extrapolated above {a.plain_max_s:g} s", flush=True)
    auto.choose(tcomp.op("def warm(float(N) X) -> (O) { O(i) = X(i) + 1 }"), {"N": 64})  # imports
    if a.dry_run:
        return dry_run(names, a)
    from tcomp.search import LocalRunner
    gpu = Gpu(a.reps)
    out_dir = os.environ.get("OUT", ".")
    path = os.path.join(out_dir, "first_contact.json")
    meta = dict(commit=_git_commit(), device=gpu.torch.cuda.get_device_name(0),
                torch=gpu.torch.__version__, args=vars(a), estimate_s=round(est))
    rows, t0 = [], time.perf_counter()
    with LocalRunner(devices=[0], timeout_s=10) as runner:
        for name in names:
            print(f"{name} {sizes_text(auto_time.OPS[name][1])}", flush=True)
            try:
                rows.append(run_op(name, a, gpu, runner, out_dir))
            except Exception as e:  # one op's failure is reported, the next one runs
                rows.append({"op": name, "error": f"{type(e).__name__}: {e}"})
                print(f"  [{name}] failed: {type(e).__name__}: {e}", flush=True)
            gpu.torch.cuda.empty_cache()
            meta["wall_s"] = round(time.perf_counter() - t0, 1)
            with open(path, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(table(rows))
    print(f"wrote {path}; {meta['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
