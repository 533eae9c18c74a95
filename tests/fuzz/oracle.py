"""One program x schedule pair of the differential fuzzer, run and judged.

Pair `p` of seed `S` is fully determined by (S, p): program number p // 4
(four schedules per program), drawn from `random.Random(f"{S}/program/{p//4}")`,
its schedule from `random.Random(f"{S}/schedule/{p}")`, the input data from
`numpy.random.default_rng([S, p])`. So a failure is replayed by
`python3 tools/fuzz.py --seed S --pair p`.

Acceptable outcomes: the sim result equals `tcomp.evaluate` (exact for
integers and bools, NaN and infinity positions equal, a tolerance by dtype
for finite floats: reductions may run in any order); a `ScheduleError` from
a primitive (the draw is skipped); a `LoweringError` from build (a schedule
tcomp declines). Everything else is a failure: a wrong answer, a non-tcomp
exception anywhere, a `SimError` (the compiler produced a kernel with a race
or an out-of-bounds access), a refused primitive that changed the schedule,
a schedule whose JSON does not replay, NVRTC refusing generated source, the
emulated CUDA disagreeing with `evaluate`.
"""
from __future__ import annotations

import json
import random
import re
import signal
import traceback
from dataclasses import dataclass, field

import numpy as np

import tcomp

from tcomp.lang.ast import Size

from .programs import DATA_KINDS, GeneratorStuck, ProgramGen, make_inputs
from .schedules import PrimitiveChangedSchedule, ScheduleGen
from .triage import suspects

SCHEDULES_PER_PROGRAM = 4
JSON_HEAD = "--- schedule JSON (tcomp.Schedule.from_json(op, text)):"
# rtol for finite floats (atol is rtol times the largest magnitude of the output, at least 1:
# a reduction reassociated cancels to an error of that size)
RTOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-5, "float64": 1e-12}
# CUDA codegen refusals that name a remedy, of schedules the sim runs (counted, not failed)
CUDA_LIMITS = ("codegen: cross-thread reductions are supported over threadIdx.x",
               "codegen: cross-thread reduction of")
MAX_EMULATED_THREADS = 2048  # threads of all blocks of a launch, one std::thread each


@dataclass
class Config:
    cuda_rate: float = 0.1  # share of pairs also compiled by NVRTC
    emulate_rate: float = 0.3  # share of those also run through the CUDA emulator
    max_steps: int = 12  # primitives drawn per schedule
    hygiene: float = 0.35  # share of names drawn from the hygiene pools
    # seconds a pair may take (the long mode; SIGALRM, main thread only): one past it
    # is a failure of kind "hang" instead of a run stalled for good (seed 7 pair 10924
    # looped in storage_align's padding for 30 minutes). None: no limit (CI mode:
    # deterministic, a hang there is the test's timeout).
    pair_timeout: float | None = None


@dataclass
class Result:
    seed: int
    pair: int
    status: str  # "ok", an accepted outcome ("lowering", ...), or "FAIL"
    kind: str = ""  # what failed (wrong-sim, nvrtc, ...) or what was accepted
    message: str = ""
    source: str = ""
    schedule_json: str = ""
    log: list = field(default_factory=list)
    sizes: dict | None = None
    data: str = ""
    steps: list = field(default_factory=list)  # "sim", "cuda", "emulated": what ran
    suspects: list = field(default_factory=list)  # known defects whose shape the pair has
    hygiene: float = Config.hygiene
    program_sizes: dict | None = None  # the sizes of the data (also when built symbolic)

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def reproducer(self) -> str:
        sizes = (f"{self.program_sizes} (symbolic at build)" if self.sizes is None else
                 f"{self.sizes} (bound at build)")
        lines = [f"=== fuzz failure: seed {self.seed} pair {self.pair}: {self.kind}",
                 *(f"suspect: {x}" for x in self.suspects), self.message.rstrip(), "--- TC source:", self.source,
                 f"--- sizes: {sizes}   data: {self.data}",
                 "--- primitives tried (refused ones marked):", *self.log,
                 "--- directives: " + "; ".join(directives_text(self.schedule_json)),
                 JSON_HEAD, self.schedule_json,
                 f"--- replay: python3 tools/fuzz.py --seed {self.seed} --pair {self.pair}"
                 + (f" --hygiene {self.hygiene}" if self.hygiene != Config.hygiene else "")]
        return "\n".join(lines)


