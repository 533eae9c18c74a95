"""The cost model's quality and the tuning curves of a tune run, from its
records (tcomp/search/quality.py).

    PYTHONPATH=. python3 bench/tune_curve.py mm.jsonl [--op gemm] [--sizes M=4096,N=4096,K=4096]
                                             [--target cuda] [--top 10] [--after 100]
                                             [--window 10] [--out curve.png] [--batches]

Prints, for the records of one op at one size for one target (--op, --sizes,
--target pick them when the file holds several): the trials, the best, and
the share of batches whose best measured candidate was in the model's
predicted top --top of its round, among the batches chosen after --after
trials (the issue's target: at least 80% after 100 trials); --batches adds
one line per batch. Writes --out (PNG; default: the records' name with
_curve.png): best-so-far against trials and against time, and the hit-rate
curve (rolling over --window batches and cumulative).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tcomp.errors import TcompError  # noqa: E402
from tcomp.search import model_quality, plot_quality  # noqa: E402


def parse_sizes(text: str | None) -> dict | None:
    if text is None:
        return None
    out = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        if not eq or not value.strip().isdigit():
            raise TcompError(f"--sizes must be NAME=INT,..., got {text!r}")
        out[name.strip()] = int(value)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records")
    ap.add_argument("--op", default=None, help="the def's name")
    ap.add_argument("--sizes", default=None, metavar="M=4096,N=4096")
    ap.add_argument("--target", default=None)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--after", type=int, default=100)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--batches", action="store_true", help="print one line per batch")
    args = ap.parse_args(argv)
    try:
        q = model_quality(args.records, args.op, parse_sizes(args.sizes), args.target,
                          top=args.top, after=args.after)
        out = args.out or os.path.splitext(args.records)[0] + "_curve.png"
        plot_quality(q, out, window=args.window)
    except TcompError as e:
        print(f"tune_curve: {e}", file=sys.stderr)
        return 2
    print(q.summary())
    if args.batches:
        print(q.table())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
