"""Work limits (issue 22, defect 8 leftovers): nested unrolls were capped per loop but not
in product (64 x 64 x 64 made 262,144 copies: 40 s and 606 MB of lowering), and a grid
beyond the device's limit at fixed sizes compiled and failed only at the first call, and the
sim had no guard on work (N = 10^7: minutes)."""
from __future__ import annotations

import numpy as np
import pytest

import tcomp
from tcomp.lower import unroll

CUBE = "def f(float(N, M, K) A) -> (O) { O(i, j, k) = A(i, j, k) * 2 }"
SCALE = "def f(float(N) A) -> (O) { O(i) = A(i) * 2 }"


def _unrolled(n):
    op = tcomp.op(CUBE)
    s = tcomp.Schedule(op)
    for ax in s["O"].axes:
        s["O"].unroll(ax)
    return op, s, {"N": n, "M": n, "K": n}


@pytest.mark.parametrize("target", ["sim", "cuda"], ids=["to-sim", "to-nvrtc"])
def test_nested_unrolls_are_capped_in_product(target):
    _, s, sizes = _unrolled(64)
    with pytest.raises(tcomp.ScheduleError) as e:
        tcomp.build(s, target, sizes=sizes)
    assert str(e.value) == (
        f"unroll: the nested unrolled loops i (64) x j (64) x k (64) of kernel f_O would make "
        f"262144 copies of their body (at most {unroll.MAX_UNROLL_COPIES}); unroll fewer of "
        f"them, or split one and unroll only its inner loop")


def test_the_schedule_search_sees_the_cap_without_expanding():
    from tcomp.search.validate import validate
    op, s, sizes = _unrolled(64)
    v = validate(op, s.to_json(), sizes)
    assert v.kind == "schedule" and "262144 copies" in v.message


def test_nested_unrolls_up_to_the_cap_still_unroll():
    op, s, sizes = _unrolled(16)  # 4096 copies: the cap itself
    a = np.arange(16 ** 3, dtype=np.float32).reshape(16, 16, 16)
    np.testing.assert_array_equal(tcomp.build(s, "sim", sizes=sizes)(a), tcomp.evaluate(op, a))


def _grid_y():
    op = tcomp.op(SCALE)
    s = tcomp.Schedule(op)
    io, _ = s["O"].split(s["O"].axes[0], 1)
    s["O"].bind(io, "blockIdx.y")
    return s


@pytest.mark.parametrize("target", ["sim", "cuda"], ids=["to-sim", "to-nvrtc"])
def test_a_grid_beyond_the_limit_at_fixed_sizes_fails_at_build(target):
    with pytest.raises(tcomp.LoweringError) as e:
        tcomp.build(_grid_y(), target, sizes={"N": 70000})
    assert str(e.value) == (
        "stage 'O': a grid of 70000 blocks along blockIdx.y exceeds CUDA's limit of 65535 for "
        "that dimension; bind a larger loop to blockIdx.x, or split the loop bound to "
        "blockIdx.y and loop over the outer part")


def test_a_grid_at_the_limit_or_symbolic_still_builds():
    tcomp.build(_grid_y(), "cuda", sizes={"N": 65535})
    tcomp.build(_grid_y(), "cuda")  # checked at the call, against the device


OUTER = "def outer(float(N) A, float(M) B) -> (O) { O(i, j) = A(i) * B(j) }"
SCALE1 = "def scale(float(N) A) -> (O) { O(i) = A(i) * 2 }"


def test_sim_work_beyond_its_limits_is_refused_before_it_starts():
    """N = 10^7 in a serial loop ran for many minutes on the sim (defect 8): a call
    counts its statement instances first (target_sim/work.py)."""
    k = tcomp.build(tcomp.Schedule(tcomp.op(SCALE1)), "sim")
    with pytest.raises(tcomp.SimError) as e:
        k(np.ones(10 ** 7, np.float32))
    assert str(e.value) == (
        "sim: 'scale' at N=10000000 would run 10,000,000 statement instances in one thread, "
        "more than the sim's limit of 2,097,152 (it runs a few thousand a second along a "
        "serial loop); bind loops to threads, run smaller sizes, or raise the limit: "
        "k.max_thread_steps = 10000000 (None: no limit)")
    op = tcomp.op(OUTER)
    s = tcomp.Schedule(op)
    io, ii = s["O"].split(s["O"].axes[0], 512)
    s["O"].bind(io, "blockIdx.x")
    s["O"].bind(ii, "threadIdx.x")
    a = np.ones(10000, np.float32)
    with pytest.raises(tcomp.SimError) as e:
        tcomp.build(s, "sim")(a, a)
    assert str(e.value) == (
        "sim: 'outer' at N=10000, M=10000 would run 102,400,000 statement instances, more than "
        "the sim's limit of 67,108,864 (it runs a few million a second); run smaller sizes, or "
        "raise the limit: k.max_instances = 102400000 (None: no limit)")


def test_the_sim_limits_count_threads_and_loops_and_can_be_changed():
    op = tcomp.op(OUTER)
    s = tcomp.Schedule(op)
    s["O"].bind(s["O"].axes[0], "threadIdx.x")
    k = tcomp.build(s, "sim")
    a, b = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32)
    k.max_instances = 11  # 3 threads x 4 iterations = 12
    with pytest.raises(tcomp.SimError, match="would run 12 statement instances, more than the "
                                             "sim's limit of 11"):
        k(a, b)
    k.max_instances, k.max_thread_steps = 12, 3  # 4 in one thread
    with pytest.raises(tcomp.SimError, match="would run 4 statement instances in one thread"):
        k(a, b)
    k.max_thread_steps = 4
    np.testing.assert_array_equal(k(a, b), tcomp.evaluate(op, a, b))
    k.max_instances = k.max_thread_steps = None
    np.testing.assert_array_equal(k(a, b), tcomp.evaluate(op, a, b))
