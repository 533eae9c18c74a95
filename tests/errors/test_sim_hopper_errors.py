"""Deliberately broken Hopper kernels, each reported by the sim with a message
that names the cause (issue 23): the GEMM of tcomp.kernels.gemm_sm90 with one
statement removed or changed, and small hand-built kernels."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tcomp.errors import SimError
from tcomp.lang import dtypes
from tcomp.lower import ir

from ..target_sim.hopper import (BF16, TID, _Edit, b, broken, c, call, drop, glob, inputs,
                                 mapvar, ref, run_kernel, shared, thread0, with_args)
from ..target_sim.hopper import SMALL, SimKernel, gemm_sm90_program
from ..target_sim.test_hopper_sim import wgmma_kernel

SIZES = dict(M=64, N=128, K=256)  # two tiles of 64 x 64, four k-steps: the ring of 2 wraps


def fails(k, *parts):
    A, B = inputs(SIZES["M"], SIZES["N"], SIZES["K"])
    with pytest.raises(SimError) as e:
        k(A, B)
    for p in parts:
        assert p in str(e.value), str(e.value)
    return str(e.value)


def test_a_missing_arrive_is_a_deadlock_naming_each_task():
    fails(broken(drop("mbarrier_arrive", "consumer"), SIZES),
                "deadlock in block (0, 0, 0): every task is blocked",
                "producer (warpgroup 0, threads 0..127): mbarrier_wait on empty[0] for parity 0: "
                "its phase 0 (parity 0) is in progress with 1 of 1 arrivals missing",
                "consumer (warpgroup 1, threads 128..255): mbarrier_wait on full[0] for parity 1")


def test_a_wrong_parity_names_the_phase_it_let_go_by():
    flip = with_args("mbarrier_wait", "consumer", lambda a: (a[0], b("^", a[1], 1)))
    fails(broken(flip, SIZES), "consumer (warpgroup 1, threads 128..255): mbarrier_wait on "
          "full[0] for parity 1: its phase 1 (parity 1) is in progress",
          "phase 0 completed without this task waiting for it (a wrong parity")


def test_a_producer_waiting_on_the_first_empty_phase_is_told_the_start_convention():
    same = with_args("mbarrier_wait", "producer", lambda a: (a[0], ir.Var("parity", ir.int32)))
    fails(broken(same, SIZES), "producer (warpgroup 0, threads 0..127): mbarrier_wait on "
          "empty[0] for parity 0", "on a fresh barrier, a wait for parity 1 returns at once")


def test_a_wait_returning_twice_for_one_phase_is_a_wrong_parity():
    body = ir.seq(thread0(call("mbarrier_init", ref("bar", 0), c(1))), ir.Barrier(),
                  thread0(call("mbarrier_arrive", ref("bar", 0))),
                  call("mbarrier_wait", ref("bar", 0), c(0)),
                  call("mbarrier_wait", ref("bar", 0), c(0)))
    with pytest.raises(SimError, match=r"mbarrier_wait on bar\[0\] for parity 0 returned at once "
                                       r"for phase 0, which it had already waited for: a wrong "
                                       r"parity"):
        run_kernel(body, [ir.Buffer("bar", dtypes.uint64, (c(1),), "barrier")], [], {})


@pytest.mark.parametrize("extra, parts", [
    (1024, ["mbarrier_wait on full[0] for parity 0", "0 of 1 arrivals missing and 1024 of 17408 "
            "transaction bytes not delivered (16384 delivered): the expect_tx count is larger "
            "than the bytes its copies move"]),
    (-1024, ["TMA loads delivered 16384 bytes to mbarrier full[0] in phase 0, but "
             "mbarrier_expect_tx announced 15360: the expect-tx byte count does not match the "
             "copies"]),
])
def test_an_expect_tx_count_that_does_not_match_the_copies(extra, parts):
    more = with_args("mbarrier_expect_tx", "producer", lambda a: (a[0], c(a[1].value + extra)))
    fails(broken(more, SIZES), *parts)


def test_a_read_of_a_tma_destination_before_its_barrier_completes():
    fails(broken(drop("mbarrier_wait", "consumer"), SIZES),
          "wgmma reads shared A_s[0, 0, 0] by consumer (warpgroup 1, threads 128..255) before "
          "the TMA load to it completed: the load completes phase 0 (parity 0) of mbarrier "
          "full[0], and the reader never waited on full[0] (a missing mbarrier_wait)")


def test_an_accumulator_read_before_the_wgmma_wait():
    env = {"A": np.ones((64, 64), BF16), "B": np.ones((64, 64), BF16),
           "C": np.zeros((64, 64), np.float32)}
    with pytest.raises(SimError, match=r"read of local acc\[0\] \(thread \(0, 0, 0\)\) while a "
                                       r"wgmma writing it is in flight"):
        run_kernel(*wgmma_kernel(wait=False), env)


def test_accumulating_into_unwritten_registers():
    env = {"A": np.ones((64, 64), BF16), "B": np.ones((64, 64), BF16),
           "C": np.zeros((64, 64), np.float32)}
    with pytest.raises(SimError, match=r"accumulates \(scale_d = 1\) into acc\[0:32\] before "
                                       r"every register was written"):
        run_kernel(*wgmma_kernel(first_scale=1), env)


def test_a_wgmma_reading_generic_writes_without_a_proxy_fence():
    env = {"A": np.ones((64, 64), BF16), "B": np.ones((64, 64), BF16),
           "C": np.zeros((64, 64), np.float32)}
    with pytest.raises(SimError, match=r"wgmma reads shared A_s\[0, 0\], written by thread "
                                       r"\(0, 0, 0\) with ordinary stores and no "
                                       r"fence_proxy_async after them"):
        run_kernel(*wgmma_kernel(fence=False), env)


def test_a_missing_proxy_fence_before_the_tma_store():
    fails(broken(drop("fence_proxy_async"), SIZES),
          "TMA store reads shared C_s[0, 0, 0], written by thread (128, 0, 0) with ordinary "
          "stores and no fence_proxy_async after them", "fence_proxy_async between the writes "
          "and the barrier before the TMA store is missing")


def _early_release():
    """The consumer arrives on the slot's empty barrier before its wgmma ran."""
    prog = gemm_sm90_program(SIZES, SMALL)
    (k,) = prog.kernels
    taken = []

    def take(s, role):
        if s.call.fn == "mbarrier_arrive" and role == "consumer":
            taken.append(s)
            return ir.seq()
        return s

    def put(s, role):
        if s.call.fn == "wgmma_fence" and role == "consumer":
            return ir.seq(ir.If(b("==", b("%", TID, 128), 0, ir.bool_), taken[0]), s)
        return s
    body = _Edit(put).stmt(_Edit(take).stmt(k.body))
    return SimKernel.from_program(dataclasses.replace(
        prog, kernels=(dataclasses.replace(k, body=body),)))


