"""`tcomp tune`: search schedules of a def at given sizes (docs/tuning.md).

  tcomp tune FILE.tc --sizes M=...,N=... --records R.jsonl [--trials 200]
             [--target cuda|sim] [--plot curve.png] [--export best.cubin] ...

Progress: on a terminal, one line on stderr rewritten after each trial
(trials, best so far, ETA); elsewhere a line on stdout each time the best
improves. At the end: the top candidates as a table. Ctrl-C stops the search,
keeps what was measured (the records are appended per measurement), prints
the best so far and exits with status 130. Warnings (a records line passed
over by its re-check, a last line cut short) are printed as
"tcomp: warning: ..." on stderr, as they happen.
"""
from __future__ import annotations

import sys
import warnings

from .errors import TcompError

TUNE_HELP = "search for a fast schedule of a def at given sizes (records kept, resumable)"
TUNE_EPILOG = """\
Every candidate is checked against tcomp.evaluate before it counts. Records
are JSON lines appended as candidates are measured: running the same command
again resumes (measured candidates count toward --trials and are not measured
again). On --target sim nothing is timed: candidates are ranked by the
analytic cost estimate. Exit status: 0 done, 2 on an error, 130 when stopped
with Ctrl-C (the best so far is still printed and exported).
example: tcomp tune tutorials/matmul.tc --sizes M=64,N=64,K=64 --trials 8 \\
             --records mm.jsonl --target sim"""
EXIT_INTERRUPTED = 130


def add_parser(sub, positive, formatter) -> None:
    p = sub.add_parser("tune", help=TUNE_HELP, description=TUNE_HELP[0].upper() + TUNE_HELP[1:]
                       + ".", epilog=TUNE_EPILOG, formatter_class=formatter)
    p.add_argument("file", metavar="FILE.tc", help="a .tc source file with one or more defs")
    p.add_argument("--entry", metavar="NAME", help="the def to use when the file has several")
    p.add_argument("--sizes", required=True, metavar="M=1024,N=512",
                   help="every size variable of the def (the search tunes for these sizes)")
    p.add_argument("--records", required=True, metavar="R.jsonl",
                   help="the records file: read first (resume), appended per measurement")
    p.add_argument("--trials", type=positive, default=200, metavar="N",
                   help="candidates to measure in all, the records' earlier ones included "
                        "(default: 200)")
    p.add_argument("--target", default="cuda", choices=("cuda", "sim"),
                   help="measure on the local GPUs (cuda, the default) or check on the CPU "
                        "simulator and rank by the cost estimate (sim)")
    p.add_argument("--batch", type=positive, default=8, metavar="N",
                   help="candidates measured per round (default: 8)")
    p.add_argument("--patience", type=positive, default=8, metavar="N",
                   help="stop after N rounds without a better best (default: 8)")
    p.add_argument("--time-limit", type=positive, default=None, metavar="S",
                   help="stop after S seconds (default: no limit)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the search's random choices (default: 0)")
    p.add_argument("--top", type=positive, default=10, metavar="N",
                   help="rows of the final table of best candidates (default: 10)")
    p.add_argument("--plot", metavar="CURVE.png",
                   help="write best-so-far against trials and against time, and the cost "
                        "model's hit rate per batch (needs matplotlib)")
    p.add_argument("--export", metavar="OUT.cubin",
                   help="compile the best schedule for CUDA and export it (OUT.cubin and "
                        "OUT.json, for tcomp.load)")


