"""A small mutation-testing run over tcomp's lowering, sim target, CUDA codegen and checkers.

Why our own script rather than mutmut: we want a deterministic *sample* of
mutants (a seed, N per module) that fits a short run on a shared 2-core
machine, and a fast test subset chosen per module; mutmut mutates everything
and runs one command for all.

How it works:

1. Every target file is parsed with `ast`; each mutation site becomes one
   mutant: comparison swaps (`<`<->`<=`, `==`<->`!=`, `in`<->`not in`, ...),
   arithmetic swaps (`+`<->`-`, `*`->`//`, `//`->`*`, `%`->`//`, `<<`<->`>>`),
   `and`<->`or`, a negated `if`/`while`/ternary condition, integer constant
   off by one, `True`<->`False`, swapped CUDA strings ("threadIdx.x" <->
   "threadIdx.y", "-inf" -> "0.0", ...), and dropped statements (a call
   statement such as `append`/`emit`, or `return X` -> `return None`).
   Docstrings, annotations, f-strings and error-message texts are left alone.
2. The mutant is a source splice: only the mutated node's text changes
   (`ast.unparse` of the mutated node, parenthesised), so line numbers and the
   rest of the file stay as they are.
3. Each mutant runs in a private copy of the repository (copied once to a
   temp directory; the file is restored after each mutant, and no bytecode is
   written, so a stale .pyc can never mask a mutant). The worktree is never
   touched.
4. The test command is a fast subset chosen per module (`SUBSETS`), with -x
   and a timeout: exit 0 = survived, non-zero = killed, timeout = timeout.
   `--wide` re-runs survivors under the rest of the CPU suite most likely to
   see the module (`WIDE`: the CUDA emulator tests, bench goldens, lang, errors) to tell "the fast subset misses it" from
   "the CPU suite misses it".
5. Results are JSON lines (one per mutant, keyed by mutant id); a rerun skips
   ids already recorded, so a run can be interrupted and resumed.

Usage:
    python3 tools/mutate.py --list                 # how many sites per module
    python3 tools/mutate.py --per-module 6 --seed 11 --out tools/mutation_results.jsonl
    python3 tools/mutate.py --out tools/mutation_results.jsonl --wide   # re-check survivors
    python3 tools/mutate.py --summary --out tools/mutation_results.jsonl
    python3 tools/mutate.py --show ID               # print the diff of one mutant
    python3 tools/mutate.py --per-module 30 --seed 12 --retry-timeouts --timeout 400

A record's later line wins (load() keys by id and suite), so a retried mutant
keeps its history in the file.
"""
from __future__ import annotations

import argparse
import ast
import copy
import difflib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TARGETS = sorted(
    [p for p in (ROOT / "tcomp" / "lower").glob("*.py") if p.name != "__init__.py"]
    + [p for p in (ROOT / "tcomp" / "target_sim").glob("*.py") if p.name != "__init__.py"]
    + [ROOT / "tcomp" / "target_cuda" / "codegen.py", ROOT / "tcomp" / "target_cuda" / "allreduce.py"]
    # the checkers (issue 22): the language's checks, the schedule primitives, the IR verifier
    + list((ROOT / "tcomp" / "lang").glob("check*.py"))
    + [p for p in (ROOT / "tcomp" / "schedule").glob("*.py") if p.name != "__init__.py"])

_PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
           "-k", "not gpu"]
# Fast subsets per module, timed unmutated on the shared 2-core box: tests/lower
# (golden IR, sim schedules, simplify, sim catches, ...) 17 s; the CUDA subset
# below 50 s (codegen text, NVRTC compiles, the CPU emulator of the generated CUDA).
# cheap files first so -x stops early; test_allreduce (about 34 s) last.
_CUDA = ["tests/target_cuda/test_codegen_vectors.py", "tests/target_cuda/test_lang_programs_cuda.py",
         "tests/target_cuda/test_index_width.py", "tests/target_cuda/test_inplace_cuda.py",
         "tests/target_cuda/test_schedules_compile.py", "tests/target_cuda/test_allreduce.py"]
# checkers: the error tests (every refusal's text), the stage API and thread checks, the
# language's goldens and literals, the sim's and verifier's catches, the fuzz regressions
_CHECKERS = ["tests/errors", "tests/schedule/test_stage_api.py", "tests/schedule/test_threads.py",
             "tests/lang/test_golden.py", "tests/lang/test_literals.py",
             "tests/lower/test_sim_catches.py", "tests/lower/test_thread_rebinds.py",
             "tests/lower/test_fuzz_regions.py"]
