"""The thread hierarchy and the uniformity lattice (tcomp/arch/hierarchy.py),
and the thread axes' move into arch (schedule/threads.py re-exports them)."""
from __future__ import annotations

import numpy as np
import pytest

from tcomp.arch import hierarchy as H
from tcomp.arch import threads as arch_threads
from tcomp.arch.hierarchy import Uniformity as U
from tcomp.schedule import threads as schedule_threads

GRID, CLUSTER, BLOCK, WARPGROUP, WARP, THREAD = U


def test_schedule_threads_is_the_arch_module():
    for name in ("ThreadAxis", "AXES", "BLOCK", "THREAD", "TAGS", "INDEX_VARS", "DIMS",
                 "LEVELS", "parse", "axis", "is_block", "is_thread"):
        assert getattr(schedule_threads, name) is getattr(arch_threads, name)


def test_cluster_registers_are_read_not_bound():
    assert set(arch_threads.SPECIAL) == {"clusterid.x", "clusterid.y", "clusterid.z",
                                         "cluster_ctarank"}
    assert arch_threads.SPECIAL["cluster_ctarank"].ptx == "%cluster_ctarank"
    assert not set(arch_threads.SPECIAL) & set(arch_threads.TAGS)
    assert all(r.feature == "clusters" for r in arch_threads.SPECIAL.values())


def test_lattice_order_and_join():
    assert GRID < CLUSTER < BLOCK < WARPGROUP < WARP < THREAD
    assert H.join() is GRID and H.join(BLOCK, WARP, GRID) is WARP
    assert H.join(WARPGROUP, WARPGROUP) is WARPGROUP
    assert (WARPGROUP.threads, WARP.threads, THREAD.threads, BLOCK.threads) == (128, 32, 1, None)
    assert [lv.name for lv in H.LEVELS] == ["cluster", "block", "warpgroup", "warp", "lane"]


def test_derived_axes_as_data():
    tid = np.arange(512)
    d = H.DERIVED
    assert (d["warpgroup"].expr(tid) == tid // 128).all()
    assert (d["warp"].expr(tid) == tid // 32).all()
    assert (d["lane"].expr(tid) == tid % 32).all()
    assert (d["warp_in_warpgroup"].expr(tid) == (tid // 32) % 4).all()
    assert (d["thread_in_warpgroup"].expr(tid) == tid % 128).all()
    # each derived axis is constant over its group of consecutive threads
    for a in d.values():
        if a.uniform.threads > 1:
            groups = a.expr(tid).reshape(-1, a.uniform.threads)
            assert (groups == groups[:, :1]).all(), a.name


def test_linear_thread_index():
    assert H.linear_thread_index((256, 1, 1), "x", "y", "z") == "x"
    tx, ty, tz = np.meshgrid(np.arange(32), np.arange(4), np.arange(2), indexing="ij")
    tid = H.linear_thread_index((32, 4, 2), tx, ty, tz)
    assert sorted(tid.ravel().tolist()) == list(range(256))
    assert tid[3, 2, 1] == 3 + 32 * 2 + 128
    with pytest.raises(ValueError, match="needs its x"):
        H.linear_thread_index((None, 4, 1), "x", "y", "z")


@pytest.mark.parametrize("name,block,want", [
    ("blockIdx.y", (128, 1, 1), BLOCK), ("clusterid.x", (128, 1, 1), CLUSTER),
    ("cluster_ctarank", (128, 1, 1), BLOCK), ("threadIdx.x", (128, 1, 1), THREAD),
    ("threadIdx.x", (1, 64, 1), GRID), ("threadIdx.y", (32, 4, 1), WARP),
    ("threadIdx.y", (128, 3, 1), WARPGROUP), ("threadIdx.y", (16, 8, 1), THREAD),
    ("threadIdx.y", (None, 8, 1), THREAD), ("threadIdx.z", (32, 4, 2), WARPGROUP),
    ("threadIdx.z", (32, 1, 2), WARP), ("threadIdx.z", (8, 2, 2), THREAD),
    ("threadIdx.z", (32, 4, 1), GRID), ("i", (32, 1, 1), None)])
def test_register_uniformity(name, block, want):
    assert H.register_uniformity(name, block) == want


def brute_uniformity(values_by_tid):
    """The most uniform level over which `values_by_tid` is constant."""
    v = np.asarray(values_by_tid)
    if (v == v[0]).all():
        return GRID
    for u in (WARPGROUP, WARP):
        n = u.threads
        pad = (-len(v)) % n
        groups = np.concatenate([v, np.repeat(v[-1:], pad)]).reshape(-1, n) if pad else \
            v.reshape(-1, n)
        # (a partial last group holds only real threads: compare those)
        ok = all((g[: n - (pad if i == len(groups) - 1 else 0)] == g[0]).all()
                 for i, g in enumerate(groups))
        if ok:
            return u
    return THREAD


@pytest.mark.parametrize("block", [(256, 1, 1), (160, 1, 1), (48, 1, 1), (64, 2, 1),
                                   (128, 2, 1), (48, 2, 1), (32, 4, 2), (96, 1, 1)])
@pytest.mark.parametrize("divisor", [1, 4, 16, 32, 64, 128, 256])
def test_quotient_uniformity_is_never_too_optimistic(block, divisor):
    """threadIdx.x / d claimed uniform within a group only when, over the
    block's threads in warp order, it is."""
    tx, ty, tz = np.meshgrid(*(np.arange(n) for n in block), indexing="ij")
    tid = H.linear_thread_index(block, tx, ty, tz)
    order = np.argsort(tid.ravel())
    actual = brute_uniformity((tx.ravel() // divisor)[order])
    claimed = H.quotient_uniformity(divisor, block)
    assert claimed >= actual
    if block[1:] == (1, 1):
        assert claimed == actual  # exact for 1-D blocks


def test_quotient_uniformity_of_the_derived_axes():
    one_d = (384, 1, 1)
    assert H.quotient_uniformity(128, one_d) is WARPGROUP
    assert H.quotient_uniformity(32, one_d) is WARP
    assert H.quotient_uniformity(64, one_d) is WARP
    assert H.quotient_uniformity(4, one_d) is THREAD
    assert H.quotient_uniformity(512, one_d) is GRID
    assert H.quotient_uniformity(128, (None, 1, 1)) is WARPGROUP  # a runtime 1-D block
    assert H.quotient_uniformity(128, (None, 2, 1)) is THREAD


def view(e):
    """Expressions as tuples: ("var", name), ("const", v), (op, a, b)."""
    if isinstance(e, str):
        return ("var", e)
    if isinstance(e, int):
        return ("const", e)
    return e


def test_expression_uniformity():
    block = (384, 1, 1)
    wg = ("/", "threadIdx.x", 128)
    assert H.uniformity(wg, view, block) is WARPGROUP
    assert H.uniformity(("*", wg, 64), view, block) is WARPGROUP
    assert H.uniformity(("+", wg, "blockIdx.x"), view, block) is WARPGROUP
    assert H.uniformity(("+", ("/", "threadIdx.x", 32), "k"), view, block,
                        known={"k": BLOCK}) is WARP
    assert H.uniformity(("%", "threadIdx.x", 32), view, block) is THREAD
    assert H.uniformity(("+", "threadIdx.x", 1), view, block) is THREAD
    assert H.uniformity(("+", "N", 1), view, block, known={"N": GRID}) is GRID
    assert H.uniformity("i", view, block) is THREAD  # nothing known of it
    assert H.uniformity(("/", "threadIdx.x", 128), view, (128, 2, 1)) is GRID