def directives_text(schedule_json: str) -> list[str]:
    """The directives of a schedule JSON, one short line each."""
    if not schedule_json:
        return []
    out = []
    for d in json.loads(schedule_json)["directives"]:
        d = dict(d)
        kind, stage = d.pop("kind"), d.pop("stage", None)
        args = ", ".join(f"{k}={v!r}" for k, v in d.items() if v is not None)
        out.append(f"{stage}.{kind}({args})" if stage else f"{kind}({args})")
    return out


_PROGRAMS: dict = {}


def program(seed: int, index: int, hygiene: float):
    """Program `index` of `seed` (cached: four schedules share it)."""
    key = (seed, index, hygiene)
    if key not in _PROGRAMS:
        if len(_PROGRAMS) > 64:
            _PROGRAMS.clear()
        rng = random.Random(f"{seed}/program/{index}")
        for attempt in range(5):
            try:
                _PROGRAMS[key] = ProgramGen(rng, hygiene if attempt < 3 else 0.0).generate()
                break
            except GeneratorStuck:
                continue
        else:
            _PROGRAMS[key] = None
    return _PROGRAMS[key]


def output_rtols(op) -> dict[str, float]:
    """Each output's tolerance: the loosest of the float types it is computed in,
    through the temporaries it reads. A float64 output of `pow(cos(k), x)` computes
    `cos` in float32, where NumPy's float32 cos and the C library's `cosf` differ in
    the last bit (2e-8 relative; seed 2 pair 2148 failed float64's 1e-12 by that)."""
    from tcomp.lang.ast import LetClause, Read, walk
    kinds: dict[str, set] = {}
    for st in op.statements:
        names, reads = {st.acc_dtype.name}, set()
        exprs = [st.stmt.rhs] + [c.value for c in st.stmt.where if isinstance(c, LetClause)]
        for x in (x for e in exprs for x in walk(e)):
            if isinstance(x, Read):
                reads.add(x.tensor)
            elif x.dtype is not None:
                names.add(x.dtype.name)
        for r in reads:
            names |= kinds.get(r, set())
        for t in st.tensors:
            kinds[t] = kinds.get(t, set()) | names
    return {t.name: max([RTOL[n] for n in kinds.get(t.name, ()) if n in RTOL] +
                        [RTOL.get(t.dtype.name, 0.0)]) for t in op.outputs}


def compare(op, got, want) -> str | None:
    """None when `got` (a target's outputs) matches `want` (evaluate's), else why not."""
    rtols = output_rtols(op)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return f"{len(got)} outputs, evaluate gives {len(want)}"
    for t, g, w in zip(op.outputs, got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {t.name}: {g.dtype}{list(g.shape)}, evaluate gives {w.dtype}{list(w.shape)}"
        if w.dtype.kind != "f" and w.dtype.name != "bfloat16":
            bad = g != w
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            fin = np.isfinite(w64)
            scale = max(1.0, float(np.abs(w64[fin]).max())) if fin.any() else 1.0
            rtol = rtols[t.name]
            with np.errstate(invalid="ignore"):
                close = np.abs(g64 - w64) <= rtol * (np.abs(w64) + scale)
            same_special = (np.isnan(g64) == np.isnan(w64)) & (
                np.isfinite(w64) | (g64 == w64) | np.isnan(w64))
            bad = ~np.where(fin, close & np.isfinite(g64), same_special)
        if bad.any():
            where = [tuple(int(x) for x in ix) for ix in np.argwhere(bad)[:4]]
            first = where[0] if where else ()
            return (f"output {t.name} ({w.dtype}) differs at {int(bad.sum())} of {bad.size} "
                    f"elements, first {where}: got {g[first]!r}, evaluate {w[first]!r}\n"
                    f"  got      {np.array2string(g.ravel()[:24], threshold=24)}\n"
                    f"  evaluate {np.array2string(w.ravel()[:24], threshold=24)}")
    return None


# lower/launch.py's launch_problem: a launch beyond the device's limits
_LAUNCH_LIMIT = re.compile(r"^kernel \S+: (a block of \S+ = \d+ threads.* exceeds the "
                           r"|block dimension [xyz] is \d+.*, but the device allows at most "
                           r"|grid dimension [xyz] is \d+ blocks, but the device allows at most )")


def launch_limit(message: str) -> bool:
    """Whether a SimError is the launch check's (a block or grid beyond the device's
    limits). With sizes symbolic at build the dimensions are known only at the call,
    where both targets refuse the launch with this message (lower/launch.py): an
    accepted outcome there, not a failure (seed 6 pair 21891: j^3 = 125 threads along
    z at j = 5). At sizes bound at build it is a failure: the build must refuse it."""
    return bool(_LAUNCH_LIMIT.match(message))


def _error(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-6:])


