"""The differential fuzzer in CI (TESTING.md, "Differential fuzzer").

test_pair: a fixed list of program x schedule pairs (seed TCOMP_FUZZ_SEED,
pairs 0 .. TCOMP_FUZZ_PAIRS - 1; 120 of seed 5 by default, counted, not
timed, so that a run is deterministic), each on the sim against
`tcomp.evaluate`, one in ten also through NVRTC, a share of those through
the CUDA emulator. A failure prints its reproducer (TC source, sizes, data,
primitives, schedule JSON) and the command that replays it.

test_nest: every small case of thread tags at two levels of one nest
(nests.py), at fixed and symbolic sizes.

test_hygiene_*: every name of the hygiene pools (C++ keywords, CUDA
builtins, names lowering generates) in every role of a program, on the sim
and through NVRTC.

Longer runs: `python3 tools/fuzz.py --pairs 100000 -j 2` (or
TCOMP_FUZZ_PAIRS=100000 for this file).
"""
from __future__ import annotations

import os

import pytest

from . import hygiene, nests
from .oracle import Config, run_pair

SEED = int(os.environ.get("TCOMP_FUZZ_SEED", "5"))
PAIRS = int(os.environ.get("TCOMP_FUZZ_PAIRS", "120"))
CI = Config()


@pytest.mark.parametrize("pair", [pytest.param(p, id=f"s{SEED}p{p}") for p in range(PAIRS)])
def test_pair(pair):
    r = run_pair(SEED, pair, CI)
    assert not r.failed, r.reproducer()


@pytest.mark.parametrize("case", list(nests.cases()), ids="-".join)
def test_nest(case):
    problems = nests.check(*case)
    assert not problems, "\n\n".join(problems)


# C++ keywords and CUDA builtins as TC names compile (issue 22, defect 2: the CUDA
# emitter mangles them, target_cuda/names.py).
@pytest.mark.parametrize("names", hygiene.keyword_chunks(), ids=lambda n: n["D"])
def test_hygiene_keywords(names):
    problems = [p for sch in hygiene.SCHEDULES
                for p in hygiene.check(names, sch, cuda=sch == "caches")]
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("names", hygiene.capture_chunks(), ids=lambda n: n["D"])
def test_hygiene_captures(names):
    problems = [p for sch in hygiene.SCHEDULES for p in hygiene.check(names, sch)]
    assert not problems, "\n\n".join(problems)


def test_plain_names_pass_every_hygiene_schedule():
    """The sweep's program and schedules are valid: with plain names nothing
    goes wrong (so what the sweep reports is about the names)."""
    plain = {"D": "f", "S1": "N", "S2": "M", "A": "A", "G": "G", "T": "T", "O": "O",
             "x": "i", "y": "j", "L": "a"}
    for sch in hygiene.SCHEDULES:
        assert hygiene.check(plain, sch) == [], sch


def test_an_output_s_tolerance_is_the_loosest_type_it_is_computed_in():
    """Seed 2 pair 2148: a float64 output of `pow(cos(k), x)` computes cos in float32,
    where NumPy and the C library differ in the last bit: the oracle's float64
    tolerance (1e-12) reported a wrong answer. Casts of exact inputs do not loosen it."""
    import numpy as np
    import tcomp
    from .oracle import RTOL, compare, output_rtols
    op = tcomp.op("""def f(double(N) A, half(N) H) -> (O, P, Q, R) {
    O(k) = pow(cos(k), A(k))
    P(k) = A(k) * 2
    T(k) = H(k) * 2
    Q(k) = float64(T(k)) + A(k)
    R(k) = float64(H(k)) + A(k)
}""")
    assert output_rtols(op) == {"O": RTOL["float32"], "P": RTOL["float64"],
                                "Q": RTOL["float16"], "R": RTOL["float64"]}
    want = tuple(np.full(2, -2.4029980871653884) for _ in range(4))
    got = (np.full(2, -2.402997915074876),) + want[1:]
    assert compare(op, got, want) is None
    assert "output P (float64) differs" in compare(op, want[:1] + got[:1] + want[2:], want)


def test_the_schedule_generator_knows_an_empty_loop_split_by_nparts():
    """Seed 6 pair 26663: `where j in 1:N` at N = 1 (an empty loop) split with nparts=3;
    the generator's own extent of the outer part divided by the inner's extent, 0:
    ZeroDivisionError, reported as a crash of compute_at. Both parts have extent 0."""
    import random
    import numpy as np
    import tcomp
    from .schedules import ScheduleGen
    op = tcomp.op("""def f(float(N) A) -> (C) {
    C(j) = A(j) * 2.0 where j in 1:N
}""")
    gen = ScheduleGen(random.Random(0), op, {"N": 1})
    c = gen.s["C"]
    c.split(c.axes[0], nparts=3)
    assert gen.extent("C", "j_o") == 0 and gen.extent("C", "j_i") == 0
    a = np.arange(1, dtype=np.float32)
    np.testing.assert_array_equal(tcomp.build(gen.s, "sim", sizes={"N": 1})(a),
                                  tcomp.evaluate(op, a))


def test_a_launch_beyond_the_limits_at_symbolic_sizes_is_an_accepted_outcome():
    """Seed 6 pair 21891: j^3 threads along z, j = 5 at the call (sizes symbolic at
    build): the sim refuses the launch of 125 > 64 threads, as the CUDA target does
    (lower/launch.py checks at launch what is not known at build). The oracle took it
    for a sim failure; it accepts it now, and only at symbolic sizes: bound at build,
    the build refuses it."""
    import numpy as np
    import tcomp
    from tcomp.arch.limits import LaunchLimits
    from tcomp.lower.launch import launch_problem
    from .oracle import launch_limit
    op = tcomp.op("""def f(half(J, J, N) X) -> (O) {
    O(a, i, c) *=! X(i, i, 0) where a in 0:J, c in 0:J
}""")
    s = tcomp.Schedule(op)
    O = s["O"]
    a, i, c = O.leaf_axes
    O.bind(O.fuse(O.fuse(a, i), c), "threadIdx.z")
    with pytest.raises(tcomp.LoweringError, match="125 threads along threadIdx.z exceed"):
        tcomp.build(s, "sim", sizes={"J": 5, "N": 3})
    X = np.ones((5, 5, 3), np.float16)
    with pytest.raises(tcomp.SimError) as e:
        tcomp.build(s, "sim")(X)
    assert "block dimension z is 125" in str(e.value) and launch_limit(str(e.value))
    small = LaunchLimits(threads_per_block=8, block=(8, 8, 4), grid=(4, 4, 4))
    for grid, block in (((1, 1, 1), (4, 4, 1)), ((1, 1, 1), (1, 1, 5)), ((5, 1, 1), (1, 1, 1))):
        assert launch_limit(launch_problem("k", grid, block, small))
    assert not launch_limit("kernel f_C: block (0, 2, 0) overwrites O[0], which block "
                            "(0, 0, 0) read in the same launch")
