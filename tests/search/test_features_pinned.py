"""The feature vectors of a Hopper GEMM (TMA + wgmma, warp-specialised,
persistent: kernels/gemm_sm90.py's schedule, with cooperative and ping-pong
consumers) and of an mma.sync GEMM (ldmatrix, a 3-stage cp.async ring), pinned
number by number: the walk (search/feature_walk.py) reads each intrinsic's
registry entry (its tensor-core instruction, effects, operands, feature), and
a change there, or in what it counts, shows here first. Regenerate only for
an intended change to what the features count, and say so in the commit."""
from __future__ import annotations

import pytest

import tcomp
from tcomp.kernels.gemm_sm90 import SOURCE, GemmConfig, hopper_schedule
from tcomp.search import features as F
from tcomp.search import validate
from tests.bench.common import S

HOPPER = {
    "allreduce": 0.0,
    "barriers": 50688.0,
    "blocks": 132.0,
    "blocks_per_sm": 1.0,
    "coalescing": 1.0,
    "cp_async": 0.0,
    "cp_async_bytes": 0.0,
    "flops": 0.0,
    "flops_per_global_byte": 78.76923076923077,
    "flops_per_shared_byte": 73.14285714285714,
    "fragment_load_bytes": 0.0,
    "fragment_store_bytes": 0.0,
    "global_load_bytes": 25165823.999999996,
    "global_sector_bytes": 27262975.999999996,
    "global_store_bytes": 2097151.9999999998,
    "global_vector_bytes": 27262975.999999996,
    "inflight_bytes": 1572863.9999999998,
    "inflight_per_sm": 11915.636363636362,
    "int_ops": 16576704.000000013,
    "kernels": 1.0,
    "ldmatrix": 0.0,
    "local_load_bytes": 4194303.9999999995,
    "local_store_bytes": 0.0,
    "log_analytic_ms": -5.03177942440839,
    "log_kernel_ms": -5.03177942440839,
    "mem_instructions": 1049856.0,
    "memory_efficiency": 0.9187289719626168,
    "mma": 524287.99999999994,
    "mma_flops": 2147483647.9999998,
    "occupancy": 0.1875,
    "per_thread_flops": 42366.70707070707,
    "registers": 160.0,
    "shared_bytes": 212992.0,
    "shared_load_bytes": 2097151.9999999998,
    "shared_store_bytes": 27262975.999999996,
    "special": 0.0,
    "stages": 0.0,
    "stores": 1048575.9999999999,
    "threads": 384.0,
    "unique_global_bytes": 6291456.0,
    "unroll": 128.0,
    "vector_bytes": 0.0,
    "vector_share": 1.0,
    "waves": 1.0,
    "wgmma_flops": 2147483647.9999998,
}
HOPPER_PINGPONG = {
    "allreduce": 0.0,
    "barriers": 50688.0,
    "blocks": 132.0,
    "blocks_per_sm": 1.0,
    "coalescing": 0.9999999999999998,
    "cp_async": 0.0,
    "cp_async_bytes": 0.0,
    "flops": 0.0,
    "flops_per_global_byte": 60.235294117647065,
    "flops_per_shared_byte": 56.888888888888886,
    "fragment_load_bytes": 0.0,
    "fragment_store_bytes": 0.0,
    "global_load_bytes": 33554431.999999996,
    "global_sector_bytes": 35651584.0,
    "global_store_bytes": 2097151.9999999998,
    "global_vector_bytes": 35651584.0,
    "inflight_bytes": 2097151.9999999998,
    "inflight_per_sm": 15887.51515151515,
    "int_ops": 17703168.000000004,
    "kernels": 1.0,
    "ldmatrix": 0.0,
    "local_load_bytes": 4194303.9999999995,
    "local_store_bytes": 0.0,
    "log_analytic_ms": -4.942421524572611,
    "log_kernel_ms": -4.942421524572611,
    "mem_instructions": 1050880.0,
    "memory_efficiency": 1.0,
    "mma": 1048575.9999999999,
    "mma_flops": 2147483647.9999998,
    "occupancy": 0.1875,
    "per_thread_flops": 42366.70707070707,
    "registers": 160.0,
    "shared_bytes": 147456.0,
    "shared_load_bytes": 2097151.9999999998,
    "shared_store_bytes": 35651584.0,
    "special": 0.0,
    "stages": 0.0,
    "stores": 1048575.9999999999,
    "threads": 384.0,
    "unique_global_bytes": 6291456.0,
    "unroll": 64.0,
    "vector_bytes": 0.0,
    "vector_share": 1.0,
    "waves": 1.0,
    "wgmma_flops": 2147483647.9999998,
}
MMA_SYNC = {
    "allreduce": 0.0,
    "barriers": 4096.0,
    "blocks": 4.0,
    "blocks_per_sm": 2.0,
    "coalescing": 0.8571428571428571,
    "cp_async": 40960.0,
    "cp_async_bytes": 655360.0,
    "flops": 0.0,
    "flops_per_global_byte": 42.666666666666664,
    "flops_per_shared_byte": 19.692307692307693,
    "fragment_load_bytes": 262144.0,
    "fragment_store_bytes": 1310720.0,
    "global_load_bytes": 655360.0,
    "global_sector_bytes": 917504.0,
    "global_store_bytes": 131072.0,
    "global_vector_bytes": 655360.0,
    "inflight_bytes": 49152.0,
    "inflight_per_sm": 24576.0,
    "int_ops": 1122304.0,
    "kernels": 1.0,
    "ldmatrix": 65536.0,
    "local_load_bytes": 0.0,
    "local_store_bytes": 0.0,
    "log_analytic_ms": -4.9627230353713685,
    "log_kernel_ms": -4.9627230353713685,
    "mem_instructions": 106496.0,
    "memory_efficiency": 1.0,
    "mma": 262144.0,
    "mma_flops": 33554432.0,
    "occupancy": 0.125,
    "per_thread_flops": 65536.0,
    "registers": 192.0,
    "shared_bytes": 49152.0,
    "shared_load_bytes": 1048576.0,
    "shared_store_bytes": 655360.0,
    "special": 0.0,
    "stages": 3.0,
    "stores": 131072.0,
    "threads": 128.0,
    "unique_global_bytes": 393216.0,
    "unroll": 128.0,
    "vector_bytes": 16.0,
    "vector_share": 0.8333333333333334,
    "waves": 0.015151515151515152,
    "wgmma_flops": 0.0,
}


def _features(op, s, sizes):
    v = validate(op, s.to_json(), sizes, "cuda")
    assert v.ok, v
    got = F.as_dict(F.extract(v, sizes))
    return {n: got[n] for n in F.NAMES}


@pytest.mark.parametrize("config, want", [
    (GemmConfig(), HOPPER),
    (GemmConfig(bm=128, bn=128, pingpong=True), HOPPER_PINGPONG),
], ids=["cooperative", "pingpong"])
def test_features_of_the_hopper_gemm(config, want):
    op = tcomp.op(SOURCE)
    got = _features(op, hopper_schedule(op, config), {"M": 1024, "N": 1024, "K": 1024})
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert got["wgmma_flops"] == got["mma_flops"] == pytest.approx(2 * 1024 ** 3)


def test_features_of_an_mma_sync_gemm():
    op, s = S.tc_gemm(bm=128, bn=128, wm=64, wn=64, bk=32, pipeline=3, swizzle=True)
    got = _features(op, s, {"M": 256, "N": 256, "K": 256})
    assert got == pytest.approx(MMA_SYNC, rel=1e-12, abs=1e-12)
    assert got["wgmma_flops"] == 0 and got["stages"] == 3