class PairTimeout(BaseException):
    """A pair ran past Config.pair_timeout (a BaseException: no `except Exception`
    of the code under test swallows it)."""


def _alarm(signum, frame):
    raise PairTimeout()


def run_pair(seed: int, pair: int, cfg: Config = Config()) -> Result:
    res = Result(seed, pair, "ok", hygiene=cfg.hygiene)
    old = None
    if cfg.pair_timeout:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, cfg.pair_timeout)
    try:
        return _run(res, seed, pair, cfg)
    except PairTimeout as e:
        where = "".join(traceback.format_tb(e.__traceback__)[-4:])
        res.status, res.kind = "FAIL", "hang"
        res.message = (f"the pair ran past {cfg.pair_timeout:g} s (after: "
                       f"{', '.join(res.steps) or 'no step'}); stopped in:\n{where}")
        return res
    except Exception as e:  # a crash of the fuzzer's own code, reported with the pair
        res.status, res.kind, res.message = "FAIL", "fuzzer-crash", _error(e)
        return res
    finally:
        if cfg.pair_timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _fail(res, kind, message):
    res.status, res.kind, res.message = "FAIL", kind, message
    return res


def _accept(res, kind, message=""):
    res.status, res.kind, res.message = kind, kind, message
    return res


def _run_pair(res, seed, pair, cfg):
    try:
        prog = program(seed, pair // SCHEDULES_PER_PROGRAM, cfg.hygiene)
    except Exception as e:  # the front end crashed on a program the generator made
        return _fail(res, "frontend-crash", _error(e))
    if prog is None:
        return _accept(res, "no-program")
    op = prog.op
    res.source = prog.source
    rng = random.Random(f"{seed}/schedule/{pair}")
    sizes = dict(prog.sizes)
    res.program_sizes = sizes
    res.sizes = sizes if rng.random() < 0.75 else None
    kind = rng.choice(DATA_KINDS)
    res.data = f"{kind}, numpy.random.default_rng([{seed}, {pair}])"
    arrays = make_inputs(op, sizes, np.random.default_rng([seed, pair]), kind)
    try:
        with np.errstate(all="ignore"):
            want = tcomp.evaluate(op, *arrays)
    except tcomp.LangError as e:
        return _accept(res, "evaluate-error", str(e))
    except Exception as e:
        return _fail(res, "evaluate-crash", _error(e))

    gen = ScheduleGen(rng, op, sizes)
    res.log = gen.log
    try:
        s = gen.run(rng.randint(0, cfg.max_steps))
    except PrimitiveChangedSchedule as e:
        return _fail(res, "refused-primitive-changed-schedule", str(e))
    except Exception as e:
        return _fail(res, "primitive-crash", f"{gen.log[-1]}\n{_error(e)}")
    res.schedule_json = s.to_json()
    try:
        again = tcomp.Schedule.from_json(op, res.schedule_json).to_json()
        if again != res.schedule_json:
            return _fail(res, "json-replay", "from_json(to_json()) gives other directives")
    except Exception as e:
        return _fail(res, "json-replay", _error(e))

    do_cuda = rng.random() < cfg.cuda_rate
    do_emulate = rng.random() < cfg.emulate_rate
    return _judge(res, op, s, arrays, want, do_cuda, do_emulate and kind != "special")


def _judge(res, op, s, arrays, want, do_cuda, do_emulate):
    try:
        k = tcomp.build(s, "sim", sizes=res.sizes)
    except (tcomp.LoweringError, tcomp.ScheduleError) as e:
        return _accept(res, "lowering", str(e))
    except Exception as e:
        return _fail(res, "build-crash", _error(e))
    res.steps.append("sim")
    try:
        with np.errstate(all="ignore"):
            got = k(*arrays)
    except tcomp.SimError as e:
        if res.sizes is None and launch_limit(str(e)):
            return _accept(res, "launch-limit", str(e))
        return _fail(res, "sim-error", str(e))
    except tcomp.LoweringError as e:
        return _accept(res, "call-lowering", str(e))
    except Exception as e:
        return _fail(res, "sim-crash", _error(e))
    why = compare(op, got, want)
    if why:
        return _fail(res, "wrong-sim", why)
    if do_cuda:
        return _cuda(res, s, op, arrays, want, do_emulate)
    return res


def _run(res, seed, pair, cfg):
    res = _run_pair(res, seed, pair, cfg)
    if res.failed and res.source:
        _triage(res)
    return res


def _triage(res):
    op = tcomp.op(res.source)
    try:
        s = tcomp.Schedule.from_json(op, res.schedule_json) if res.schedule_json else None
    except tcomp.TcompError:
        s = None
    res.suspects = suspects(res, op, s or tcomp.Schedule(op))


def replay(text: str) -> Result:
    """Run a reproducer (the text `Result.reproducer` prints) again, NVRTC
    and the emulator included; the generators are not involved, so it
    replays after they change."""
    def between(a, b):
        return text.split(a, 1)[1].split(b, 1)[0].strip("\n")
    head = re.search(r"seed (-?\d+) pair (\d+)", text)
    res = Result(int(head[1]), int(head[2]), "ok") if head else Result(0, 0, "ok")
    res.source = between("--- TC source:\n", "\n--- sizes: ")
    m = re.search(r"--- sizes: (\{.*?\}) \((bound|symbolic) at build\)\s+data: (\w+), "
                  r"numpy\.random\.default_rng\(\[(-?\d+), (\d+)\]\)", text)
    if m is None:
        raise ValueError("not a reproducer of tests/fuzz/oracle.py (no '--- sizes:' line)")
    sizes = json.loads(m[1].replace("'", '"'))
    res.sizes = sizes if m[2] == "bound" else None
    res.program_sizes = sizes
    res.data = f"{m[3]}, numpy.random.default_rng([{m[4]}, {m[5]}])"
    res.schedule_json = between(JSON_HEAD + "\n", "\n--- replay:")
    res.log = ["(replayed from its schedule JSON)"]
    op = tcomp.op(res.source)
    arrays = make_inputs(op, sizes, np.random.default_rng([int(m[4]), int(m[5])]), m[3])
    with np.errstate(all="ignore"):
        want = tcomp.evaluate(op, *arrays)
    try:
        s = tcomp.Schedule.from_json(op, res.schedule_json)
    except tcomp.ScheduleError as e:  # a directive refused now (a fix made it an error)
        res.status, res.kind, res.message = "schedule", "refused", str(e)
        return res
    res = _judge(res, op, s, arrays, want, True, m[3] != "special")
    if res.failed:
        _triage(res)
    return res


def _cuda(res, s, op, arrays, want, emulate):
    res.steps.append("cuda")
    try:
        k = tcomp.build(s, "cuda", sizes=res.sizes)
    except tcomp.CudaError as e:
        text = str(e)
        if any(x in text for x in CUDA_LIMITS):  # refused with its remedy: the sim runs it
            return _accept(res, "cuda-refused", text)
        return _fail(res, "nvrtc" if "NVRTC" in text else "codegen-refused", text[:6000])
    except (tcomp.LoweringError, tcomp.ScheduleError) as e:
        return _accept(res, "cuda-lowering", str(e))
    except Exception as e:
        return _fail(res, "cuda-crash", _error(e))
    if not emulate:
        return res
    from tests.target_cuda import emulator
    meta = k.meta
    dtypes = {b["dtype"] for b in meta["inputs"] + meta["outputs"] + meta["temps"]}
    if not emulator.HAVE_CXX or not dtypes <= set(emulator._CTYPES):
        return res
    sizes = dict(meta["bound_sizes"])
    for t, a in zip(op.inputs, arrays):
        for d, n in zip(t.shape, a.shape):
            if isinstance(d, Size):
                sizes.setdefault(d.name, n)
    from tcomp.target_cuda.kernel import launch_dims
    for kd in meta["kernels"]:
        grid, block = launch_dims(kd, sizes)
        if int(np.prod(grid)) * int(np.prod(block)) > MAX_EMULATED_THREADS:
            return res
    try:
        emulator._compile(emulator.PRELUDE + k.source + "".join(
            emulator._launcher(kd, meta) for kd in meta["kernels"]))
    except AssertionError as e:  # NVRTC took it: what g++ lacks is the emulator's
        return _accept(res, "emulator-unsupported", str(e)[:2000])
    res.steps.append("emulated")
    try:
        with np.errstate(all="ignore"):
            got = emulator.run_emulated(k, *arrays, timeout=120)
    except Exception as e:
        return _fail(res, "emulated-crash", _error(e)[:6000])
    why = compare(op, got, want)
    if why:
        return _fail(res, "wrong-emulated", why + "\n--- CUDA source:\n" + k.source)
    return res