def cmd_tune(args, load_op) -> int:
    from .cli_inputs import parse_sizes
    from .search.tuner import fmt_ms, tune
    from .search.identity import sizes_text
    if args.export is not None and not args.export.endswith(".cubin"):
        raise TcompError(f"--export must name a .cubin file, got '{args.export}'")
    if args.plot is not None:
        _matplotlib()  # before the search: a long run must not end in this error
    op = load_op(args)
    sizes = parse_sizes(args.sizes, op)
    missing = [v for v in op.size_vars if v not in sizes]
    if missing:
        raise TcompError(f"--sizes must give every size variable of '{op.name}' (tuning is for "
                         f"fixed sizes); missing {', '.join(missing)}")
    if args.target == "cuda":
        from .search.local_runner import gpu_count
        if gpu_count() == 0:
            raise TcompError("no CUDA GPU found on this machine: tune with --target sim (checks "
                             "each candidate on the CPU and ranks by the cost estimate)")
    show = _Progress(sys.stderr.isatty())
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show.warning
        res = tune(op, sizes, trials=args.trials, records=args.records, target=args.target,
                   batch=args.batch, patience=args.patience, time_limit_s=args.time_limit,
                   seed=args.seed, progress=show)
    show.close()
    resumed = sum(t.resumed for t in res.history)
    print(f"tuned {op.name} at {sizes_text(sizes)} for {args.target}: {len(res.history)} trials"
          f"{f' ({resumed} resumed)' if resumed else ''}, stopped: {_why(res.stopped)}")
    kind = "measured" if res.timed else "estimated; the sim checks results but measures no time"
    print(f"best: {fmt_ms(res.time_ms)} ({kind}), trial {res.best.index}"
          f"{': ' + res.best.sketch if res.best.sketch else ''}")
    print(_table(res, args.top))
    errors = res.errors()
    if errors:
        print("failed: " + ", ".join(f"{k}: {n}" for k, n in sorted(errors.items())))
    print(f"records: {args.records} (the best: tcomp.search.best(path, op, sizes"
          f"{', target=' + repr(args.target) if args.target != 'cuda' else ''}))")
    if args.plot is not None:
        plot(args.records, op, sizes, args.target, args.plot)
        print(f"wrote {args.plot}")
    if args.export is not None:
        _export(res, args.export, args.target)
    return EXIT_INTERRUPTED if res.stopped == "interrupted" else 0


def _why(stopped: str) -> str:
    return {"trials": "all trials done", "patience": "no better candidate for --patience rounds",
            "time_limit": "--time-limit reached", "exhausted": "no unmeasured candidate left",
            "interrupted": "interrupted (Ctrl-C); what was measured is kept"}[stopped]


def _table(res, n: int) -> str:
    head = "time" if res.timed else "estimate"
    rows = [f"{'rank':>4}  {'trial':>5}  {head:>10}  sketch"]
    for i, t in enumerate(res.top(n), 1):
        rows.append(f"{i:>4}  {t.index:>5}  {_ms(t.score(res.timed)):>10}  "
                    f"{' '.join(x for x in (t.sketch, '(resumed)' if t.resumed else '') if x)}")
    return "\n".join(rows)


def _ms(ms):
    from .search.tuner import fmt_ms
    return fmt_ms(ms)


class _Progress:
    """The live line (a terminal) or a line per new best (elsewhere)."""

    def __init__(self, tty: bool):
        self.tty, self.best, self.width = tty, None, 0

    def __call__(self, p) -> None:
        from .search.tuner import fmt_ms
        if self.tty:
            eta = "" if p.eta_s is None else f", ETA {_duration(p.eta_s)}"
            line = f"[{p.done}/{p.total}] best {fmt_ms(p.best_ms)}, {_duration(p.elapsed_s)}{eta}"
            sys.stderr.write("\r" + line.ljust(self.width))
            sys.stderr.flush()
            self.width = len(line)
        elif p.best_ms is not None and (self.best is None or p.best_ms < self.best):
            self.best = p.best_ms
            new = p.last.score(p.last.time_ms is not None) == p.best_ms and p.last.sketch
            print(f"trial {p.done}/{p.total}: best {fmt_ms(p.best_ms)}"
                  f"{f' ({p.last.sketch})' if new else ''}", flush=True)

    def warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        """warnings.showwarning: one line, without Python's file and line."""
        if self.tty and self.width:  # below the live line, which the next trial rewrites
            sys.stderr.write("\n")
            self.width = 0
        print(f"tcomp: warning: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty and self.width:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TcompError("--plot needs matplotlib, which is not installed here: "
                         "pip install matplotlib (or pip install 'tcomp[search]'), or leave "
                         "out --plot") from None
    return plt


def plot(records: str, op, sizes: dict, target: str, path: str) -> None:
    """The tuning curves of the records (this run's and the resumed ones):
    best-so-far against trials and against time, and the cost model's hit
    rate (tcomp.search.plot_quality)."""
    from .search.quality import model_quality, plot_quality
    try:
        plot_quality(model_quality(records, op, sizes, target), path)
    except TcompError as e:
        raise TcompError(str(e).replace("plot_quality: ", "--plot: ")) from None


def _export(res, path: str, target: str) -> None:
    from .build import build
    arch = target if target.startswith("cuda") else "cuda"
    k = build(res.schedule, arch, res.sizes)
    try:
        k.export(path)
    except OSError as e:
        raise TcompError(f"cannot write {path}: {e.strerror or e}") from None
    print(f"wrote {path} ({len(k.cubin)} bytes) and {path[:-len('.cubin')]}.json")