SUBSETS = {"lower": ["tests/lower"], "target_sim": ["tests/lower"], "cuda": _CUDA,
           "checkers": _CHECKERS}
# --wide: the rest of the CPU suite most likely to see each module (the full
# suite, several minutes per mutant, does not fit a habitual run on this box).
_REST_CUDA = ["tests/target_cuda", "tests/bench", "tests/test_cli.py"]
_REST_LOWER = ["tests/target_cuda/test_adversarial_cuda.py", "tests/target_cuda/test_vector_alignment.py",
               "tests/target_cuda/test_allreduce.py", "tests/bench", "tests/errors", "tests/lang",
               "tests/schedule"]
WIDE = {"lower": _REST_LOWER, "target_sim": _REST_LOWER, "cuda": _REST_CUDA,
        "checkers": ["tests/lang", "tests/schedule", "tests/lower", "tests/fuzz"]}

_STRING_SWAPS = {
    "threadIdx.x": "threadIdx.y", "threadIdx.y": "threadIdx.x", "threadIdx.z": "threadIdx.y",
    "blockIdx.x": "blockIdx.y", "blockIdx.y": "blockIdx.x", "blockIdx.z": "blockIdx.y",
    "blockDim.x": "blockDim.y", "blockDim.y": "blockDim.x",
    "-inf": "0.0", "inf": "0.0", "min": "max", "max": "min", "sum": "prod", "+": "-", "-": "+",
    "*": "+", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "&&": "||", "||": "&&",
    "__syncthreads();": "", "__syncwarp();": "", "shared": "local", "local": "shared",
    "__shfl_xor_sync": "__shfl_down_sync", "__shfl_down_sync": "__shfl_xor_sync",
    "float32": "float64", "int32": "int64", "int64": "int32", "x": "y", "y": "x",
}
_CMP_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
              ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
              ast.In: ast.NotIn, ast.NotIn: ast.In}
_BIN_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
              ast.Mod: ast.FloorDiv, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
              ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.Div: ast.Mult}


@dataclass(frozen=True)
class Mutant:
    id: str          # stable: file, position, operator
    module: str      # "lower" | "target_sim" | "cuda"
    path: str        # relative to the repository root
    line: int
    kind: str        # the operator, e.g. "cmp Lt->LtE"
    start: tuple     # (lineno, col) of the replaced span
    end: tuple       # (end_lineno, end_col)
    replacement: str


def module_of(rel: str) -> str:
    if rel.startswith(("tcomp/lang/check", "tcomp/schedule/")) or rel == "tcomp/lower/verify.py":
        return "checkers"
    if rel.startswith("tcomp/lower/"):
        return "lower"
    if rel.startswith("tcomp/target_sim/"):
        return "target_sim"
    return "cuda"


def _skipped_nodes(tree: ast.AST) -> set:
    """Ids of nodes never mutated: docstrings, annotations, f-strings, raise/assert texts."""
    skip = set()

    def mark(n):
        for sub in ast.walk(n):
            skip.add(id(sub))

    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = n.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                mark(body[0])
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in n.args.args + n.args.kwonlyargs + n.args.posonlyargs:
                if a.annotation is not None:
                    mark(a.annotation)
            if n.returns is not None:
                mark(n.returns)
        if isinstance(n, ast.AnnAssign):
            mark(n.annotation)
        if isinstance(n, ast.JoinedStr):
            mark(n)
        if isinstance(n, (ast.Raise, ast.Assert)):
            mark(n)   # error texts are pinned by the error tests; mutating them is noise here
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            mark(n)
    return skip


def _variants(node: ast.AST):
    """(kind, mutated node or replacement text) pairs for one node."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAPS:
        new = copy.deepcopy(node)
        new.ops = [_CMP_SWAPS[type(node.ops[0])]()]
        yield f"cmp {type(node.ops[0]).__name__}->{type(new.ops[0]).__name__}", new
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAPS:
        new = copy.deepcopy(node)
        new.op = _BIN_SWAPS[type(node.op)]()
        yield f"binop {type(node.op).__name__}->{type(new.op).__name__}", new
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield f"boolop {type(node.op).__name__}->{type(new.op).__name__}", new
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield f"const {v}->{not v}", ast.Constant(not v)
        elif isinstance(v, int):
            yield f"const {v}->{v + 1}", ast.Constant(v + 1)
        elif isinstance(v, str) and v in _STRING_SWAPS:
            yield f"str {v!r}->{_STRING_SWAPS[v]!r}", ast.Constant(_STRING_SWAPS[v])
        elif isinstance(v, str) and any(k in v for k in ("threadIdx.", "blockIdx.", "__syncthreads")):
            for k in ("threadIdx.x", "threadIdx.y", "blockIdx.x", "__syncthreads();"):
                if k in v:
                    swapped = v.replace(k, _STRING_SWAPS[k], 1)
                    yield f"str-part {k!r}->{_STRING_SWAPS[k]!r}", ast.Constant(swapped)
                    break


def _cond_variants(node: ast.AST):
    """Negated conditions: the test expression of if/while/ternary/comprehension-if."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        yield "negate-cond", node.test, ast.UnaryOp(ast.Not(), copy.deepcopy(node.test))


