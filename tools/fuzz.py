"""The differential fuzzer's long mode: random programs x random schedules on
the sim (and a sample through NVRTC and the CUDA emulator) against
`tcomp.evaluate`. The generators and the oracle are tests/fuzz/.

    python3 tools/fuzz.py --pairs 100000 --seed 1 -j 2        # a release run
    python3 tools/fuzz.py --seed 1 --pair 4711                 # replay one pair, verbosely
    python3 tools/fuzz.py --pairs 2000 --cuda-rate 0.5 --out fails.txt

Prints pairs/s as it goes, each failure with its reproducer (TC source,
sizes, data, the primitives tried, the schedule JSON), and a summary of the
outcomes at the end. Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.fuzz.oracle import Config, replay, run_pair  # noqa: E402

_CFG = Config()


def _init(cfg):
    global _CFG
    _CFG = cfg


def _one(args):
    seed, pair = args
    t = time.perf_counter()
    r = run_pair(seed, pair, _CFG)
    return r, time.perf_counter() - t


def _replay(path, pair, shrink=False) -> int:
    failed = 0
    for block in open(path).read().split("=== fuzz failure: ")[1:]:
        block = "=== fuzz failure: " + block
        if pair is not None and f" pair {pair}:" not in block.splitlines()[0]:
            continue
        if shrink and replay(block).failed:
            from tests.fuzz.shrink import shrink as shrink_text
            block = shrink_text(block)
        r = replay(block)
        failed += r.failed
        print(r.reproducer() if r.failed else
              f"seed {r.seed} pair {r.pair}: {r.status} {r.kind} now (ran {', '.join(r.steps)})")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=int(os.environ.get("TCOMP_FUZZ_PAIRS", 1000)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("TCOMP_FUZZ_SEED", 1)))
    ap.add_argument("--start", type=int, default=0, help="first pair number")
    ap.add_argument("--pair", type=int, help="replay this one pair and print all about it")
    ap.add_argument("--replay", metavar="FILE",
                    help="run the reproducers in FILE (an --out file) again, all or --pair's")
    ap.add_argument("--shrink", action="store_true",
                    help="with --replay: drop directives, statements and size first")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--cuda-rate", type=float, default=Config.cuda_rate)
    ap.add_argument("--emulate-rate", type=float, default=Config.emulate_rate)
    ap.add_argument("--hygiene", type=float, default=Config.hygiene,
                    help="share of names drawn from the hygiene pools (0: plain names only)")
    ap.add_argument("--pair-timeout", type=float, default=120.0,
                    help="seconds a pair may take before it is reported as a hang (0: none)")
    ap.add_argument("--out", help="also write the failures' reproducers to this file")
    ap.add_argument("--max-failures", type=int, default=50, help="reproducers printed in full")
    a = ap.parse_args(argv)
    cfg = Config(cuda_rate=a.cuda_rate, emulate_rate=a.emulate_rate, hygiene=a.hygiene,
                 pair_timeout=a.pair_timeout or None)
    if a.replay:
        return _replay(a.replay, a.pair, a.shrink)
    if a.pair is not None:  # (the rates decide no draw of the program or schedule: run it all)
        r = run_pair(a.seed, a.pair, Config(cuda_rate=1.0, emulate_rate=1.0, hygiene=a.hygiene))
        print(r.reproducer() if r.failed else
              f"seed {a.seed} pair {a.pair}: {r.status} {r.kind} (ran {', '.join(r.steps)})\n"
              f"{r.message}\n--- TC source:\n{r.source}\n--- sizes: {r.sizes}\n"
              + "\n".join(r.log) + f"\n--- schedule JSON:\n{r.schedule_json}")
        return 1 if r.failed else 0
    _init(cfg)  # (the workers get it from the pool's initializer)
    work = [(a.seed, p) for p in range(a.start, a.start + a.pairs)]
    counts, steps, fails = collections.Counter(), collections.Counter(), []
    out = open(a.out, "w") if a.out else None
    t0 = last = time.perf_counter()
    pool = multiprocessing.Pool(a.jobs, _init, (cfg,)) if a.jobs > 1 else None
    results = pool.imap_unordered(_one, work, chunksize=4) if pool else map(_one, work)
    slowest = []
    try:
        for done, (r, dt) in enumerate(results, 1):
            counts[(r.status, r.kind)] += 1
            steps.update(r.steps)
            slowest = sorted(slowest + [(dt, r.pair)])[-5:]
            if r.failed:
                fails.append(r)
                text = r.reproducer()
                if len(fails) <= a.max_failures:
                    print(text + "\n", flush=True)
                else:
                    print(f"FAIL seed {r.seed} pair {r.pair}: {r.kind}", flush=True)
                if out:
                    out.write(text + "\n\n")
                    out.flush()
            now = time.perf_counter()
            if now - last > 30 or done == len(work):
                last = now
                print(f"[{done}/{len(work)}] {done / (now - t0):.1f} pairs/s, "
                      f"{len(fails)} failures", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        if pool:
            pool.terminate()
    total = time.perf_counter() - t0
    n = sum(counts.values())
    print(f"\n=== {n} pairs (seed {a.seed}, pairs {a.start}..{a.start + a.pairs - 1}) in "
          f"{total:.0f} s, {n / max(total, 1e-9):.1f} pairs/s, {a.jobs} worker(s)")
    print(f"ran: sim {steps['sim']}, NVRTC {steps['cuda']}, emulated CUDA {steps['emulated']}")
    for (status, kind), c in counts.most_common():
        print(f"  {c:7d}  {status:14s} {kind}")
    print("slowest pairs: " + ", ".join(f"{p} ({t:.1f} s)" for t, p in reversed(slowest)))
    by_kind = collections.defaultdict(list)
    for r in fails:
        known = sorted({x.split(" (")[0] for x in r.suspects}) or ["no known defect's shape"]
        by_kind[(r.kind, ", ".join(known))].append(r.pair)
    for (kind, known), pairs in sorted(by_kind.items()):
        print(f"FAILED {kind} [{known}]: {len(pairs)} pairs, e.g. {sorted(pairs)[:20]}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