def test_a_ring_slot_overwritten_before_its_consumer_released_it():
    fails(_early_release(), "a TMA load (by thread (0, 0, 0)) writes shared A_s[0, 0, 0] while a "
          "wgmma of consumer (warpgroup 1, threads 128..255) reads it (before its wgmma_wait): "
          "the ring slot was overwritten before its consumer released it")


def test_a_missing_wgmma_wait_lets_the_producer_overwrite_the_slot():
    fails(broken(drop("wgmma_wait", "consumer"), SIZES),
          "while a wgmma of consumer (warpgroup 1, threads 128..255) reads it (before its "
          "wgmma_wait)")


def test_a_producer_that_does_not_wait_for_empty_slots_runs_a_ring_ahead():
    fails(broken(drop("mbarrier_wait", "producer"), SIZES),
          "consumer (warpgroup 1, threads 128..255): mbarrier_wait on full[0] for parity 0: its "
          "phase 2 (parity 0) is in progress", "phase 1 completed without this task waiting for "
          "it", "a missing wait on the slot's empty barrier")


def test_a_tensor_map_that_disagrees_with_its_shared_tile():
    wide = lambda ms: tuple(dataclasses.replace(m, box=(64, 32)) if m.name == "tmA" else m  # noqa
                            for m in ms)
    fails(broken(lambda s, r: s, SIZES, maps=wide),
          "tensor map tmA (box [64, 32], swizzle 128, A: bfloat16) does not agree with shared "
          "A_s (rows of 64 bfloat16 elements, swizzle 128)")


def test_a_tensor_the_driver_could_not_encode():
    k = broken(lambda s, r: s, {})
    A, B = inputs(37, 72, 39)
    with pytest.raises(SimError, match=r"tensor map tmA: a row of 'A' is 78 bytes .* the TMA "
                                       r"engine needs rows that are a multiple of 16 bytes"):
        k(A, B)


def test_a_read_of_a_tma_destination_in_lock_step_code_without_the_wait():
    body = ir.seq(
        thread0(call("mbarrier_init", ref("bar", 0), c(1))), ir.Barrier(),
        thread0(ir.seq(call("mbarrier_expect_tx", ref("bar", 0), c(8192)),
                       call("tma_load_2d", ref("S", 0, 0), mapvar("tmA"), ref("bar", 0), c(0),
                            c(0)))),
        ir.Store("P", (TID,), ir.Load("S", (b("/", TID, 2), c(0)), dtypes.bfloat16)))
    env = {"A": np.ones((64, 64), BF16), "P": np.zeros(128, BF16)}
    with pytest.raises(SimError, match=r"read of shared S\[0, 0\] before the TMA load to it "
                                       r"completed: .* never waited on bar\[0\]"):
        run_kernel(body, [shared("S", 64), ir.Buffer("bar", dtypes.uint64, (c(1),), "barrier")],
                   [glob("A", (64, 64)), glob("P", (128,), role="output")], env,
                   (ir.TensorMap("tmA", "A", (64, 64), 128),))


def test_a_named_barrier_its_count_never_reaches():
    body = call("named_barrier", c(1), c(256))
    with pytest.raises(SimError, match=r"deadlock in block \(0, 0, 0\) \(outside a Specialize, "
                                       r"nothing else runs\): named_barrier 1: 128 of its 256 "
                                       r"threads have arrived"):
        run_kernel(body, [], [], {})


def test_an_mbarrier_used_before_its_init():
    body = call("mbarrier_arrive", ref("bar", 0))
    with pytest.raises(SimError, match=r"mbarrier_arrive on mbarrier bar\[0\] before its "
                                       r"mbarrier_init"):
        run_kernel(body, [ir.Buffer("bar", dtypes.uint64, (c(1),), "barrier")], [], {})