def _stmt_variants(node: ast.AST):
    """Dropped statements: a bare call (append, emit, barrier insertion), or a returned value."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "drop-call", "pass"
    elif isinstance(node, ast.Return) and node.value is not None \
            and not (isinstance(node.value, ast.Constant) and node.value.value is None):
        yield "return-None", "return None"


def collect(path: Path) -> list[Mutant]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text())
    skip = _skipped_nodes(tree)
    out: list[Mutant] = []

    def add(kind, node, text):
        span = ((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))
        key = f"{rel}:{span[0][0]}:{span[0][1]}:{span[1][0]}:{span[1][1]}:{kind}"
        mid = hashlib.sha1(key.encode()).hexdigest()[:10]
        out.append(Mutant(mid, module_of(rel), rel, node.lineno, kind, span[0], span[1], text))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        for kind, new in _variants(node):
            add(kind, node, "(" + ast.unparse(new) + ")")
        for kind, test, new in _cond_variants(node):
            if id(test) not in skip:
                add(kind, test, "(" + ast.unparse(new) + ")")
        for kind, text in _stmt_variants(node):
            add(kind, node, text)
    return out


def splice(source: str, m: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    # ast columns are utf-8 byte offsets; convert through bytes so non-ASCII lines stay right.
    (l0, c0), (l1, c1) = m.start, m.end
    head = "".join(lines[:l0 - 1]) + lines[l0 - 1].encode()[:c0].decode()
    tail = lines[l1 - 1].encode()[c1:].decode() + "".join(lines[l1:])
    return head + m.replacement + tail


def all_mutants() -> list[Mutant]:
    muts = []
    for p in TARGETS:
        for m in collect(p):
            src = p.read_text()
            try:
                compile(splice(src, m), m.path, "exec")
            except SyntaxError:
                continue   # e.g. a drop inside a construct that needs a body expression
            muts.append(m)
    return muts


def sample(muts: list[Mutant], per_module: int, seed: int, modules=None) -> list[Mutant]:
    """Deterministic: a seeded shuffle per module, the first N of each, interleaved."""
    chosen = []
    for mod in modules or SUBSETS:
        pool = sorted((m for m in muts if m.module == mod), key=lambda m: m.id)
        random.Random(f"{seed}:{mod}").shuffle(pool)
        chosen.append(pool[:per_module])
    out = []
    for i in range(per_module):
        out.extend(group[i] for group in chosen if i < len(group))
    return out


def _copy_repo() -> Path:
    dst = Path(tempfile.mkdtemp(prefix="tcomp-mutate-"))
    for name in ("tcomp", "tests", "docs", "bench", "tutorials"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, dst / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dst / name)
    return dst


def run_tests(repo: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    t0 = time.monotonic()
    try:
        p = subprocess.run(_PYTEST + tests, cwd=repo, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    dt = time.monotonic() - t0
    last = [ln for ln in p.stdout.splitlines() if ln.strip()]
    failed = next((ln for ln in last if ln.startswith(("FAILED", "ERROR"))), last[-1] if last else "")
    if p.returncode == 0:
        return "survived", dt, last[-1] if last else ""
    if p.returncode == 5:   # nothing collected: a broken subset, not a kill
        return "error", dt, "no tests collected"
    return "killed", dt, failed[:200]


def load(out: Path) -> dict:
    done = {}
    if out.exists():
        for ln in out.read_text().splitlines():
            if ln.strip():
                rec = json.loads(ln)
                done[(rec["id"], rec.get("suite", "fast"))] = rec
    return done


def summary(out: Path) -> None:
    recs = load(out)
    fast = {k[0]: r for k, r in recs.items() if k[1] == "fast"}
    wide = {k[0]: r for k, r in recs.items() if k[1] == "wide"}
    print(f"{'module':<12}{'mutants':>8}{'killed(fast)':>14}{'killed(+wide)':>15}{'rate':>8}")
    tot = [0, 0, 0]
    for mod in SUBSETS:
        rs = [r for r in fast.values() if r["module"] == mod and r["status"] != "error"]
        kf = sum(r["status"] in ("killed", "timeout") for r in rs)
        kw = kf + sum(1 for r in rs if r["status"] == "survived"
                      and wide.get(r["id"], {}).get("status") in ("killed", "timeout"))
        tot = [tot[0] + len(rs), tot[1] + kf, tot[2] + kw]
        if rs:
            print(f"{mod:<12}{len(rs):>8}{kf:>14}{kw:>15}{100 * kw / len(rs):>7.0f}%")
    if tot[0]:
        print(f"{'total':<12}{tot[0]:>8}{tot[1]:>14}{tot[2]:>15}{100 * tot[2] / tot[0]:>7.0f}%")
    slow = sum(r["status"] == "timeout" for r in recs.values())
    if slow:
        print(f"\n{slow} timeouts are counted as killed: on a loaded machine rerun them with "
              f"--retry-timeouts and a larger --timeout")
    print("\nsurvivors:")
    for r in fast.values():
        if r["status"] == "survived" and wide.get(r["id"], {}).get("status") not in ("killed", "timeout"):
            w = wide.get(r["id"], {}).get("status", "not re-checked")
            print(f"  {r['id']} {r['path']}:{r['line']} {r['kind']}  (wide: {w})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-module", type=int, default=6)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=ROOT / "tools" / "mutation_results.jsonl")
    ap.add_argument("--timeout", type=float, default=100.0, help="seconds per mutant test run")
    ap.add_argument("--budget", type=float, default=None, help="stop starting mutants after this many seconds")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--show", metavar="ID")
    ap.add_argument("--wide", action="store_true", help="re-run fast-subset survivors under the wide suite")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th sampled mutant from i")
    ap.add_argument("--baseline", action="store_true", help="time the unmutated subsets")
    ap.add_argument("--modules", help="comma-separated modules to sample (default: all of "
                    f"{', '.join(SUBSETS)})")
    ap.add_argument("--retry-timeouts", action="store_true",
                    help="run again the mutants whose last result is a timeout (on a loaded "
                         "machine a slow test run is not a kill; give a larger --timeout)")
    a = ap.parse_args(argv)

    muts = all_mutants()
    if a.list:
        for mod in SUBSETS:
            print(mod, sum(m.module == mod for m in muts))
        return 0
    if a.summary:
        summary(a.out)
        return 0
    if a.show:
        m = next(m for m in muts if m.id == a.show)
        src = (ROOT / m.path).read_text()
        sys.stdout.writelines(difflib.unified_diff(src.splitlines(True), splice(src, m).splitlines(True),
                                                   m.path, m.path + " (mutant)", n=1))
        return 0

    repo = _copy_repo()
    try:
        modules = a.modules.split(",") if a.modules else list(SUBSETS)
        if a.baseline:
            for mod, tests in ((m, SUBSETS[m]) for m in modules):
                st, dt, msg = run_tests(repo, tests, a.timeout * 3)
                print(f"{mod}: {st} in {dt:.1f}s  {msg}", flush=True)
            return 0
        done = load(a.out)
        todo = sample(muts, a.per_module, a.seed, modules)
        if a.wide:
            fast = {k[0]: r for k, r in done.items() if k[1] == "fast"}
            todo = [m for m in muts if fast.get(m.id, {}).get("status") == "survived"]
        si, sn = (int(x) for x in a.shard.split("/"))
        todo = todo[si::sn]
        suite = "wide" if a.wide else "fast"
        t_start = time.monotonic()
        for i, m in enumerate(todo):
            rec = done.get((m.id, suite))
            if rec is not None and not (a.retry_timeouts and rec["status"] == "timeout"):
                continue
            if a.budget is not None and time.monotonic() - t_start > a.budget:
                print("budget spent; rerun to resume", flush=True)
                break
            target = repo / m.path
            original = target.read_text()
            target.write_text(splice(original, m))
            try:
                tests = (WIDE if a.wide else SUBSETS)[m.module]
                st, dt, msg = run_tests(repo, tests, a.timeout * (2 if a.wide else 1))
            finally:
                target.write_text(original)
            rec = dict(id=m.id, suite=suite, module=m.module, path=m.path, line=m.line, kind=m.kind,
                       replacement=m.replacement, status=st, seconds=round(dt, 1), detail=msg)
            with a.out.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"[{i + 1}/{len(todo)}] {st:<8} {dt:6.1f}s {m.path}:{m.line} {m.kind}", flush=True)
        summary(a.out)
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
